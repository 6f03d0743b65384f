"""The JAX runner: every canonical op against its NumPy reference, forward and backward."""

from __future__ import annotations


import jax
import numpy as np
import pytest

from specgraph.frontends.jax import runner as _jax_run
from specgraph.frontends.jax.runner import JaxRunner
from specgraph.ir import Node, Value
from specgraph.numeric.runner import Context, RunnerError
from specgraph.ops import registered_ops
from tests.numeric.runner_checks import (CASES, case_inputs, case_node, check_forward,
                                         check_self_contained, check_vjp, forward_and_grads)

# int64 values beyond the int32 range: JAX without x64 cannot hold them
BEYOND_INT32 = {"div-int_beyond_float53", "div-int_floor_beyond_float53"}


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


def test_op_table_covers_every_canonical_op() -> None:
    assert set(JaxRunner.ops) == set(registered_ops()) - {"opaque"}


# Every case compiles a few XLA programs (tens of ms each on a CPU, most of the sweep's time):
# the default sweep runs the default (eager) runner; the compiled runner's sweep runs with
# -m slow (test_compiled_agrees_with_eager covers it on a few layers by default).
MODES = ["eager", pytest.param("compiled", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=MODES)
def sweep(request: pytest.FixtureRequest, runner: JaxRunner, compiled: JaxRunner) -> JaxRunner:
    return compiled if request.param == "compiled" else runner


def test_op_functions_use_only_jax_numpy_math_and_private_helpers() -> None:
    """What a standalone script needs to run an op: those imports and the helpers it calls."""
    check_self_contained(_jax_run, JaxRunner.ops, {"jax", "jnp", "lax", "math", "np"},
                         private_helpers=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward(sweep: JaxRunner, case) -> None:
    if case.id in BEYOND_INT32:
        with pytest.raises(RunnerError, match="int32"):
            check_forward(sweep, case)
        return
    check_forward(sweep, case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_vjp(sweep: JaxRunner, case) -> None:
    if not check_vjp(sweep, case):
        pytest.skip("nothing to differentiate")


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


def test_pullback_gives_none_for_integer_inputs_and_takes_missing_cotangents(
        runner: JaxRunner) -> None:
    node = Node("embedding", (Value((3,), "int64"), Value((4, 2), "float32")),
                (Value((3, 2), "float32"),), {"padding_idx": None})
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    outs, pullback = runner.vjp(node, [runner.put(np.array([1, 1, 3]), "int64"),
                                       runner.put(weight, "float32")])
    np.testing.assert_array_equal(runner.fetch(outs[0]), weight[[1, 1, 3]])
    d_ids, d_weight = pullback([runner.put(np.ones((3, 2), np.float32), "float32")])
    assert d_ids is None
    np.testing.assert_array_equal(runner.fetch(d_weight), [[0, 0], [2, 2], [0, 0], [1, 1]])
    _, zero = pullback([None])
    np.testing.assert_array_equal(runner.fetch(zero), np.zeros((4, 2)))


def test_embedding_padding_row_gets_no_gradient(runner: JaxRunner) -> None:
    node = Node("embedding", (Value((3,), "int64"), Value((4, 2), "float32")),
                (Value((3, 2), "float32"),), {"padding_idx": 1})
    _, pullback = runner.vjp(node, [runner.put(np.array([1, 0, 1]), "int64"),
                                    runner.put(np.ones((4, 2), np.float32), "float32")])
    _, d_weight = pullback([runner.put(np.ones((3, 2), np.float32), "float32")])
    np.testing.assert_array_equal(runner.fetch(d_weight), [[1, 1], [0, 0], [0, 0], [0, 0]])


def test_split_pullback_with_one_cotangent_missing(runner: JaxRunner) -> None:
    node = Node("split", (Value((5,), "float32"),), (Value((2,), "float32"),
                                                       Value((3,), "float32")),
                {"axis": 0, "sizes": (2, 3)})
    _, pullback = runner.vjp(node, [runner.put(np.arange(5, dtype=np.float32), "float32")])
    (grad,) = pullback([None, runner.put(np.array([1, 2, 3], np.float32), "float32")])
    np.testing.assert_array_equal(runner.fetch(grad), [0, 0, 1, 2, 3])


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
