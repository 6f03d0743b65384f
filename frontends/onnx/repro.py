"""An onnxruntime script that reproduces one layer's forward divergence alone (``--repro``)."""

from __future__ import annotations

from pathlib import Path

from specgraph.frontends.onnx.export import to_onnx
from specgraph.ir import GraphBuilder, Node
from specgraph.numeric.repro import TOLERANCE, ReproCase, comment

__all__ = ["write"]


def write(folder: Path, node: Node, side: str, case: ReproCase) -> list[str]:
    """Write ``layer.onnx`` (the node alone) and ``repro_onnx.py`` for a forward case;
    onnxruntime computes no gradients, so a backward case gets nothing."""
    if case.kind != "forward":
        return []
    b = GraphBuilder("repro")
    ins = [b.input(f"input{i}", v.shape, v.dtype) for i, v in enumerate(node.inputs)]
    made = b.add_multi(node.op, ins, dict(node.attrs),
                       outputs=[(v.shape, v.dtype) for v in node.outputs])
    for k, v in enumerate(made):
        b.output(f"output{k}", v)
    model = to_onnx(b.build(), {})
    (folder / "layer.onnx").write_bytes(model.SerializeToString())
    layer = f"{node.op} at {node.scope or '<model>'}"
    (folder / "repro_onnx.py").write_text(f'''"""Reproduces a forward divergence of one layer (LAYER below) in onnxruntime: runs
layer.onnx alone on the inputs captured in case.npz and compares with the float64 truth
(exit 1 when off)."""
# layer: {comment(layer)}

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

LAYER = {layer!r}
here = Path(__file__).parent
data = np.load(here / "case.npz")
session = ort.InferenceSession(str(here / "layer.onnx"), providers=["CPUExecutionProvider"])
feed = {{f"input{{i}}": data[f"input{{i}}"] for i in range({len(node.inputs)})}}
outs = session.run(None, feed)
worst = 0.0
for k, out in enumerate(outs):
    truth = data[f"{side}_output{{k}}"].astype(np.float64)
    scale = max(float(np.sqrt(np.mean(np.square(truth)))), 1e-30)
    worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - truth))) / scale)
print(f"onnxruntime {{LAYER}}: max error {{worst:.3e}} of the values' scale")
sys.exit(1 if worst > {TOLERANCE!r} else 0)
''', encoding="utf-8")
    return [f"{folder / 'repro_onnx.py'}: the layer in onnxruntime"]
