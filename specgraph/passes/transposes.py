"""Sink layout transposes toward the outputs so that inverse pairs meet and cancel.

An NHWC model traced into channels-first ops carries ``transpose`` pairs around every layer;
moving each transpose past elementwise ops, reductions, slices, gathers along one axis,
resizes, layer norms that keep their axes, softmax, rotary embeddings and concats whose
operands all carry it (adjusting their axes and re-laying out broadcast constants and
parameters) makes ``T⁻¹ · T`` adjacent, and the identities pass removes them.
A reshape that merges runs of axes followed by a transpose becomes the transpose of the runs
then the merge (PyTorch flattens patches as ``reshape[N, C, HW]·transpose``, Flax and Keras
as ``transpose[N, H, W, C]·reshape``: one form), and a transpose followed by a reshape that
splits its axes into runs becomes the split then the transpose of the runs (PyTorch
unflattens tokens as ``transpose[N, C, HW]·reshape``, Keras as
``reshape[N, H, W, C]·transpose``), both proved on random values. Where a transpose reads
an elementwise op, a concat, a keepdims reduction, a pad or a softmax whose operands are
mostly its inverse transposes (an NHWC residual add, squeeze-excitation or channel concat
between two NCHW convs, TF's zero pad of an NHWC tensor before a pool; a pad of anything,
whose transpose then reaches the conv that reads the pad), it is hoisted above the op
instead: the inverse pairs cancel there, the count of transposes never grows and
every transpose moves toward the inputs (a tie, an NHWC residual whose NHWC input is also
read elsewhere, goes the same way in every model), and the sinking rules never undo it: they
move a transpose only when every operand carries it. A reshape that only adds or drops axes
of one sinks below a rotary embedding too (its position axis renumbered). A transpose
reading a ``weight_norm`` moves onto its weight (and its gain is relaid out), so that the
parameters take the layout the model reads. A lone transpose does not sink through an
elementwise op into one whose other operands, made elsewhere, keep the layout it leaves:
it would stop there anyway, and the layouts pass gives that stretch one layout (the two
passes moved it back and forth). A transpose that leaves the last axis in place sinks below
the linear layers that read it, and hoists above a linear layer that reads a merge of a
transpose's output, where the two transposes then meet: ``nn.MultiheadAttention(batch_first=
True)`` moves its input sequence-first and its output back, around heads split and merged
sequence-first; its heads then are those of an attention written batch-first. (A split of
an axis a transpose leaves in place goes above it only where another transpose reads the
split, as those heads are moved.)

Requires: a verified graph. Ensures: no transpose directly feeds an elementwise op (but one
the next op of its stretch would stop),
reduction, slice, softmax or rotary embedding whose layout could absorb it, nor all of a
concat's operands alike, nor a reshape that only splits its axes into runs, nor reads a
reshape that only merges runs of axes, nor reads an op it could be hoisted above with fewer
transposes, nor reads a ``weight_norm``.
"""

from __future__ import annotations

from math import prod
from types import MappingProxyType

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SinkTransposesPass", "relayout_operand", "inverse_perm", "ELEMENTWISE"]

ELEMENTWISE = frozenset({"elementwise", "activation"})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                         "reduce_var"})


