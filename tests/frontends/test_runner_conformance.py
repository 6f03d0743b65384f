"""Every runner against the op cases of tests/ops: forward against the NumPy reference,
pullbacks against central differences of it, op tables that cover every canonical op and copy
into repro scripts, and the gradient plumbing all runners share.

Parametrized over runner kinds (a framework and a mode) x cases. No framework is imported
here: each runner comes from the registry (``specgraph.frontends.runner``), and a kind
whose framework is missing is skipped. What one framework alone does is tested in
``tests/frontends/<framework>/test_runner.py``.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from specgraph.errors import FrontendMissingError
from specgraph.frontends import runner as make_runner
from specgraph.ir import Node, Value
from specgraph.numeric.runner import Context, Runner, RunnerError
from specgraph.ops import OPAQUE, get_spec, registered_ops
from tests.frontends.runner_checks import (BEYOND_INT32, CASES, case_inputs, case_node,
                                           check_forward, check_self_contained, check_vjp,
                                           forward_and_grads, has_gradient, repro_copy)
from tests.ops.case_types import Case


@dataclass(frozen=True)
class Kind:
    framework: str
    mode: str = "eager"
    differentiable: bool = True
    slow: bool = False


KINDS = {
    "torch": Kind("torch"),
    "jax": Kind("jax"),
    # every case compiles a few XLA programs (tens of ms each on a CPU, most of the sweep's
    # time): the compiled sweep runs with -m slow (tests/frontends/jax/test_runner.py compares
    # compiled with eager on a few layers by default)
    "jax-compiled": Kind("jax", "compiled", slow=True),
    "tf": Kind("tf"),
    "onnx": Kind("onnx", differentiable=False),  # onnxruntime computes no gradients
}
EAGER = [k for k, kind in KINDS.items() if kind.mode == "eager"]
DIFFERENTIABLE = [k for k, kind in KINDS.items() if kind.differentiable]
EAGER_DIFFERENTIABLE = [k for k in DIFFERENTIABLE if k in EAGER]

# the runners with an op table of their own kernels: the names those kernels may read besides
# their own module's functions, and whether those functions must be private (``_...``)
KERNELS = {
    "torch": ({"torch", "F", "math", "np"}, True),
    "jax": ({"jax", "jnp", "lax", "math", "np"}, True),
    "tf": ({"tf", "math", "np"}, False),  # tf's ``linear`` calls its op ``matmul``
}
KERNEL_MODULES = ("kernels", "kernels_spatial")

# what a runner refuses, by framework and case: a RunnerError whose message matches
RAISES = {("jax", case_id): "int32" for case_id in BEYOND_INT32}
# the ONNX runner exports at opset 17; an antialiased Resize came in opset 18
RAISES[("onnx", "resize-2d_linear_antialias_down")] = "opset 18"

# what a runner computes differently from the float64 reference (strict: a fix shows)
DIFFERS = {
    ("onnx", "div-floor_is_python_floordiv"): "the export writes floor(a / b): 1 / 0.1f rounds "
                                              "to 10 in float32 where floor division of the "
                                              "exact values is 9",
    ("onnx", "reduce_max-nan_propagates"): "onnxruntime's CPU ReduceMax skips NaN",
    ("onnx", "argmax-nan_wins"): "onnxruntime's CPU ArgMax skips NaN",
    ("onnx", "arange-float"): "onnxruntime's float32 Range counts ceil((3.2f - 0.5f) / 0.3f) = 9 "
                              "elements where the float64 reference has 10",
    ("onnx", "tile-more_repeats_than_rank"): "to_onnx writes Tile without first raising the "
                                             "input's rank to len(repeats), which ONNX Tile "
                                             "rejects",
}

VJP_CASES = [c for c in CASES if has_gradient(c)]


def _marks(kind: str, case: Case | None = None) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if KINDS[kind].slow else []
    reason = DIFFERS.get((KINDS[kind].framework, case.id)) if case is not None else None
    if reason:
        marks.append(pytest.mark.xfail(reason=reason, strict=True))
    return marks


def _kinds(kinds: list[str]) -> list:
    return [pytest.param(k, id=k, marks=_marks(k)) for k in kinds]


def _sweep(kinds: list[str], cases: list[Case]) -> list:
    return [pytest.param(k, c, id=f"{k}-{c.id}", marks=_marks(k, c)) for k in kinds for c in cases]


@pytest.fixture(scope="module")
def runner(request: pytest.FixtureRequest) -> Runner:
    """The runner of kind ``request.param`` on the CPU, one per kind for the module."""
    kind = KINDS[request.param]
    try:
        made = make_runner(kind.framework, Context(device="cpu", mode=kind.mode))
    except FrontendMissingError as err:
        pytest.skip(str(err))
    assert made.differentiable == kind.differentiable, request.param
    return made


def _node(op: str, inputs: list[Value], outputs: list[Value], **attrs) -> Node:
    return Node(op, tuple(inputs), tuple(outputs), get_spec(op).normalize_attrs(attrs))


# --- the op cases ----------------------------------------------------------------------------


@pytest.mark.parametrize("runner, case", _sweep(list(KINDS), CASES), indirect=["runner"])
def test_forward(runner: Runner, case: Case) -> None:
    refused = RAISES.get((runner.framework, case.id))
    if refused:
        with pytest.raises(RunnerError, match=refused):
            check_forward(runner, case)
        return
    check_forward(runner, case)


@pytest.mark.parametrize("runner, case", _sweep(DIFFERENTIABLE, VJP_CASES), indirect=["runner"])
def test_vjp(runner: Runner, case: Case) -> None:
    check_vjp(runner, case)


def test_the_cases_and_this_module_load_no_framework() -> None:
    code = ("import sys, tests.ops.cases, tests.frontends.test_runner_conformance\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'flax', 'keras', 'tf_keras', "
            "'onnxruntime') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.strip() == "[]"


def test_cases_left_out_of_the_gradient_sweep_have_nothing_to_differentiate() -> None:
    """Left out: piecewise-constant ops, cases without a floating input or output, and the
    few whose reference derivative is not finite; every case still runs forward."""
    out = [c.id for c in CASES if c not in VJP_CASES]
    assert "tanh-basic" not in out and "linear-bias" not in out
    assert {"argmax-axis0", "floor-basic", "div-floor", "full-float", "div-int_true",
            "equal-broadcast_ties", "pow-negative_base_int_exponent"} <= set(out)
    assert len(VJP_CASES) > len(CASES) * 3 // 4


# --- op tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("runner", _kinds(EAGER), indirect=True)
def test_runner_supports_every_canonical_op(runner: Runner) -> None:
    ops = set(registered_ops()) - {OPAQUE}
    assert sorted(op for op in ops if not runner.supports(op)) == []


@pytest.mark.parametrize("runner", _kinds(list(KERNELS)), indirect=True)
def test_op_table_covers_every_canonical_op(runner: Runner) -> None:
    assert set(type(runner).ops) == set(registered_ops()) - {OPAQUE}
    kernels = importlib.import_module(f"specgraph.frontends.{runner.framework}.kernels")
    assert type(runner).ops is kernels.KERNELS


@pytest.mark.parametrize("runner", _kinds(list(KERNELS)), indirect=True)
def test_op_functions_are_self_contained(runner: Runner) -> None:
    """What a repro script copies of an op (its function, the helpers it calls, its module's
    imports) needs nothing else: the kernels are split by kind, each helper beside its ops."""
    imports, private_helpers = KERNELS[runner.framework]
    modules = [importlib.import_module(f"specgraph.frontends.{runner.framework}.{name}")
               for name in KERNEL_MODULES]
    check_self_contained(type(runner).ops, modules, imports, private_helpers=private_helpers)


FIRST_CASE = {c.op: c for c in reversed(CASES)}  # each op's first case


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype:UserWarning")  # JAX without x64
@pytest.mark.parametrize("runner, case",
                         [pytest.param(k, FIRST_CASE[op], id=f"{k}-{op}")
                          for k in KERNELS for op in sorted(FIRST_CASE)], indirect=["runner"])
def test_repro_copy_computes_what_the_op_computes(runner: Runner, case: Case) -> None:
    """The op's function as a repro script holds it (``function_source``, run without
    specgraph) gives what the op table's function gives on the same tensors."""
    fn = type(runner).ops[case.op]
    arrays = case_inputs(case)
    node = case_node(case, arrays)
    tensors = [runner.put(a, "float32" if a.dtype.kind == "f" else str(a.dtype)) for a in arrays]
    want, got = fn(*tensors, **node.attrs), repro_copy(fn)(*tensors, **node.attrs)
    want, got = (x if isinstance(x, (tuple, list)) else (x,) for x in (want, got))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(runner.fetch(g), runner.fetch(w), err_msg=case.id)


