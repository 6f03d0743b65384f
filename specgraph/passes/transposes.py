"""Sink layout transposes toward the outputs so that inverse pairs meet and cancel.

An NHWC model traced into channels-first ops carries ``transpose`` pairs around every layer;
moving each transpose past elementwise ops, reductions, softmax and rotary embeddings
(adjusting their axes and re-laying out broadcast constants and parameters) makes
``T⁻¹ · T`` adjacent, and the identities pass removes them. A reshape that merges runs of axes followed by a transpose
becomes the transpose of the runs then the merge (PyTorch flattens patches as
``reshape[N, C, HW]·transpose``, Flax and Keras as ``transpose[N, H, W, C]·reshape``: one
form), proved on random values.

Requires: a verified graph. Ensures: no transpose directly feeds an elementwise op,
reduction, softmax or rotary embedding whose layout could absorb it, nor reads a reshape that only merges
runs of axes.
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SinkTransposesPass"]

_ELEMENTWISE = frozenset({"elementwise", "activation"})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                         "reduce_var"})


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _sinkable_transpose(rw: Rewriter, value: Value) -> Node | None:
    node = rw.producer(value)
    if node is not None and node.op == "transpose" and rw.uses(value) == 1:
        return node
    return None


def _relayout_operand(rw: Rewriter, value: Value, perm: tuple[int, ...], rank: int,
                      like: Node) -> Value | None:
    """``value`` as it must be read after the transpose moves past: broadcast operand only."""
    if value.rank == 0 or all(s == 1 for s in value.shape):
        return value
    if not rw.is_fixed(value):
        return None
    full = (1,) * (rank - value.rank) + value.shape
    inv = _inverse(perm)
    target = tuple(full[inv[i]] for i in range(rank))
    order = [i for i in inv if full[i] != 1]
    if order != sorted(order):  # non-unit axes would change order: needs a real transpose
        return None
    return rw.emit("reshape", [value], {"shape": target}, like=like, shape=target)


def _elementwise(rw: Rewriter, node: Node) -> bool:
    transposes = [_sinkable_transpose(rw, v) for v in node.inputs]
    found = [t for t in transposes if t is not None]
    if not found or len(node.outputs) != 1:
        return False
    perm = found[0].attrs["perm"]
    rank = node.outputs[0].rank
    if len(perm) != rank:
        return False
    inputs = []
    for value, t in zip(node.inputs, transposes):
        if t is not None and t.attrs["perm"] == perm:
            inputs.append(t.inputs[0])
            continue
        moved = _relayout_operand(rw, value, perm, rank, node)
        if moved is None:
            return False
        inputs.append(moved)
    inv = _inverse(perm)
    shape = tuple(node.outputs[0].shape[inv[i]] for i in range(rank))
    inner = rw.emit(node.op, inputs, dict(node.attrs), like=node, shape=shape,
                    dtype=node.outputs[0].dtype)
    rw.replace(node.outputs[0], rw.emit("transpose", [inner], {"perm": perm}, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _reduction(rw: Rewriter, node: Node) -> bool:
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None:
        return False
    perm = t.attrs["perm"]
    rank = len(perm)
    axes = node.attrs["axes"]
    axes = tuple(range(rank)) if axes is None else axes
    new_axes = tuple(sorted(perm[a] for a in axes))
    attrs = {**node.attrs, "axes": new_axes}
    source = t.inputs[0]
    if node.attrs["keepdims"]:
        shape = tuple(1 if i in new_axes else source.shape[i] for i in range(rank))
        inner = rw.emit(node.op, [source], attrs, like=node, shape=shape)
        out = rw.emit("transpose", [inner], {"perm": perm}, like=node,
                      shape=node.outputs[0].shape)
    else:
        kept = [perm[i] for i in range(rank) if i not in axes]  # source axes, output order
        ordered = sorted(kept)
        shape = tuple(source.shape[i] for i in ordered)
        out = rw.emit(node.op, [source], attrs, like=node, shape=shape)
        order = tuple(ordered.index(k) for k in kept)
        if order != tuple(range(len(order))):
            out = rw.emit("transpose", [out], {"perm": order}, like=node,
                          shape=node.outputs[0].shape)
    rw.replace(node.outputs[0], out)
    return True


def _softmax(rw: Rewriter, node: Node) -> bool:
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None:
        return False
    perm = t.attrs["perm"]
    source = t.inputs[0]
    inner = rw.emit(node.op, [source], {"axis": perm[node.attrs["axis"]]}, like=node,
                    shape=source.shape)
    rw.replace(node.outputs[0], rw.emit("transpose", [inner], {"perm": perm}, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _rotary(rw: Rewriter, node: Node) -> bool:
    """rotary_embedding(transpose(x, p)) turns the pairs of the last axis by the position
    along its ``axis``: the same as rotating x along ``p[axis]``, then transposing, when p
    keeps the last axis last."""
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None or t.attrs["perm"][-1] != len(t.attrs["perm"]) - 1:
        return False
    perm, source = t.attrs["perm"], t.inputs[0]
    attrs = {**node.attrs, "axis": perm[node.attrs["axis"]]}
    inner = rw.emit(node.op, [source], attrs, like=node, shape=source.shape)
    rw.replace(node.outputs[0], rw.emit("transpose", [inner], {"perm": perm}, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _merge_groups(source: tuple[int, ...], target: tuple[int, ...]) -> list[list[int]] | None:
    """Runs of consecutive ``source`` axes whose sizes multiply to each ``target`` size, or
    None if the reshape does anything but merge runs (size-1 axes make the runs ambiguous)."""
    if 1 in source or 1 in target:
        return None
    groups, i = [], 0
    for size in target:
        group = []
        while i < len(source) and prod(source[j] for j in group) < size:
            group.append(i)
            i += 1
        if not group or prod(source[j] for j in group) != size:
            return None
        groups.append(group)
    return groups if i == len(source) else None


def _merge_after_transpose(rw: Rewriter, node: Node) -> bool:
    """transpose(reshape(x, M), q), M merging runs of x's axes: transpose(x, p) moving the
    runs whole, then the merge (the same values, one form for both orders)."""
    r = rw.producer(node.inputs[0])
    if r is None or r.op != "reshape" or rw.uses(node.inputs[0]) != 1:
        return False
    x, q, out = r.inputs[0], node.attrs["perm"], node.outputs[0]
    groups = _merge_groups(x.shape, r.outputs[0].shape)
    if groups is None or all(len(g) == 1 for g in groups):
        return False
    perm = tuple(i for j in q for i in groups[j])
    moved = tuple(x.shape[i] for i in perm)
    rw.keep(node)  # the region's root must be visible to the region walk
    nodes = region(rw, out, [x])
    if nodes is None or not agrees(
            rw, nodes, out, [x],
            lambda env: np.reshape(np.transpose(env[x], perm), out.shape),
            claim=("merge-after-transpose", perm, out.shape)):
        return True
    inner = rw.emit("transpose", [x], {"perm": perm}, like=node, shape=moved)
    rw.replace(out, rw.emit("reshape", [inner], {"shape": out.shape}, like=r,
                            shape=out.shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "transpose":
        return _merge_after_transpose(rw, node)
    if node.op in _REDUCTIONS:
        return _reduction(rw, node)
    if node.op in ("softmax", "log_softmax"):
        return _softmax(rw, node)
    if node.op == "rotary_embedding":
        return _rotary(rw, node)
    category = get_spec(node.op).category
    if category in _ELEMENTWISE and node.inputs:
        return _elementwise(rw, node)
    return False


class SinkTransposesPass:
    """See the module docstring."""

    name = "sink-transposes"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