def inverse_perm(perm: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation undoing ``perm``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _trailing_order(perm: tuple[int, ...], axis: int) -> tuple[int, ...] | None:
    """How ``perm`` orders the axes from ``axis`` on, numbered from 0 (the transpose that
    relays out a tensor laid over them), where it moves them among themselves; else None."""
    rank = len(perm)
    if sorted(perm[axis:]) != list(range(axis, rank)):
        return None
    inverse = inverse_perm(perm)
    return tuple(inverse[a] - axis for a in range(axis, rank))


def _sinkable_transpose(rw: Rewriter, value: Value) -> Node | None:
    node = rw.producer(value)
    if node is not None and node.op == "transpose" and rw.uses(value) == 1:
        return node
    return None


def relayout_operand(rw: Rewriter, value: Value, perm: tuple[int, ...], rank: int,
                     like: Node) -> Value | None:
    """``value`` as it must be read after the transpose by ``perm`` moves past (from the
    layout ``perm`` makes to the one it reads): a broadcast operand, reshaped; None where
    it depends on an input or its non-unit axes would change order."""
    if value.rank == 0 or all(s == 1 for s in value.shape):
        return value
    if not rw.is_fixed(value) or not _keeps_order(value, perm, rank):
        return None  # (non-unit axes that would change order need a real transpose)
    full = (1,) * (rank - value.rank) + value.shape
    inv = inverse_perm(perm)
    target = tuple(full[inv[i]] for i in range(rank))
    return rw.emit("reshape", [value], {"shape": target}, like=like, shape=target)


def _keeps_order(value: Value, perm: tuple[int, ...], rank: int) -> bool:
    """Whether ``value``, broadcast to ``rank`` axes, keeps its non-unit axes in order
    when read in the layout ``perm`` makes: a reshape then relays it out."""
    full = (1,) * (rank - value.rank) + value.shape
    order = [i for i in inverse_perm(perm) if full[i] != 1]
    return order == sorted(order)


def _stuck_below(rw: Rewriter, node: Node, perm: tuple[int, ...]) -> bool:
    """Whether a transpose by ``perm`` sunk below ``node`` would stop at its one reader: an
    elementwise op that also reads a value made by another layer in the layout the
    transpose leaves (not carrying the same transpose, not a constant a reshape relays
    out). The transpose then only moves between two ops of one stretch, which the layouts
    pass gives one layout, and the two passes would move it back and forth (wav2vec2's
    feature encoder: a gelu between a conv's transpose and a residual add)."""
    out = node.outputs[0]
    if out in rw.graph.outputs:
        return False
    readers = rw.graph.consumers(out)
    if len(readers) != 1 or get_spec(readers[0].op).category not in ELEMENTWISE:
        return False
    rank = out.rank
    for v in readers[0].inputs:
        if v is out or v.rank == 0 or all(n == 1 for n in v.shape):
            continue
        if rw.is_fixed(v):  # a constant or weight the reader could read relaid out,
            if not _keeps_order(v, perm, rank):  # unless only a real transpose would do
                return True  # (Whisper's positions)
            continue
        t = _sinkable_transpose(rw, v)
        if t is None or t.attrs["perm"] != perm:
            return True
    return False


def _elementwise(rw: Rewriter, node: Node) -> bool:
    transposes = [_sinkable_transpose(rw, v) for v in node.inputs]
    found = [t for t in transposes if t is not None]
    if not found or len(node.outputs) != 1:
        return False
    perm = found[0].attrs["perm"]
    rank = node.outputs[0].rank
    if len(perm) != rank:
        return False
    if len(found) == 1 and all(t is not None or rw.is_fixed(v) or v.rank == 0
                               for v, t in zip(node.inputs, transposes)) and \
            _stuck_below(rw, node, perm):
        return False  # one transpose that would only move to the next op
    inputs = []
    for value, t in zip(node.inputs, transposes):
        if t is not None and t.attrs["perm"] == perm:
            inputs.append(t.inputs[0])
            continue
        moved = relayout_operand(rw, value, perm, rank, node)
        if moved is None:
            return False
        inputs.append(moved)
    inv = inverse_perm(perm)
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


def _slice(rw: Rewriter, node: Node) -> bool:
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None:
        return False
    perm, out = t.attrs["perm"], node.outputs[0]
    inner_shape = [0] * out.rank
    for j, p in enumerate(perm):
        inner_shape[p] = out.shape[j]
    attrs = {**node.attrs, "axes": tuple(perm[a] for a in node.attrs["axes"])}
    inner = rw.emit("slice", [t.inputs[0]], attrs, like=node, shape=inner_shape)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=node, shape=out.shape))
    return True


