"""The models' own programs on a GPU (run where one is present: ``pytest -m gpu``).

Each side's program runs on the device and what it observes stays there, as the framework's
tensors: the comparison reads them through DLPack and only statistics cross to the host.
The golden pairs agree there as on the CPU, and the LayerNorm case is blamed on Flax.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

from specgraph.check import compare  # noqa: E402
from specgraph.cli import main  # noqa: E402
from specgraph.model import TracedModel  # noqa: E402
from specgraph.numeric import program as prog  # noqa: E402
from specgraph.numeric.options import NumericOptions  # noqa: E402
from specgraph.numeric.runner import Context  # noqa: E402
from tests.numeric.test_native_flax import MODELS  # noqa: E402
from tests.zoo import traced  # noqa: E402


def _jax_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or not _jax_gpu(),
                                 reason="needs a CUDA device that PyTorch and JAX both see")]
CUDA = Context(device="cuda")
PAIRS = [("mlp", "mlp"), ("cnn", "cnn"), ("transformer_block", "preln"),
         ("embedding_classifier", "embed")]


def _torch(name: str) -> TracedModel:
    return traced.torch_model(name)


def _jax(name: str) -> TracedModel:
    return traced.jax_model(f"{name}/linen")


def _observe(model: TracedModel) -> prog.Observation:
    g = model.graph
    loss = {name: np.ones(v.shape, np.float32) for name, v in zip(g.output_names, g.outputs)
            if v.dtype == "float32"}
    return model.program.observe(
        prog.native_weights(model, model.weights, model.param_shapes),
        prog.native_inputs(model, model.inputs),
        {n.key for n in g.natives.values()}, prog.native_cotangents(model, loss), CUDA)


@pytest.mark.parametrize("side", ["torch", "jax"])
def test_observed_values_and_gradients_stay_on_the_device(side: str) -> None:
    model = _torch("transformer_block") if side == "torch" else _jax("preln")
    obs = _observe(model)
    assert obs.values and obs.grads and obs.param_grads
    for array in [*obs.values.values(), *obs.grads.values(), *obs.param_grads.values()]:
        if side == "torch":
            assert isinstance(array, torch.Tensor) and array.device.type == "cuda"
        else:
            assert isinstance(array, jax.Array)
            assert {d.platform for d in array.devices()} == {"gpu"}


@pytest.mark.parametrize("side", ["torch", "jax"])
def test_weights_are_copied_to_the_device_once_and_each_run_is_its_own(side: str) -> None:
    """A program copies a given weight to the GPU once while the same array is given: the
    next run reads the first run's copy, and its gradients are its own (not summed onto
    the first's); another array under the same name is copied anew."""
    model = _torch("mlp") if side == "torch" else _jax("mlp")
    first, second = _observe(model), _observe(model)
    assert first.param_grads and set(first.param_grads) == set(second.param_grads)
    for name, grad in first.param_grads.items():
        assert np.array_equal(prog.host_array(grad), prog.host_array(second.param_grads[name]))
    copies = model.program._copies
    names = [n for n in model.weights if n in copies]
    assert names
    kept = {n: copies.copy_of(n) for n in names}
    _observe(model)
    assert all(copies.copy_of(n) is kept[n] for n in names)
    g = model.graph
    weights = prog.native_weights(model, model.weights, model.param_shapes)
    name = names[0]
    weights = {**weights, name: np.asarray(weights[name]) * 2}
    obs = model.program.observe(
        weights, prog.native_inputs(model, model.inputs), {n.key for n in g.natives.values()},
        prog.native_cotangents(model, {n: np.ones(v.shape, np.float32) for n, v in
                                       zip(g.output_names, g.outputs)}), CUDA)
    assert copies.copy_of(name) is not kept[name]
    assert any(not np.array_equal(prog.host_array(v), prog.host_array(first.values[k]))
               for k, v in obs.values.items())


@pytest.mark.parametrize("lhs,rhs", PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_pairs_agree_on_the_gpu(lhs: str, rhs: str) -> None:
    options = NumericOptions(lhs_context=CUDA, rhs_context=CUDA, seeds=(0, 1, 2))
    report = compare(_torch(lhs), _jax(rhs), mode="numbers", options=options)
    assert report.equivalent, [f.message for f in report.findings]
    assert report.numeric is not None and report.numeric.layers


def test_flax_fast_variance_is_blamed_on_the_gpu(tmp_path, capsys) -> None:
    path = tmp_path / "sensor.py"
    path.write_text(MODELS)
    pair = [f"{path}:torch_model", f"{path}:flax_fast", "--device", "cuda", "--format",
            "json"]
    assert main(["diff", *pair]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["code"], finding["op"], finding["blame"]) == (
        "numeric-divergence", "layer_norm", "rhs")
    assert main(["diff", f"{path}:torch_model", f"{path}:flax_two_pass", "--device", "cuda",
                 "--seed", "0-4", "--format", "json"]) == 0


def test_inductors_wrong_avg_pool_gradient_is_caught_on_the_gpu(tmp_path, capsys) -> None:
    """Inductor's GPU code has the CPU's bug: a CNN with ``avg_pool2d(ceil_mode=True,
    count_include_pad=True)`` against its own compiled self on the GPU parts in the pool's
    gradient alone, blamed on the compiled side."""
    from tests.numeric.test_native_torch import POOL

    path = tmp_path / "pool.py"
    path.write_text(POOL)
    model = f"{path}:make"
    code = main(["diff", model, model, "--device", "cuda", "--rhs-context", "cuda,compiled",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (finding,) = report["findings"]
    assert (finding["code"], finding["rhs"]["scope"], finding["blame"]) == (
        "gradient-divergence", "pool", "rhs")