# --- plumbing every runner shares ------------------------------------------------------------


@pytest.mark.parametrize("runner", _kinds(EAGER), indirect=True)
def test_outputs_come_back_in_the_graph_dtypes(runner: Runner) -> None:
    x = runner.put(np.array([[0.0, 5.0, 1.0], [7.0, 2.0, 3.0]]), "float32")
    idx, = runner.run(_node("argmax", [Value((2, 3), "float32")], [Value((2,), "int64")],
                            axis=1), [x])
    mask, = runner.run(_node("greater", [Value((2, 3), "float32")] * 2,
                             [Value((2, 3), "bool")]), [x, x])
    n = runner.put(np.array([7, -7]), "int64")
    q, = runner.run(_node("div", [Value((2,), "int64")] * 2, [Value((2,), "float64")]), [n, n])
    assert runner.fetch(idx).dtype == np.int64
    np.testing.assert_array_equal(runner.fetch(idx), [1, 0])
    assert runner.fetch(mask).dtype == np.bool_ and not runner.fetch(mask).any()
    # a float64 graph value is stored in the context's float32
    assert runner.fetch(q).dtype == np.float32
    np.testing.assert_array_equal(runner.fetch(q), [1.0, 1.0])


@pytest.mark.parametrize("runner", _kinds(EAGER_DIFFERENTIABLE), indirect=True)
def test_pullback_gives_none_for_integer_inputs(runner: Runner) -> None:
    node = _node("embedding", [Value((3,), "int64"), Value((4, 2), "float32")],
                 [Value((3, 2), "float32")], padding_idx=None)
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    outs, pullback = runner.vjp(node, [runner.put(np.array([1, 1, 3]), "int64"),
                                       runner.put(weight, "float32")])
    np.testing.assert_array_equal(runner.fetch(outs[0]), weight[[1, 1, 3]])
    d_ids, d_weight = pullback([runner.put(np.ones((3, 2), np.float32), "float32")])
    assert d_ids is None
    # a row read twice sums its gradients
    np.testing.assert_array_equal(runner.fetch(d_weight), [[0, 0], [2, 2], [0, 0], [1, 1]])