def _along_axes(rw: Rewriter, node: Node) -> bool:
    """A gather of positions along one axis (1-D indices: a nearest resize's, a
    reorder's), or a resize, reads the transpose's source along the axes it moved there."""
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None or (node.op == "gather" and node.inputs[1].rank != 1):
        return False
    perm, out = t.attrs["perm"], node.outputs[0]
    inner_shape = [0] * out.rank
    for j, p in enumerate(perm):
        inner_shape[p] = out.shape[j]
    if node.op == "gather":
        attrs = {"axis": perm[node.attrs["axis"]]}
    else:  # a resize: its axes (and what goes with each) in the source's order
        moved = sorted(zip((perm[a] for a in node.attrs["axes"]), node.attrs["sizes"],
                           node.attrs["steps"]))
        attrs = {**node.attrs, "axes": tuple(a for a, _, _ in moved),
                 "sizes": tuple(n for _, n, _ in moved), "steps": tuple(s for _, _, s in moved)}
    inner = rw.emit(node.op, [t.inputs[0], *node.inputs[1:]], attrs, like=node,
                    shape=inner_shape)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=node, shape=out.shape))
    return True


def _split(rw: Rewriter, node: Node) -> bool:
    """A split of a transposed value is the split of the value along the axis the transpose
    moved there, each piece transposed (a GLU gate split along TF's channels-last axis, one
    along PyTorch's channels-first one), where every piece is read by elementwise ops only,
    through which the transposes sink on (q, k and v split for attention keep the one
    transpose above the split)."""
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None or len(node.inputs) != 1:
        return False
    perm, source = t.attrs["perm"], t.inputs[0]
    if not all(_sinks_on(rw, out, perm) for out in node.outputs):
        return False  # one transpose becomes one per piece: only where they sink on
    axis = perm[node.attrs["axis"] % source.rank]
    pieces = []
    for out in node.outputs:
        shape = [0] * out.rank
        for j, p in enumerate(perm):
            shape[p] = out.shape[j]
        pieces.append(Value(tuple(shape), out.dtype))
    attrs = get_spec("split").normalize_attrs({**node.attrs, "axis": axis})
    rw.keep(Node("split", (source,), tuple(pieces), MappingProxyType(attrs), node.scope,
                 node.source, node.origin))
    rw.modified = True
    for piece, out in zip(pieces, node.outputs):
        rw.replace(out, rw.emit("transpose", [piece], {"perm": perm}, like=node,
                                shape=out.shape))
    return True


def _sinks_on(rw: Rewriter, piece: Value, perm: tuple[int, ...]) -> bool:
    """Whether a transpose by ``perm`` of ``piece`` (a split's output) sinks on below every
    reader: elementwise ops, (``perm`` leaving the last axis in place) linear layers
    reading it as their input (a recurrent layer run time-major reads each step of its
    transposed sequence through its input projection: Keras' LSTM), or reshapes that only
    drop its axes of one where ``perm`` moves only those (that step, ``[1, B, D]`` read as
    ``[B, D]``: the transpose and the reshape are one reshape)."""
    readers = rw.graph.consumers(piece)
    if not readers:
        return False
    last = len(perm) - 1
    kept = [p for p, n in zip(perm, piece.shape) if n != 1]  # what each axis reads
    squeezed = tuple(n for n in piece.shape if n != 1)
    return all(get_spec(u.op).category in ELEMENTWISE or
               (u.op == "linear" and perm[-1] == last and u.inputs[0] is piece and
                piece not in u.inputs[1:]) or
               (u.op == "reshape" and u.outputs[0].shape == squeezed and
                kept == sorted(kept)) for u in readers)


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


def _rotary_unit_axes(rw: Rewriter, node: Node) -> bool:
    """rotary_embedding(reshape(x)) where the reshape only adds or drops axes of one (a
    transpose of one head's size-1 axis, which became a reshape: Gemma's single key head):
    x rotated along the same axis, then reshaped, as the transposes above are moved."""
    x_value = node.inputs[0]
    reshape = rw.producer(x_value)
    if reshape is None or reshape.op != "reshape" or rw.uses(x_value) != 1:
        return False
    source = reshape.inputs[0]
    kept_in = [i for i, n in enumerate(source.shape) if n != 1]
    kept_out = [i for i, n in enumerate(x_value.shape) if n != 1]
    axis = node.attrs["axis"]
    if [source.shape[i] for i in kept_in] != [x_value.shape[i] for i in kept_out] or \
            axis not in kept_out or not kept_out or kept_out[-1] != x_value.rank - 1 or \
            kept_in[-1] != source.rank - 1:
        return False
    moved = kept_in[kept_out.index(axis)]
    inner = rw.emit(node.op, [source], {**node.attrs, "axis": moved}, like=node,
                    shape=source.shape)
    rw.replace(node.outputs[0], rw.emit("reshape", [inner], {"shape": x_value.shape},
                                        like=reshape, shape=x_value.shape))
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


