"""ONNX operator -> canonical op converters for the ONNX frontend, kept as a table of data.

Each converter takes the frontend's converter state ``cx`` and one ``NodeProto``, reads
attributes with ``cx.attr`` and constant inputs with ``cx.const`` (which raises ``Dynamic``
for a value computed at run time: the node then becomes ``opaque``), and emits canonical
nodes with ``cx.emit``. Layer ops live here; shape ops and reductions in ``shape_ops``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from specgraph.frontends._common.points import emit_along_gather, emit_top_k
from specgraph.frontends._common.resize import (COORDINATES, ROUNDINGS, emit_gathers,
                                                 nearest_positions, resize_attrs)
from specgraph.frontends._common.table import Converter, ConverterTable
from specgraph.frontends.onnx.convert import Dynamic, f32

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def wrap_axis(axis: int, rank: int) -> int:
    """Axis ``axis`` (negative counts from the end) as an index into ``rank`` axes."""
    return int(axis) % rank if rank else 0


def scalar(cx: Any, name: str, default: float | None) -> float | None:
    """A constant scalar input as a float (``default`` where the input is absent)."""
    array = cx.const(name)
    return default if array is None else f32(float(np.asarray(array).reshape(-1)[0]))


# --- elementwise -------------------------------------------------------------------------
_UNARY = {
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs", "Erf": "erf",
    "Sin": "sin", "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Sign": "sign",
    "Not": "logical_not", "Identity": "identity", "HardSwish": "hardswish", "Mish": "mish",
}
_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Pow": "pow", "Equal": "equal",
    "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
}


def _unary(canonical: str) -> Converter:
    def convert(cx: Any, node: Any) -> Any:
        return cx.emit(canonical, [cx.value(node.input[0])])

    return convert


def _binary(canonical: str) -> Converter:
    def convert(cx: Any, node: Any) -> Any:
        return cx.emit(canonical, [cx.value(node.input[0]), cx.value(node.input[1])])

    return convert


for _name, _canonical in _UNARY.items():
    CONVERTERS[_name] = _unary(_canonical)
for _name, _canonical in _BINARY.items():
    CONVERTERS[_name] = _binary(_canonical)


@_reg("Div")
def _div(cx: Any, node: Any) -> Any:
    a, b = cx.value(node.input[0]), cx.value(node.input[1])
    integer = not cx.out()[1].startswith(("float", "bfloat"))
    return cx.emit("div", [a, b], {"rounding": "trunc" if integer else None})


@_reg("Max", "Min", "Sum", "Mean")
def _variadic(cx: Any, node: Any) -> Any:
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    values = [cx.value(name) for name in node.input if name]
    shape, dtype = cx.out()
    acc = values[0]
    for other in values[1:]:
        shp = np.broadcast_shapes(acc.shape, other.shape)
        acc = cx.emit(op, [acc, other], out=(shp, dtype))
    if node.op_type == "Mean" and len(values) > 1:
        acc = cx.emit("div", [acc, cx.constant(len(values), dtype)])
    return acc if acc is not values[0] else cx.emit("identity", [acc])


@_reg("IsNaN")
def _isnan(cx: Any, node: Any) -> Any:
    """NaN is the one value not equal to itself (JAX's ``isnan`` is written so, too)."""
    x = cx.value(node.input[0])
    return cx.emit("not_equal", [x, x])


@_reg("Where")
def _where(cx: Any, node: Any) -> Any:
    return cx.emit("where", [cx.value(name) for name in node.input[:3]])


@_reg("Clip")
def _clip(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    if cx.opset < 11:
        lo, hi = cx.attr("min"), cx.attr("max")
        lo = None if lo is None or lo <= -3.4e38 else lo
        hi = None if hi is None or hi >= 3.4e38 else hi
        return cx.emit("clip", [x], {"min": lo, "max": hi})
    try:
        return cx.emit("clip", [x], {"min": scalar(cx, cx.input(1), None),
                                     "max": scalar(cx, cx.input(2), None)})
    except Dynamic:  # bounds computed at run time: max then min, as Clip defines them
        for name, op in ((cx.input(1), "maximum"), (cx.input(2), "minimum")):
            if name:
                x = cx.emit(op, [x, cx.value(name)])
        return x


# --- activations -------------------------------------------------------------------------
@_reg("LeakyRelu")
def _leaky_relu(cx: Any, node: Any) -> Any:
    return cx.emit("leaky_relu", [cx.value(node.input[0])], {"alpha": cx.attr("alpha", 0.01)})


@_reg("Elu")
def _elu(cx: Any, node: Any) -> Any:
    return cx.emit("elu", [cx.value(node.input[0])], {"alpha": cx.attr("alpha", 1.0)})


@_reg("HardSigmoid")
def _hardsigmoid(cx: Any, node: Any) -> Any:
    return cx.emit("hardsigmoid", [cx.value(node.input[0])],
                   {"alpha": cx.attr("alpha", 0.2), "beta": cx.attr("beta", 0.5)})


@_reg("Softplus")
def _softplus(cx: Any, node: Any) -> Any:
    # ONNX has no threshold; the canonical 20 changes the result by < e**-20 relative.
    return cx.emit("softplus", [cx.value(node.input[0])])


@_reg("Gelu")
def _gelu(cx: Any, node: Any) -> Any:
    return cx.emit("gelu", [cx.value(node.input[0])],
                   {"approximate": cx.attr("approximate", "none")})


@_reg("PRelu")
def _prelu(cx: Any, node: Any) -> Any:
    x, slope = cx.value(node.input[0]), cx.value(node.input[1])
    return cx.emit("prelu", [x, slope])


@_reg("Softmax", "LogSoftmax")
def _softmax(cx: Any, node: Any) -> Any:
    op = "softmax" if node.op_type == "Softmax" else "log_softmax"
    x = cx.value(node.input[0])
    axis = wrap_axis(cx.attr("axis", -1 if cx.opset >= 13 else 1), x.rank)
    if cx.opset >= 13 or axis == x.rank - 1:
        return cx.emit(op, [x], {"axis": axis})
    # before opset 13 the input is flattened to 2-D at ``axis`` and normalized per row
    flat = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    h = cx.emit("reshape", [x], {"shape": flat}, out=(flat, x.dtype))
    h = cx.emit(op, [h], {"axis": 1}, out=(flat, x.dtype))
    return cx.emit("reshape", [h], {"shape": x.shape})


@_reg("Dropout")
def _dropout(cx: Any, node: Any) -> Any:
    if cx.opset >= 12:
        training = cx.const(cx.input(2))
        if training is not None and bool(np.asarray(training).reshape(-1)[0]):
            return cx.opaque()
        p = scalar(cx, cx.input(1), 0.5)
    else:
        p = cx.attr("ratio", 0.5)
    return cx.emit("dropout", [cx.value(node.input[0])], {"p": p}), cx.opaque_output(1)


# --- matmul ------------------------------------------------------------------------------
@_reg("MatMul")
def _matmul(cx: Any, node: Any) -> Any:
    return cx.emit("matmul", [cx.value(node.input[0]), cx.value(node.input[1])])


def _swap(cx: Any, value: Any) -> Any:
    shape = value.shape[:-2] + (value.shape[-1], value.shape[-2])
    perm = tuple(range(value.rank - 2)) + (value.rank - 1, value.rank - 2)
    return cx.emit("transpose", [value], {"perm": perm}, out=(shape, value.dtype))


@_reg("Gemm")
def _gemm(cx: Any, node: Any) -> Any:
    a, b, c = node.input[0], node.input[1], cx.input(2)
    alpha, beta = cx.attr("alpha", 1.0), cx.attr("beta", 1.0)
    trans_a, trans_b = cx.attr("transA", 0), cx.attr("transB", 0)
    shape, dtype = cx.out()
    bias_vector = not c or (cx.is_param(c) and cx.shape(c) == (shape[1],))
    if cx.is_param(b) and not trans_a and alpha == 1 and beta == 1 and bias_vector:
        inputs = [cx.value(a), cx.param(b, "linear" if trans_b else "native")]
        return cx.emit("linear", inputs + ([cx.value(c)] if c else []), {"bias": bool(c)})
    x = _swap(cx, cx.value(a)) if trans_a else cx.value(a)
    if trans_b:
        w = cx.param(b, "linear") if cx.is_param(b) else _swap(cx, cx.value(b))
    else:
        w = cx.value(b)
    y = cx.emit("matmul", [x, w], out=(shape, dtype))
    if alpha != 1:
        y = cx.emit("mul", [y, cx.constant(alpha, dtype)], out=(shape, dtype))
    if not c:
        return y
    bias = cx.value(c)
    if beta != 1:
        bias = cx.emit("mul", [bias, cx.constant(beta, dtype)], out=(bias.shape, dtype))
    return cx.emit("add", [y, bias])


@_reg("Einsum")
def _einsum(cx: Any, node: Any) -> Any:
    equation = cx.attr("equation").replace(" ", "")
    if "..." in equation:
        return cx.opaque()  # the canonical einsum takes explicit subscripts only
    if "->" not in equation:
        letters = equation.replace(",", "")
        equation += "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return cx.emit("einsum", [cx.value(name) for name in node.input], {"equation": equation})


# --- convolution and pooling -------------------------------------------------------------
def _same_pads(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
               dilation: Sequence[int], lower: bool) -> tuple[int, ...]:
    totals = [max(0, (-(-s // st) - 1) * st + (k - 1) * d + 1 - s)
              for s, k, st, d in zip(sizes, kernel, stride, dilation)]
    small = [t // 2 for t in totals]
    large = [t - t // 2 for t in totals]
    return tuple(large + small) if lower else tuple(small + large)


def _window(cx: Any, sizes: Sequence[int], kernel: Sequence[int]) -> dict[str, Any]:
    """Canonical stride, dilation and explicit padding from ONNX window attributes."""
    n = len(kernel)
    stride = tuple(cx.attr("strides") or (1,) * n)
    dilation = tuple(cx.attr("dilations") or (1,) * n)
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        padding = _same_pads(sizes, kernel, stride, dilation, auto == "SAME_LOWER")
    elif auto == "VALID":
        padding = (0,) * (2 * n)
    else:
        padding = tuple(cx.attr("pads") or (0,) * (2 * n))
    return {"stride": stride, "dilation": dilation, "padding": padding}


def _conv_inputs(cx: Any, node: Any) -> tuple[list[Any], bool]:
    inputs = [cx.value(node.input[0]), cx.value(node.input[1])]
    bias = bool(cx.input(2))
    if bias:
        inputs.append(cx.value(node.input[2]))
    return inputs, bias


@_reg("Conv")
def _conv(cx: Any, node: Any) -> Any:
    inputs, bias = _conv_inputs(cx, node)
    x, w = inputs[0], inputs[1]
    kernel = tuple(cx.attr("kernel_shape") or w.shape[2:])
    attrs = _window(cx, x.shape[2:], kernel)
    return cx.emit("conv", inputs, {**attrs, "groups": cx.attr("group", 1), "bias": bias})


@_reg("ConvTranspose")
def _conv_transpose(cx: Any, node: Any) -> Any:
    inputs, bias = _conv_inputs(cx, node)
    x, w = inputs[0], inputs[1]
    n = x.rank - 2
    kernel = tuple(cx.attr("kernel_shape") or w.shape[2:])
    stride = tuple(cx.attr("strides") or (1,) * n)
    dilation = tuple(cx.attr("dilations") or (1,) * n)
    extra = tuple(cx.attr("output_padding") or (0,) * n)
    auto = cx.attr("auto_pad", "NOTSET")
    padding = tuple(cx.attr("pads") or (0,) * (2 * n))
    if cx.attr("output_shape") or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = cx.out()[0][2:]
        totals = [st * (s - 1) + e + (k - 1) * d + 1 - o for s, k, st, d, e, o
                  in zip(x.shape[2:], kernel, stride, dilation, extra, want)]
        if min(totals) < 0:
            return cx.opaque()
        small, large = [t // 2 for t in totals], [t - t // 2 for t in totals]
        padding = tuple(small + large) if auto == "SAME_UPPER" else tuple(large + small)
    attrs = {"stride": stride, "dilation": dilation, "padding": padding,
             "output_padding": extra, "groups": cx.attr("group", 1), "bias": bias}
    return cx.emit("conv_transpose", inputs, attrs)


def _pool_attrs(cx: Any, x: Any) -> dict[str, Any]:
    kernel = tuple(cx.attr("kernel_shape"))
    attrs = _window(cx, x.shape[2:], kernel)
    return {**attrs, "kernel": kernel, "ceil_mode": bool(cx.attr("ceil_mode", 0))}


@_reg("MaxPool")
def _max_pool(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    if cx.attr("storage_order", 0):
        return cx.opaque()
    return cx.emit("max_pool", [x], _pool_attrs(cx, x)), cx.opaque_output(1)


@_reg("AveragePool")
def _avg_pool(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    attrs = _pool_attrs(cx, x)
    attrs["count_include_pad"] = bool(cx.attr("count_include_pad", 0))
    return cx.emit("avg_pool", [x], attrs)


@_reg("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    op = "adaptive_avg_pool" if node.op_type == "GlobalAveragePool" else "adaptive_max_pool"
    return cx.emit(op, [x], {"output_size": (1,) * (x.rank - 2)})


# --- normalization and embedding ---------------------------------------------------------
@_reg("BatchNormalization")
def _batch_norm(cx: Any, node: Any) -> Any:
    if cx.attr("training_mode", 0):
        return cx.opaque()
    x, scale, bias, mean, var = (cx.value(name) for name in node.input[:5])
    attrs = {"eps": cx.attr("epsilon", 1e-5), "momentum": f32(1 - cx.attr("momentum", 0.9))}
    out = cx.emit("batch_norm", [x, mean, var, scale, bias], attrs)
    return (out,) + tuple(cx.opaque_output(i) for i in range(1, len(node.output)))


@_reg("LayerNormalization")
def _layer_norm(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    bias = bool(cx.input(2))
    inputs = [x, cx.value(node.input[1])] + ([cx.value(node.input[2])] if bias else [])
    attrs = {"axis": wrap_axis(cx.attr("axis", -1), x.rank), "eps": cx.attr("epsilon", 1e-5),
             "scale": True, "bias": bias}
    out = cx.emit("layer_norm", inputs, attrs)
    return (out,) + tuple(cx.opaque_output(i) for i in range(1, len(node.output)))


@_reg("RMSNormalization")
def _rms_norm(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    attrs = {"axis": wrap_axis(cx.attr("axis", -1), x.rank), "eps": cx.attr("epsilon", 1e-5)}
    return cx.emit("rms_norm", [x, cx.value(node.input[1])], attrs)


def _per_channel(cx: Any, value: Any, groups: int, channels: int) -> Any:
    """A per-group vector repeated per channel (GroupNormalization before opset 21)."""
    if value.shape == (channels,):
        return value
    index = cx.constant(np.repeat(np.arange(groups), channels // groups), "int64")
    return cx.emit("gather", [value, index], {"axis": 0}, out=((channels,), value.dtype))


@_reg("GroupNormalization", "InstanceNormalization")
def _group_norm(cx: Any, node: Any) -> Any:
    x = cx.value(node.input[0])
    channels = x.shape[1]
    groups = channels if node.op_type == "InstanceNormalization" else cx.attr("num_groups")
    scale, bias = cx.value(node.input[1]), cx.value(node.input[2])
    if node.op_type == "GroupNormalization" and cx.opset < 21:
        scale, bias = (_per_channel(cx, v, groups, channels) for v in (scale, bias))
    return cx.emit("group_norm", [x, scale, bias],
                   {"num_groups": groups, "eps": cx.attr("epsilon", 1e-5)})


@_reg("GatherND")
def _gather_nd(cx: Any, node: Any) -> Any:
    """GatherND with constant indices and no batch axes (the exporter's ``table[index]``
    with a buffer for the index: Swin's relative position bias) is one gather along the
    first axis of the table with its indexed axes made one, at indices computed here."""
    data = node.input[0]
    indices = cx.const(node.input[1])  # computed at run time: Dynamic, kept opaque
    shape = cx.shape(data)
    if cx.attr("batch_dims", 0) or indices.ndim < 1 or not 1 <= indices.shape[-1] <= len(shape):
        return cx.opaque()[0]
    k = indices.shape[-1]
    lead = np.array(shape[:k], dtype=np.int64)
    index = np.asarray(indices, dtype=np.int64)
    index = np.where(index < 0, index + lead, index)
    if np.any((index < 0) | (index >= lead)):
        return cx.opaque()[0]  # out of range: onnxruntime's error, not a gather
    flat = np.ravel_multi_index(tuple(np.moveaxis(index, -1, 0)), tuple(lead))
    table = cx.value(data)
    if k > 1:
        rows = (int(np.prod(lead)),) + tuple(shape[k:])
        table = cx.emit("reshape", [table], {"shape": rows}, out=(rows, table.dtype))
    at = cx.constant(np.asarray(flat, dtype=np.int64), "int64")
    if k == 1 and cx.is_param(data):
        return cx.emit("embedding", [at, table])
    return cx.emit("gather", [table, at], {"axis": 0})


@_reg("GatherElements")
def _gather_elements(cx: Any, node: Any) -> Any:
    """One entry of ``data`` per index position along ``axis`` (``torch.gather`` exported)."""
    data, indices = node.input[0], node.input[1]
    x, at = cx.value(data), cx.value(indices)
    axis = wrap_axis(cx.attr("axis", 0), len(cx.shape(data)))
    return emit_along_gather(cx, x, at, axis, tuple(cx.shape(indices)),
                             lambda a: cx.constant(a, str(a.dtype)))


@_reg("Gather")
def _gather(cx: Any, node: Any) -> Any:
    data, indices = node.input[0], node.input[1]
    rank = len(cx.shape(data))
    axis = wrap_axis(cx.attr("axis", 0), rank)
    if axis == 0 and cx.is_param(data) and not cx.meta(indices)[1].startswith("float"):
        return cx.emit("embedding", [cx.value(indices), cx.value(data)])
    return cx.emit("gather", [cx.value(data), cx.value(indices)], {"axis": axis})


@_reg("Resize")
def _resize(cx: Any, node: Any) -> Any:
    """``Resize``: nearest (``torch.onnx.export`` of ``interpolate(mode='nearest')``) as a
    gather per resized axis at the positions its coordinate transformation and rounding
    read (``frontends._common.resize``); linear and cubic as a ``resize`` of its
    attributes; crops stay opaque."""
    x = cx.value(node.input[0])
    coordinates = cx.attr("coordinate_transformation_mode", "half_pixel")
    rounding = cx.attr("nearest_mode", "round_prefer_floor")
    mode = cx.attr("mode", "nearest")
    if coordinates not in COORDINATES or rounding not in ROUNDINGS or \
            cx.attr("keep_aspect_ratio_policy", "stretch") != "stretch" or \
            mode not in ("nearest", "linear", "cubic") or \
            (mode != "nearest" and coordinates == "tf_half_pixel_for_nn"):
        return cx.opaque()
    scales = cx.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    (shape, _), = cx.outs()
    axes = [wrap_axis(a, x.rank) for a in cx.attr("axes", list(range(x.rank)))]
    if scales is not None and np.size(scales) == 0:
        scales = None
    if len(shape) != x.rank or any(shape[a] < 1 or x.shape[a] < 1 for a in axes) or (
            scales is not None and (np.size(scales) != len(axes)
                                    or not np.all(np.isfinite(scales))
                                    or np.any(np.asarray(scales) <= 0))):
        return cx.opaque()  # a resize this file describes inconsistently: kept as it is
    steps = [1.0 / float(np.ravel(scales)[k]) if scales is not None
             else x.shape[axis] / shape[axis] for k, axis in enumerate(axes)]
    if mode != "nearest":
        attrs = resize_attrs(x.shape, axes, [shape[a] for a in axes], mode, coordinates, steps,
                             cubic_coeff=float(cx.attr("cubic_coeff_a", -0.75)),
                             exclude_outside=bool(cx.attr("exclude_outside", 0)),
                             antialias=bool(cx.attr("antialias", 0)))
        return cx.emit("identity" if attrs is None else "resize", [x], attrs)
    return emit_gathers(cx, x, [
        (axis, nearest_positions(int(x.shape[axis]), int(shape[axis]), coordinates, rounding,
                                 step)) for axis, step in zip(axes, steps)])


@_reg("TopK")
def _top_k(cx: Any, node: Any) -> Any:
    """TopK sorted (ties by the lower index first: stable): the canonical ``argsort``
    (descending for the largest) cut to the first k, and the values gathered at those
    indices (``torch.argsort``, ``torch.topk`` exported); unsorted, or of a k not known
    when traced, opaque."""
    from specgraph.frontends.onnx.shape_ops import _ints

    k = _ints(cx, node.input[1])
    if not cx.attr("sorted", 1) or not k:
        return cx.opaque()
    x = cx.value(node.input[0])
    return emit_top_k(cx, x, wrap_axis(cx.attr("axis", -1), x.rank), int(k[0]),
                      bool(cx.attr("largest", 1)), lambda a: cx.constant(a, str(a.dtype)))
