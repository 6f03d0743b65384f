"""An ONNX model's own program: the model run again in onnxruntime, observed.

With the model's own weights and nothing observed, the program's outputs are exactly what
onnxruntime gives for the model (at the same optimization level); observed values have the
canonical values' shapes; given weights are the weights it runs with; and through the CLI a
PyTorch model and its ONNX export agree with ``--native``.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from specgraph.cli import main  # noqa: E402
from specgraph.frontends import onnx as onnx_frontend  # noqa: E402
from specgraph.numeric import program as prog  # noqa: E402
from specgraph.numeric.runner import Context  # noqa: E402
from specgraph.passes import canonicalize_model  # noqa: E402
from tests.zoo.torch_models import MODELS  # noqa: E402

NAMES = ["mlp", "cnn", "transformer_block", "causal_sdpa"]


def _export(name: str):
    model, inputs = MODELS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    proto = program.model_proto
    traced = onnx_frontend.trace_model(proto, tuple(t.numpy() for t in inputs),
                                       reference=f"{name}.onnx")
    return model, inputs, proto, canonicalize_model(traced)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_program_gives_exactly_what_onnxruntime_gives(name, mode):
    model, inputs, proto, traced = _export(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                                        if mode == "eager" else
                                        ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    feeds = dict(prog.native_inputs(traced, traced.inputs))
    plain = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    obs = traced.program.observe(weights, feeds, (), None, Context(mode=mode))
    assert set(obs.outputs) == set(traced.graph.output_names)
    for key, got in obs.outputs.items():
        assert np.array_equal(got, plain[key]), key  # the same program, bit for bit
    keys = {n.key for n in traced.graph.natives.values()}
    seen = traced.program.observe(weights, feeds, keys, None, Context(mode=mode))
    assert seen.values and not seen.grads  # onnxruntime computes no gradients
    for v, native in traced.graph.natives.items():
        if native.key in seen.values:
            assert native.canonical(seen.values[native.key]).shape == v.shape


def test_given_weights_are_the_weights_it_runs_with():
    model, inputs, proto, traced = _export("mlp")
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    doubled = {k: v * 2 for k, v in weights.items()}
    obs = traced.program.observe(doubled, prog.native_inputs(traced, traced.inputs), (), None,
                                 Context())
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2)
        want = model(*inputs).numpy()
    (got,) = obs.outputs.values()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_pytorch_model_and_its_export_agree_on_their_own_programs(tmp_path, capsys):
    factory = tmp_path / "model.py"
    factory.write_text(
        "from tests.zoo.torch_models import MODELS\n\n\ndef make():\n"
        "    return MODELS['transformer_block']()\n")
    _, _, proto, _ = _export("transformer_block")
    path = tmp_path / "block.onnx"
    path.write_bytes(proto.SerializeToString())
    assert main(["diff", f"{factory}:make", str(path), "--native", "--seed", "0-2"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out