def _split_after_transpose(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(x, p), S), S splitting axes that p moves each into a run of axes:
    the same split of x's axes, then the transpose moving each run whole (the same values;
    the transpose sinks toward the outputs). PyTorch unflattens tokens as
    ``transpose[B, C, H·W]·reshape[B, C, H, W]``, Keras as
    ``reshape[B, H, W, C]·transpose``: one form. A split of an axis p leaves in place
    (``d`` into pairs after the heads were moved) is left as written: rotary embeddings are
    raised from that form."""
    t = rw.producer(node.inputs[0])
    if t is None or t.op != "transpose" or rw.uses(node.inputs[0]) != 1:
        return False
    x, p, out = t.inputs[0], t.attrs["perm"], node.outputs[0]
    runs = _merge_groups(out.shape, t.outputs[0].shape)  # output axes per transposed axis
    split_axes = [i for i, run in enumerate(runs or ()) if len(run) > 1]
    if not split_axes or any(p[i] == i for i in split_axes) and not _transposed_next(rw, out):
        return False
    sizes = {p[i]: [out.shape[a] for a in run] for i, run in enumerate(runs)}
    split = tuple(s for axis in range(x.rank) for s in sizes[axis])
    starts = np.cumsum([0] + [len(sizes[axis]) for axis in range(x.rank)])
    perm = tuple(int(starts[p[i]]) + k for i in range(x.rank) for k in range(len(runs[i])))
    return _reshaped_first(rw, node, t, split, perm, "split-after-transpose")


def _trailing_units_after_transpose(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(x, p)) where the reshape only appends axes of one at the end or
    drops axes of one from it: the same reshape of x (the appended axes last, the dropped
    ones where p took them from), then p on the axes left. Keras' GroupNormalization with a
    group per channel reshapes its channels-last input to [B, H, W, C, 1]: so the layout
    transposes meet around the norm."""
    t = rw.producer(node.inputs[0])
    if t is None or t.op != "transpose" or rw.uses(node.inputs[0]) != 1:
        return False
    x, p, mid, out = t.inputs[0], t.attrs["perm"], node.inputs[0], node.outputs[0]
    if out.rank > mid.rank and out.shape == mid.shape + (1,) * (out.rank - mid.rank):
        shape = x.shape + (1,) * (out.rank - mid.rank)
        perm = tuple(p) + tuple(range(x.rank, out.rank))
    elif out.rank < mid.rank and mid.shape == out.shape + (1,) * (mid.rank - out.rank):
        dropped = sorted(p[out.rank:])
        shape = tuple(n for a, n in enumerate(x.shape) if a not in dropped)
        perm = tuple(a - sum(d < a for d in dropped) for a in p[:out.rank])
    else:
        return False
    if perm == tuple(range(len(perm))) and shape == out.shape and x.shape == shape:
        return False
    inner = rw.emit("reshape", [x], {"shape": shape}, like=node, shape=shape)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=t, shape=out.shape))
    return True


def _transposed_next(rw: Rewriter, value: Value) -> bool:
    """Whether ``value`` is read only by a transpose (no graph output): a split of an axis
    the transpose before it leaves in place goes above it there, the two transposes then
    one (a sequence-first attention's heads, ``[T, B, H·D]`` split and moved to ``[B, H,
    T, D]``), where a rotary embedding's pairs are read by other ops."""
    readers = rw.graph.consumers(value)
    return value not in rw.graph.outputs and len(readers) == 1 and \
        readers[0].op == "transpose"


