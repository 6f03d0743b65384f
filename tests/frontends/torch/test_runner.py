"""What the PyTorch runner alone does: paths of its kernels the shared cases miss, storage
dtypes, TF32 switches, devices, compiled mode, planted kernel faults. The op cases on every
runner are in ``tests/frontends/test_runner_conformance.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specgraph.frontends.torch.runner import TorchRunner
from specgraph.ir import Node, Value
from specgraph.numeric.runner import Context, RunnerError
from specgraph.ops import get_spec
from tests.frontends.runner_checks import (BY_ID, case_inputs, case_node, check_forward,
                                           check_vjp, has_gradient)
from tests.ops.case_types import INT, Case
from tests.zoo import torch_faults

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="module")
def runner() -> TorchRunner:
    return TorchRunner(Context(device="cpu"))


@pytest.fixture
def tf32_flags():
    """Restore PyTorch's process-wide TF32 switches after a test that sets them."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _node(op: str, inputs: list[Value], outputs: list[Value], **attrs) -> Node:
    return Node(op, tuple(inputs), tuple(outputs), get_spec(op).normalize_attrs(attrs))


def _extra(op: str, name: str, inputs: list, **attrs) -> Case:
    return Case(op, name, tuple(inputs), attrs)


# paths of the op functions that the shared cases do not reach: pooling through window sums
# (dilated average, asymmetric padding that excludes pads, a 1-D divisor, padding wider than
# PyTorch takes), F.pad beyond the last three axes, negative slice steps, int32 indices
EXTRA = [
    _extra("avg_pool", "dilated", [(1, 2, 9, 8)], kernel=(3, 2), stride=(2, 1),
           padding=(1, 0, 1, 0), dilation=(2, 2)),
    _extra("avg_pool", "asym_exclude_pad_ceil", [(2, 3, 7, 6)], kernel=(3, 3), stride=(2, 2),
           padding=(0, 1, 2, 1), dilation=(1, 1), ceil_mode=True, count_include_pad=False),
    _extra("avg_pool", "1d_divisor", [(2, 3, 10)], kernel=(3,), stride=(2,), padding=(1, 1),
           dilation=(1,), divisor=4),
    _extra("avg_pool", "wide_pad", [(1, 2, 5, 5)], kernel=(2, 2), stride=(1, 1),
           padding=(2, 2, 2, 2), dilation=(1, 1)),
    _extra("max_pool", "asym_pad_ceil", [(1, 3, 7, 6)], kernel=(3, 2), stride=(2, 2),
           padding=(0, 1, 2, 0), dilation=(1, 1), ceil_mode=True),
    _extra("pad", "reflect_four_axes", [(2, 3, 4, 5)], pads=(0, 1, 2, 1, 0, 2, 1, 3),
           mode="reflect"),
    _extra("pad", "edge_five_axes", [(2, 3, 2, 3, 4)], pads=(1, 0, 1, 0, 2, 0, 1, 0, 1, 1),
           mode="edge"),
    _extra("pad", "edge_vector", [(5,)], pads=(2, 3), mode="edge"),
    _extra("slice", "negative_steps", [(7, 6, 5)], axes=(0, 1, 2), starts=(-1, 5, 10),
           ends=(-8, -7, -100), steps=(-3, -1, -2)),
    _extra("attention", "causal_and_vector_mask", [(2, 2, 4, 3), (2, 2, 6, 3), (2, 2, 6, 3),
                                                   (6,)], scale=0.5, causal=True, has_mask=True),
    _extra("gather", "int32_indices", [(4, 3), INT(-4, 4, 2, 2, dtype=np.int32)], axis=0),
    _extra("reduce_mean", "int64", [INT(-9, 9, 3, 4)], axes=(1,)),
]


@pytest.mark.parametrize("case", EXTRA, ids=lambda c: c.id)
def test_paths_beyond_the_shared_cases(runner: TorchRunner, case) -> None:
    check_forward(runner, case)


@pytest.mark.parametrize("case", [c for c in EXTRA if has_gradient(c)], ids=lambda c: c.id)
def test_gradients_beyond_the_shared_cases(runner: TorchRunner, case) -> None:
    check_vjp(runner, case)


def test_outputs_follow_the_graph_dtypes(runner: TorchRunner) -> None:
    x = runner.put(np.array([[1.0, 3.0, 2.0]]), "float32")
    idx, = runner.run(_node("argmax", [Value((1, 3), "float32")], [Value((1,), "int64")],
                            axis=1), [x])
    mask, = runner.run(_node("greater", [Value((1, 3), "float32")] * 2,
                             [Value((1, 3), "bool")]), [x, x])
    n = runner.put(np.array([7, -7]), "int64")
    q, = runner.run(_node("div", [Value((2,), "int64")] * 2, [Value((2,), "float64")]), [n, n])
    assert (idx.dtype, mask.dtype, q.dtype) == (torch.int64, torch.bool, torch.float32)
    assert runner.fetch(idx).tolist() == [1]


def test_floating_casts_and_sources_land_in_the_storage_dtype() -> None:
    half = TorchRunner(Context(device="cpu", dtype="bfloat16"))
    x = half.put(np.arange(3), "int64")
    y, = half.run(_node("cast", [Value((3,), "int64")], [Value((3,), "float64")],
                        dtype="float64"), [x])
    z, = half.run(_node("full", [], [Value((2,), "float32")], shape=[2], value=1.5,
                        dtype="float64"), [])
    assert y.dtype == z.dtype == torch.bfloat16
    assert half.fetch(y).dtype == np.float32 and half.fetch(z).tolist() == [1.5, 1.5]


