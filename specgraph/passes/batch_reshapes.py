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

Reshapes that only put leading axes of size one before a value (a promotion) move down past
the same ops, operands promoted alike, until they meet the reshape that drops those axes: the
pieces of a split stacked tensor, each dropped of its stacked axis where it is unpacked and
promoted again where the program kept it, are multiplied as ``[B, H, T, D]`` whether the
program did so in 5-D (PyTorch's ``nn.MultiheadAttention``, a dynamo ONNX export) or not.

Requires: a verified graph. Ensures: none of those ops reads a merging reshape or a
promotion; exact (the same values, in the same order, row by row).
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SinkBatchReshapesPass", "batch_merge", "batch_promotion", "promoted",
           "unit_split"]

_ROW_WISE = ("softmax", "log_softmax", "layer_norm", "rms_norm")


def _merge(rw: Rewriter, value: Value) -> tuple[Value, int] | None:
    """``value`` as a reshape merging the leading axes of x: (x, k kept trailing axes). A
    piece of a split along the first axis with that axis dropped is no merge: it is how a
    stacked tensor is unpacked (``specgraph.passes.unpacking``), and stays there."""
    node = rw.producer(value)
    if node is None:
        return None
    k = _kept(node)
    if k is None or _unpacked_piece(rw, node) or _drops_units_only(node, k):
        return None
    return node.inputs[0], k


def _drops_units_only(node: Node, k: int) -> bool:
    """Whether the merge only drops axes of one (Keras' GroupNormalization(1) reshapes
    [B, H, W, 1, C] back to [B, H, W, C]): nothing merged, and the norm it ends is raised
    only while the reshape stays where it is."""
    x, y = node.inputs[0], node.outputs[0]
    return [n for n in x.shape[:-k] if n != 1] == [n for n in y.shape[:-k] if n != 1]


def unit_split(node: Node) -> bool:
    """Whether ``node`` splits a stacked tensor into its pieces of one along the first axis
    (``q, k, v = qkv``)."""
    x = node.inputs[0] if node.inputs else None
    return node.op == "split" and x is not None and x.rank >= 2 and \
        node.attrs["axis"] % x.rank == 0 and set(node.attrs["sizes"]) == {1} and \
        len(node.attrs["sizes"]) >= 2


def _unpacked_piece(rw: Rewriter, node: Node) -> bool:
    """Whether the reshape ``node`` drops the first axis of a piece of a ``unit_split``."""
    x, y = node.inputs[0], node.outputs[0]
    split = rw.producer(x)
    return split is not None and unit_split(split) and y.shape == x.shape[1:]


def promoted(rw: Rewriter, value: Value) -> tuple[Value, int] | None:
    """``value`` as a reshape that puts ``m`` leading axes of size one before x: (x, m)."""
    node = rw.producer(value)
    if node is None or node.op != "reshape":
        return None
    return _promotion(node)


def _promotion(node: Node) -> tuple[Value, int] | None:
    x, y = node.inputs[0], node.outputs[0]
    m = y.rank - x.rank
    if m < 1 or y.shape[m:] != x.shape or any(s != 1 for s in y.shape[:m]):
        return None
    return x, m


