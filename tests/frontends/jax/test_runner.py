"""What the JAX runner alone does: compiled mode against eager, int64 values without x64,
pullbacks without cotangents, bfloat16 storage, devices. The op cases on every runner (the
compiled sweep with -m slow) are in ``tests/frontends/test_runner_conformance.py``."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specgraph.frontends.jax.runner import JaxRunner
from specgraph.ir import Node, Value
from specgraph.numeric.runner import Context, RunnerError
from tests.frontends.runner_checks import (BEYOND_INT32, CASES, case_inputs, case_node,
                                           forward_and_grads)


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


gpu = pytest.mark.skipif(not _has_gpu(), reason="no GPU visible to JAX")


@pytest.fixture(scope="module")
def runner() -> JaxRunner:
    return JaxRunner(Context(device="cpu"))


@pytest.fixture(scope="module")
def compiled() -> JaxRunner:
    return JaxRunner(Context(device="cpu", mode="compiled"))


COMPILED_CASES = ["linear-bias", "conv-2d_stride_asym_pad_dilation", "softmax-last_axis",
                  "layer_norm-two_axes_eps", "attention-causal_and_bool_mask",
                  "embedding-padding_idx"]


@pytest.mark.parametrize("case_id", COMPILED_CASES)
def test_compiled_agrees_with_eager(runner: JaxRunner, compiled: JaxRunner, case_id: str) -> None:
    want_outs, want_grads = forward_and_grads(runner, case_id)
    got_outs, got_grads = forward_and_grads(compiled, case_id)
    for got, want in zip(got_outs + got_grads, want_outs + want_grads):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the jitted forward and pullback are cached per op and attributes
    cached = len(compiled._compiled)
    forward_and_grads(compiled, case_id)
    assert len(compiled._compiled) == cached


def test_int64_values_come_back_as_int64(runner: JaxRunner) -> None:
    ids = np.array([[3, -1], [0, 2]], dtype=np.int64)
    tensor = runner.put(ids, "int64")
    assert tensor.dtype == np.int32  # x64 is off
    assert runner.fetch(tensor).dtype == np.int64
    np.testing.assert_array_equal(runner.fetch(tensor), ids)
    node = Node("argmax", (Value((2, 3), "float32"),), (Value((2,), "int64"),), {"axis": 1})
    (out,) = runner.run(node, [runner.put(np.array([[0, 5, 1], [7, 2, 3]], np.float32),
                                          "float32")])
    assert runner.fetch(out).dtype == np.int64
    np.testing.assert_array_equal(runner.fetch(out), [1, 0])
    small = runner.put(np.arange(3, dtype=np.int32), "int32")
    assert runner.fetch(small).dtype == np.int32


def test_pullback_without_cotangents_gives_zeros(runner: JaxRunner) -> None:
    """Where no cotangent flows back, JAX's pullback gives zeros (PyTorch's and TF's None);
    integer inputs get None (every runner: test_runner_conformance)."""
    node = Node("embedding", (Value((3,), "int64"), Value((4, 2), "float32")),
                (Value((3, 2), "float32"),), {"padding_idx": None})
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    _, pullback = runner.vjp(node, [runner.put(np.array([1, 1, 3]), "int64"),
                                    runner.put(weight, "float32")])
    d_ids, zero = pullback([None])
    assert d_ids is None
    np.testing.assert_array_equal(runner.fetch(zero), np.zeros((4, 2)))


def test_bfloat16_storage_and_cast_to_float() -> None:
    runner = JaxRunner(Context(device="cpu", dtype="bfloat16"))
    x = runner.put(np.array([1.0, 2.5, -3.0], np.float64), "float64")
    assert x.dtype == jax.numpy.bfloat16
    node = Node("cast", (Value((3,), "int64"),), (Value((3,), "float64"),), {"dtype": "float64"})
    (out,) = runner.run(node, [runner.put(np.array([1, 2, 3]), "int64")])
    assert out.dtype == jax.numpy.bfloat16
    assert runner.fetch(out).dtype == np.float32
    np.testing.assert_array_equal(runner.fetch(out), [1, 2, 3])


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_missing_gpu_is_one_sentence() -> None:
    with pytest.raises(RunnerError, match="no GPU"):
        JaxRunner(Context(device="cuda"))


def test_auto_device_resolves() -> None:
    runner = JaxRunner(Context(device="auto"))
    assert runner.device.platform == ("gpu" if _has_gpu() else "cpu")


# --- on a GPU ------------------------------------------------------------------------------


def _agree(lhs: list, rhs: list, rtol: float) -> None:
    for a, b in zip(lhs, rhs):
        assert (a is None) == (b is None)
        if a is not None and b.dtype.kind != "f":
            np.testing.assert_array_equal(a, b)
        elif a is not None:
            finite = b[np.isfinite(b)].astype(np.float64)
            scale = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 1.0
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(scale, 1e-3))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("case", [c for c in CASES if c.id not in BEYOND_INT32],
                         ids=lambda c: c.id)
def test_cuda_agrees_with_cpu(runner: JaxRunner, case) -> None:
    cuda = JaxRunner(Context(device="cuda"))
    arrays = case_inputs(case)
    node = case_node(case, arrays)
    got = [cuda.fetch(o) for o in cuda.run(node, [cuda.put(a, str(a.dtype)) for a in arrays])]
    want = [runner.fetch(o) for o in runner.run(node, [runner.put(a, str(a.dtype))
                                                       for a in arrays])]
    _agree(got, want, 1e-5)
    if any(v.dtype == "float32" for v in node.outputs):
        _agree(*(forward_and_grads(r, case.id)[1] for r in (cuda, runner)), 1e-4)


@pytest.mark.gpu
@gpu
def test_cuda_float32_is_true_float32_and_tf32_is_not() -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
    node = Node("matmul", (Value((256, 512), "float32"), Value((512, 256), "float32")),
                (Value((256, 256), "float32"),), {})
    truth = a.astype(np.float64) @ b.T.astype(np.float64)

    def error(dtype: str) -> float:
        r = JaxRunner(Context(device="cuda", dtype=dtype))
        (out,) = r.run(node, [r.put(a, "float32"), r.put(np.ascontiguousarray(b.T), "float32")])
        return float(np.max(np.abs(r.fetch(out) - truth)))

    assert error("float32") < 1e-3
    assert error("tf32") > 4 * error("float32")