@pytest.mark.parametrize("runner", _kinds(EAGER_DIFFERENTIABLE), indirect=True)
def test_embedding_padding_row_gets_no_gradient(runner: Runner) -> None:
    node = _node("embedding", [Value((3,), "int64"), Value((4, 2), "float32")],
                 [Value((3, 2), "float32")], padding_idx=1)
    _, pullback = runner.vjp(node, [runner.put(np.array([1, 0, 1]), "int64"),
                                    runner.put(np.ones((4, 2), np.float32), "float32")])
    _, d_weight = pullback([runner.put(np.ones((3, 2), np.float32), "float32")])
    np.testing.assert_array_equal(runner.fetch(d_weight), [[1, 1], [0, 0], [0, 0], [0, 0]])


@pytest.mark.parametrize("runner", _kinds(EAGER_DIFFERENTIABLE), indirect=True)
def test_split_pullback_with_one_cotangent_missing(runner: Runner) -> None:
    node = _node("split", [Value((5,), "float32")], [Value((2,), "float32"),
                                                     Value((3,), "float32")],
                 axis=0, sizes=(2, 3))
    _, pullback = runner.vjp(node, [runner.put(np.arange(5, dtype=np.float32), "float32")])
    (grad,) = pullback([None, runner.put(np.array([1, 2, 3], np.float32), "float32")])
    np.testing.assert_array_equal(runner.fetch(grad), [0, 0, 1, 2, 3])


