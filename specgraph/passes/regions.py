"""Regions of a graph and their numeric check: the proof obligation of every raising rule.

A raising rule proposes "the nodes between these inputs and this output compute layer L
with these attributes". ``region`` collects those nodes and checks that nothing outside reads
their intermediate values; ``agrees`` runs the region and the proposed layer with the fp64
references on random inputs (and random parameter values, so a structure that only agrees
for the model's current weights is rejected). A pattern whose arithmetic differs (another
eps, another approximation, another axis) fails the check and is left as it is.

Two shortcuts keep this cheap on large models without changing what is proved. Along axes
that the region and the layer both compute slice by slice, the region runs on fewer slices
(``slices.reduce_region`` says why that is the same statement). And a verdict is remembered
under a key holding everything it depends on: the ops, attributes and wiring of the nodes
run, the shapes and dtypes of the random inputs, the values of the constants, and the
caller's description of its layer (``claim``); a model's twelve identical encoder layers
are proved once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.ir import Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import numpy_dtype
from specgraph.passes.rewrite import Rewriter
from specgraph.passes.slices import reduce_region

__all__ = ["region", "run_region", "agrees", "random_env", "scalar_constants", "params_in",
           "layout_of",
           "forget_verdicts"]

_MAX_REGION = 24
_MAX_VERDICTS = 4096
_VERDICTS: dict[Hashable, bool] = {}


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
    nodes = rw.in_order(found.values())
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


def random_env(values: Iterable[Value], seed: int, *, positive: Iterable[Value] = (),
               shapes: Mapping[Value, tuple[int, ...]] | None = None
               ) -> dict[Value, np.ndarray]:
    """Random float64 arrays for ``values``: N(0, 4²), or uniform in [0.5, 1.5) for
    ``positive`` ones (variances); ``shapes`` overrides the shape of some values."""
    rng = np.random.default_rng(seed)
    positive = set(positive)
    shapes = shapes or {}
    env = {}
    for v in values:
        shape = shapes.get(v, v.shape)
        if v.dtype == "bool":
            env[v] = rng.random(shape) < 0.7
        elif v.dtype.startswith(("int", "uint")):
            env[v] = rng.integers(0, 4, size=shape)
        elif v in positive:
            env[v] = rng.uniform(0.5, 1.5, size=shape)
        else:  # wide enough that relu6 and relu, say, differ
            env[v] = 4.0 * rng.standard_normal(shape)
    return env


def agrees(rw: Rewriter, nodes: Sequence[Node], output: Value, free: Sequence[Value],
           candidate: Callable[[Mapping[Value, np.ndarray]], np.ndarray], *,
           positive: Iterable[Value] = (), trials: int = 2, rtol: float = 1e-6,
           claim: Hashable | None = None, batch: Mapping[Value, Sequence[int]] | None = None
           ) -> bool:
    """Whether the region and ``candidate`` compute the same on random ``free`` values.

    ``rtol`` allows for constants stored in float32 (1/sqrt(2) rounded, say); differences
    of arithmetic (another constant, another formula) are orders of magnitude larger.

    Args:
        claim: what ``candidate`` computes, hashable, naming free values by their position
            in ``free`` (never by ``Value``): two calls with equal claims and structurally
            equal regions must have candidates computing the same. None: not remembered.
        batch: axes along which ``candidate`` computes slice by slice, as
            ``slices.reduce_region`` takes them (output and batch-carrying free values).
    """
    chosen = set(positive)
    positive = [v for v in free if v in chosen]
    reduced = reduce_region(nodes, output, batch) if batch else None
    run_nodes, shapes = (reduced.nodes, reduced.shapes) if reduced else (list(nodes), {})
    key = None if claim is None else _key(rw, run_nodes, output, free, shapes, positive,
                                          (trials, rtol, claim))
    if key is not None and key in _VERDICTS:
        return _VERDICTS[key]
    verdict = all(_trial(rw, run_nodes, output, free, candidate, positive, shapes,
                         1234 + trial, rtol) for trial in range(trials))
    if key is not None:
        if len(_VERDICTS) >= _MAX_VERDICTS:
            del _VERDICTS[next(iter(_VERDICTS))]
        _VERDICTS[key] = verdict
    return verdict


def forget_verdicts() -> None:
    """Drop the remembered verdicts (for timing the proofs themselves)."""
    _VERDICTS.clear()


def _trial(rw, nodes, output, free, candidate, positive, shapes, seed, rtol) -> bool:
    env = random_env(free, seed=seed, positive=positive, shapes=shapes)
    try:
        with np.errstate(all="ignore"):
            want = run_region(rw, nodes, env, output)
            got = np.asarray(candidate(env))
    except (KeyError, ValueError, TypeError, IndexError, FloatingPointError):
        return False
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "biu" or got.dtype.kind in "biu":  # masks, indices: exactly
        return bool(want.dtype.kind == got.dtype.kind and np.array_equal(want, got))
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)):
        return False
    scale = max(float(np.max(np.abs(want[finite]), initial=0.0)), 1e-30)
    return bool(np.max(np.abs(got[finite] - want[finite]), initial=0.0) <= rtol * scale)


class _Unkeyable(Exception):
    """An attribute or claim holds something without an exact hashable form."""


def _frozen(value: Any) -> Hashable:
    """An exact hashable form: type-tagged scalars (so 1, 1.0, True and -0.0, 0.0 differ)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list)):
        return ("seq", tuple(_frozen(v) for v in value))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _frozen(v)) for k, v in value.items())))
    raise _Unkeyable


