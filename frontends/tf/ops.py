"""TF op -> canonical op converters for the TF frontend: arithmetic, activations, matmul,
reductions and layers (convolutions, pools, fused batch norm), kept as a table of data.

Each converter takes the converter state ``cx`` and one ``tf.Operation``; it reads inputs
with ``cx.value`` (constants come back as NumPy arrays), attributes with ``cx.attr``, and
emits canonical nodes with ``cx.emit``. Raising ``Unsupported`` makes the op opaque.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from specgraph.frontends.tf.convert import Unsupported, dtype_of, numpy_of
from specgraph.ir import Value
from specgraph.frontends._common.einsum import explicit_einsum
from specgraph.frontends._common.points import emit_top_k
from specgraph.frontends._common.resize import emit_gathers, nearest_positions, resize_attrs
from specgraph.frontends._common.table import Converter, ConverterTable

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def _scalar(value: float, dtype: str) -> np.ndarray:
    return np.array(value, dtype=numpy_of(dtype))


# --- elementwise -------------------------------------------------------------------------
_UNARY = {
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Neg": "neg", "Exp": "exp",
    "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Reciprocal": "reciprocal",
    "Inv": "reciprocal", "Abs": "abs", "Erf": "erf", "Erfc": "erfc", "Sin": "sin", "Cos": "cos",
    "Floor": "floor", "Ceil": "ceil", "Sign": "sign", "LogicalNot": "logical_not",
    "Softplus": "softplus", "Elu": "elu",
}
_BINARY = {
    "AddV2": "add", "Add": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div",
    "Maximum": "maximum", "Minimum": "minimum", "Pow": "pow", "Equal": "equal",
    "NotEqual": "not_equal", "Less": "less", "LessEqual": "less_equal", "Greater": "greater",
    "GreaterEqual": "greater_equal", "LogicalAnd": "logical_and", "LogicalOr": "logical_or",
}


def _unary(canonical: str) -> Converter:
    def convert(cx: Any, op: Any) -> Any:
        return cx.emit(canonical, [cx.value(op.inputs[0])])

    return convert


def _binary(canonical: str, attrs: dict[str, Any] | None = None) -> Converter:
    def convert(cx: Any, op: Any) -> Any:
        return cx.emit(canonical, [cx.value(op.inputs[0]), cx.value(op.inputs[1])], attrs)

    return convert


for _name, _canonical in _UNARY.items():
    CONVERTERS[_name] = _unary(_canonical)
for _name, _canonical in _BINARY.items():
    CONVERTERS[_name] = _binary(_canonical)
CONVERTERS["FloorDiv"] = _binary("div", {"rounding": "floor"})
CONVERTERS["TruncateDiv"] = _binary("div", {"rounding": "trunc"})


@_reg("Div")
def _div(cx: Any, op: Any) -> Any:
    floating = cx.out()[1].startswith(("float", "bfloat"))
    attrs = None if floating else {"rounding": "trunc"}  # TF's Div truncates integers
    return cx.emit("div", [cx.value(op.inputs[0]), cx.value(op.inputs[1])], attrs)


@_reg("FloorMod")
def _floor_mod(cx: Any, op: Any) -> Any:
    a, b = cx.value(op.inputs[0]), cx.value(op.inputs[1])
    quotient = cx.emit("div", [a, b], {"rounding": "floor"})
    return cx.emit("sub", [a, cx.emit("mul", [quotient, b])])


@_reg("DivNoNan", "MulNoNan")
def _no_nan(cx: Any, op: Any) -> Any:
    a, b = cx.value(op.inputs[0]), cx.value(op.inputs[1])
    shape, dtype = cx.out()
    zero = _scalar(0, dtype)
    is_zero = cx.emit("equal", [b, zero], out=(cx.shape(op.inputs[1]), "bool"))
    result = cx.emit("div" if op.type == "DivNoNan" else "mul", [a, b])
    return cx.emit("where", [is_zero, zero, result])


@_reg("Square")
def _square(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    return cx.emit("mul", [x, x])


@_reg("SquaredDifference")
def _squared_difference(cx: Any, op: Any) -> Any:
    d = cx.emit("sub", [cx.value(op.inputs[0]), cx.value(op.inputs[1])])
    return cx.emit("mul", [d, d])


@_reg("BiasAdd", "BiasAddV1")
def _bias_add(cx: Any, op: Any) -> Any:
    x, bias = cx.value(op.inputs[0]), cx.value(op.inputs[1])
    rank = len(cx.shape(op.inputs[0]))
    if cx.attr("data_format", "NHWC").startswith("NC") and rank > 2:
        shape = (bias.shape[0],) + (1,) * (rank - 2)
        bias = cx.emit("reshape", [bias], {"shape": shape}, out=(shape, cx.out()[1]))
    return cx.emit("add", [x, bias])


@_reg("AddN")
def _add_n(cx: Any, op: Any) -> Any:
    total = cx.value(op.inputs[0])
    for t in op.inputs[1:]:
        total = cx.emit("add", [total, cx.value(t)])
    return total


@_reg("Relu6")
def _relu6(cx: Any, op: Any) -> Any:
    return cx.emit("clip", [cx.value(op.inputs[0])], {"min": 0.0, "max": 6.0})


@_reg("LeakyRelu")
def _leaky_relu(cx: Any, op: Any) -> Any:
    return cx.emit("leaky_relu", [cx.value(op.inputs[0])], {"alpha": float(cx.attr("alpha"))})


@_reg("Selu")
def _selu(cx: Any, op: Any) -> Any:
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    elu = cx.emit("elu", [cx.value(op.inputs[0])], {"alpha": alpha})
    return cx.emit("mul", [elu, _scalar(scale, cx.out()[1])])


@_reg("Softsign")
def _softsign(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    one = _scalar(1, cx.out()[1])
    return cx.emit("div", [x, cx.emit("add", [one, cx.emit("abs", [x])])])


@_reg("Log1p", "Expm1")
def _log1p_expm1(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    one = _scalar(1, cx.out()[1])
    if op.type == "Log1p":
        return cx.emit("log", [cx.emit("add", [x, one])])
    return cx.emit("sub", [cx.emit("exp", [x]), one])


@_reg("Gelu")
def _gelu(cx: Any, op: Any) -> Any:
    approximate = "tanh" if cx.attr("approximate", False) else "none"
    return cx.emit("gelu", [cx.value(op.inputs[0])], {"approximate": approximate})


@_reg("Softmax", "LogSoftmax")
def _softmax(cx: Any, op: Any) -> Any:
    canonical = "softmax" if op.type == "Softmax" else "log_softmax"
    return cx.emit(canonical, [cx.value(op.inputs[0])], {"axis": len(cx.out()[0]) - 1})


@_reg("ClipByValue")
def _clip(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    lo, hi = cx.const(op.inputs[1]), cx.const(op.inputs[2])
    if lo is not None and hi is not None and lo.size == 1 and hi.size == 1:
        return cx.emit("clip", [x], {"min": float(lo.item()), "max": float(hi.item())})
    low = cx.emit("maximum", [x, cx.value(op.inputs[1])])
    return cx.emit("minimum", [low, cx.value(op.inputs[2])])


@_reg("Cast")
def _cast(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    dtype = cx.out()[1]
    if dtype_of(x) == dtype:
        return x
    return cx.emit("cast", [x], {"dtype": dtype})


@_reg("Select", "SelectV2")
def _select(cx: Any, op: Any) -> Any:
    cond = cx.value(op.inputs[0])
    shape = cx.out()[0]
    cond_shape = cx.shape(op.inputs[0])
    if op.type == "Select" and len(cond_shape) == 1 and len(shape) > 1:
        rows = cond_shape + (1,) * (len(shape) - 1)  # v1 Select picks whole rows
        cond = cx.emit("reshape", [cond], {"shape": rows}, out=(rows, "bool"))
    return cx.emit("where", [cond, cx.value(op.inputs[1]), cx.value(op.inputs[2])])


# --- matmul and einsum -------------------------------------------------------------------
def _swap_last(cx: Any, x: Any) -> Any:
    r = len(x.shape)
    return cx.transpose(x, tuple(range(r - 2)) + (r - 1, r - 2))


@_reg("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _matmul(cx: Any, op: Any) -> Any:
    a, b = cx.value(op.inputs[0]), cx.value(op.inputs[1])
    flags = ("transpose_a", "transpose_b") if op.type == "MatMul" else ("adj_x", "adj_y")
    if cx.attr(flags[0], False):
        a = _swap_last(cx, a)
    if cx.attr(flags[1], False):
        b = _swap_last(cx, b)
    shape, dtype = cx.out()
    a_dtype = dtype_of(a)
    if a_dtype != dtype:  # BatchMatMulV3 may widen
        product = cx.emit("matmul", [a, b], out=(shape, a_dtype))
        return cx.emit("cast", [product], {"dtype": dtype})
    return cx.emit("matmul", [a, b])


@_reg("Einsum")
def _einsum(cx: Any, op: Any) -> Any:
    ranks = [len(cx.shape(t)) for t in op.inputs]
    equation = explicit_einsum(cx.attr("equation"), ranks)
    return cx.emit("einsum", [cx.value(t) for t in op.inputs], {"equation": equation})


# --- reductions --------------------------------------------------------------------------
_REDUCE = {"Mean": "reduce_mean", "Sum": "reduce_sum", "Max": "reduce_max",
           "Min": "reduce_min", "Prod": "reduce_prod", "All": "reduce_min",
           "Any": "reduce_max"}


def _axes(cx: Any, t: Any, rank: int) -> tuple[int, ...]:
    return tuple(sorted({a % rank for a in cx.const_ints(t)})) if rank else ()


def _reduction(canonical: str) -> Converter:
    def convert(cx: Any, op: Any) -> Any:
        x = cx.value(op.inputs[0])
        axes = _axes(cx, op.inputs[1], len(cx.shape(op.inputs[0])))
        if not axes:
            return x
        return cx.emit(canonical, [x], {"axes": axes, "keepdims": bool(cx.attr("keep_dims"))})

    return convert


for _name, _canonical in _REDUCE.items():
    CONVERTERS[_name] = _reduction(_canonical)


@_reg("ArgMax", "ArgMin")
def _argmax(cx: Any, op: Any) -> Any:
    rank = len(cx.shape(op.inputs[0]))
    (axis,) = _axes(cx, op.inputs[1], rank)
    shape, dtype = cx.out()
    canonical = "argmax" if op.type == "ArgMax" else "argmin"
    index = cx.emit(canonical, [cx.value(op.inputs[0])], {"axis": axis}, out=(shape, "int64"))
    return index if dtype == "int64" else cx.emit("cast", [index], {"dtype": dtype})


@_reg("Cumsum")
def _cumsum(cx: Any, op: Any) -> Any:
    if cx.attr("exclusive", False) or cx.attr("reverse", False):
        raise Unsupported("exclusive or reverse cumsum")
    (axis,) = _axes(cx, op.inputs[1], len(cx.shape(op.inputs[0])))
    return cx.emit("cumsum", [cx.value(op.inputs[0])], {"axis": axis})


# --- convolutions, pools, batch norm (NHWC wrapped in transposes to NCHW) ----------------
def _layout(cx: Any, rank: int) -> tuple[bool, list[int]]:
    """Whether the op's data format is channels-last, and the positions of spatial axes."""
    last = not cx.attr("data_format", "NHWC").startswith("NC")
    return last, list(range(1, rank - 1)) if last else list(range(2, rank))