def _linear(rw: Rewriter, node: Node) -> bool:
    """linear(transpose(x, p)), p leaving the last axis in place: transpose(linear(x), p)
    (the layer works on the last axis alone). A transpose that several linear layers read
    (the q, k and v of ``nn.MultiheadAttention(batch_first=True)``, which moves the sequence
    first) sinks below each."""
    x = node.inputs[0]
    t = rw.producer(x)
    if t is None or t.op != "transpose" or x in rw.graph.outputs:
        return False
    perm = tuple(t.attrs["perm"])
    if perm[-1] != len(perm) - 1 or any(r.op != "linear" or r.inputs[0] is not x
                                        for r in rw.graph.consumers(x)):
        return False
    source, out = t.inputs[0], node.outputs[0]
    shape = source.shape[:-1] + out.shape[-1:]
    inner = rw.emit("linear", [source, *node.inputs[1:]], dict(node.attrs), like=node,
                    shape=shape)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=t, shape=out.shape))
    return True


def _flattened_into_linear(rw: Rewriter, node: Node) -> bool:
    """linear(reshape(transpose(x, p)), W) with the reshape flattening the axes p permutes
    among themselves: linear(reshape(x), W') with W's rows in the order x's flattening
    reads them (Keras' Flatten of an NHWC map against PyTorch's flatten of the NCHW one,
    then a Dense: the same layer, its weight's rows laid out otherwise, as a port moves
    them). A port whose rows were not moved parts in numbers at the linear layer."""
    flat = node.inputs[0]
    r = rw.producer(flat)
    if r is None or r.op != "reshape" or rw.uses(flat) != 1 or flat in rw.graph.outputs:
        return False
    t = _sinkable_transpose(rw, r.inputs[0])
    weight = node.inputs[1]
    if t is None or not rw.is_fixed(weight) or weight.rank != 2:
        return False
    perm, moved = tuple(t.attrs["perm"]), t.outputs[0].shape
    k = flat.rank - 1  # the leading axes stay, the rest become the last
    order = _trailing_order(perm, k)
    if k >= len(perm) - 1 or flat.shape[:k] != moved[:k] or order is None or \
            any(perm[a] != a for a in range(k)):
        return False
    source = t.inputs[0]
    rows = moved[k:] + (weight.shape[1],)
    q = order + (len(order),)  # the output axis stays last
    w = rw.emit("reshape", [weight], {"shape": rows}, like=node, shape=rows)
    w = rw.emit("transpose", [w], {"perm": q}, like=node, shape=tuple(rows[i] for i in q))
    w = rw.emit("reshape", [w], {"shape": weight.shape}, like=node, shape=weight.shape)
    x = rw.emit("reshape", [source], {"shape": flat.shape}, like=r, shape=flat.shape)
    rw.replace(node.outputs[0], rw.emit("linear", [x, w, *node.inputs[2:]], dict(node.attrs),
                                        like=node, shape=node.outputs[0].shape))
    return True


def _trailing_norm(rw: Rewriter, node: Node) -> bool:
    """layer_norm(transpose(x, p)) over axes from ``axis`` on that p leaves in place:
    transpose(layer_norm(x), p) (the norm works on those axes alone): a sequence-first
    residual stream moved batch-first before its norm, as batch-first layers called on
    sequence-first inputs write it."""
    t = _sinkable_transpose(rw, node.inputs[0])
    if t is None:
        return False
    perm, axis = tuple(t.attrs["perm"]), node.attrs["axis"]
    rank = len(perm)
    params = list(node.inputs[1:])
    if any(perm[a] != a for a in range(axis, rank)):
        # the normalized axes permuted among themselves (Keras' LayerNormalization over
        # [H, W, C] of an NHWC map made from an NCHW one): the same statistics, the scale
        # and shift relaid out alike (PyTorch's nn.LayerNorm([C, H, W]))
        q = _trailing_order(perm, axis)
        if q is None or any(not rw.is_fixed(p) for p in params):
            return False
        trailing = t.outputs[0].shape[axis:]
        moved = []
        for p in params:
            if p.shape != trailing:
                p = rw.emit("reshape", [p], {"shape": trailing}, like=node, shape=trailing)
            moved.append(rw.emit("transpose", [p], {"perm": q}, like=node,
                                 shape=tuple(trailing[i] for i in q)))
        params = moved
    source, out = t.inputs[0], node.outputs[0]
    inner = rw.emit(node.op, [source, *params], dict(node.attrs), like=node,
                    shape=source.shape)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=t, shape=out.shape))
    return True


