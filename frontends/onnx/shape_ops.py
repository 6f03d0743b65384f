"""ONNX shape, data-movement, reduction and tensor-creation operators -> canonical ops.

Static shapes are known for every value (the frontend's probe run), so ``Reshape``,
``Flatten`` and ``Expand`` become canonical ops with their resolved output shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.onnx.ops import scalar, wrap_axis

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def _ints(cx: Any, name: str) -> list[int] | None:
    array = cx.const(name)
    return None if array is None else [int(v) for v in np.asarray(array).reshape(-1)]


def _axes_of(cx: Any, node: Any, index: int, first_opset: int) -> list[int] | None:
    """Axes given as input ``index`` (from ``first_opset`` on) or as the ``axes`` attribute."""
    if cx.opset >= first_opset:
        return _ints(cx, cx.input(index))
    axes = cx.attr("axes")
    return None if axes is None else list(axes)


@_reg("Reshape", "Flatten")
def _reshape(cx: Any, node: Any) -> Any:
    shape, _ = cx.out()
    return cx.emit("reshape", [cx.value(node.input[0])], {"shape": shape})


@_reg("Expand")
def _expand(cx: Any, node: Any) -> Any:
    shape, _ = cx.out()
    return cx.emit("expand", [cx.value(node.input[0])], {"shape": shape})


@_reg("Transpose")
def _transpose(cx: Any, node: Any) -> Any:
    name = node.input[0]
    rank = len(cx.shape(name))
    perm = tuple(cx.attr("perm") or range(rank - 1, -1, -1))
    if cx.is_param(name) and rank == 2 and perm == (1, 0):
        return cx.param(name, "linear")  # a weight stored [out, in], read as [in, out]
    return cx.emit("transpose", [cx.value(name)], {"perm": perm})


@_reg("Squeeze")
def _squeeze(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    axes = _axes_of(cx, node, 1, 13)
    if axes is None:
        axes = [i for i, s in enumerate(x.shape) if s == 1]
    axes = sorted({wrap_axis(a, x.rank) for a in axes})
    if not axes:
        return cx.emit("identity", [x])
    return cx.emit("squeeze", [x], {"axes": axes})


@_reg("Unsqueeze")
def _unsqueeze(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    rank = len(cx.out()[0])
    axes = sorted({wrap_axis(a, rank) for a in _axes_of(cx, node, 1, 13) or ()})
    return cx.emit("unsqueeze", [x], {"axes": axes})


@_reg("Concat")
def _concat(cx: Any, node: Any) -> Any:
    values = [cx.value(name) for name in node.input if name]
    return cx.emit("concat", values, {"axis": wrap_axis(cx.attr("axis"), values[0].rank)})


@_reg("Split")
def _split(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    axis = wrap_axis(cx.attr("axis", 0), x.rank)
    sizes = [cx.meta(name)[0][axis] for name in node.output if name]
    if len(sizes) != len(node.output):
        return cx.opaque()
    return cx.emit_multi("split", [x], {"axis": axis, "sizes": sizes})


@_reg("SplitToSequence")
def _split_to_sequence(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    axis = wrap_axis(cx.attr("axis", 0), x.rank)
    items = cx.values.get(node.output[0])
    if not isinstance(items, list) or not items:
        return cx.opaque()
    keep = bool(cx.input(1)) or bool(cx.attr("keepdims", 1))
    sizes = [item.shape[axis] if keep else 1 for item in items]
    metas = [(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes]
    parts = cx.b.add_multi("split", [x], {"axis": axis, "sizes": sizes}, outputs=metas,
                           **cx.where())
    if not keep:
        parts = tuple(cx.emit("squeeze", [p], {"axes": (axis,)}, out=(item.shape, x.dtype))
                      for p, item in zip(parts, items))
    cx.sequences[node.output[0]] = list(parts)
    return None


@_reg("SequenceAt")
def _sequence_at(cx: Any, node: Any) -> Any:
    items = cx.sequences.get(node.input[0])
    if items is None:
        return cx.opaque()
    return items[_ints(cx, node.input[1])[0]]


def _slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX clamping, written as Python slice bounds (which the canonical slice uses)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, end if end >= 0 else -dim - 1  # -dim-1: "before index 0" for Python


@_reg("Slice")
def _slice(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    if cx.opset >= 10:
        starts, ends = _ints(cx, node.input[1]), _ints(cx, node.input[2])
        axes, steps = _ints(cx, cx.input(3)), _ints(cx, cx.input(4))
    else:
        starts, ends, axes, steps = cx.attr("starts"), cx.attr("ends"), cx.attr("axes"), None
    axes = [wrap_axis(a, x.rank) for a in (axes or range(len(starts)))]
    steps = steps or [1] * len(starts)
    bounds = [_slice_bounds(s, e, st, x.shape[a]) for s, e, st, a in zip(starts, ends, steps, axes)]
    return cx.emit("slice", [x], {"axes": axes, "starts": [b[0] for b in bounds],
                                  "ends": [b[1] for b in bounds], "steps": steps})


@_reg("Tile")
def _tile(cx: Any, node: Any) -> Any:
    return cx.emit("tile", [cx.value(node.input[0])], {"repeats": _ints(cx, node.input[1])})


@_reg("Pad")
def _pad(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    mode = cx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        return cx.opaque()
    if cx.opset >= 11:
        pads, value = _ints(cx, node.input[1]), scalar(cx, cx.input(2), 0.0)
        axes = _ints(cx, cx.input(3))
    else:
        pads, value, axes = list(cx.attr("pads")), cx.attr("value", 0.0), None
    if axes is not None:
        full = [0] * (2 * x.rank)
        for i, a in enumerate(wrap_axis(a, x.rank) for a in axes):
            full[a], full[x.rank + a] = pads[i], pads[len(axes) + i]
        pads = full
    return cx.emit("pad", [x], {"pads": pads, "mode": mode, "value": value})


@_reg("Cast", "CastLike")
def _cast(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    dtype = cx.out()[1]
    if dtype == x.dtype:
        return cx.emit("identity", [x])
    return cx.emit("cast", [x], {"dtype": dtype})


# --- reductions --------------------------------------------------------------------------
_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}
# reductions written as canonical ops around a sum: (before, reduction, after)
_COMPOSITE = {"ReduceSumSquare": ("square", "reduce_sum", None),
              "ReduceL1": ("abs", "reduce_sum", None), "ReduceL2": ("square", "reduce_sum", "sqrt"),
              "ReduceLogSum": (None, "reduce_sum", "log"),
              "ReduceLogSumExp": ("exp", "reduce_sum", "log")}


def _reduce_axes(cx: Any, node: Any, rank: int) -> tuple[bool, list[int] | None]:
    """(noop, axes): the axes in canonical form, or noop for empty axes with the flag set."""
    first = 13 if node.op_type == "ReduceSum" else 18
    axes = _axes_of(cx, node, 1, first)
    if not axes:
        return bool(cx.attr("noop_with_empty_axes", 0)), None
    return False, sorted({wrap_axis(a, rank) for a in axes})


def _reduction(cx: Any, node: Any, canonical: str, x: Any) -> Any:
    noop, axes = _reduce_axes(cx, node, x.rank)
    if noop:
        return cx.emit("identity", [x])
    return cx.emit(canonical, [x], {"axes": axes, "keepdims": bool(cx.attr("keepdims", 1))})


def _simple(canonical: str):
    def convert(cx: Any, node: Any) -> Any:
        return _reduction(cx, node, canonical, cx.value(node.input[0]))

    return convert


for _name, _canonical in _REDUCE.items():
    CONVERTERS[_name] = _simple(_canonical)


def _composite(cx: Any, node: Any) -> Any:
    before, canonical, after = _COMPOSITE[node.op_type]
    x = cx.value(node.input[0])
    if before == "square":
        x = cx.emit("mul", [x, x], out=(x.shape, x.dtype))
    elif before:
        x = cx.emit(before, [x], out=(x.shape, x.dtype))
    if after is None:
        return _reduction(cx, node, canonical, x)
    noop, axes = _reduce_axes(cx, node, x.rank)
    if not noop:
        x = cx.emit(canonical, [x], {"axes": axes, "keepdims": bool(cx.attr("keepdims", 1))})
    return cx.emit(after, [x])


for _name in _COMPOSITE:
    CONVERTERS[_name] = _composite


@_reg("ArgMax", "ArgMin")
def _argmax(cx: Any, node: Any) -> Any:
    if cx.attr("select_last_index", 0):
        return cx.opaque()
    x = cx.value(node.input[0])
    return cx.emit(node.op_type.lower(), [x], {"axis": wrap_axis(cx.attr("axis", 0), x.rank),
                                               "keepdims": bool(cx.attr("keepdims", 1))})


@_reg("CumSum")
def _cumsum(cx: Any, node: Any) -> Any:
    if cx.attr("exclusive", 0) or cx.attr("reverse", 0):
        return cx.opaque()
    x = cx.value(node.input[0])
    return cx.emit("cumsum", [x], {"axis": wrap_axis(_ints(cx, node.input[1])[0], x.rank)})


@_reg("Trilu")
def _trilu(cx: Any, node: Any) -> Any:
    k = _ints(cx, cx.input(1))
    return cx.emit("trilu", [cx.value(node.input[0])],
                   {"upper": bool(cx.attr("upper", 1)), "k": k[0] if k else 0})


# --- tensor creation ---------------------------------------------------------------------
@_reg("Range")
def _range(cx: Any, node: Any) -> Any:
    start, limit, delta = (float(np.asarray(cx.const(n)).reshape(-1)[0]) for n in node.input[:3])
    return cx.emit("arange", [], {"start": start, "limit": limit, "delta": delta,
                                  "dtype": cx.out()[1]})


@_reg("ConstantOfShape")
def _constant_of_shape(cx: Any, node: Any) -> Any:
    shape, dtype = cx.out()
    fill = cx.attr("value")
    value = 0.0 if fill is None else float(np.asarray(fill).reshape(-1)[0])
    return cx.emit("full", [], {"shape": shape, "value": value, "dtype": dtype})