def _pick(values: list[int], positions: list[int], n: int) -> tuple[int, ...]:
    return tuple(int(values[p]) for p in positions) if values else (1,) * n


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TF's SAME padding of one axis: the odd pixel goes at the end."""
    extent = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + extent - size, 0)
    return total // 2, total - total // 2


def _padding(cx: Any, sizes: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
             dilation: tuple[int, ...], positions: list[int]) -> tuple[int, ...]:
    mode = cx.attr("padding")
    if mode == "VALID":
        return (0,) * (2 * len(sizes))
    if mode == "EXPLICIT":
        pairs = [int(p) for p in cx.attr("explicit_paddings")]
        return tuple(pairs[2 * p] for p in positions) + tuple(pairs[2 * p + 1] for p in positions)
    pads = [_same_pads(*args) for args in zip(sizes, kernel, stride, dilation)]
    return tuple(b for b, _ in pads) + tuple(e for _, e in pads)


def _nchw_out(cx: Any, last: bool) -> tuple[tuple[int, ...], str]:
    shape, dtype = cx.out()
    if last:
        shape = (shape[0], shape[-1]) + shape[1:-1]
    return shape, dtype


def _expanded(cx: Any, t: Any, axis: int) -> Any | None:
    """The tensor that ``t`` is ``ExpandDims`` of at ``axis``, or None."""
    if t.op.type != "ExpandDims":
        return None
    (at,) = cx.const_ints(t.op.inputs[1])
    return t.op.inputs[0] if at % len(cx.shape(t)) == axis else None