def _over_linear(rw: Rewriter, node: Node) -> bool:
    """transpose(linear(reshape(y, M)), q), y a transpose's output, M merging runs of y's
    axes and q leaving the last axis in place: linear(reshape(transpose(y, p), M')), p
    moving the runs whole; the two transposes then meet (``nn.MultiheadAttention``'s heads
    merged sequence-first, then its output moved batch-first)."""
    q = tuple(node.attrs["perm"])
    lin = rw.producer(node.inputs[0])
    if q[-1] != len(q) - 1 or lin is None or lin.op != "linear" or \
            rw.uses(node.inputs[0]) != 1:
        return False
    r = rw.producer(lin.inputs[0])
    if r is None or r.op != "reshape" or rw.uses(lin.inputs[0]) != 1:
        return False
    y = r.inputs[0]
    made = rw.producer(y)
    groups = _merge_groups(y.shape, r.outputs[0].shape)
    if made is None or made.op != "transpose" or groups is None or \
            all(len(g) == 1 for g in groups):
        return False
    perm = tuple(i for j in q for i in groups[j])
    moved = rw.emit("transpose", [y], {"perm": perm}, like=node,
                    shape=tuple(y.shape[i] for i in perm))
    merged_shape = tuple(r.outputs[0].shape[j] for j in q)
    merged = rw.emit("reshape", [moved], {"shape": merged_shape}, like=r, shape=merged_shape)
    rw.replace(node.outputs[0], rw.emit("linear", [merged, *lin.inputs[1:]], dict(lin.attrs),
                                        like=lin, shape=node.outputs[0].shape))
    return True


def _reshaped_first(rw: Rewriter, node: Node, t: Node, split: tuple[int, ...],
                    perm: tuple[int, ...], claim: str) -> bool:
    """reshape ``node`` of transpose ``t`` written as ``t``'s input reshaped to ``split``,
    then transposed by ``perm``, once that is proved on random values (the node is kept as
    written where it is not)."""
    x, out = t.inputs[0], node.outputs[0]
    rw.keep(node)  # the region's root must be visible to the region walk
    nodes = region(rw, out, [x])
    if nodes is None or not agrees(
            rw, nodes, out, [x],
            lambda env: np.transpose(np.reshape(env[x], split), perm),
            claim=(claim, split, perm)):
        return True
    inner = rw.emit("reshape", [x], {"shape": split}, like=node, shape=split)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=t, shape=out.shape))
    return True