def _key(rw: Rewriter, nodes: Sequence[Node], output: Value, free: Sequence[Value],
         shapes: Mapping[Value, tuple[int, ...]], positive: Sequence[Value],
         extra: Any) -> Hashable | None:
    """Everything ``agrees`` computes with, naming values as ``run_region`` finds them:
    free values by position, node outputs by (node, output), constants by their data."""
    if len(set(free)) != len(free):
        return None  # a repeated free value: positions no longer name one draw each
    names: dict[Value, Hashable] = {v: ("free", i) for i, v in enumerate(free)}
    inputs = tuple((v.dtype, shapes.get(v, v.shape), v in positive) for v in free)
    try:
        wired = []
        for j, node in enumerate(nodes):
            wired.append((node.op, _frozen(dict(node.attrs)),
                          tuple(names.get(v) or _constant(rw, v) for v in node.inputs)))
            names.update({v: ("node", j, k) for k, v in enumerate(node.outputs)})
        return (inputs, tuple(wired), names.get(output), _frozen(extra))
    except _Unkeyable:
        return None


def _constant(rw: Rewriter, v: Value) -> Hashable:
    data = rw.constant_value(v)
    if data is None:  # neither free nor computed: run_region fails the same way each time
        return ("missing", v.dtype, v.shape)
    data = np.asarray(data)
    return ("constant", v.dtype, data.dtype.str, data.shape, data.tobytes())


def layout_of(x: Value, chain: list[Node]) -> tuple[int, ...] | None:
    """The permutation of ``x``'s axes the reshapes and transposes ``chain`` amount to
    (the elementwise ops between them move nothing), or None where they are no
    permutation: each output axis is the ``x`` axis of the stride its positions step by,
    checked element by element."""
    base = np.arange(x.size).reshape(x.shape)
    index = base
    for n in chain:
        index = np.transpose(index, n.attrs["perm"]) if n.op == "transpose" else \
            np.reshape(index, n.outputs[0].shape)
    if index.ndim != x.rank:
        return None
    by_stride = {s // base.itemsize: a for a, s in enumerate(base.strides) if x.shape[a] > 1}
    perm = [by_stride.get(int(index[(0,) * k + (1,)].reshape(-1)[0] - index.flat[0]))
            if index.shape[k] > 1 else None for k in range(x.rank)]
    rest = iter(a for a in range(x.rank) if a not in perm)  # size-1 axes, in order
    perm = [a if a is not None else next(rest, None) for a in perm]
    if None in perm or sorted(perm) != list(range(x.rank)) or \
            not np.array_equal(np.transpose(base, perm), index):
        return None
    return tuple(perm)