def _height_one(cx: Any, t: Any) -> Value | None:
    """The NWC value a converted 4-D ``t`` of height 1 is that value unsqueezed (a 1-D
    conv's result read by the next conv of height 1: Keras' SeparableConv1D runs its
    pointwise Conv2D on its depthwise one's output), or None."""
    shape = cx.shape(t)
    v = cx.value(t)
    origin = cx.origins.get(v) if isinstance(v, Value) else None
    if len(shape) == 4 and shape[1] == 1 and isinstance(origin, Value) and \
            origin.shape == (shape[0], shape[2], shape[3]):
        return origin
    return None


def _conv1d(cx: Any, op: Any) -> Any | None:
    """TF's 1-D convolution (``tf.nn.conv1d``, Keras Conv1D: ExpandDims of the NWC input
    and of the kernel, a Conv2D of height 1, then Squeeze; Keras' SeparableConv1D: a
    DepthwiseConv2dNative so, then a 1x1 Conv2D of its output) as the 1-D ``conv`` it is;
    the 4-D output is the 1-D result unsqueezed, which the Squeeze gives back."""
    depthwise = op.type == "DepthwiseConv2dNative"
    if op.type not in ("Conv2D", "DepthwiseConv2dNative") or \
            not cx.attr("data_format", "NHWC").startswith("NH"):
        return None
    x3, w3 = _expanded(cx, op.inputs[0], 1), _expanded(cx, op.inputs[1], 0)
    strides, dilations = cx.attr("strides"), cx.attr("dilations") or [1, 1, 1, 1]
    # a stride along the height of 1 (Keras' SeparableConv1D strides both) is no stride
    if w3 is None or dilations[1] != 1 or (strides[1] != 1 and cx.attr("padding") != "VALID"):
        return None
    if cx.attr("padding") == "EXPLICIT" and any(cx.attr("explicit_paddings")[2:4]):
        return None
    before = _height_one(cx, op.inputs[0]) if x3 is None else None
    if x3 is None and before is None:
        return None
    atrous = _atrous_1d(cx, op, x3) if x3 is not None and not depthwise else None
    if atrous is not None:  # a dilated Conv1D: the dilation, padding and input it stands for
        x3, dilation, padding = atrous
        stride = (1,)
    x_shape = cx.shape(x3) if before is None else before.shape
    w_shape = cx.shape(w3)
    if atrous is None:
        stride, dilation = (int(strides[2]),), (int(dilations[2]),)
        padding = _padding(cx, (x_shape[1],), (w_shape[0],), stride, dilation, [2])
    attrs = {"stride": stride, "padding": padding, "dilation": dilation,
             "groups": x_shape[-1] if depthwise else x_shape[-1] // w_shape[1],
             "bias": False}
    shape, dtype = cx.out()
    if atrous is not None:
        shape = (x_shape[0], 1, x_shape[1] + sum(padding) - (w_shape[0] - 1) * dilation[0],
                 shape[3])
    x = cx.value(x3) if before is None else before
    y = cx.emit("conv", [cx.channels_first(x),
                         cx.weight(w3, "depthwise" if depthwise else "oihw")], attrs,
                out=((shape[0], shape[3], shape[2]), dtype))
    if atrous is not None:  # shapes of its own, not those TF gives the batched form
        last = cx.channels_last(y)
        u = cx.emit("unsqueeze", [last], {"axes": (1,)}, out=(shape, dtype))
        cx.origins[u] = last  # the Squeeze after it gives ``last`` back
        return u
    return cx.reshape(cx.channels_last(y), "unsqueeze", {"axes": (1,)})


