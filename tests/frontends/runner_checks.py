"""Checks every runner's op table must pass: forward against the op's NumPy reference, and
the pullback against central differences of that reference, on the op cases of tests/ops.

``test_runner_conformance`` runs ``check_forward`` on every case and ``check_vjp`` on every
case ``has_gradient`` admits, for every runner; inputs are rounded to the runner's float32
first, so the float64 reference sees exactly what the runner saw. No framework is imported
here: the runners come in as arguments.
"""

from __future__ import annotations

import builtins
import inspect
import types
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgraph.ir import Node, Value
from specgraph.numeric.oracle import directional_derivative, reference_outputs
from specgraph.numeric.repro import function_source, global_names
from specgraph.numeric.runner import Runner
from specgraph.ops import get_spec
from tests.ops.case_types import Case, make_input
from tests.ops.cases import BY_ID, CASES

__all__ = ["CASES", "BY_ID", "BEYOND_INT32", "PIECEWISE_CONSTANT", "case_inputs", "case_node",
           "check_forward", "vjp_probe", "has_gradient", "check_vjp", "check_self_contained",
           "repro_copy", "forward_and_grads"]

# int64 values beyond the int32 range: JAX without x64 cannot hold them, and its runner says so
BEYOND_INT32 = frozenset({"div-int_beyond_float53", "div-int_floor_beyond_float53"})

# ops whose floating outputs are piecewise constant in their inputs (and so is division with
# rounding): the gradient is zero almost everywhere, central differences across a step are
# meaningless. Ops with only integer or boolean outputs need no listing: nothing flows back.
PIECEWISE_CONSTANT = frozenset({"ceil", "floor", "sign"})


def _dtype(a: np.ndarray) -> str:
    return "float32" if a.dtype.kind == "f" else str(a.dtype)


def case_inputs(c: Case) -> list[np.ndarray]:
    """The case's inputs, seeded from its id, floats rounded to float32."""
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    arrays = [make_input(s, rng) for s in c.inputs]
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def case_node(c: Case, arrays: list[np.ndarray]) -> Node:
    """A node for the case, its outputs shaped as the reference computes them."""
    spec = get_spec(c.op)
    attrs = spec.normalize_attrs(c.attrs)
    outs = reference_outputs(Node(c.op, (), (), attrs), arrays)
    return Node(c.op, tuple(Value(a.shape, _dtype(a)) for a in arrays),
                tuple(Value(o.shape, _dtype(o)) for o in outs), attrs)


def _close(got: np.ndarray, want: np.ndarray, what: str, rtol: float) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    got = got.astype(np.float64)
    finite = want[np.isfinite(want)]
    scale = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(scale, 1e-3),
                               err_msg=what)


def check_forward(runner: Runner, c: Case, rtol: float = 2e-5) -> None:
    """The runner's op agrees with the float64 reference on the case's inputs."""
    arrays = case_inputs(c)
    node = case_node(c, arrays)
    want = reference_outputs(node, arrays)
    got = runner.run(node, [runner.put(a, _dtype(a)) for a in arrays])
    assert len(got) == len(want), f"{len(got)} outputs, reference {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        _close(runner.fetch(g), w, f"{c.id} output {i}", rtol)


@dataclass(frozen=True)
class VjpProbe:
    """What ``check_vjp`` holds a runner's pullback against: the case's inputs and node, the
    output cotangents and input direction (seeded from the case's id, None where the value is
    not floating), and the reference's directional derivative along them."""

    arrays: list[np.ndarray]
    node: Node
    cts: list[np.ndarray | None]
    dirs: list[np.ndarray | None]
    want: float


def vjp_probe(c: Case) -> VjpProbe | None:
    """The case's gradient check, or None where it has nothing to differentiate: a piecewise
    constant op, no floating input, a non-finite input, no floating output, or a reference
    derivative that is not finite (pow of a negative base, off its integer exponents)."""
    if c.op in PIECEWISE_CONSTANT or (c.op == "div" and c.attrs.get("rounding")):
        return None
    if c.op == "embedding" and c.attrs.get("max_norm") is not None:
        return None  # PyTorch renormalizes outside autograd: the lookup's gradient, by
        # convention, not the derivative of the renormalized rows the differences take
    arrays = case_inputs(c)
    floats = [a for a in arrays if a.dtype.kind == "f"]
    if not floats or not all(np.all(np.isfinite(a)) for a in floats):
        return None
    node = case_node(c, arrays)
    if not any(v.dtype == "float32" for v in node.outputs):
        return None
    rng = np.random.default_rng(zlib.crc32(c.id.encode()) + 1)
    cts = [rng.standard_normal(v.shape).astype(np.float32) if v.dtype == "float32" else None
           for v in node.outputs]
    dirs = [rng.standard_normal(a.shape).astype(np.float32) if a.dtype.kind == "f" else None
            for a in arrays]
    want = directional_derivative(node, arrays, cts, dirs)
    if not np.isfinite(want):
        return None
    return VjpProbe(arrays, node, cts, dirs, want)


