"""Reshapes that only merge leading (batch) axes move down, past what works row by row, until
they meet their inverse. PyTorch's OPT runs its final LayerNorm and MLP on ``[B·T, d]``;
TF's OPT attends over ``[B·H, T, d]``; the other ports keep ``[B, T, d]`` and ``[B, H, T,
d]``: moved down, the merges cancel against the reshapes that split them back, and one
network is one graph.

A merge keeps the last ``k`` axes as they are and regroups the ones before them into fewer.
It moves below an elementwise op or activation (whose other operands are merged the same way,
broadcast over the kept axes only, or constants laid out unmerged), a softmax or
normalization over kept axes, a linear layer, a transpose of the kept axes, a product of two
operands merged the same way, and attention whose query, key and value are merged the same
way (a mask broadcast over the kept axes only).

Requires: a verified graph. Ensures: none of those ops reads a merging reshape; exact (the
same values, in the same order, row by row).
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SinkBatchReshapesPass", "batch_merge"]

_ROW_WISE = ("softmax", "log_softmax", "layer_norm", "rms_norm")


def _merge(rw: Rewriter, value: Value) -> tuple[Value, int] | None:
    """``value`` as a reshape merging the leading axes of x: (x, k kept trailing axes)."""
    node = rw.producer(value)
    if node is None:
        return None
    k = _kept(node)
    return None if k is None else (node.inputs[0], k)


def _kept(node: Node) -> int | None:
    """How many trailing axes ``node``, a reshape merging leading axes, keeps (else None)."""
    if node.op != "reshape":
        return None
    x, y = node.inputs[0], node.outputs[0]
    for k in range(min(x.rank, y.rank) - 1, 0, -1):
        if x.shape[-k:] == y.shape[-k:] and x.rank - k > y.rank - k and \
                prod(x.shape[:-k]) == prod(y.shape[:-k]):
            return k
    return None


def batch_merge(node: Node) -> bool:
    """Whether ``node`` is a reshape merging leading axes, which this pass moves down."""
    return _kept(node) is not None


def _axis(axis: int, y: Value, x: Value, k: int) -> int | None:
    """``axis`` of y as an axis of x, when it is one of the kept axes."""
    axis = axis % y.rank
    return axis + x.rank - y.rank if axis >= y.rank - k else None


def _unmerged(rw: Rewriter, node: Node, data: int
              ) -> tuple[list[Value], Value, int, int] | None:
    """The inputs of ``node`` before the merge its first ``data`` inputs share (an operand
    broadcast over the kept axes only stays as it is, size-one axes before them included;
    a constant that varies along the merged axes too is laid out unmerged, as BLOOM's ALiBi
    bias added to scores flattened over batch and heads; inputs past ``data``, a layer's
    parameters, as they are), the merged source of the first merged input, k, and that
    input's slot."""
    found = next(((i, m) for i, v in enumerate(node.inputs[:data])
                  if (m := _merge(rw, v)) is not None), None)
    if found is None or (found[0] and node.op != "add" and node.op != "mul"):
        return None  # beyond a commutative op, the merged operand comes first
    slot, (x0, k) = found
    inputs: list[Value] = []
    for i, v in enumerate(node.inputs[:data]):
        m = _merge(rw, v) if i != slot else (x0, k)
        if m is not None and m[1] == k and m[0].shape[:-k] == x0.shape[:-k]:
            inputs.append(m[0])
        elif _kept_only(v, k):
            inputs.append(v)  # broadcast over the kept axes only (a bias, a scalar, a mask)
        elif (laid := _unmerged_constant(rw, v, x0, k, node.outputs[0].rank)) is not None:
            inputs.append(laid)
        else:
            return None
    return inputs + list(node.inputs[data:]), x0, k, slot


def _unmerged_constant(rw: Rewriter, v: Value, x0: Value, k: int, rank: int
                       ) -> Value | None:
    """A constant broadcast against merged values, laid out for them unmerged: its merged
    axis (the one before the kept ones) of the merged size, split as x0's leading axes."""
    data = rw.constant_value(v)
    if data is None or v.rank > rank:
        return None
    full = (1,) * (rank - v.rank) + v.shape
    lead = x0.shape[:-k]
    if len(full) != k + 1 or full[0] != prod(lead):
        return None
    return rw.constant(np.asarray(data).reshape(lead + full[1:]), v.dtype)


def _kept_only(v: Value, k: int) -> bool:
    """Whether ``v`` varies along the last ``k`` axes alone (any axes before them of size
    one, as an ONNX export's [1, 1, T, T] mask beside [1, B, H, T, T] scores)."""
    return all(s == 1 for s in v.shape[:max(v.rank - k, 0)])


def _emit_merged(rw: Rewriter, node: Node, inputs: list[Value], x0: Value, k: int,
                 attrs: dict) -> bool:
    y = node.outputs[0]
    shape = x0.shape[:-k] + y.shape[-k:]
    inner = rw.emit(node.op, inputs, attrs, like=node, shape=shape)
    rw.replace(y, rw.emit("reshape", [inner], {"shape": y.shape}, like=node, shape=y.shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if len(node.outputs) != 1 or not node.inputs:
        return False
    spec = get_spec(node.op)
    elementwise = spec.category in ("elementwise", "activation")
    data = len(node.inputs) if elementwise or node.op == "matmul" else (
        3 if node.op == "attention" else 1)
    found = _unmerged(rw, node, data)
    if found is None:
        return False
    inputs, x0, k, slot = found
    y, attrs = node.outputs[0], dict(node.attrs)
    if y.rank < k:
        return False
    if elementwise:
        if node.inputs[slot].shape != y.shape:
            return False  # the merged operand is broadcast: its rows are not the result's
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    if node.op in _ROW_WISE:
        axis = _axis(attrs["axis"], node.inputs[0], x0, k)
        if axis is None:
            return False
        attrs["axis"] = axis
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    if node.op == "linear":
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    if node.op == "transpose" and k >= 2:
        perm = attrs["perm"]
        lead = y.rank - k
        if tuple(perm[:lead]) != tuple(range(lead)):
            return False
        attrs["perm"] = tuple(range(x0.rank - k)) + tuple(p - lead + x0.rank - k
                                                        for p in perm[lead:])
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    if node.op == "matmul" and k >= 2 and all(v.rank == x0.rank for v in inputs):
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    if node.op == "attention" and k >= 2 and all(v.rank == x0.rank for v in inputs[:3]) \
            and all(_kept_only(v, k) for v in inputs[3:]):
        return _emit_merged(rw, node, inputs, x0, k, attrs)
    return False


class SinkBatchReshapesPass:
    """See the module docstring."""

    name = "sink-batch-reshapes"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