def _atrous_1d(cx: Any, op: Any, x3: Any) -> tuple[Any, tuple[int], tuple[int, int]] | None:
    """A dilated Conv1D (SpaceToBatchND of the NWC input by the dilation, ExpandDims, a
    VALID Conv2D of stride 1, Squeeze, BatchToSpaceND): the input before SpaceToBatchND,
    the dilation and the padding it stands for; the Squeeze's output is marked for
    BatchToSpaceND to crop (``_atrous``), else None."""
    s2b = x3.op
    readers = op.outputs[0].consumers()
    if s2b.type != "SpaceToBatchND" or len(readers) != 1 or readers[0].type != "Squeeze":
        return None
    block = _batched_by(cx, op, s2b, readers[0].outputs[0])
    if block is None or len(block) != 1:
        return None
    pads = np.ravel(cx.const_ints(s2b.inputs[2]))
    cx.atrous.add(readers[0].outputs[0].name)
    return s2b.inputs[0], block, (int(pads[0]), int(pads[1]))


def _batched_by(cx: Any, op: Any, s2b: Any, out: Any) -> tuple[int, ...] | None:
    """The block of SpaceToBatchND ``s2b`` where convolution ``op`` (VALID, stride and
    dilation 1) reads its blocks and the one reader of ``out`` is a BatchToSpaceND of the
    same block (its constants are not converted yet: read from TF), else None."""
    after = out.consumers()
    if len(after) != 1 or after[0].type != "BatchToSpaceND" or \
            cx.attr("padding") != "VALID" or \
            any(int(v) != 1 for v in [*cx.attr("strides"), *(cx.attr("dilations") or ())]):
        return None
    block, later = (tf.get_static_value(t.inputs[1]) for t in (s2b, after[0]))
    if block is None or later is None or \
            tuple(np.ravel(block)) != tuple(np.ravel(later)):
        return None
    return tuple(int(b) for b in np.ravel(block))


