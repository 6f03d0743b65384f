"""A paper spec is an executable reference: its compiled graph runs on each framework's
canonical kernels (the runners the replay uses) and gives what the fp64 interpreter gives,
to float32 accuracy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgraph import frontends
from specgraph.loading import trace
from specgraph.numeric.engine import Execution
from specgraph.numeric.runner import Context

SPECS = sorted(str(p) for p in (Path(__file__).parents[2] / "examples" / "specs").glob(
    "*.spec.yaml"))


@pytest.mark.parametrize("framework", ["torch", "jax", "tf", "onnx"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: Path(p).name)
def test_spec_runs_on_each_frameworks_kernels(spec, framework):
    pytest.importorskip({"torch": "torch", "jax": "jax", "tf": "tensorflow",
                         "onnx": "onnxruntime"}[framework])
    model = trace(spec)
    runner = frontends.runner(framework, Context())
    run = Execution(model.graph, runner, model.weights, model.inputs, backward=False)
    outs = run.forward()
    for name, want in model.outputs.items():
        got = runner.fetch(outs[name]).astype(np.float64)
        want = np.asarray(want, dtype=np.float64)
        scale = max(float(np.sqrt(np.mean(want ** 2))), 1e-12)
        assert np.max(np.abs(got - want)) <= 1e-4 * scale, (name, framework)
