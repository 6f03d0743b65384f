"""TF shape, indexing, tensor-creation and plumbing ops -> canonical ops (a table of their own).

Shape queries (``Shape``, ``Size``, ``Rank``) become constants from the static shapes the
model was traced with; arithmetic on them folds into constants as it is emitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np
import tensorflow as tf

from specgraph.frontends._common.converter import NATIVE
from specgraph.frontends._common.points import emit_along_gather, emit_point_gather, positions
from specgraph.frontends._common.roll import emit_roll
from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends._common.writes import emit_write, fill_of
from specgraph.frontends.tf.convert import Unsupported, VarHandle, VarRead, dtype_name, dtype_of

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


# --- plumbing ----------------------------------------------------------------------------
@_reg("Identity", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape",
      "CheckNumerics", "CheckNumericsV2")
def _identity(cx: Any, op: Any) -> Any:
    return cx.entry(op.inputs[0])


@_reg("IdentityN")
def _identity_n(cx: Any, op: Any) -> Any:
    return tuple(cx.entry(t) for t in op.inputs)


@_reg("ReadVariableOp")
def _read_variable(cx: Any, op: Any) -> Any:
    handle = cx.entry(op.inputs[0])
    if not isinstance(handle, VarHandle):
        raise Unsupported("a read of an unknown resource")
    return VarRead(handle.key)


@_reg("PartitionedCall", "StatefulPartitionedCall")
def _call(cx: Any, op: Any) -> Any:
    return cx.inline(op)


@_reg("If", "StatelessIf")
def _if(cx: Any, op: Any) -> Any:
    """``tf.cond`` (AutoGraph's form of a Python ``if`` on a tensor): the branch its
    predicate picks, where the predicate is known at trace time; opaque otherwise."""
    pred = cx.const(op.inputs[0])
    if pred is None:
        raise Unsupported("a branch on a value known only when the model runs")
    taken = bool(pred) if pred.ndim == 0 else pred.size > 0  # the If op's rule
    return cx.inline(op, "then_branch" if taken else "else_branch", op.inputs[1:])


@_reg("Const")
def _const(cx: Any, op: Any) -> Any:
    dtype = dtype_name(op.outputs[0].dtype)
    if dtype is None:
        return None
    array = tf.make_ndarray(op.get_attr("value"))
    if dtype == "bfloat16":
        return cx.b.constant(array.astype(np.float32), "bfloat16")
    return array


def _shape_const(cx: Any, values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.dtype(cx.out()[1]))


@_reg("Shape")
def _shape(cx: Any, op: Any) -> Any:
    return _shape_const(cx, cx.shape(op.inputs[0]))


@_reg("ShapeN")
def _shape_n(cx: Any, op: Any) -> Any:
    return tuple(_shape_const(cx, cx.shape(t)) for t in op.inputs)


@_reg("Size")
def _size(cx: Any, op: Any) -> Any:
    return _shape_const(cx, int(np.prod(cx.shape(op.inputs[0]), dtype=np.int64)))


@_reg("Rank")
def _rank(cx: Any, op: Any) -> Any:
    return _shape_const(cx, len(cx.shape(op.inputs[0])))


@_reg("BroadcastArgs")
def _broadcast_args(cx: Any, op: Any) -> Any:
    shapes = [tuple(cx.const_ints(t)) for t in op.inputs]
    return _shape_const(cx, np.broadcast_shapes(*shapes))


# --- tensor creation ---------------------------------------------------------------------
def _full(cx: Any, value: Any) -> Any:
    shape, dtype = cx.out()
    if isinstance(value, np.ndarray) and value.size == 1:
        return cx.emit("full", [], {"shape": shape, "value": float(value.item()), "dtype": dtype})
    return cx.emit("expand", [value], {"shape": shape})


@_reg("Fill")
def _fill(cx: Any, op: Any) -> Any:
    return _full(cx, cx.value(op.inputs[1]))


@_reg("ZerosLike", "OnesLike")
def _zeros_like(cx: Any, op: Any) -> Any:
    return _full(cx, np.array(0.0 if op.type == "ZerosLike" else 1.0))


@_reg("Range")
def _range(cx: Any, op: Any) -> Any:
    start, limit, delta = (cx.const(t) for t in op.inputs)
    if start is None or limit is None or delta is None:
        raise Unsupported("a range with computed bounds")
    attrs = {"start": float(start), "limit": float(limit), "delta": float(delta),
             "dtype": cx.out()[1]}
    return cx.emit("arange", [], attrs)


# --- shape ops ---------------------------------------------------------------------------
def _same_or(cx: Any, x: Any, op_name: str, attrs: dict[str, Any]) -> Any:
    if tuple(x.shape) == cx.out()[0]:
        return x
    return cx.emit(op_name, [x], attrs)


@_reg("Reshape")
def _reshape(cx: Any, op: Any) -> Any:
    return cx.reshape(cx.value(op.inputs[0]), "reshape", {"shape": cx.out()[0]})


@_reg("Transpose")
def _transpose(cx: Any, op: Any) -> Any:
    perm = tuple(cx.const_ints(op.inputs[1]))
    x = cx.value(op.inputs[0])
    return x if perm == tuple(range(len(perm))) else cx.emit("transpose", [x], {"perm": perm})


@_reg("ExpandDims")
def _expand_dims(cx: Any, op: Any) -> Any:
    rank = len(cx.out()[0])
    (axis,) = cx.const_ints(op.inputs[1])
    entry = cx.entry(op.inputs[0])
    if isinstance(entry, VarRead) and entry.expand is None and axis % rank == 0:
        return VarRead(entry.key, 0)  # a 1-D conv's kernel: its layout is the consumer's
    return cx.reshape(cx.value(op.inputs[0]), "unsqueeze", {"axes": (axis % rank,)})


@_reg("Squeeze")
def _squeeze(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    dims = [d % len(shape) for d in cx.attr("squeeze_dims", [])]
    axes = tuple(sorted(set(dims))) or tuple(i for i, s in enumerate(shape) if s == 1)
    x = cx.value(op.inputs[0])
    if op.outputs[0].name in cx.atrous and axes:
        # a dilated Conv1D's output in the input's own space (``ops._atrous_1d``): its
        # shapes are not those TF gives the batched form
        out = tuple(size for i, size in enumerate(x.shape) if i not in axes)
        origin = cx.origins.get(x)
        if origin is not None and origin.shape == out:
            return origin
        return cx.emit("squeeze", [x], {"axes": axes}, out=(out, dtype_of(x)))
    return cx.reshape(x, "squeeze", {"axes": axes}) if axes else x


@_reg("ConcatV2", "Concat")
def _concat(cx: Any, op: Any) -> Any:
    values = list(op.inputs[:-1]) if op.type == "ConcatV2" else list(op.inputs[1:])
    axis_t = op.inputs[-1] if op.type == "ConcatV2" else op.inputs[0]
    (axis,) = cx.const_ints(axis_t)
    rank = len(cx.out()[0])
    parts = [cx.value(t) for t in values]
    if len(parts) == 1:
        return parts[0]
    return cx.emit("concat", parts, {"axis": axis % rank})


def stack(cx: Any, parts: Sequence[Any], axis: int, out: tuple[tuple[int, ...], str]
          ) -> Any:
    """``parts`` stacked along a new ``axis`` into a tensor of ``out`` (shape, dtype): each
    unsqueezed there, then one concat (``tf.stack``; a TensorList stacked)."""
    shape, dtype = out
    piece = shape[:axis] + (1,) + shape[axis + 1:]
    lifted = [cx.emit("unsqueeze", [p], {"axes": (axis,)}, out=(piece, dtype)) for p in parts]
    return lifted[0] if len(lifted) == 1 else \
        cx.emit("concat", lifted, {"axis": axis}, out=out)


@_reg("Pack")
def _pack(cx: Any, op: Any) -> Any:
    out = cx.out()
    axis = int(cx.attr("axis", 0)) % len(out[0])
    return stack(cx, [cx.value(t) for t in op.inputs], axis, out)


def _split(cx: Any, x: Any, axis: int, sizes: tuple[int, ...]) -> tuple:
    if isinstance(x, np.ndarray):
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))
    if len(sizes) == 1:
        return (x,)
    outs = [cx.out(i) for i in range(len(sizes))]
    return cx.emit_multi("split", [x], {"axis": axis, "sizes": sizes}, outs)


@_reg("Split", "SplitV")
def _split_op(cx: Any, op: Any) -> Any:
    x_t = op.inputs[1] if op.type == "Split" else op.inputs[0]
    axis_t = op.inputs[0] if op.type == "Split" else op.inputs[2]
    (axis,) = cx.const_ints(axis_t)
    axis %= len(cx.shape(x_t))
    sizes = tuple(cx.shape(t)[axis] for t in op.outputs)
    return _split(cx, cx.value(x_t), axis, sizes)


def unstack(cx: Any, x: Any, axis: int) -> tuple:
    """The slices of ``x`` along ``axis``, that axis dropped: a split into pieces of one,
    each squeezed (``tf.unstack``; a TensorList made from a tensor)."""
    shape, dtype = tuple(x.shape), dtype_of(x)
    if isinstance(x, np.ndarray):
        return tuple(np.take(x, i, axis=axis) for i in range(shape[axis]))
    piece = (shape[:axis] + (1,) + shape[axis + 1:], dtype)
    row = (shape[:axis] + shape[axis + 1:], dtype)
    parts = cx.emit_multi("split", [x], {"axis": axis, "sizes": (1,) * shape[axis]},
                          [piece] * shape[axis])
    return tuple(cx.emit("squeeze", [p], {"axes": (axis,)}, out=row) for p in parts)


@_reg("Unpack")
def _unpack(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    return unstack(cx, x, int(cx.attr("axis", 0)) % len(x.shape))


def _slice_nodes(cx: Any, x: Any, shape: tuple[int, ...], specs: list[tuple[int, int, int]]
                 ) -> Any:
    """x[start:end:step] per axis as one ``slice`` node (full axes left out)."""
    axes, starts, ends, steps = [], [], [], []
    for axis, (start, end, step) in enumerate(specs):
        if (start, end, step) == (0, shape[axis], 1):
            continue
        if step < 0 and end < 0:
            end = -shape[axis] - 1  # "through index 0" (a bare -1 would mean the last element)
        axes.append(axis)
        starts.append(start)
        ends.append(end)
        steps.append(step)
    if not axes:
        return x
    sliced = tuple(len(range(*spec)) for spec in specs)
    return cx.emit("slice", [x], {"axes": axes, "starts": starts, "ends": ends, "steps": steps},
                   out=(sliced, dtype_of(x)))


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def _dense_slices(cx: Any, shape: tuple[int, ...], begin: list[int], end: list[int],
                  strides: list[int]) -> tuple[list[tuple[int, int, int]], list[int], list[int]]:
    """StridedSlice's sparse spec as one (start, end, step) per input axis, the input axes
    it removes (shrink_axis_mask) and the output axes it adds (new_axis_mask)."""
    masks = {m: int(cx.attr(m, 0)) for m in ("begin_mask", "end_mask", "ellipsis_mask",
                                             "new_axis_mask", "shrink_axis_mask")}
    consumed = sum(1 for i in range(len(begin))
                   if not _bit(masks["ellipsis_mask"], i) and not _bit(masks["new_axis_mask"], i))
    specs: list[tuple[int, int, int]] = []
    shrink: list[int] = []
    new: list[int] = []
    for i in range(len(begin)):
        if _bit(masks["ellipsis_mask"], i):
            base = len(specs)  # the axes the ellipsis stands for (not len(specs) as it grows)
            specs.extend((0, shape[base + j], 1) for j in range(len(shape) - consumed))
            continue
        if _bit(masks["new_axis_mask"], i):
            new.append(len(specs) - len(shrink) + len(new))
            continue
        size = shape[len(specs)]
        if _bit(masks["shrink_axis_mask"], i):
            index = begin[i] + size if begin[i] < 0 else begin[i]
            shrink.append(len(specs))
            specs.append((index, index + 1, 1))
            continue
        start = None if _bit(masks["begin_mask"], i) else begin[i]
        stop = None if _bit(masks["end_mask"], i) else end[i]
        specs.append(slice(start, stop, strides[i]).indices(size))
    specs.extend((0, shape[a], 1) for a in range(len(specs), len(shape)))
    return specs, shrink, new


@_reg("StridedSlice")
def _strided_slice(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    begin, end, strides = (cx.const_ints(t) for t in op.inputs[1:4])
    specs, shrink, new = _dense_slices(cx, shape, begin, end, strides)
    x = cx.value(op.inputs[0])
    out_shape, dtype = cx.out()
    if isinstance(x, np.ndarray):
        index = tuple(slice(b, None if e < 0 and s < 0 else e, s) for b, e, s in specs)
        return x[index].reshape(out_shape)
    full = [a for a, spec in enumerate(specs) if spec == (0, shape[a], 1)]
    if len(shrink) == 1 and len(full) == len(shape) - 1 and not new:
        index = np.array(specs[shrink[0]][0], dtype=np.int64)  # x[:, i]: one entry of an axis
        return cx.emit("gather", [x, index], {"axis": shrink[0]})
    y = _slice_nodes(cx, x, shape, specs)
    sliced = tuple(y.shape)
    if sliced == out_shape:
        return y
    if not new:
        return cx.emit("squeeze", [y], {"axes": tuple(shrink)})
    if not shrink:
        return cx.emit("unsqueeze", [y], {"axes": tuple(new)})
    return cx.emit("reshape", [y], {"shape": out_shape})


@_reg("Slice")
def _slice(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    begin, size = cx.const_ints(op.inputs[1]), cx.const_ints(op.inputs[2])
    specs = [(b, shape[a] if s == -1 else b + s, 1) for a, (b, s) in enumerate(zip(begin, size))]
    x = cx.value(op.inputs[0])
    if isinstance(x, np.ndarray):
        return x[tuple(slice(*s) for s in specs)]
    return _slice_nodes(cx, x, shape, specs)


@_reg("Roll")
def _roll(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    shifts, axes = cx.const_ints(op.inputs[1]), cx.const_ints(op.inputs[2])
    x = cx.value(op.inputs[0])
    if isinstance(x, np.ndarray):
        return np.roll(x, shifts, axes)
    _, dtype = cx.out()
    rolled = emit_roll(cx, x, shape, dtype, shifts, [a % len(shape) for a in axes])
    return cx.emit("identity", [rolled])


# --- gathers and embeddings --------------------------------------------------------------
@_reg("GatherV2", "Gather", "ResourceGather")
def _gather(cx: Any, op: Any) -> Any:
    """A gather from a variable along axis 0 is an embedding lookup; one with batch
    dimensions up to its axis, of one index per batch position, is a gather along that axis
    (``_gather_along``)."""
    axis = cx.const_ints(op.inputs[2])[0] if op.type == "GatherV2" else 0
    if int(cx.attr("batch_dims", 0)) != 0:
        return _gather_along(cx, op, int(cx.attr("batch_dims", 0)), axis)
    indices = cx.value(op.inputs[1])
    entry = cx.entry(op.inputs[0])
    if isinstance(entry, (VarHandle, VarRead)):
        axis %= len(cx.variables[entry.key][1].shape)
        table = cx.param(entry.key, NATIVE)
        if axis == 0:
            return cx.emit("embedding", [indices, table])
        return cx.emit("gather", [table, indices], {"axis": axis})
    axis %= len(cx.shape(op.inputs[0]))
    return cx.emit("gather", [cx.value(op.inputs[0]), indices], {"axis": axis})


def _gather_along(cx: Any, op: Any, batch: int, axis: int) -> Any:
    """``tf.gather(x, indices, batch_dims=b, axis=a)``, a >= b, with indices
    ``[*x.shape[:b], k]`` takes ``x[i₀, …, i_{b-1}, …, indices[i₀, …, i_{b-1}, j], …]`` (the
    index at axis a): a gather of one entry per output position along axis a (DeBERTa's
    ``take_along_axis``)."""
    x = cx.materialize(cx.value(op.inputs[0]))
    indices = cx.materialize(cx.value(op.inputs[1]))
    dims, ishape = tuple(x.shape), tuple(indices.shape)
    rank = len(dims)
    axis %= max(rank, 1)
    if batch == len(ishape) and axis == batch and ishape == dims[:batch]:
        return _batch_entry_rows(cx, x, indices, batch)
    batch %= max(len(ishape), 1)
    if axis < batch or len(ishape) != batch + 1 or ishape[:batch] != dims[:batch]:
        raise Unsupported("gather with batch dimensions other than one index per position")
    # an axis past the batch ones (HF's TF masked-image-modeling heads permute each
    # example's channels with ``batch_dims=-1``): the indices broadcast over the axes between
    shape = dims[:axis] + (ishape[-1],) + dims[axis + 1:]
    keyed = ishape[:batch] + (1,) * (axis - batch) + ishape[batch:] + (1,) * (rank - axis - 1)
    if keyed != ishape:
        indices = cx.emit("reshape", [indices], {"shape": keyed}, out=(keyed, indices.dtype))
    return emit_along_gather(cx, x, indices, axis, shape, lambda a: a)


def _batch_entry_rows(cx: Any, x: Any, indices: Any, batch: int) -> Any:
    """``tf.gather(x, indices, batch_dims=b, axis=b)`` with one index per batch entry
    (indices shaped ``x.shape[:b]``: GPT-2's last token per sequence) takes the slice
    ``x[i₀, …, i_{b-1}, indices[i₀, …]]``: the batch and the indexed axis flattened into
    rows, each index shifted to its entry's rows, one gather of whole rows, as PyTorch's
    ``x[torch.arange(B), ids]`` writes it."""
    dims = tuple(int(n) for n in x.shape)
    entries = prod(dims[:batch])
    rest = dims[batch + 1:]
    rows = cx.emit("reshape", [x], {"shape": (entries * dims[batch],) + rest},
                   out=((entries * dims[batch],) + rest, x.dtype))
    ids = indices
    if tuple(indices.shape) != (entries,):
        ids = cx.emit("reshape", [indices], {"shape": (entries,)},
                      out=((entries,), indices.dtype))
    shift = (np.arange(entries) * dims[batch]).astype(np.dtype(indices.dtype))
    ids = cx.emit("add", [ids, shift], out=((entries,), indices.dtype))
    picked = cx.emit("gather", [rows, ids], {"axis": 0},
                     out=((entries,) + rest, x.dtype))
    if batch == 1:
        return picked
    return cx.emit("reshape", [picked], {"shape": dims[:batch] + rest},
                   out=(dims[:batch] + rest, x.dtype))


@_reg("GatherNd")
def _gather_nd(cx: Any, op: Any) -> Any:
    """``gather_nd`` of whole slices at points (CLIP's pooled token) is a flat gather."""
    x = cx.materialize(cx.value(op.inputs[0]))
    indices = cx.materialize(cx.value(op.inputs[1]))
    if not indices.shape or not 1 <= int(indices.shape[-1]) <= len(x.shape):
        raise Unsupported("gather_nd")
    return emit_point_gather(cx, x, indices, lambda a: a)


@_reg("TensorScatterUpdate")
def _scatter_update(cx: Any, op: Any) -> Any:
    """``tf.tensor_scatter_nd_update(x, idx, y)`` with indices known at trace time: the write
    PyTorch's in-place slice assignment and JAX's ``.at[].set`` are (``where`` over the
    elements written, ``frontends._common.writes``); which element of ``y`` lands where is
    found by running the op itself on positions."""
    if all(cx.const(t) is not None for t in op.inputs):  # a mask built from constants
        return cx.unknown(op)  # (HF Swin's shifted-window mask): TF computes it
    at = cx.const(op.inputs[1])
    if at is None:
        return cx.unknown(op)  # indices computed in the graph: opaque
    shape, update_shape = cx.shape(op.inputs[0]), cx.shape(op.inputs[2])
    source = tf.tensor_scatter_nd_update(
        tf.fill(shape, -1), tf.constant(at),
        tf.reshape(tf.range(prod(update_shape)), update_shape)).numpy()
    fill = fill_of(cx, cx.const(op.inputs[2]))
    return emit_write(cx, cx.materialize(cx.value(op.inputs[0])), source.astype(np.int64),
                      None if fill is not None else cx.materialize(cx.value(op.inputs[2])),
                      fill)


@_reg("OneHot")
def _one_hot(cx: Any, op: Any) -> Any:
    """``one_hot(i, depth, on, off, axis)`` is ``where(expand(i) == arange(depth), on,
    off)``: as PyTorch's scatter of ones at one index per row writes it."""
    indices = cx.materialize(cx.value(op.inputs[0]))
    shape, dtype = cx.out()
    axis = int(cx.attr("axis", -1)) % len(shape)
    depth = shape[axis]
    keyed = tuple(1 if k == axis else n for k, n in enumerate(shape))
    index = cx.emit("reshape", [indices], {"shape": keyed}, out=(keyed, indices.dtype))
    line = positions(depth, axis, len(shape), np.dtype(indices.dtype))
    hit = cx.emit("equal", [index, line], out=(tuple(shape), "bool"))
    return cx.emit("where", [hit, cx.value(op.inputs[2]), cx.value(op.inputs[3])])


# --- padding, tiling, broadcasting -------------------------------------------------------
def _pads(cx: Any, t: Any) -> tuple[int, ...]:
    pairs = np.asarray(cx.const_ints(t)).reshape(-1, 2)
    return tuple(int(p) for p in pairs[:, 0]) + tuple(int(p) for p in pairs[:, 1])


@_reg("Pad", "PadV2", "MirrorPad")
def _pad(cx: Any, op: Any) -> Any:
    attrs: dict[str, Any] = {"pads": _pads(cx, op.inputs[1]), "mode": "constant"}
    if op.type == "PadV2":
        value = cx.const(op.inputs[2])
        if value is None:
            raise Unsupported("a pad value computed in the graph")
        attrs["value"] = float(value.item())
    if op.type == "MirrorPad":
        if cx.attr("mode") != "REFLECT":
            raise Unsupported("symmetric mirror padding")
        attrs["mode"] = "reflect"
    return cx.emit("pad", [cx.value(op.inputs[0])], attrs)


@_reg("Tile")
def _tile(cx: Any, op: Any) -> Any:
    repeats = tuple(cx.const_ints(op.inputs[1]))
    return _same_or(cx, cx.value(op.inputs[0]), "tile", {"repeats": repeats})


@_reg("BroadcastTo")
def _broadcast_to(cx: Any, op: Any) -> Any:
    return _same_or(cx, cx.value(op.inputs[0]), "expand", {"shape": cx.out()[0]})


# --- space-to-batch (TF's dilated convolutions) as pad, reshape and transpose -----------
def _reshape_to(cx: Any, x: Any, shape: tuple[int, ...]) -> Any:
    return cx.emit("reshape", [x], {"shape": shape}, out=(shape, dtype_of(x)))


@_reg("SpaceToBatchND")
def _space_to_batch(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    block = cx.const_ints(op.inputs[1])
    pads = np.asarray(cx.const_ints(op.inputs[2])).reshape(-1, 2)
    m, rest = len(block), shape[1 + len(block):]
    full = [0] * len(shape)
    begins, ends = list(full), list(full)
    for i in range(m):
        begins[1 + i], ends[1 + i] = int(pads[i, 0]), int(pads[i, 1])
    padded = tuple(s + b + e for s, b, e in zip(shape, begins, ends))
    dtype = cx.out()[1]
    x = cx.emit("pad", [cx.value(op.inputs[0])], {"pads": tuple(begins + ends)},
                out=(padded, dtype))
    split = (shape[0],) + sum(((padded[1 + i] // block[i], block[i]) for i in range(m)), ()) + rest
    x = _reshape_to(cx, x, split)
    perm = (tuple(2 + 2 * i for i in range(m)) + (0,) + tuple(1 + 2 * i for i in range(m))
            + tuple(range(1 + 2 * m, len(split))))
    x = cx.transpose(x, perm)
    return _reshape_to(cx, x, cx.out()[0])


@_reg("BatchToSpaceND")
def _batch_to_space(cx: Any, op: Any) -> Any:
    shape = cx.shape(op.inputs[0])
    block = cx.const_ints(op.inputs[1])
    crops = np.asarray(cx.const_ints(op.inputs[2])).reshape(-1, 2)
    m = len(block)
    if op.inputs[0].name in cx.atrous:
        # a dilated convolution's output, already in the input's space (``ops._atrous``):
        # only the crops are left
        x = cx.value(op.inputs[0])
        full = tuple(x.shape)
        origin = cx.origins.get(x)
        if m == 2 and full[1] == 1 and not crops[0].any() and \
                getattr(origin, "shape", None) == (full[0],) + full[2:]:
            # a 1-D result unsqueezed to height 1 (``ops._atrous``): cropped as it is
            specs = [(0, size, 1) for size in origin.shape]
            specs[1] = (int(crops[1, 0]), origin.shape[1] - int(crops[1, 1]), 1)
            return cx.reshape(_slice_nodes(cx, origin, origin.shape, specs), "unsqueeze",
                              {"axes": (1,)})
        specs = [(0, size, 1) for size in full]
        for i in range(m):
            specs[1 + i] = (int(crops[i, 0]), full[1 + i] - int(crops[i, 1]), 1)
        return _slice_nodes(cx, x, full, specs)
    batch, spatial, rest = shape[0] // int(np.prod(block)), shape[1:1 + m], shape[1 + m:]
    x = _reshape_to(cx, cx.value(op.inputs[0]), tuple(block) + (batch,) + spatial + rest)
    perm = (m,) + sum(((m + 1 + i, i) for i in range(m)), ()) + tuple(
        range(2 * m + 1, 2 * m + 1 + len(rest)))
    x = cx.transpose(x, perm)
    merged = (batch,) + tuple(spatial[i] * block[i] for i in range(m)) + rest
    x = _reshape_to(cx, x, merged)
    specs = [(0, s, 1) for s in merged]
    for i in range(m):
        specs[1 + i] = (int(crops[i, 0]), merged[1 + i] - int(crops[i, 1]), 1)
    return _slice_nodes(cx, x, merged, specs)



@_reg("ReverseV2")
def _reverse(cx: Any, op: Any) -> Any:
    """``tf.reverse`` along constant axes: ``flip`` (Speech2Text's masks)."""
    rank = len(cx.shape(op.inputs[0]))
    axes = tuple(sorted({int(a) % rank for a in np.ravel(cx.const_ints(op.inputs[1]))}))
    return cx.emit("flip", [cx.value(op.inputs[0])], {"axes": axes})


@_reg("DepthToSpace")
def _depth_to_space(cx: Any, op: Any) -> Any:
    """``tf.nn.depth_to_space`` of NHWC: each pixel's channels, in (r, r, C) order, spread
    over an r×r patch: reshape, transpose, reshape (a port of ``nn.PixelShuffle`` reads its
    channels in (C, r, r) order: the channels reordered first, as HF's TF ports do)."""
    if cx.attr("data_format", "NHWC") != "NHWC":
        raise Unsupported("DepthToSpace in a layout other than NHWC")
    r = int(cx.attr("block_size"))
    n, h, w, c = cx.shape(op.inputs[0])
    x = cx.value(op.inputs[0])
    split, perm = (n, h, w, r, r, c // (r * r)), (0, 1, 3, 2, 4, 5)
    shape = (n, h * r, w * r, c // (r * r))
    dtype = cx.out()[1]
    y = cx.emit("reshape", [x], {"shape": split}, out=(split, dtype))
    y = cx.emit("transpose", [y], {"perm": perm}, out=(tuple(split[p] for p in perm), dtype))
    return cx.emit("reshape", [y], {"shape": shape}, out=(shape, dtype))