def _atrous(cx: Any, op: Any) -> Any | None:
    """TF's dilated convolution (``tf.nn.convolution`` with dilations, Keras Conv2D and
    DepthwiseConv2D with ``dilation_rate``): SpaceToBatchND of the input by the dilation,
    a VALID convolution of stride 1, BatchToSpaceND of its output: the dilated ``conv`` of
    the input padded as SpaceToBatchND pads it, in the input's own layout; the crops of
    BatchToSpaceND follow there (``shape_ops._batch_to_space``, ``atrous``)."""
    s2b = op.inputs[0].op
    if s2b.type != "SpaceToBatchND" or not cx.attr("data_format", "NHWC").startswith("NH"):
        return None
    block = _batched_by(cx, op, s2b, op.outputs[0])
    x_shape, w_shape = cx.shape(s2b.inputs[0]), cx.shape(op.inputs[1])
    if block is None or len(x_shape) != len(block) + 2:
        return None
    n = len(block)
    pads = np.asarray(cx.const_ints(s2b.inputs[2])).reshape(-1, 2)
    padding = tuple(int(b) for b in pads[:, 0]) + tuple(int(e) for e in pads[:, 1])
    depthwise = op.type == "DepthwiseConv2dNative"
    channels = x_shape[-1]
    groups = channels if depthwise else channels // w_shape[n]
    spatial = tuple(x_shape[1 + i] + int(pads[i].sum()) - (w_shape[i] - 1) * block[i]
                    for i in range(n))
    out_channels = w_shape[n] * w_shape[n + 1] if depthwise else w_shape[-1]
    dtype = cx.out()[1]
    x3, w3 = _expanded(cx, s2b.inputs[0], 1), _expanded(cx, op.inputs[1], 0)
    if n == 2 and block[0] == 1 and not pads[0].any() and x3 is not None and w3 is not None:
        # Keras' dilated SeparableConv1D: the 1-D conv of the input before ExpandDims,
        # its result unsqueezed back to height 1 (``_conv1d``)
        attrs = {"stride": (1,), "padding": (int(pads[1, 0]), int(pads[1, 1])),
                 "dilation": (block[1],), "groups": groups, "bias": False}
        y = cx.emit("conv", [cx.channels_first(cx.value(x3)),
                             cx.weight(w3, "depthwise" if depthwise else "oihw")],
                    attrs, out=((x_shape[0], out_channels, spatial[1]), dtype))
        last = cx.channels_last(y)
        shape = (x_shape[0], 1, spatial[1], out_channels)
        u = cx.emit("unsqueeze", [last], {"axes": (1,)}, out=(shape, dtype))
        cx.origins[u] = last
        cx.atrous.add(op.outputs[0].name)
        return u
    attrs = {"stride": (1,) * n, "padding": padding, "dilation": block, "groups": groups,
             "bias": False}
    y = cx.emit("conv", [cx.channels_first(cx.value(s2b.inputs[0])),
                         cx.weight(op.inputs[1], "depthwise" if depthwise else "oihw")],
                attrs, out=((x_shape[0], out_channels) + spatial, dtype))
    cx.atrous.add(op.outputs[0].name)
    return cx.channels_last(y)