def batch_promotion(node: Node) -> bool:
    """Whether ``node`` is a reshape putting leading axes of size one before its input,
    which this pass moves down."""
    return node.op == "reshape" and _promotion(node) is not None


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
    input's slot. Merges alike up to leading axes of one (PyTorch's BLOOM flattens an
    unpacked piece of its stacked query, key and value, [1, B, H, T, D], where it flattens
    the transposed key as [B, H, D, T]) are unmerged to the sources without those axes:
    stand-ins (``_DROPPED``) that ``_emit_merged`` makes."""
    found = next(((i, m) for i, v in enumerate(node.inputs[:data])
                  if (m := _merge(rw, v)) is not None), None)
    if found is None or (found[0] and node.op != "add" and node.op != "mul"):
        return None  # beyond a commutative op, the merged operand comes first
    slot, (x0, k) = found
    lead = _lead(x0, k)
    inputs: list[Value] = []
    for i, v in enumerate(node.inputs[:data]):
        m = _merge(rw, v) if i != slot else (x0, k)
        if m is not None and m[1] == k and _lead(m[0], k) == lead:
            inputs.append(_without_units(rw, m[0], lead, k))
        elif _kept_only(v, k):
            inputs.append(v)  # broadcast over the kept axes only (a bias, a scalar, a mask)
        elif (laid := _unmerged_constant(rw, v, lead, k, node.outputs[0].rank)) is not None:
            inputs.append(laid)
        else:
            return None
    return inputs + list(node.inputs[data:]), inputs[slot], k, slot


def _lead(x: Value, k: int) -> tuple[int, ...]:
    """The merged axes of ``x`` (all but its last ``k``), leading axes of one left out."""
    lead = x.shape[:-k]
    start = 0
    while start < len(lead) - 1 and lead[start] == 1:
        start += 1
    return lead[start:]


def _without_units(rw: Rewriter, x: Value, lead: tuple[int, ...], k: int) -> Value:
    """``x`` if its merged axes are ``lead``, else a stand-in for ``x`` reshaped to them
    (made by ``_emit_merged``, should the rule apply; kept for this rule alone)."""
    if x.shape[:-k] == lead:
        return x
    stand_in = Value(lead + x.shape[-k:], x.dtype)
    rw.memo[_DROPPED][stand_in] = x
    return stand_in


_DROPPED = "batch-merge-stand-ins"  # rw.memo key: stand-in -> the merged source it drops


def _unmerged_constant(rw: Rewriter, v: Value, lead: tuple[int, ...], k: int, rank: int
                       ) -> Value | None:
    """A constant broadcast against merged values, laid out for them unmerged: its merged
    axis (the one before the kept ones) of the merged size, split as ``lead``."""
    data = rw.constant_value(v)
    if data is None or v.rank > rank:
        return None
    full = (1,) * (rank - v.rank) + v.shape
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
    dropped = rw.memo[_DROPPED]
    inputs = [rw.emit("reshape", [dropped.pop(v)], {"shape": v.shape}, like=node,
                      shape=v.shape) if v in dropped else v for v in inputs]
    shape = x0.shape[:-k] + y.shape[-k:]
    inner = rw.emit(node.op, inputs, attrs, like=node, shape=shape)
    rw.replace(y, rw.emit("reshape", [inner], {"shape": y.shape}, like=node, shape=y.shape))
    return True


def _pieces_kept_whole(rw: Rewriter, node: Node) -> bool:
    """A split into pieces of one along the first axis whose pieces some op reads as they
    are, each such piece dropped of the axis and promoted back for its readers: the
    promotion then moves down (``_sink_promotion``, below) to where the program drops the
    axis, and the product is the one a program that drops it at once computes. Only where
    every such reader lets the promotion through: one left at once above a reader would be
    the identity, undone by the identities pass."""
    if not unit_split(node):
        return False
    pieces = set(node.outputs)
    kept = [v for v in node.outputs
            if any(r.op != "reshape" for r in rw.graph.consumers(v))]
    if not kept or not all(_passes(rw.graph, r, pieces) for v in kept
                           for r in rw.graph.consumers(v)):
        return False
    rw.keep(node)
    for piece in kept:
        dropped = rw.emit("reshape", [piece], {"shape": piece.shape[1:]}, like=node,
                          shape=piece.shape[1:])
        rw.replace(piece, rw.emit("reshape", [dropped], {"shape": piece.shape}, like=node,
                                  shape=piece.shape))
    return True


def _passes(graph: Graph, reader: Node, pieces: set[Value]) -> bool:
    """Whether a promotion of the pieces moves below ``reader`` (see ``_sink_promotion``):
    its operands the pieces (or their transposes that keep the first axis first) or
    operands of fewer axes."""
    if reader.op == "reshape":
        return True
    if reader.op == "transpose":
        return reader.attrs["perm"][0] == 0
    rank = reader.outputs[0].rank if len(reader.outputs) == 1 else 0
    if reader.op in _ROW_WISE:
        return reader.attrs["axis"] % rank != 0

    def piece(v: Value) -> bool:
        if v in pieces:
            return True
        made = graph.producer(v)
        return made is not None and made.op == "transpose" and made.attrs["perm"][0] == 0 \
            and made.inputs[0] in pieces

    if reader.op == "attention":
        return all(piece(v) for v in reader.inputs[:3]) and \
            all(v.rank < rank for v in reader.inputs[3:])
    if reader.op == "matmul" or get_spec(reader.op).category in ("elementwise", "activation"):
        return all(piece(v) or v.rank < rank for v in reader.inputs)
    return False


def _attention_split_after(rw: Rewriter, node: Node) -> bool:
    """reshape(attention(q, k, v[, mask])) over ``[N, T, d]`` that splits N into
    ``(B, H)`` (keeping d last) is the attention over ``[B, H, T, d]``, each operand of N
    rows split alike (a mask of one row stays broadcast), then the reshape: TF's SAM
    attends over windows · heads merged, unpacked from a stacked q, k, v (the merges of
    ``_unmerged`` never reach it), and splits them only afterwards."""
    att = rw.producer(node.inputs[0])
    y, out = node.inputs[0], node.outputs[0].shape
    if att is None or att.op != "attention" or rw.uses(y) != 1 or y.rank != 3 or \
            len(out) < 3 or out[-1] != y.shape[-1] or out[0] == 1 or out[1] == 1 or \
            out[0] * out[1] != y.shape[0]:
        return False
    lead = out[:2]
    inputs = []
    for v in att.inputs:
        if v.rank != 3 or v.shape[0] not in (1, y.shape[0]):
            return False
        shape = (lead if v.shape[0] == y.shape[0] else (1, 1)) + v.shape[1:]
        inputs.append(rw.emit("reshape", [v], {"shape": shape}, like=node, shape=shape,
                              dtype=v.dtype))
    made = rw.emit("attention", inputs, dict(att.attrs), like=att, shape=lead + y.shape[1:],
                   dtype=y.dtype)
    rw.replace(node.outputs[0], rw.emit("reshape", [made], {"shape": out}, like=node,
                                        shape=out, dtype=y.dtype))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    rw.memo[_DROPPED] = {}  # none from a rule that did not apply
    if node.op == "split":
        return _pieces_kept_whole(rw, node)
    if node.op == "reshape" and _attention_split_after(rw, node):
        return True
    if len(node.outputs) != 1 or not node.inputs:
        return False
    spec = get_spec(node.op)
    elementwise = spec.category in ("elementwise", "activation")
    data = len(node.inputs) if elementwise or node.op == "matmul" else (
        3 if node.op == "attention" else 1)
    if node.op == "linear" and _units_dropped_before_linear(rw, node):
        return True
    found = _unmerged(rw, node, data)
    if found is None:
        return _sink_promotion(rw, node, elementwise, data)
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


def _units_dropped_before_linear(rw: Rewriter, node: Node) -> bool:
    """linear(reshape(x)), the reshape only dropping leading axes of one (read there
    alone): the layer, then the reshape (HF's sequence summary squeezes the picked token's
    axis before its ``Linear``, TF's after its ``Dense``, the squeeze of the head's one
    logit merged into it)."""
    x = node.inputs[0]
    r = rw.producer(x)
    k = _kept(r) if r is not None else None
    if k is None or k != 1 or rw.uses(x) != 1 or x in rw.graph.outputs or \
            not _drops_units_only(r, k):
        return False
    source, out = r.inputs[0], node.outputs[0]
    shape = source.shape[:-1] + out.shape[-1:]
    inner = rw.emit("linear", [source, *node.inputs[1:]], dict(node.attrs), like=node,
                    shape=shape)
    rw.replace(out, rw.emit("reshape", [inner], {"shape": out.shape}, like=r, shape=out.shape))
    return True


def _unpromoted(rw: Rewriter, node: Node, data: int) -> tuple[list[Value], int] | None:
    """The first ``data`` inputs of ``node`` before the promotion they share (m leading
    axes of size one put before each; an operand of no more axes than what follows them
    broadcasts alike without them and stays as it is), and m; None where none is promoted
    or the promoted ones differ in m."""
    y = node.outputs[0]
    found = [promoted(rw, v) for v in node.inputs[:data]]
    ms = {p[1] for p in found if p is not None}
    if len(ms) != 1:
        return None
    (m,) = ms
    if y.rank <= m or any(s != 1 for s in y.shape[:m]):
        return None
    inputs: list[Value] = []
    for v, p in zip(node.inputs[:data], found):
        if p is not None:
            inputs.append(p[0])
        elif v.rank <= y.rank - m:
            inputs.append(v)
        else:
            return None
    return inputs + list(node.inputs[data:]), m


def _sink_promotion(rw: Rewriter, node: Node, elementwise: bool, data: int) -> bool:
    """``op(reshape(x, [1, *x.shape]))`` as ``reshape(op(x), [1, *op(x).shape])`` where
    ``op`` works alike without the leading axes of size one: an elementwise op, a transpose
    that leaves them in place, a softmax or normalization over other axes, a product or
    attention of operands promoted alike (not a linear layer: raising one keeps the rank
    its product has, ``raise_linear``). The axes a split of a stacked tensor
    leaves on each piece (PyTorch's ``nn.MultiheadAttention`` and a dynamo ONNX export of
    GPT-2 multiply its pieces as ``[1, B, H, T, D]``) so reach the reshape that drops them."""
    if node.op == "reshape":
        p = promoted(rw, node.inputs[0])
        if p is None:
            return False
        y = node.outputs[0]
        rw.replace(y, p[0] if p[0].shape == y.shape else rw.emit(
            "reshape", [p[0]], {"shape": y.shape}, like=node, shape=y.shape))
        return True
    if not (elementwise or node.op in _ROW_WISE or node.op in (
            "transpose", "matmul", "attention")):
        return False
    found = _unpromoted(rw, node, data)
    if found is None:
        return False
    inputs, m = found
    y, attrs = node.outputs[0], dict(node.attrs)
    if elementwise and not any(v.shape == y.shape[m:] for v in inputs[:data]):
        return False
    if node.op in _ROW_WISE:
        axis = attrs["axis"] % y.rank
        if axis < m:
            return False
        attrs["axis"] = axis - m
    elif node.op == "transpose":
        perm = attrs["perm"]
        if tuple(perm[:m]) != tuple(range(m)):
            return False
        attrs["perm"] = tuple(p - m for p in perm[m:])
    elif node.op in ("matmul", "attention") and any(v.rank < 2 for v in inputs[:data]):
        return False
    if node.op == "attention" and any(v.rank > y.rank - m for v in inputs[data:]):
        return False  # a mask laid out over the promoted axes too
    inner = rw.emit(node.op, inputs, attrs, like=node, shape=y.shape[m:])
    rw.replace(y, rw.emit("reshape", [inner], {"shape": y.shape}, like=node, shape=y.shape))
    return True


class SinkBatchReshapesPass:
    """See the module docstring."""

    name = "sink-batch-reshapes"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