@pytest.mark.parametrize("runner", _kinds(EAGER_DIFFERENTIABLE), indirect=True)
def test_one_tensor_read_twice_gets_a_gradient_per_input(runner: Runner) -> None:
    node = _node("mul", [Value((2,), "float32"), Value((2,), "float32")],
                 [Value((2,), "float32")])
    x = runner.put(np.array([2.0, 3.0]), "float32")
    _, pullback = runner.vjp(node, [x, x])
    grads = pullback([runner.put(np.ones(2), "float32")])
    assert len(grads) == 2
    for g in grads:
        np.testing.assert_array_equal(runner.fetch(g), [2.0, 3.0])


# --- on a GPU (run where one is present: -m gpu) -------------------------------------------

GPU_KINDS = ["torch", "jax", "tf"]  # onnxruntime's CUDA provider: tests/frontends/onnx/
# forward tolerance on a GPU against the CPU (PyTorch's cuDNN picks its own algorithms)
GPU_RTOL = {"torch": 1e-4, "jax": 1e-5, "tf": 1e-5}


def _on_gpu(framework: str, **context: str) -> Runner:
    """``framework``'s runner on a GPU, or a skip where its framework sees none."""
    try:
        return make_runner(framework, Context(device="cuda", **context))
    except FrontendMissingError as err:
        pytest.skip(str(err))
    except RunnerError as err:
        pytest.skip(f"no GPU for {framework}: {err}")


def _agree(got: list, want: list, rtol: float, what: str) -> None:
    """Outputs (or gradients) of two devices, floats within ``rtol`` of the values' scale."""
    assert len(got) == len(want), what
    for a, b in zip(got, want):
        assert (a is None) == (b is None), what
        if b is None:
            continue
        if b.dtype.kind != "f":
            np.testing.assert_array_equal(a, b, err_msg=what)
            continue
        finite = b[np.isfinite(b)].astype(np.float64)
        scale = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(scale, 1e-3), err_msg=what)


@pytest.mark.gpu
@pytest.mark.parametrize("runner, case",
                         [p for p in _sweep(GPU_KINDS, CASES)
                          if (KINDS[p.values[0]].framework, p.values[1].id) not in RAISES],
                         indirect=["runner"])
def test_cuda_agrees_with_cpu(runner: Runner, case: Case) -> None:
    gpu = _on_gpu(runner.framework)
    assert gpu.device_kind() == "cuda"
    arrays = case_inputs(case)
    node = case_node(case, arrays)
    got, want = ([r.fetch(o) for o in r.run(node, [r.put(a, str(a.dtype)) for a in arrays])]
                 for r in (gpu, runner))
    _agree(got, want, GPU_RTOL[runner.framework], case.id)
    if any(v.dtype == "float32" for v in node.outputs) and has_gradient(case):
        _agree(*(forward_and_grads(r, case.id)[1] for r in (gpu, runner)), 1e-4, case.id)


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["jax", "tf"])
def test_cuda_float32_is_true_float32_and_tf32_is_not(framework: str) -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
    node = Node("matmul", (Value((256, 512), "float32"), Value((512, 256), "float32")),
                (Value((256, 256), "float32"),), {})
    truth = a.astype(np.float64) @ b.T.astype(np.float64)

    def error(dtype: str) -> float:
        r = _on_gpu(framework, dtype=dtype)
        (out,) = r.run(node, [r.put(a, "float32"), r.put(np.ascontiguousarray(b.T), "float32")])
        return float(np.max(np.abs(r.fetch(out) - truth)))

    assert error("float32") < 1e-3
    assert error("tf32") > 4 * error("float32")