@_reg("Conv2D", "Conv3D", "DepthwiseConv2dNative")
def _conv(cx: Any, op: Any) -> Any:
    one_d = _conv1d(cx, op)
    if one_d is not None:
        return one_d
    atrous = _atrous(cx, op)
    if atrous is not None:
        return atrous
    x_shape, w_shape = cx.shape(op.inputs[0]), cx.shape(op.inputs[1])
    last, positions = _layout(cx, len(x_shape))
    n = len(positions)
    stride = _pick(cx.attr("strides"), positions, n)
    dilation = _pick(cx.attr("dilations"), positions, n)
    sizes = tuple(x_shape[p] for p in positions)
    padding = _padding(cx, sizes, w_shape[:n], stride, dilation, positions)
    channels = x_shape[-1] if last else x_shape[1]
    depthwise = op.type == "DepthwiseConv2dNative"
    groups = channels if depthwise else channels // w_shape[n]
    weight = cx.weight(op.inputs[1], "depthwise" if depthwise else "oihw")
    x = cx.value(op.inputs[0])
    if last:
        x = cx.channels_first(x)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups,
             "bias": False}
    y = cx.emit("conv", [x, weight], attrs, out=_nchw_out(cx, last))
    return cx.channels_last(y) if last else y


@_reg("Conv2DBackpropInput", "Conv3DBackpropInputV2")
def _conv_transpose(cx: Any, op: Any) -> Any:
    w_shape, x_shape = cx.shape(op.inputs[1]), cx.shape(op.inputs[2])
    last, positions = _layout(cx, len(x_shape))
    n = len(positions)
    stride = _pick(cx.attr("strides"), positions, n)
    dilation = _pick(cx.attr("dilations"), positions, n)
    out_shape = cx.out()[0]
    outs = tuple(out_shape[p] for p in positions)
    if cx.attr("padding") == "SAME":  # the forward convolution's padding, out -> in
        pads = [_same_pads(o, k, s, d) for o, k, s, d in zip(outs, w_shape[:n], stride, dilation)]
        padding = tuple(b for b, _ in pads) + tuple(e for _, e in pads)
    else:
        padding = _padding(cx, outs, w_shape[:n], stride, dilation, positions)
    extra = []
    for i in range(n):
        full = (x_shape[positions[i]] - 1) * stride[i] + (w_shape[i] - 1) * dilation[i] + 1
        extra.append(outs[i] - (full - padding[i] - padding[n + i]))
    if min(extra) < 0:
        raise Unsupported("transposed convolution that crops more than its padding")
    x = cx.value(op.inputs[2])
    if last:
        x = cx.channels_first(x)
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": 1,
             "bias": False, "output_padding": tuple(extra)}
    y = cx.emit("conv_transpose", [x, cx.weight(op.inputs[1], "oihw")], attrs,
                out=_nchw_out(cx, last))
    return cx.channels_last(y) if last else y