def test_float64_storage_is_exact(runner: TorchRunner) -> None:
    exact = TorchRunner(Context(device="cpu", dtype="float64"))
    case = BY_ID["linear-bias"]
    arrays = [np.random.default_rng(0).standard_normal(a.shape) for a in case_inputs(case)]
    node = case_node(case, arrays)
    got, = exact.run(node, [exact.put(a, "float64") for a in arrays])
    assert got.dtype == torch.float64
    np.testing.assert_allclose(exact.fetch(got), arrays[0] @ arrays[1] + arrays[2], rtol=1e-13)


def test_pullback_gives_none_for_integers_and_absent_cotangents(runner: TorchRunner) -> None:
    case = BY_ID["split-rows"]
    arrays = case_inputs(case)
    node = case_node(case, arrays)
    outs, pullback = runner.vjp(node, [runner.put(a, "float32") for a in arrays])
    ct = runner.put(np.ones((3, 4)), "float32")
    grad, = pullback([None, ct])
    assert runner.fetch(grad)[:2].tolist() == [[0.0] * 4] * 2
    assert runner.fetch(grad)[2:].tolist() == [[1.0] * 4] * 3
    assert pullback([None, None]) == (None,)
    emb = BY_ID["embedding-vector"]
    arrays = case_inputs(emb)
    outs, pullback = runner.vjp(case_node(emb, arrays),
                                [runner.put(a, str(a.dtype)) for a in arrays])
    grads = pullback([runner.put(np.ones(outs[0].shape), "float32")])
    assert grads[0] is None and runner.fetch(grads[1])[5].tolist() == [2.0, 2.0]


def test_planted_kernel_faults_are_hit(runner: TorchRunner) -> None:
    x = np.random.default_rng(0).standard_normal((2, 1027)).astype(np.float32)
    node = _node("softmax", [Value(x.shape, "float32")], [Value(x.shape, "float32")], axis=1)
    with torch_faults.wrong_softmax():
        out, = runner.run(node, [runner.put(x, "float32")])
    assert np.abs(runner.fetch(out).sum(axis=1) - 1).max() > 1e-3
    node = _node("gelu", [Value(x.shape, "float32")], [Value(x.shape, "float32")])
    ct = runner.put(np.ones(x.shape), "float32")
    right, = runner.vjp(node, [runner.put(x, "float32")])[1]([ct])
    with torch_faults.wrong_gelu_backward():
        wrong, = runner.vjp(node, [runner.put(x, "float32")])[1]([ct])
    np.testing.assert_allclose(runner.fetch(wrong), runner.fetch(right) * 1.002, rtol=1e-6)


def test_precision_switches_tf32(tf32_flags) -> None:
    TorchRunner(Context(device="cpu", dtype="tf32"))
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    TorchRunner(Context(device="cpu", dtype="float32"))
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_devices_resolve() -> None:
    assert TorchRunner(Context(device="auto")).device.type == (
        "cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RunnerError, match="cuda"):
            TorchRunner(Context(device="cuda"))
    with pytest.raises(RunnerError, match="int8"):
        TorchRunner(Context(dtype="int8"))


def test_kernel_failures_name_the_node(runner: TorchRunner) -> None:
    node = _node("matmul", [Value((2, 3), "float32"), Value((4, 5), "float32")],
                 [Value((2, 5), "float32")])
    with pytest.raises(RunnerError, match="matmul at <model>"):
        runner.run(node, [runner.put(np.ones((2, 3)), "float32"),
                          runner.put(np.ones((4, 5)), "float32")])


def test_compiled_mode_agrees_with_eager(runner: TorchRunner) -> None:
    compiled = TorchRunner(Context(device="cpu", mode="compiled"))
    # every op, attributes and input types compile apart, each at most once per gradient
    # mode: Dynamo's per-function recompile limit (past it, it runs eagerly) is never reached
    before = set(compiled._compiled)  # the process's cache: other tests' ops may be in it
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True):
        for case_id in ("linear-bias", "softmax-last_axis", "conv-2d_depthwise"):
            case = BY_ID[case_id]
            arrays = case_inputs(case)
            node = case_node(case, arrays)
            check_forward(compiled, case)
            eager, = runner.run(node, [runner.put(a, "float32") for a in arrays])
            outs, pullback = compiled.vjp(node, [compiled.put(a, "float32") for a in arrays])
            np.testing.assert_allclose(compiled.fetch(outs[0]), runner.fetch(eager),
                                       rtol=1e-5, atol=1e-6)
            grads = pullback([compiled.put(np.ones(outs[0].shape), "float32")])
            assert all(g is not None for g in grads), case_id
    made = set(compiled._compiled) - before
    assert len(made) <= 3 and {"linear", "softmax", "conv"} <= {k[0] for k in compiled._compiled}


# -- CUDA against CPU ------------------------------------------------------------------------


@pytest.mark.gpu
@cuda
def test_cuda_tensors_stay_on_the_device(tf32_flags) -> None:
    gpu = TorchRunner(Context(device="cuda", dtype="tf32"))
    case = BY_ID["full-float"]
    out, = gpu.run(case_node(case, []), [])
    assert out.device.type == "cuda" and out.dtype == torch.float32
    assert torch.backends.cuda.matmul.allow_tf32
    gpu.synchronize()
