"""ATen shape, indexing and tensor-creation ops -> canonical ops (a table of their own)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from specgraph.frontends._common.points import emit_along_gather
from specgraph.frontends._common.roll import emit_roll
from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.torch.ops import rank_of, shape_of, wrap_dim
from specgraph.ops.dtypes import numpy_dtype

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def _to_shape(cx: Any, node: Any) -> Any:
    shape = cx.meta(node)[0][0]
    x = cx.value(node.args[0])
    if x.shape == shape:
        return cx.emit("identity", [x])
    return cx.emit("reshape", [x], {"shape": shape})


for _name in ("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
              "aten.flatten.using_ints", "aten.unflatten.int", "aten.view_as.default",
              "aten.reshape_as.default", "aten.ravel.default"):
    CONVERTERS[_name] = _to_shape


@_reg("aten.permute.default")
def _permute(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0])
    perm = tuple(wrap_dim(d, rank) for d in node.args[1])
    return cx.emit("transpose", [cx.value(node.args[0])], {"perm": perm})


@_reg("aten.movedim.int", "aten.movedim.intlist", "aten.moveaxis.int", "aten.moveaxis.intlist")
def _movedim(cx: Any, node: Any) -> Any:
    """Axes moved to new places, the others keeping their order: a transpose."""
    rank = rank_of(node.args[0])
    source, destination = node.args[1], node.args[2]
    if isinstance(source, int):
        source, destination = [source], [destination]
    source = [wrap_dim(d, rank) for d in source]
    destination = [wrap_dim(d, rank) for d in destination]
    perm: list[int | None] = [None] * rank
    for s, d in zip(source, destination):
        perm[d] = s
    rest = iter(a for a in range(rank) if a not in source)
    perm = [next(rest) if p is None else p for p in perm]
    if perm == list(range(rank)):
        return cx.emit("identity", [cx.value(node.args[0])])
    return cx.emit("transpose", [cx.value(node.args[0])], {"perm": tuple(perm)})


@_reg("aten.transpose.int", "aten.swapaxes.default", "aten.t.default", "aten.numpy_T.default")
def _transpose(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0])
    perm = list(range(rank))
    if rank >= 2:
        i, j = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
        i, j = wrap_dim(i, rank), wrap_dim(j, rank)
        perm[i], perm[j] = perm[j], perm[i]
    if perm == list(range(rank)):
        return cx.emit("identity", [cx.value(node.args[0])])
    return cx.emit("transpose", [cx.value(node.args[0])], {"perm": tuple(perm)})


@_reg("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def _cat(cx: Any, node: Any) -> Any:
    tensors = [t for t in node.args[0] if shape_of(t) != (0,)]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    rank = rank_of(tensors[0])
    return cx.emit("concat", [cx.value(t) for t in tensors], {"axis": wrap_dim(dim, rank)})


@_reg("aten.stack.default")
def _stack(cx: Any, node: Any) -> Any:
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    axis = wrap_dim(dim, rank_of(tensors[0]) + 1)
    parts = []
    for t in tensors:
        v = cx.value(t)
        shape = v.shape[:axis] + (1,) + v.shape[axis:]
        parts.append(cx.emit("unsqueeze", [v], {"axes": (axis,)}, out=(shape, v.dtype)))
    return cx.emit("concat", parts, {"axis": axis})


def _split_into(cx: Any, node: Any, axis: int) -> tuple:
    metas = cx.meta(node)
    sizes = tuple(shape[axis] for shape, _ in metas)
    return cx.emit_multi("split", [cx.value(node.args[0])], {"axis": axis, "sizes": sizes})


@_reg("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
      "aten.tensor_split.sections", "aten.split.sizes")
def _split(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0])
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    return _split_into(cx, node, wrap_dim(dim, rank))


@_reg("aten.unbind.int")
def _unbind(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0])
    axis = wrap_dim(node.args[1] if len(node.args) > 1 else 0, rank)
    x = cx.value(node.args[0])
    count = x.shape[axis]
    piece = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    parts = cx.b.add_multi("split", [x], {"axis": axis, "sizes": (1,) * count},
                           outputs=[(piece, x.dtype)] * count, **cx.where())
    out_shape = x.shape[:axis] + x.shape[axis + 1:]
    return tuple(cx.emit("squeeze", [p], {"axes": (axis,)}, out=(out_shape, x.dtype))
                 for p in parts)


@_reg("aten.slice.Tensor")
def _slice(cx: Any, node: Any) -> Any:
    x = node.args[0]
    shape = shape_of(x)
    rank = len(shape)
    dim = wrap_dim(node.args[1] if len(node.args) > 1 else 0, rank)
    start = node.args[2] if len(node.args) > 2 else None
    end = node.args[3] if len(node.args) > 3 else None
    step = node.args[4] if len(node.args) > 4 else 1
    start, end, step = slice(start, end, step).indices(shape[dim])
    if (start, end, step) == (0, shape[dim], 1):
        return cx.emit("identity", [cx.value(x)])
    return cx.emit("slice", [cx.value(x)],
                   {"axes": (dim,), "starts": (start,), "ends": (end,), "steps": (step,)})


@_reg("aten.roll.default")
def _roll(cx: Any, node: Any) -> Any:
    """roll along given axes, or over the flattened tensor where none are given."""
    x = node.args[0]
    shifts = node.args[1] if len(node.args) > 1 else node.kwargs["shifts"]
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", ())
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    shape, value = tuple(shape_of(x)), cx.value(x)
    if dims:
        rolled = emit_roll(cx, value, shape, value.dtype, shifts,
                           [wrap_dim(d, len(shape)) for d in dims])
    else:  # no axes: the flattened tensor rolls, then takes its shape back
        size = (int(np.prod(shape)),)
        flat = cx.emit("reshape", [value], {"shape": size}, out=(size, value.dtype))
        rolled = cx.emit("reshape", [emit_roll(cx, flat, size, value.dtype, shifts, [0])],
                         {"shape": shape}, out=(shape, value.dtype))
    return cx.emit("identity", [rolled])


@_reg("aten.select.int")
def _select(cx: Any, node: Any) -> Any:
    x, dim, index = node.args
    rank = rank_of(x)
    index_value = cx.b.constant(np.array(index, dtype=np.int64), "int64")
    return cx.emit("gather", [cx.value(x), index_value], {"axis": wrap_dim(dim, rank)})


@_reg("aten.gather.default")
def _gather_along(cx: Any, node: Any) -> Any:
    """``torch.gather(x, dim, index)``: one entry of ``x`` per index position."""
    x, dim, index = node.args[:3]
    value, at = cx.value(x), cx.value(index)
    return emit_along_gather(cx, value, at, wrap_dim(dim, rank_of(x)), tuple(shape_of(index)),
                             lambda a: cx.b.constant(a, str(a.dtype)))


@_reg("aten.index_select.default")
def _index_select(cx: Any, node: Any) -> Any:
    x, dim, index = node.args
    return cx.emit("gather", [cx.value(x), cx.value(index)], {"axis": wrap_dim(dim, rank_of(x))})


@_reg("aten.index.Tensor")
def _index(cx: Any, node: Any) -> Any:
    x, indices = node.args
    used = [(i, t) for i, t in enumerate(indices) if t is not None]
    if any(cx.meta(t)[0][1] == "bool" for _, t in used):
        return cx.opaque(node)
    if len(used) > 1 and [i for i, _ in used] == list(range(len(used))):
        return _index_leading(cx, x, [t for _, t in used])
    if len(used) != 1:
        return cx.opaque(node)
    axis, index = used[0]
    table = cx.value(x)
    if axis == 0 and table.rank == 2 and cx.is_param(x):  # rows of a table, as TF and JAX
        return cx.emit("embedding", [cx.value(index), table])
    return cx.emit("gather", [table, cx.value(index)], {"axis": axis})


def _index_leading(cx: Any, x: Any, indices: list[Any]) -> Any:
    """``x[i0, i1, ...]``, integer index tensors over the leading axes, broadcast together
    (HF's padding mask read at batch and key positions): one gather over those axes
    flattened, at ``Σ wrap(i_k)·stride_k``."""
    shape = shape_of(x)
    m = len(indices)
    metas = [cx.meta(t)[0] for t in indices]
    dtype = metas[0][1]
    if any(d != dtype for _, d in metas) or not dtype.startswith(("int", "uint")):
        return cx.opaque(cx.current)
    where = tuple(np.broadcast_shapes(*(tuple(s) for s, _ in metas)))
    rows = (int(np.prod(shape[:m], dtype=np.int64)), *shape[m:])
    table = cx.value(x)
    table = cx.emit("reshape", [table], {"shape": rows}, out=(rows, table.dtype))
    strides = [int(np.prod(shape[k + 1:m], dtype=np.int64)) for k in range(m)]
    known = [cx.static.get(t.name) if hasattr(t, "name") else None for t in indices]
    if all(isinstance(k, torch.Tensor) for k in known):  # constant indices (aranges)
        at = sum(np.where(i < 0, i + shape[k], i).astype(np.int64) * strides[k]
                 for k, i in enumerate(t.numpy() for t in known))
        at = np.broadcast_to(at, where)
        if at.size == rows[0] and np.array_equal(at.reshape(-1), np.arange(rows[0])):
            # every row once, in order: x's leading axes laid out as the indices are
            out = (*where, *shape[m:])
            return cx.emit("reshape", [table], {"shape": out}, out=(out, table.dtype))
        return cx.emit("gather", [table, cx.b.constant(np.ascontiguousarray(at), "int64")],
                       {"axis": 0})
    flat = None
    for k in range(m - 1, -1, -1):
        i = cx.value(indices[k])
        meta = (tuple(metas[k][0]), dtype)
        if not dtype.startswith("uint"):  # a negative index counts from the end
            size = cx.operand(shape[k], dtype)
            negative = cx.emit("less", [i, cx.operand(0, dtype)], out=(meta[0], "bool"))
            i = cx.emit("where", [negative, cx.emit("add", [i, size], out=meta), i],
                        out=meta)
        if strides[k] != 1:
            i = cx.emit("mul", [i, cx.operand(strides[k], dtype)], out=meta)
        flat = i if flat is None else cx.emit(
            "add", [i, flat], out=(tuple(np.broadcast_shapes(meta[0], flat.shape)), dtype))
    assert flat is not None
    if flat.shape != where:
        flat = cx.emit("expand", [flat], {"shape": where}, out=(where, dtype))
    return cx.emit("gather", [table, flat], {"axis": 0})


@_reg("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.squeeze_.dim")
def _squeeze(cx: Any, node: Any) -> Any:
    shape = shape_of(node.args[0])
    rank = len(shape)
    if len(node.args) > 1:
        dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
        axes = sorted({wrap_dim(d, rank) for d in dims if shape[wrap_dim(d, rank)] == 1})
    else:
        axes = [i for i, s in enumerate(shape) if s == 1]
    if not axes:
        return cx.emit("identity", [cx.value(node.args[0])])
    return cx.emit("squeeze", [cx.value(node.args[0])], {"axes": tuple(axes)})


@_reg("aten.unsqueeze.default", "aten.unsqueeze_.default")
def _unsqueeze(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0]) + 1
    return cx.emit("unsqueeze", [cx.value(node.args[0])], {"axes": (wrap_dim(node.args[1], rank),)})


@_reg("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
def _expand(cx: Any, node: Any) -> Any:
    shape = cx.meta(node)[0][0]
    x = cx.value(node.args[0])
    if x.shape == shape:
        return cx.emit("identity", [x])
    return cx.emit("expand", [x], {"shape": shape})


@_reg("aten.repeat.default")
def _repeat(cx: Any, node: Any) -> Any:
    x = cx.value(node.args[0])
    repeats = tuple(int(r) for r in node.args[1])
    if len(repeats) > x.rank:
        shape = (1,) * (len(repeats) - x.rank) + x.shape
        x = cx.emit("reshape", [x], {"shape": shape}, out=(shape, x.dtype))
    return cx.emit("tile", [x], {"repeats": repeats})


@_reg("aten.flip.default")
def _flip(cx: Any, node: Any) -> Any:
    rank = rank_of(node.args[0])
    return cx.emit("flip", [cx.value(node.args[0])],
                   {"axes": tuple(wrap_dim(d, rank) for d in node.args[1])})


@_reg("aten.constant_pad_nd.default", "aten.pad.default")
def _pad(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    x = a["self"]
    rank = rank_of(x)
    torch_pads = list(a["pad"])  # last axis first: (begin_last, end_last, begin_prev, ...)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(torch_pads) // 2):
        axis = rank - 1 - i
        begins[axis], ends[axis] = int(torch_pads[2 * i]), int(torch_pads[2 * i + 1])
    mode = a.get("mode", "constant")
    mode = {"replicate": "edge"}.get(mode, mode)
    if mode not in ("constant", "reflect", "edge"):
        return cx.opaque(node)
    value = a.get("value")
    return cx.emit("pad", [cx.value(x)], {"pads": tuple(begins + ends), "mode": mode,
                                          "value": float(value or 0.0)})


@_reg("aten.tril.default", "aten.triu.default")
def _trilu(cx: Any, node: Any) -> Any:
    k = node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0)
    return cx.emit("trilu", [cx.value(node.args[0])],
                   {"upper": "triu" in str(node.target), "k": int(k)})


def _fill_value(node: Any) -> float:
    name = str(node.target)
    if "zeros" in name:
        return 0.0
    if "ones" in name:
        return 1.0
    if name.startswith("aten.scalar_tensor"):
        return float(node.args[0])
    value = node.args[-1] if node.args else node.kwargs.get("fill_value")
    return float(value)


@_reg("aten.full.default", "aten.zeros.default", "aten.ones.default", "aten.full_like.default",
      "aten.zeros_like.default", "aten.ones_like.default", "aten.new_zeros.default",
      "aten.new_ones.default", "aten.new_full.default", "aten.scalar_tensor.default",
      "aten.empty.memory_format", "aten.new_empty.default", "aten.empty_like.default")
def _full(cx: Any, node: Any) -> Any:
    shape, dtype = cx.meta(node)[0]
    value = 0.0 if "empty" in str(node.target) else _fill_value(node)
    return cx.emit("full", [], {"shape": shape, "value": value, "dtype": dtype})


@_reg("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(cx: Any, node: Any) -> Any:
    args = [float(a) for a in node.args]
    if len(args) == 1:
        args = [0.0, args[0]]
    start, limit = args[0], args[1]
    delta = args[2] if len(args) > 2 else 1.0
    dtype = cx.meta(node)[0][1]
    return cx.emit("arange", [], {"start": start, "limit": limit, "delta": delta, "dtype": dtype})


@_reg("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
      "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg")
def _no_value(cx: Any, node: Any) -> Any:
    return None



@_reg("aten.fill_.Tensor", "aten.fill_.Scalar", "aten.fill.Tensor", "aten.fill.Scalar",
      "aten.zero_.default", "aten.zero.default")
def _fill(cx: Any, node: Any) -> Any:
    """``x.fill_(v)``, ``x.zero_()``: ``v`` everywhere in ``x``'s shape (written into what
    ``x`` views by the converter's in-place rule: ``h[:, 0] = 0``)."""
    (shape, dtype), = cx.meta(node)[:1]
    arg = node.args[1] if len(node.args) > 1 else 0.0
    if hasattr(arg, "name") and arg.name not in cx.static:
        value = cx.value(arg)
        if tuple(value.shape) not in ((), (1,)):
            return cx.opaque(node)
        if value.shape:
            value = cx.emit("reshape", [value], {"shape": ()}, out=((), value.dtype))
        if value.dtype != dtype:
            value = cx.emit("cast", [value], {"dtype": dtype}, out=((), dtype))
    else:
        number = cx.static[arg.name] if hasattr(arg, "name") else arg
        number = number.item() if isinstance(number, torch.Tensor) else number
        value = cx.b.constant(np.array(number, dtype=numpy_dtype(dtype) if dtype != "bool"
                                       else np.bool_), dtype)
    filled = cx.emit("expand", [value], {"shape": tuple(shape)}, out=(tuple(shape), dtype))
    cx.fills[filled] = value
    return filled


@_reg("aten.copy_.default")
def _copy_(cx: Any, node: Any) -> Any:
    """``dst.copy_(src)``: ``dst`` holds ``src`` from here on, broadcast to its shape, in
    its dtype; later reads of ``dst`` see it, and a tensor ``dst`` views becomes opaque
    there (the converter's in-place rule). HF's OPT writes its padded mask so. A copy into
    an input stays opaque."""
    dst, src = node.args[:2]
    if getattr(dst, "op", None) != "call_function" or not hasattr(src, "name"):
        return cx.opaque(node)
    (shape, dtype), = cx.meta(node)[:1]
    x = cx.value(src)
    if x.dtype != dtype:
        x = cx.emit("cast", [x], {"dtype": dtype}, out=(x.shape, dtype))
    if x.shape != shape:
        return cx.emit("expand", [x], {"shape": shape})
    return cx.emit("identity", [x])


@_reg("aten.glu.default")
def _glu(cx: Any, node: Any) -> Any:
    """``glu(x, dim)``: the first half of ``x`` along ``dim`` times the sigmoid of the second
    (as TensorFlow's and Flax's ports write it: Speech2Text's convolutional subsampler)."""
    x = cx.value(node.args[0])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", -1)
    axis = wrap_dim(dim, len(x.shape))
    half = x.shape[axis] // 2
    piece = x.shape[:axis] + (half,) + x.shape[axis + 1:]
    a, b = cx.b.add_multi("split", [x], {"axis": axis, "sizes": (half, half)},
                          outputs=[(piece, x.dtype)] * 2, **cx.where())
    gate = cx.emit("sigmoid", [b], out=(piece, x.dtype))
    return cx.emit("mul", [a, gate], out=(piece, x.dtype))


@_reg("aten.im2col.default")
def _im2col(cx: Any, node: Any) -> Any:
    """``F.unfold`` (``nn.Unfold``: ConvBERT's span convolution) of ``[N, C, H, W]``: the
    input padded, one strided slice per kernel position, stacked after the channels and
    flattened with them: ``[N, C·kh·kw, oh·ow]``, the channel slowest, as PyTorch orders
    them. Spatial axes of one (a 1-D unfold written as 2-D) are dropped first. TF's ports
    write the same as slices of the padded input, stacked."""
    a = cx.bind(node)
    x = cx.value(a["self"])
    if x.rank != 4:
        return cx.opaque(node)
    n, c = x.shape[:2]
    axes = [(size, k, d, p, s) for size, k, d, p, s in zip(
        x.shape[2:], a["kernel_size"], a["dilation"], a["padding"], a["stride"])]
    kept = [ax for ax in axes if not (ax[0] == 1 and ax[1] == 1 and ax[3] == 0)]
    if len(kept) != len(axes):
        shape = (n, c) + tuple(ax[0] for ax in kept)
        x = cx.emit("reshape", [x], {"shape": shape}, out=(shape, x.dtype))
    outs = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, d, p, s in kept]
    if len(kept) == 1:
        return _unfold_1d(cx, x, kept[0], outs[0])
    if any(ax[3] for ax in kept):
        pads = (0, 0) + tuple(ax[3] for ax in kept)
        shape = (n, c) + tuple(ax[0] + 2 * ax[3] for ax in kept)
        x = cx.emit("pad", [x], {"pads": pads + pads, "mode": "constant", "value": 0.0},
                    out=(shape, x.dtype))
    length = int(np.prod(outs)) if outs else 1
    pieces = []
    for at in np.ndindex(*[ax[1] for ax in kept]):
        sliced, starts, ends, steps = [], [], [], []
        for axis, (i, (size, k, d, p, s), o) in enumerate(zip(at, kept, outs)):
            start, end = i * d, i * d + (o - 1) * s + 1
            if (start, end, s) != (0, size + 2 * p, 1):
                sliced.append(2 + axis)
                starts.append(start)
                ends.append(end)
                steps.append(s)
        piece = x if not sliced else cx.emit(
            "slice", [x], {"axes": tuple(sliced), "starts": tuple(starts), "ends": tuple(ends),
                           "steps": tuple(steps)}, out=((n, c, *outs), x.dtype))
        pieces.append(cx.emit("reshape", [piece], {"shape": (n, c, 1, length)},
                              out=((n, c, 1, length), x.dtype)))
    count = len(pieces)
    stacked = pieces[0] if count == 1 else cx.emit(
        "concat", pieces, {"axis": 2}, out=((n, c, count, length), x.dtype))
    return cx.emit("reshape", [stacked], {"shape": (n, c * count, length)},
                   out=((n, c * count, length), x.dtype))


