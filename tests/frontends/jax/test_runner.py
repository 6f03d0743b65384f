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
from tests.frontends.runner_checks import forward_and_grads


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False




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