@_reg("MaxPool", "MaxPoolV2", "MaxPool3D", "AvgPool", "AvgPool3D")
def _pool(cx: Any, op: Any) -> Any:
    x_shape = cx.shape(op.inputs[0])
    last, positions = _layout(cx, len(x_shape))
    n = len(positions)
    if op.type == "MaxPoolV2":
        ksize, strides = cx.const_ints(op.inputs[1]), cx.const_ints(op.inputs[2])
    else:
        ksize, strides = list(cx.attr("ksize")), list(cx.attr("strides"))
    kernel, stride = _pick(ksize, positions, n), _pick(strides, positions, n)
    sizes = tuple(x_shape[p] for p in positions)
    attrs = {"kernel": kernel, "stride": stride, "dilation": (1,) * n, "ceil_mode": False,
             "padding": _padding(cx, sizes, kernel, stride, (1,) * n, positions)}
    if op.type.startswith("Avg"):
        attrs["count_include_pad"] = False  # TF divides by the valid elements only
    x = cx.value(op.inputs[0])
    if last:
        x = cx.channels_first(x)
    canonical = "avg_pool" if op.type.startswith("Avg") else "max_pool"
    y = cx.emit(canonical, [x], attrs, out=_nchw_out(cx, last))
    return cx.channels_last(y) if last else y


