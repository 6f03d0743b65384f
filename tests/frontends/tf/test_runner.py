"""What the TensorFlow runner alone does: compiled mode (and its fallback where XLA refuses),
integer and low-precision storage, dense gradients, TensorFloat-32, devices. The op cases on
every runner are in ``tests/frontends/test_runner_conformance.py``."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.frontends.tf.runner import TfRunner, tf
from specgraph.ir import Node, Value
from specgraph.numeric.runner import Context, RunnerError
from tests.frontends.runner_checks import BY_ID, case_inputs, case_node, forward_and_grads


def _has_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


gpu = pytest.mark.skipif(not _has_gpu(), reason="no GPU visible to TensorFlow")


@pytest.fixture(scope="module")
def runner() -> TfRunner:
    return TfRunner(Context(device="cpu"))


@pytest.fixture(scope="module")
def compiled() -> TfRunner:
    return TfRunner(Context(device="cpu", mode="compiled"))


COMPILED_CASES = ["linear-bias", "conv-2d_stride_asym_pad_dilation",
                  "softmax-last_axis", "layer_norm-two_axes_eps"]


@pytest.mark.parametrize("case_id", COMPILED_CASES)
def test_compiled_agrees_with_eager(runner: TfRunner, compiled: TfRunner, case_id: str) -> None:
    want_outs, want_grads = forward_and_grads(runner, case_id)
    got_outs, got_grads = forward_and_grads(compiled, case_id)
    for got, want in zip(got_outs + got_grads, want_outs + want_grads):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # one XLA-compiled function per op and attributes, reused
    cached = dict(compiled._compiled)
    forward_and_grads(compiled, case_id)
    assert compiled._compiled == cached
    assert not compiled.not_compiled


def _relu_in_python(x):
    return tf.py_function(tf.nn.relu, [x], x.dtype)


class _PyFunctionRunner(TfRunner):
    ops = {**TfRunner.ops, "relu": _relu_in_python}


def test_compiled_falls_back_to_a_plain_graph_where_xla_refuses() -> None:
    runner = _PyFunctionRunner(Context(device="cpu", mode="compiled"))
    node = Node("relu", (Value((3,), "float32"),), (Value((3,), "float32"),), {})
    (out,) = runner.run(node, [runner.put(np.array([-1.0, 0.5, 2.0]), "float32")])
    np.testing.assert_array_equal(runner.fetch(out), [0.0, 0.5, 2.0])
    assert runner.not_compiled == {"relu"}


def test_integer_and_bool_tensors_keep_their_dtype(runner: TfRunner) -> None:
    big = np.array([2**62 + 3, -5], dtype=np.int64)
    assert runner.fetch(runner.put(big, "int64")).dtype == np.int64
    np.testing.assert_array_equal(runner.fetch(runner.put(big, "int64")), big)
    assert runner.put(np.array([True]), "bool").dtype == tf.bool
    # a float64 graph value is stored in the context's float32
    assert runner.put(np.array([1.5]), "float64").dtype == tf.float32
    node = Node("argmax", (Value((2, 3), "float32"),), (Value((2,), "int64"),), {"axis": 1})
    (out,) = runner.run(node, [runner.put(np.array([[0, 5, 1], [7, 2, 3]]), "float32")])
    assert runner.fetch(out).dtype == np.int64
    np.testing.assert_array_equal(runner.fetch(out), [1, 0])


def test_sparse_gradients_come_back_dense_and_absent_cotangents_give_none(
        runner: TfRunner) -> None:
    """The gather's sparse gradient comes back dense; where no cotangent flows back, every
    input gets None (integer inputs always do: test_runner_conformance)."""
    node = Node("embedding", (Value((3,), "int64"), Value((4, 2), "float32")),
                (Value((3, 2), "float32"),), {"padding_idx": None})
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    _, pullback = runner.vjp(node, [runner.put(np.array([1, 1, 3]), "int64"),
                                    runner.put(weight, "float32")])
    _, d_weight = pullback([runner.put(np.ones((3, 2), np.float32), "float32")])
    assert isinstance(d_weight, tf.Tensor)
    np.testing.assert_array_equal(runner.fetch(d_weight), [[0, 0], [2, 2], [0, 0], [1, 1]])
    assert pullback([None]) == (None, None)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_storage_and_cast_to_float(dtype: str) -> None:
    runner = TfRunner(Context(device="cpu", dtype=dtype))
    x = runner.put(np.array([1.0, 2.5, -3.0], np.float64), "float64")
    assert x.dtype == tf.as_dtype(dtype)
    node = Node("cast", (Value((3,), "int64"),), (Value((3,), "float64"),), {"dtype": "float64"})
    (out,) = runner.run(node, [runner.put(np.array([1, 2, 3]), "int64")])
    assert out.dtype == tf.as_dtype(dtype)
    assert runner.fetch(out).dtype == np.float32
    np.testing.assert_array_equal(runner.fetch(out), [1, 2, 3])


def test_precision_sets_tensor_float_32() -> None:
    node = Node("relu", (Value((1,), "float32"),), (Value((1,), "float32"),), {})
    for dtype, enabled in (("tf32", True), ("float32", False)):
        r = TfRunner(Context(device="cpu", dtype=dtype))
        r.run(node, [r.put(np.ones(1), "float32")])
        assert tf.config.experimental.tensor_float_32_execution_enabled() is enabled


def test_kernel_failure_is_a_runner_error(runner: TfRunner) -> None:
    node = Node("gather", (Value((3,), "float32"), Value((1,), "int64")),
                (Value((1,), "float32"),), {"axis": 0})
    with pytest.raises(RunnerError, match="TensorFlow failed on gather"):
        runner.run(node, [runner.put(np.ones(3), "float32"), runner.put(np.array([7]), "int64")])


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_missing_gpu_is_one_sentence() -> None:
    with pytest.raises(RunnerError, match="no GPU"):
        TfRunner(Context(device="cuda"))


def test_auto_device_resolves() -> None:
    assert TfRunner(Context(device="auto")).device == ("/GPU:0" if _has_gpu() else "/CPU:0")


@pytest.mark.gpu
@gpu
def test_cuda_tensors_stay_on_the_device() -> None:
    cuda = TfRunner(Context(device="cuda"))
    case = BY_ID["linear-bias"]
    arrays = case_inputs(case)
    outs = cuda.run(case_node(case, arrays), [cuda.put(a, str(a.dtype)) for a in arrays])
    assert all("GPU" in o.device for o in outs)