def _unfold_1d(cx: Any, x: Any, axis: tuple[int, int, int, int, int], out: int) -> Any:
    """A 1-D unfold of ``[N, C, L]`` written channels-last, as TF's ConvBERT writes it (pad
    along the length, one slice per kernel position, stacked last: ``[N, L', C, k]``), then
    laid out as ``F.unfold`` gives it, ``[N, C·k, L']``: the transposes and reshapes PyTorch's
    ConvBERT writes around its unfold then cancel against these."""
    n, c, length = x.shape
    size, k, d, p, s = axis
    last = cx.emit("transpose", [x], {"perm": (0, 2, 1)}, out=((n, length, c), x.dtype))
    if p:
        last = cx.emit("pad", [last], {"pads": (0, p, 0, 0, p, 0), "mode": "constant",
                                       "value": 0.0}, out=((n, length + 2 * p, c), x.dtype))
    pieces = []
    for i in range(k):
        start, end = i * d, i * d + (out - 1) * s + 1
        piece = last if (start, end, s) == (0, length + 2 * p, 1) else cx.emit(
            "slice", [last], {"axes": (1,), "starts": (start,), "ends": (end,), "steps": (s,)},
            out=((n, out, c), x.dtype))
        pieces.append(cx.emit("reshape", [piece], {"shape": (n, out, c, 1)},
                              out=((n, out, c, 1), x.dtype)))
    stacked = pieces[0] if k == 1 else cx.emit("concat", pieces, {"axis": 3},
                                               out=((n, out, c, k), x.dtype))
    flat = cx.emit("reshape", [stacked], {"shape": (n, out, c * k)},
                   out=((n, out, c * k), x.dtype))
    return cx.emit("transpose", [flat], {"perm": (0, 2, 1)}, out=((n, c * k, out), x.dtype))
