"""Regions of a graph and their numeric check: the proof obligation of every raising rule.

A raising rule proposes "the nodes between these inputs and this output compute layer L
with these attributes". ``region`` collects those nodes and checks that nothing outside reads
their intermediate values; ``agrees`` runs the region and the proposed layer with the fp64
references on random inputs (and random parameter values, so a structure that only agrees
for the model's current weights is rejected). A pattern whose arithmetic differs (another
eps, another approximation, another axis) fails the check and is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from specgraph.ir import Node, Value
from specgraph.ops import get_spec
from specgraph.ops.elementwise import numpy_dtype
from specgraph.passes.rewrite import Rewriter

__all__ = ["region", "run_region", "agrees", "random_env", "scalar_constants", "params_in"]

_MAX_REGION = 24


def region(rw: Rewriter, output: Value, inputs: Iterable[Value], *,
           limit: int = _MAX_REGION) -> list[Node] | None:
    """The nodes computing ``output`` from ``inputs``, params and constants, in order.

    Returns None if the cone reaches another tensor, exceeds ``limit`` nodes, or if a value
    computed inside is also read outside (replacing the region would then change the graph).
    """
    stop = set(inputs)
    found: dict[int, Node] = {}
    stack = [output]
    seen: set[Value] = set()
    while stack:
        v = stack.pop()
        if v in seen or v in stop:
            continue
        seen.add(v)
        node = rw.producer(v)
        if node is None:
            if rw.is_param(v) or rw.constant_value(v) is not None:
                continue
            return None  # reaches a graph input that is not one of ``inputs``
        if id(node) not in found:
            found[id(node)] = node
            if len(found) > limit:
                return None
            stack.extend(node.inputs)
    nodes = [n for n in rw.nodes if id(n) in found]
    if not _closed(rw, nodes, output):
        return None
    return nodes


def _closed(rw: Rewriter, nodes: list[Node], output: Value) -> bool:
    inside: dict[Value, int] = {}  # distinct reading nodes, as Graph.consumers counts
    for n in nodes:
        for v in set(n.inputs):
            inside[v] = inside.get(v, 0) + 1
    for n in nodes:
        for v in n.outputs:
            if v is output:
                continue
            if v not in rw._uses or rw.uses(v) != inside.get(v, 0):
                return False
    return True


def params_in(rw: Rewriter, nodes: Sequence[Node]) -> list[Value]:
    """Parameters read by ``nodes``, in first-read order."""
    out: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if rw.is_param(v) and v not in out:
                out.append(v)
    return out


def scalar_constants(rw: Rewriter, nodes: Sequence[Node]) -> list[float]:
    """The single-element constants read by ``nodes`` (candidate eps, scale, ...)."""
    out: list[float] = []
    for n in nodes:
        for v in n.inputs:
            s = rw.scalar(v)
            if s is not None and s not in out:
                out.append(s)
    return out


def run_region(rw: Rewriter, nodes: Sequence[Node], env: Mapping[Value, np.ndarray],
               output: Value) -> np.ndarray:
    """Evaluate ``nodes`` with the fp64 references, reading ``env`` then constants."""
    values = dict(env)
    for node in nodes:
        args = []
        for v in node.inputs:
            if v in values:
                args.append(values[v])
            else:
                data = rw.constant_value(v)
                if data is None:
                    raise KeyError(v)
                args.append(np.asarray(data).astype(numpy_dtype(v.dtype)))
        result = get_spec(node.op).reference(*args, **node.attrs)
        outs = result if isinstance(result, tuple) else (result,)
        for v, data in zip(node.outputs, outs):
            values[v] = np.asarray(data)
    return values[output]


def random_env(values: Iterable[Value], seed: int, *, positive: Iterable[Value] = ()
               ) -> dict[Value, np.ndarray]:
    """Random float64 arrays for ``values``: N(0, 4²), or uniform in [0.5, 1.5) for
    ``positive`` ones (variances)."""
    rng = np.random.default_rng(seed)
    positive = set(positive)
    env = {}
    for v in values:
        if v.dtype == "bool":
            env[v] = rng.random(v.shape) < 0.7
        elif v.dtype.startswith(("int", "uint")):
            env[v] = rng.integers(0, 4, size=v.shape)
        elif v in positive:
            env[v] = rng.uniform(0.5, 1.5, size=v.shape)
        else:  # wide enough that relu6 and relu, say, differ
            env[v] = 4.0 * rng.standard_normal(v.shape)
    return env


def agrees(rw: Rewriter, nodes: Sequence[Node], output: Value, free: Sequence[Value],
           candidate: Callable[[Mapping[Value, np.ndarray]], np.ndarray], *,
           positive: Iterable[Value] = (), trials: int = 2, rtol: float = 1e-6) -> bool:
    """Whether the region and ``candidate`` compute the same on random ``free`` values.

    ``rtol`` allows for constants stored in float32 (1/sqrt(2) rounded, say); differences
    of arithmetic (another constant, another formula) are orders of magnitude larger.
    """
    positive = list(positive)
    for trial in range(trials):
        env = random_env(free, seed=1234 + trial, positive=positive)
        try:
            with np.errstate(all="ignore"):
                want = run_region(rw, nodes, env, output)
                got = np.asarray(candidate(env))
        except (KeyError, ValueError, TypeError, IndexError, FloatingPointError):
            return False
        if got.shape != want.shape:
            return False
        finite = np.isfinite(want)
        if not np.array_equal(finite, np.isfinite(got)):
            return False
        scale = max(float(np.max(np.abs(want[finite]), initial=0.0)), 1e-30)
        if np.max(np.abs(got[finite] - want[finite]), initial=0.0) > rtol * scale:
            return False
    return True