def has_gradient(c: Case) -> bool:
    """Whether ``check_vjp`` has something to check on the case (decided at collection)."""
    return vjp_probe(c) is not None


def check_vjp(runner: Runner, c: Case, rtol: float = 2e-3) -> None:
    """The runner's pullback agrees with central differences of the reference along a
    random direction; some floating input must get a gradient."""
    probe = vjp_probe(c)
    assert probe is not None, f"{c.id} has nothing to differentiate: leave it out (has_gradient)"
    arrays, cts, dirs, want = probe.arrays, probe.cts, probe.dirs, probe.want
    outs, pullback = runner.vjp(probe.node, [runner.put(a, _dtype(a)) for a in arrays])
    grads = pullback([None if ct is None else runner.put(ct, "float32") for ct in cts])
    assert len(grads) == len(arrays), f"{len(grads)} input gradients for {len(arrays)} inputs"
    assert any(g is not None for g, d in zip(grads, dirs) if d is not None), (
        f"{c.id}: no floating input got a gradient")
    got = sum(float(np.sum(runner.fetch(g).astype(np.float64) * d))
              for g, d in zip(grads, dirs) if g is not None and d is not None)
    size = sum(float(np.linalg.norm(d)) for d in dirs if d is not None)
    ct_size = sum(float(np.linalg.norm(ct)) for ct in cts if ct is not None)
    assert abs(got - want) <= rtol * (abs(want) + 1e-2 * size * ct_size / max(
        1, np.sqrt(sum(a.size for a in arrays)))), f"{c.id}: <grad, u> {got} vs fd {want}"


def check_self_contained(ops: Mapping[str, Any], modules: Iterable[types.ModuleType],
                         imports: set[str], *, private_helpers: bool) -> None:
    """Each op function is a named module-level def of one of ``modules`` without a closure,
    and so is every helper it reaches, in the op's own module (the repro exporter follows
    same-module helpers only); none reads a global but ``imports`` (the module's imports),
    builtins and its module's own functions (named ``_...`` when ``private_helpers``): what a
    repro script copies must run on its own."""
    by_name = {m.__name__: m for m in modules}
    for op, fn in ops.items():
        assert getattr(fn, "__module__", None) in by_name, (op, fn)
        module = by_name[fn.__module__]
        todo, seen = [fn], set()
        while todo:
            f = todo.pop()
            if f.__name__ in seen:
                continue
            seen.add(f.__name__)
            assert inspect.isfunction(f) and f.__module__ == module.__name__, (op, f)
            assert f.__qualname__ == f.__name__ != "<lambda>", (op, f)
            assert getattr(module, f.__name__) is f and f.__closure__ is None, (op, f)
            for name in global_names(f.__code__) - set(dir(builtins)):
                if name in imports:
                    assert inspect.ismodule(getattr(module, name)), (op, name)
                    continue
                helper = getattr(module, name, None)
                assert inspect.isfunction(helper) and helper.__module__ == module.__name__, (
                    op, name)
                assert name.startswith("_") or not private_helpers, (op, name)
                todo.append(helper)


def repro_copy(fn: Any) -> Any:
    """``fn`` as a repro script gets it: its module text from ``function_source``, executed
    on its own, without specgraph; the script around it loads its data with ``np``."""
    namespace: dict[str, Any] = {"__name__": f"repro_{fn.__name__}"}
    exec(compile(function_source(fn), f"<repro of {fn.__name__}>", "exec"), namespace)
    assert namespace.get("np") is np, f"{fn.__module__} does not import numpy as np"
    return namespace[fn.__name__]


def forward_and_grads(runner: Runner, case_id: str) -> tuple[list, list]:
    """A case's outputs and input gradients (seeded output gradients) on ``runner``."""
    case = BY_ID[case_id]
    arrays = case_inputs(case)
    node = case_node(case, arrays)
    rng = np.random.default_rng(0)
    cts = [runner.put(rng.standard_normal(v.shape).astype(np.float32), "float32")
           for v in node.outputs]
    outs, pullback = runner.vjp(node, [runner.put(a, str(a.dtype)) for a in arrays])
    grads = pullback(cts)
    return ([runner.fetch(o) for o in outs],
            [None if g is None else runner.fetch(g) for g in grads])