def _block_after_transpose(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(x, p), S), S regrouping only a run of consecutive axes that p
    brought over whole and in order from elsewhere, otherwise than by merging or splitting
    whole axes: that regrouping of x's run, then the transpose. XLNet's relative shift
    reshapes its scores' (i, j) block as (j, i): at the end of ``bnij`` in PyTorch, at the
    front of ``ijbn`` in TF (the same values; the transpose sinks on toward the softmax)."""
    t = rw.producer(node.inputs[0])
    if t is None or t.op != "transpose" or rw.uses(node.inputs[0]) != 1:
        return False
    x, p = t.inputs[0], tuple(t.attrs["perm"])
    shape, target = t.outputs[0].shape, node.outputs[0].shape
    a = 0
    while a < min(len(shape), len(target)) and shape[a] == target[a]:
        a += 1
    tail = 0
    while tail < min(len(shape), len(target)) - a and shape[-1 - tail] == target[-1 - tail]:
        tail += 1
    k, m = len(shape) - tail - a, len(target) - tail - a
    if k < 1 or m < 1:
        return False
    q, block = p[a], target[a:a + m]
    if q == a or p[a:a + k] != tuple(range(q, q + k)):
        return False  # a run left in place (a rotary's pairs) stays as written
    if _merge_groups(shape[a:a + k], block) is not None or \
            _merge_groups(block, shape[a:a + k]) is not None:
        return False  # a merge or a split of whole axes: the rules above give its one form
    split = x.shape[:q] + block + x.shape[q + k:]

    def moved(axis: int) -> int:
        return axis if axis < q else axis + m - k

    perm = tuple(moved(i) for i in p[:a]) + tuple(range(q, q + m)) + tuple(
        moved(i) for i in p[a + k:])
    return _reshaped_first(rw, node, t, split, perm, "block-after-transpose")


def _concat(rw: Rewriter, node: Node) -> bool:
    """concat(transpose(a, p), transpose(b, p), ..., axis k) as transpose(concat(a, b, ...,
    axis p[k]), p): the same blocks joined in the layout they were made in (Keras joins two
    NHWC feature maps along channels, each the transpose of an NCHW convolution's output)."""
    transposes = [_sinkable_transpose(rw, v) for v in node.inputs]
    if len(node.outputs) != 1 or not transposes or None in transposes:
        return False
    perm = transposes[0].attrs["perm"]
    if any(t.attrs["perm"] != perm for t in transposes):
        return False
    out, inv = node.outputs[0], inverse_perm(perm)
    shape = tuple(out.shape[inv[i]] for i in range(out.rank))
    inner = rw.emit("concat", [t.inputs[0] for t in transposes],
                    {"axis": perm[node.attrs["axis"]]}, like=node, shape=shape,
                    dtype=out.dtype)
    rw.replace(out, rw.emit("transpose", [inner], {"perm": perm}, like=node,
                            shape=out.shape))
    return True


def _hoist_kind(rw: Rewriter, value: Value, q: tuple[int, ...], rank: int) -> str | None:
    """How an operand of a hoisted elementwise op or concat is read in the layout ``q`` makes:
    ``inverse`` (a transpose by q⁻¹, dropped), ``as-is`` (a scalar or all-ones shape),
    ``relayout`` (a fixed broadcast operand, reshaped), ``transpose`` (a new transpose), or
    None where none of these works."""
    t = rw.producer(value)
    if t is not None and t.op == "transpose" and t.attrs["perm"] == inverse_perm(q):
        return "inverse"
    if value.rank == 0 or all(s == 1 for s in value.shape):
        return "as-is"
    if rw.is_fixed(value):
        full = (1,) * (rank - value.rank) + value.shape
        order = [i for i in q if full[i] != 1]
        return "relayout" if order == sorted(order) else None
    return "transpose" if value.rank == rank else None


def _units_only(rw: Rewriter, value: Value, q: tuple[int, ...]) -> bool:
    """Whether ``value`` is a reshape (read nowhere else) that only inserts axes of one into
    a value with none, and ``q`` moves only those: ``q`` of it is one reshape."""
    r = rw.producer(value)
    if r is None or r.op != "reshape" or rw.uses(value) != 1:
        return False
    x = r.inputs[0]
    if 1 in x.shape or tuple(n for n in value.shape if n != 1) != x.shape:
        return False
    kept = [p for p in q if value.shape[p] != 1]
    return kept == sorted(kept)


def _weight_norm(rw: Rewriter, inner: Node, q: tuple[int, ...], out: Value) -> bool:
    """transpose(weight_norm(v, g), q) as weight_norm(transpose(v, q), g relaid out) over
    the axes q moves the norm's to: the same norms, gains and quotients, element by element
    in another order (a weight kept as [k, in, out] and read as [out, in, k])."""
    v, g = inner.inputs
    gain = relayout_operand(rw, g, inverse_perm(q), len(q), inner)
    if gain is None:
        return False
    axes = tuple(sorted(inverse_perm(q)[a] for a in inner.attrs["axes"]))
    moved = rw.emit("transpose", [v], {"perm": q}, like=inner, shape=out.shape)
    rw.replace(out, rw.emit("weight_norm", [moved, gain], {"axes": axes}, like=inner,
                            shape=out.shape))
    return True


def _hoist(rw: Rewriter, node: Node) -> bool:
    """transpose(op(transpose(a, q⁻¹), ...), q) as op(a, ...) with its axes, pads or
    operands moved by q, where that adds no more transposes than it removes."""
    x, q = node.inputs[0], node.attrs["perm"]
    inner = rw.producer(x)
    if inner is None or rw.uses(x) != 1 or len(inner.outputs) != 1:
        return False
    rank, out = len(q), node.outputs[0]
    if inner.op == "weight_norm":
        return _weight_norm(rw, inner, q, out)
    if inner.op in _REDUCTIONS or inner.op in ("pad", "softmax", "log_softmax"):
        t = rw.producer(inner.inputs[0])
        inverse = t is not None and t.op == "transpose" and t.attrs["perm"] == inverse_perm(q)
        if not inverse and inner.op != "pad":
            return False
        if inner.op in _REDUCTIONS and not inner.attrs["keepdims"]:
            return False
        attrs = dict(inner.attrs)
        if inverse:
            source = t.inputs[0]
        else:  # a pad of any other value: the transpose moves above it, one transpose as
            # before, and the pad meets what reads it (TF's ZeroPadding2D of an NHWC
            # tensor, then a transpose to a valid NCHW conv: the conv's own padding)
            x = inner.inputs[0]
            source = rw.emit("transpose", [x], {"perm": q}, like=node,
                             shape=tuple(x.shape[p] for p in q))
        if inner.op == "pad":
            pads = attrs["pads"]
            attrs["pads"] = tuple(pads[p] for p in q) + tuple(pads[rank + p] for p in q)
        elif inner.op in _REDUCTIONS:
            axes = attrs["axes"] if attrs["axes"] is not None else tuple(range(rank))
            attrs["axes"] = tuple(sorted(inverse_perm(q)[a] for a in axes))
        else:
            attrs["axis"] = inverse_perm(q)[attrs["axis"]]
        rw.replace(out, rw.emit(inner.op, [source, *inner.inputs[1:]], attrs, like=inner,
                                shape=out.shape))
        return True
    concat = inner.op == "concat"
    if not concat and get_spec(inner.op).category not in ELEMENTWISE or not inner.inputs:
        return False
    kinds = [_hoist_kind(rw, v, q, rank) for v in inner.inputs]
    if concat:  # a step's state stacked along a new axis of one (TF's stack of a time-major
        # loop's outputs), which the transpose only moves: a reshape once moved above
        kinds = ["units" if k == "transpose" and _units_only(rw, v, q) else k
                 for k, v in zip(kinds, inner.inputs)]
    if None in kinds or not {"inverse", "units"} & set(kinds):
        return False
    removed = 1 + sum(k == "inverse" and rw.uses(v) == 1 for k, v in zip(kinds, inner.inputs))
    if kinds.count("transpose") > removed:
        return False
    operands = []
    for kind, v in zip(kinds, inner.inputs):
        if kind == "inverse":
            operands.append(rw.producer(v).inputs[0])
        elif kind == "as-is":
            operands.append(v)
        elif kind == "relayout":
            operands.append(relayout_operand(rw, v, inverse_perm(q), rank, inner))
        else:  # (a transpose of axes of one: the identities pass makes it a reshape)
            operands.append(rw.emit("transpose", [v], {"perm": q}, like=node,
                                    shape=tuple(v.shape[p] for p in q)))
    attrs = dict(inner.attrs)
    if concat:  # the axis it joins along, as the hoisted layout numbers it
        attrs["axis"] = inverse_perm(q)[attrs["axis"]]
    rw.replace(out, rw.emit(inner.op, operands, attrs, like=inner, shape=out.shape,
                            dtype=out.dtype))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "transpose":
        return _merge_after_transpose(rw, node) or _over_linear(rw, node) or _hoist(rw, node)
    if node.op == "linear":
        return _linear(rw, node) or _flattened_into_linear(rw, node)
    if node.op in ("layer_norm", "rms_norm"):
        return _trailing_norm(rw, node)
    if node.op == "reshape":
        return _split_after_transpose(rw, node) or _block_after_transpose(rw, node) or \
            _trailing_units_after_transpose(rw, node)
    if node.op == "concat":
        return _concat(rw, node)
    if node.op in _REDUCTIONS:
        return _reduction(rw, node)
    if node.op in ("softmax", "log_softmax"):
        return _softmax(rw, node)
    if node.op == "slice":
        return _slice(rw, node)
    if node.op == "split":
        return _split(rw, node)
    if node.op in ("gather", "resize"):
        return _along_axes(rw, node)
    if node.op == "rotary_embedding":
        return _rotary(rw, node) or _rotary_unit_axes(rw, node)
    category = get_spec(node.op).category
    if category in ELEMENTWISE and node.inputs:
        return _elementwise(rw, node)
    return False


class SinkTransposesPass:
    """See the module docstring."""

    name = "sink-transposes"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
