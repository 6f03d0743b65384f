"""Batch-like axes of a region: where it computes slice by slice, so a few slices prove it.

A raising rule claims ``region(x) == layer(x)`` for every ``x`` of the traced shape. If both
sides compute each slice along an axis with one and the same function of that slice (the axis
is not reduced, mixed by a reshape, or broadcast against by a constant or parameter that
varies along it), the claim for every ``x`` of the full shape and the claim for every ``x``
with that axis shorter are one and the same statement: a full-size counterexample has a bad
slice, and that slice alone is a reduced-size counterexample. ``reduce_region`` checks this
for the region node by node (the raising rule vouches for its layer: it names the axes the
layer computes slice by slice) and returns the region resized to evaluate on fewer slices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specgraph.ir import Node, Value
from specgraph.ops import get_spec

__all__ = ["Reduced", "reduce_region", "FLOOR"]

#: Elements of the output that a reduced evaluation keeps per trial (or all, if fewer). The
#: reduction changes no statement, only how many random slices test it; this many keeps a
#: piecewise difference (relu vs relu6 on N(0, 4²) inputs differs on 13% of elements)
#: certain to show.
FLOOR = 4096


class _Mixed(Exception):
    """A node mixes slices along the axis (or a fixed operand varies along it)."""


@dataclass(frozen=True)
class Reduced:
    """A region to evaluate in place of the full one.

    Attributes:
        nodes: the region's nodes, ``shape`` attributes of reshapes and expands resized.
        shapes: the reduced shape of each batch-carrying free value (others keep theirs).
    """

    nodes: list[Node]
    shapes: dict[Value, tuple[int, ...]]


Position = int | None  # where a value carries the axis; None: it does not depend on the slice


def _broadcast(node: Node, pos: list[Position]) -> Position:
    """Elementwise with NumPy broadcasting: operands align on their trailing axes."""
    rank = node.outputs[0].rank
    found = {p + rank - v.rank for v, p in zip(node.inputs, pos) if p is not None}
    if len(found) != 1:
        if found:
            raise _Mixed
        return None
    (at,) = found
    for v, p in zip(node.inputs, pos):
        i = at - (rank - v.rank)
        if p is None and i >= 0 and v.shape[i] != 1:
            raise _Mixed  # a fixed operand that varies along the axis
    return at


def _reduce(node: Node, pos: list[Position]) -> Position:
    (p,) = pos
    rank = node.inputs[0].rank
    axes = node.attrs.get("axes", node.attrs.get("axis"))
    if axes is None:
        raise _Mixed
    axes = {a % rank for a in (axes if isinstance(axes, tuple) else (axes,))}
    if p in axes:
        raise _Mixed
    return p if node.attrs.get("keepdims") else p - sum(a < p for a in axes)


def _along(node: Node, pos: list[Position]) -> Position:
    """softmax, log_softmax, cumsum: one axis mixed, the shape kept."""
    if pos[0] is None or pos[0] == node.attrs["axis"] % node.inputs[0].rank:
        raise _Mixed
    return pos[0]


def _reshape(node: Node, pos: list[Position]) -> Position:
    """Row-major: axis p of s is axis q of t iff the axes before them hold as many elements
    and s[p] == t[q] (then strides agree); n >= 2 makes q unique."""
    p = pos[0]
    s, t = node.inputs[0].shape, node.outputs[0].shape
    before = math.prod(s[:p])
    for q in range(len(t)):
        if math.prod(t[:q]) == before and t[q] == s[p]:
            return q
    raise _Mixed


def _expand(node: Node, pos: list[Position]) -> Position:
    return pos[0] + node.outputs[0].rank - node.inputs[0].rank


def _transpose(node: Node, pos: list[Position]) -> Position:
    return node.attrs["perm"].index(pos[0])


def _matmul(node: Node, pos: list[Position]) -> Position:
    """Batched product: the leading (batch) axes broadcast, the last two are the matrices."""
    rank = node.outputs[0].rank
    if any(v.rank < 2 for v in node.inputs):
        raise _Mixed
    found = set()
    for v, p in zip(node.inputs, pos):
        if p is not None:
            if p >= v.rank - 2:
                raise _Mixed
            found.add(p + rank - v.rank)
    if len(found) != 1:
        raise _Mixed
    (at,) = found
    for v, p in zip(node.inputs, pos):
        i = at - (rank - v.rank)
        if p is None and i >= 0 and v.shape[i] != 1:
            raise _Mixed
    return at


_RULES: dict[str, Callable[[Node, list[Position]], Position]] = {
    "reshape": _reshape, "expand": _expand, "transpose": _transpose, "matmul": _matmul,
    "softmax": _along, "log_softmax": _along, "cumsum": _along,
    **{op: _reduce for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                              "reduce_prod", "reduce_var", "argmax", "argmin")},
}
_SLICEWISE = frozenset({"elementwise", "activation"})
_SHAPE_ATTR = {"reshape": "shape", "expand": "shape"}


def _rule(op: str) -> Callable[[Node, list[Position]], Position] | None:
    rule = _RULES.get(op)
    if rule is None and get_spec(op).category in _SLICEWISE:
        return _broadcast
    return rule


def _trace(nodes: Sequence[Node], data: Mapping[Value, int], n: int
           ) -> dict[Value, int] | None:
    """Where each value carries the axis (starting from ``data``), or None if a node mixes
    slices. A value computed from no carrying value is the same for every slice."""
    pos: dict[Value, int] = dict(data)
    for node in nodes:
        ins = [pos.get(v) for v in node.inputs]
        if all(p is None for p in ins):
            continue
        rule = _rule(node.op)
        if rule is None or len(node.outputs) != 1:
            return None
        try:
            at = rule(node, ins)
        except _Mixed:
            return None
        if at is not None:
            if node.outputs[0].shape[at] != n:
                return None
            pos[node.outputs[0]] = at
    return pos


def _sizes(output: Value, dims: list[int], floor: int) -> list[int]:
    """New lengths of ``dims`` (outermost first cut to 1) keeping ``min(size, floor)``."""
    total = output.size
    target = min(total, floor)
    sizes = []
    for d in dims:
        n = output.shape[d]
        rest = total // n
        new = min(n, max(1, -(-target // rest)))
        sizes.append(new)
        total = rest * new
    return sizes


def reduce_region(nodes: Sequence[Node], output: Value, batch: Mapping[Value, Sequence[int]],
                  *, floor: int = FLOOR) -> Reduced | None:
    """The region evaluated on fewer slices along its batch-like axes, or None if none shrinks.

    Args:
        nodes: the region, in order.
        output: its output.
        batch: ``batch[output]`` lists axes of the output along which the claimed layer
            computes slice by slice; ``batch[v]`` for each free value carrying those axes
            gives the matching axis of ``v`` (same order). Free values not listed must be
            the same for every slice (parameters, other tensors).
        floor: elements of the output to keep per evaluation.

    Returns:
        Axes whose slices the region also computes independently, with one function, are
        cut (the outermost first) to keep ``floor`` output elements; None if none is cut.
    """
    out_dims = list(batch.get(output, ()))
    kept: list[tuple[int, dict[Value, int]]] = []  # (output axis, where each value has it)
    for k, d in enumerate(out_dims):
        n = output.shape[d]
        data = {v: dims[k] for v, dims in batch.items() if v is not output}
        if n < 2 or any(v.shape[a] != n for v, a in data.items()):
            continue
        pos = _trace(nodes, data, n)
        if pos is not None and pos.get(output) == d:
            kept.append((d, pos))
    kept.sort(key=lambda item: item[0])
    sizes = _sizes(output, [d for d, _ in kept], floor)
    cuts = [(pos, new) for (d, pos), new in zip(kept, sizes) if new < output.shape[d]]
    if not cuts:
        return None
    shapes: dict[Value, tuple[int, ...]] = {}
    for v in batch:
        if v is not output:
            shape = list(v.shape)
            for pos, new in cuts:
                shape[pos[v]] = new
            shapes[v] = tuple(shape)
    return Reduced([_resized(node, cuts) for node in nodes], shapes)


def _resized(node: Node, cuts: list[tuple[dict[Value, int], int]]) -> Node:
    name = _SHAPE_ATTR.get(node.op)
    if name is None:
        return node
    shape = list(node.attrs[name])
    for pos, new in cuts:
        at = pos.get(node.outputs[0])
        if at is not None:
            shape[at] = new
    return node.replace(attrs={**node.attrs, name: tuple(shape)})