@_reg("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(cx: Any, op: Any) -> Any:
    x_shape = cx.shape(op.inputs[0])
    last, _ = _layout(cx, len(x_shape))
    x, scale, offset, mean, var = (cx.value(t) for t in op.inputs[:5])
    if cx.attr("is_training", False):
        y = _batch_statistics_norm(cx, x, scale, offset, last)
        return (y,) + (None,) * (len(op.outputs) - 1)
    momentum = getattr(cx.layer(), "momentum", None)
    attrs = {"eps": float(cx.attr("epsilon")), "scale": True, "bias": True,
             "momentum": 1.0 - float(momentum) if isinstance(momentum, float) else 0.1}
    if last:
        x = cx.channels_first(x)
    shape, dtype = cx.out()
    nchw = (shape[0], shape[-1]) + shape[1:-1] if last else shape
    y = cx.emit("batch_norm", [x, mean, var, scale, offset], attrs, out=(nchw, dtype))
    y = cx.channels_last(y) if last else y
    return (y,) + (None,) * (len(op.outputs) - 1)


def _batch_statistics_norm(cx: Any, x: Any, scale: Any, offset: Any, last: bool) -> Any:
    """A fused batch norm in training mode normalizes with the batch's own statistics
    (tf_keras' LayerNormalization is written so): mean and biased variance as primitives."""
    shape, dtype = cx.out()
    channel = len(shape) - 1 if last else 1
    axes = tuple(a for a in range(len(shape)) if a != channel)
    stat = tuple(1 if a != channel else shape[a] for a in range(len(shape)))
    mean = cx.emit("reduce_mean", [x], {"axes": axes, "keepdims": True}, out=(stat, dtype))
    centered = cx.emit("sub", [x, mean])
    var = cx.emit("reduce_mean", [cx.emit("mul", [centered, centered])],
                  {"axes": axes, "keepdims": True}, out=(stat, dtype))
    eps = _scalar(float(cx.attr("epsilon")), dtype)
    inv = cx.emit("rsqrt", [cx.emit("add", [var, eps], out=(stat, dtype))], out=(stat, dtype))
    scale = cx.emit("reshape", [scale], {"shape": stat}, out=(stat, dtype))
    offset = cx.emit("reshape", [offset], {"shape": stat}, out=(stat, dtype))
    return cx.emit("add", [cx.emit("mul", [centered, cx.emit("mul", [inv, scale],
                                                              out=(stat, dtype))]), offset])


@_reg("MatrixBandPart")
def _band_part(cx: Any, op: Any) -> Any:
    """tf.linalg.band_part(x, lower, upper): x times the band of its last two axes kept (a
    causal mask made from ones, OPT's): constant bounds only."""
    x = cx.value(op.inputs[0])
    lower, upper = (cx.value(op.inputs[i]) for i in (1, 2))
    if not all(isinstance(b, np.ndarray) and b.size == 1 for b in (lower, upper)):
        raise Unsupported("band_part with bounds computed at run time")
    shape, dtype = cx.out()
    rows, cols = shape[-2], shape[-1]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    lo, up = int(lower.reshape(())), int(upper.reshape(()))
    keep = ((lo < 0) | (i - j <= lo)) & ((up < 0) | (j - i <= up))
    return cx.emit("mul", [x, keep.astype(numpy_of(dtype))])


def _resized(cx: Any, op: Any) -> tuple[tuple[int, ...], list[int], bool, bool]:
    """A TF resize's input shape, its constant output size and its ``align_corners`` and
    ``half_pixel_centers`` flags (``Unsupported`` where the size is computed, or nothing)."""
    shape = cx.shape(op.inputs[0])
    size = cx.const_ints(op.inputs[1])  # Unsupported where the program computes it
    if len(shape) != 4 or len(size) != 2 or any(d is None for d in shape[1:3]):
        raise Unsupported("a resize to a size the program computes")
    if min(size) < 1 or min(shape[1:3]) < 1:
        raise Unsupported("a resize to or from nothing")
    return shape, size, bool(cx.attr("align_corners")), bool(cx.attr("half_pixel_centers"))


@_reg("ResizeNearestNeighbor")
def _resize_nearest(cx: Any, op: Any) -> Any:
    """``tf.image.resize(method='nearest')`` and the Keras layers that call it: a gather per
    spatial axis at the positions TF's kernel reads (``frontends._common.resize``): with
    half-pixel centers ``floor((o + ½)·s)``, else ``floor(o·s)``, rounded to nearest with
    aligned corners (``s = (in − 1)/(out − 1)``)."""
    shape, size, corners, half = _resized(cx, op)
    positions = []
    for axis, n_out in zip((1, 2), size):
        n_in, n_out = int(shape[axis]), int(n_out)
        step = (n_in - 1) / (n_out - 1) if corners and n_out > 1 else n_in / n_out
        positions.append((axis, nearest_positions(
            n_in, n_out, "tf_half_pixel_for_nn" if half else "asymmetric",
            "round_half_away" if corners else "floor", step)))
    return emit_gathers(cx, cx.value(op.inputs[0]), positions)


@_reg("ResizeBilinear", "ResizeBicubic")
def _resize(cx: Any, op: Any) -> Any:
    """``tf.image.resize(method='bilinear' | 'bicubic')`` (Keras's ``Resizing``, a bilinear
    ``UpSampling2D``): a ``resize`` of the spatial axes, half-pixel coordinates, aligned
    corners or neither (``o·in/out``, TF 1's default); TF's half-pixel bicubic is Keys' with
    a = -0.5 over the taps inside the input, its others PyTorch's a = -0.75."""
    shape, size, corners, half = _resized(cx, op)
    cubic = op.type == "ResizeBicubic"
    coordinates = "align_corners" if corners else "half_pixel" if half else "asymmetric"
    attrs = resize_attrs(shape, (1, 2), size, "cubic" if cubic else "linear", coordinates,
                         [shape[1] / size[0], shape[2] / size[1]],
                         cubic_coeff=-0.5 if half else -0.75, exclude_outside=half)
    x = cx.value(op.inputs[0])
    if attrs is None:
        return cx.emit("identity", [x])
    return cx.emit("resize", [x], attrs)


@_reg("TopKV2")
def _top_k(cx: Any, op: Any) -> Any:
    """``tf.math.top_k`` along the last axis, sorted (TF's ``argsort`` and ``sort`` are
    top_k of the whole axis, of the values negated for ascending order): the canonical
    descending ``argsort`` (top_k keeps equal values in index order: stable), sliced to
    the first k, with the values gathered at those indices. Unsorted top_k stays
    opaque."""
    x = cx.value(op.inputs[0])
    k = cx.const(op.inputs[1])
    if not cx.attr("sorted", True) or k is None or not isinstance(x, Value):
        raise Unsupported("top_k of a k unknown at trace time or unsorted")
    return emit_top_k(cx, x, x.rank - 1, int(np.asarray(k)), True, lambda a: a,
                      cx.out(1)[1])
