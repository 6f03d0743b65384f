"""Export rules for shape ops, reductions and tensor creation (``specgraph.frontends.onnx.export``).

Shapes, axes, pads and repeats are static attributes in the IR; ONNX wants most of them
as int64 inputs, which become small initializers.
"""

from __future__ import annotations

import math

import numpy as np

from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.onnx.export.exporter import Exporter
from specgraph.ir import Node

RULES = ConverterTable()  # canonical op -> the rule that writes its ONNX nodes

_INT64_MIN = int(np.iinfo(np.int64).min)
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax",
           "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd"}


def _x(ex: Exporter, node: Node) -> str:
    return ex.name(node.inputs[0])


@RULES.register("reshape")
def _reshape(ex: Exporter, node: Node) -> None:
    ex.emit("Reshape", [_x(ex, node), ex.ints(node.attrs["shape"])], ex.out())


@RULES.register("expand")
def _expand(ex: Exporter, node: Node) -> None:
    ex.emit("Expand", [_x(ex, node), ex.ints(node.attrs["shape"])], ex.out())


@RULES.register("tile")
def _tile(ex: Exporter, node: Node) -> None:
    ex.emit("Tile", [_x(ex, node), ex.ints(node.attrs["repeats"])], ex.out())


@RULES.register("transpose")
def _transpose(ex: Exporter, node: Node) -> None:
    ex.emit("Transpose", [_x(ex, node)], ex.out(), perm=list(node.attrs["perm"]))


@RULES.register("squeeze", "unsqueeze")
def _squeeze(ex: Exporter, node: Node) -> None:
    op_type = "Squeeze" if node.op == "squeeze" else "Unsqueeze"
    ex.emit(op_type, [_x(ex, node), ex.ints(node.attrs["axes"])], ex.out())


@RULES.register("concat")
def _concat(ex: Exporter, node: Node) -> None:
    ex.emit("Concat", [ex.name(v) for v in node.inputs], ex.out(), axis=node.attrs["axis"])


@RULES.register("split")
def _split(ex: Exporter, node: Node) -> None:
    outs = [ex.out(i) for i in range(len(node.outputs))]
    ex.emit_multi("Split", [_x(ex, node), ex.ints(node.attrs["sizes"])], outs,
                  axis=node.attrs["axis"])


@RULES.register("slice")
def _slice(ex: Exporter, node: Node) -> None:
    a = node.attrs
    inputs = [_x(ex, node)] + [ex.ints(a[k]) for k in ("starts", "ends", "axes", "steps")]
    ex.emit("Slice", inputs, ex.out())


@RULES.register("flip")
def _flip(ex: Exporter, node: Node) -> None:
    axes = list(node.attrs["axes"])
    n = len(axes)
    inputs = [_x(ex, node), ex.ints([-1] * n), ex.ints([_INT64_MIN] * n), ex.ints(axes),
              ex.ints([-1] * n)]
    ex.emit("Slice", inputs, ex.out())


@RULES.register("gather")
def _gather(ex: Exporter, node: Node) -> None:
    ex.emit("Gather", [ex.name(v) for v in node.inputs], ex.out(), axis=node.attrs["axis"])


@RULES.register("pad")
def _pad(ex: Exporter, node: Node) -> None:
    a, x = node.attrs, node.inputs[0]
    inputs = [ex.name(x), ex.ints(a["pads"])]
    if a["mode"] == "constant":
        inputs.append(ex.const(np.asarray(a["value"]), x.dtype))
    ex.emit("Pad", inputs, ex.out(), mode=a["mode"])


@RULES.register("trilu")
def _trilu(ex: Exporter, node: Node) -> None:
    a, x = node.attrs, node.inputs[0]
    if ex.opset >= 14:
        k = ex.const(np.asarray(a["k"], dtype=np.int64), "int64")
        ex.emit("Trilu", [ex.name(x), k], ex.out(), upper=int(a["upper"]))
        return
    rows, cols = x.shape[-2:]
    ones = np.ones((rows, cols), dtype=bool)
    keep = np.triu(ones, a["k"]) if a["upper"] else np.tril(ones, a["k"])
    zero = ex.const(np.zeros(()), x.dtype)
    ex.emit("Where", [ex.const(keep, "bool"), ex.name(x), zero], ex.out())


# --- reductions --------------------------------------------------------------------------
def _reduce(ex: Exporter, node: Node) -> None:
    a = node.attrs
    ex.reduce(_REDUCE[node.op], _x(ex, node), a["axes"], a["keepdims"], ex.out())


RULES.register(*_REDUCE)(_reduce)


@RULES.register("reduce_var")
def _reduce_var(ex: Exporter, node: Node) -> None:
    """sum((x - mean)²) / (N - correction), as the reference computes it."""
    x, a = node.inputs[0], node.attrs
    axes = a["axes"]
    count = x.size if axes is None else math.prod(x.shape[i] for i in axes)
    d = ex.emit("Sub", [ex.name(x), ex.reduce("ReduceMean", ex.name(x), axes, True)])
    total = ex.reduce("ReduceSum", ex.emit("Mul", [d, d]), axes, a["keepdims"])
    divisor = ex.const(np.asarray(count - a["correction"]), node.output.dtype)
    ex.emit("Div", [total, divisor], ex.out())


@RULES.register("argmax", "argmin")
def _argmax(ex: Exporter, node: Node) -> None:
    op_type = "ArgMax" if node.op == "argmax" else "ArgMin"
    ex.emit(op_type, [_x(ex, node)], ex.out(), axis=node.attrs["axis"],
            keepdims=int(node.attrs["keepdims"]))


@RULES.register("argsort")
def _argsort(ex: Exporter, node: Node) -> None:
    """TopK of the whole axis, sorted (ties by the lower index first: stable), its indices."""
    x, axis = node.inputs[0], node.attrs["axis"]
    k = ex.const(np.asarray([x.shape[axis]], dtype=np.int64), "int64")
    ex.emit_multi("TopK", [_x(ex, node), k], [ex.fresh(), ex.out()], axis=axis,
                  largest=int(node.attrs["descending"]), sorted=1)


@RULES.register("cumsum")
def _cumsum(ex: Exporter, node: Node) -> None:
    axis = ex.const(np.asarray(node.attrs["axis"], dtype=np.int64), "int64")
    ex.emit("CumSum", [_x(ex, node), axis], ex.out())


# --- tensor creation ---------------------------------------------------------------------
@RULES.register("full")
def _full(ex: Exporter, node: Node) -> None:
    a = node.attrs
    value = ex.tensor("value", np.asarray([a["value"]]), a["dtype"])
    ex.emit("ConstantOfShape", [ex.ints(a["shape"])], ex.out(), value=value)


@RULES.register("arange")
def _arange(ex: Exporter, node: Node) -> None:
    a = node.attrs
    bounds = [ex.const(np.asarray(a[k]), a["dtype"]) for k in ("start", "limit", "delta")]
    ex.emit("Range", bounds, ex.out())
