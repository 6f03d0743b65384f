"""Export rules of ``specgraph.frontends.onnx.export`` for ops that are not one ONNX operator as is.

Each rule writes ONNX nodes for one canonical node through the ``Exporter`` and puts the
result into ``ex.out()``. Formulas follow the ops' NumPy references term by term.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.onnx.export.exporter import Exporter
from specgraph.ir import Node

RULES = ConverterTable()  # canonical op -> the rule that writes its ONNX nodes


def _x(ex: Exporter, node: Node, index: int = 0) -> str:
    return ex.name(node.inputs[index])


def _scalar(ex: Exporter, value: float, dtype: str) -> str:
    return ex.const(np.asarray(value), dtype)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


# --- elementwise -------------------------------------------------------------------------
@RULES.register("where")
def _where(ex: Exporter, node: Node) -> None:
    cond, a, b = node.inputs
    dtype = node.output.dtype
    ex.emit("Where", [ex.operand(cond, "bool"), ex.operand(a, dtype), ex.operand(b, dtype)],
            ex.out())


@RULES.register("prelu")
def _prelu(ex: Exporter, node: Node) -> None:
    dtype = node.output.dtype
    ex.emit("PRelu", [ex.operand(node.inputs[0], dtype), ex.operand(node.inputs[1], dtype)],
            ex.out())


@RULES.register("not_equal")
def _not_equal(ex: Exporter, node: Node) -> None:
    ex.emit("Not", [ex.emit("Equal", [_x(ex, node, 0), _x(ex, node, 1)])], ex.out())


@RULES.register("pow")
def _pow(ex: Exporter, node: Node) -> None:
    ex.emit("Pow", [ex.operand(node.inputs[0], node.output.dtype), _x(ex, node, 1)], ex.out())


@RULES.register("rsqrt")
def _rsqrt(ex: Exporter, node: Node) -> None:
    ex.emit("Reciprocal", [ex.emit("Sqrt", [_x(ex, node)])], ex.out())


@RULES.register("erfc")
def _erfc(ex: Exporter, node: Node) -> None:
    one = _scalar(ex, 1.0, node.output.dtype)
    ex.emit("Sub", [one, ex.emit("Erf", [_x(ex, node)])], ex.out())


@RULES.register("reciprocal")
def _reciprocal(ex: Exporter, node: Node) -> None:
    ex.emit("Reciprocal", [ex.operand(node.inputs[0], node.output.dtype)], ex.out())


@RULES.register("div")
def _div(ex: Exporter, node: Node) -> None:
    dtype = node.output.dtype
    a, b = (ex.operand(v, dtype) for v in node.inputs)
    rounding = node.attrs["rounding"]
    if rounding is None or (rounding == "trunc" and not _is_float(dtype)):
        ex.emit("Div", [a, b], ex.out())  # integer Div truncates toward zero
    elif _is_float(dtype):
        q = ex.emit("Div", [a, b])
        if rounding == "floor":
            ex.emit("Floor", [q], ex.out())
        else:
            ex.emit("Mul", [ex.emit("Sign", [q]), ex.emit("Floor", [ex.emit("Abs", [q])])],
                    ex.out())
    else:  # integer floor: the truncated quotient, one less where the signs differ inexactly
        q = ex.emit("Div", [a, b])
        rest = ex.emit("Sub", [a, ex.emit("Mul", [q, b])])
        zero = _scalar(ex, 0, dtype)
        inexact = ex.emit("Not", [ex.emit("Equal", [rest, zero])])
        signs = ex.emit("Xor", [ex.emit("Less", [a, zero]), ex.emit("Less", [b, zero])])
        adjust = ex.emit("Cast", [ex.emit("And", [inexact, signs])], to=ex.elem(dtype))
        ex.emit("Sub", [q, adjust], ex.out())


@RULES.register("clip")
def _clip(ex: Exporter, node: Node) -> None:
    dtype = node.output.dtype
    bounds = ["" if node.attrs[k] is None else _scalar(ex, node.attrs[k], dtype)
              for k in ("min", "max")]
    ex.emit("Clip", [_x(ex, node)] + bounds, ex.out())


@RULES.register("cast")
def _cast(ex: Exporter, node: Node) -> None:
    ex.emit("Cast", [_x(ex, node)], ex.out(), to=ex.elem(node.attrs["dtype"]))


# --- activations -------------------------------------------------------------------------
@RULES.register("leaky_relu", "elu")
def _alpha_activation(ex: Exporter, node: Node) -> None:
    op_type = "LeakyRelu" if node.op == "leaky_relu" else "Elu"
    ex.emit(op_type, [_x(ex, node)], ex.out(), alpha=node.attrs["alpha"])


@RULES.register("hardsigmoid")
def _hardsigmoid(ex: Exporter, node: Node) -> None:
    ex.emit("HardSigmoid", [_x(ex, node)], ex.out(), alpha=node.attrs["alpha"],
            beta=node.attrs["beta"])


@RULES.register("hardswish")
def _hardswish(ex: Exporter, node: Node) -> None:
    if ex.opset >= 14:
        ex.emit("HardSwish", [_x(ex, node)], ex.out())
    else:
        gate = ex.emit("HardSigmoid", [_x(ex, node)], alpha=1 / 6, beta=0.5)
        ex.emit("Mul", [_x(ex, node), gate], ex.out())


@RULES.register("silu")
def _silu(ex: Exporter, node: Node) -> None:
    ex.emit("Mul", [_x(ex, node), ex.emit("Sigmoid", [_x(ex, node)])], ex.out())


@RULES.register("mish")
def _mish(ex: Exporter, node: Node) -> None:
    if ex.opset >= 18:
        ex.emit("Mish", [_x(ex, node)], ex.out())
    else:
        soft = ex.emit("Softplus", [_x(ex, node)])
        ex.emit("Mul", [_x(ex, node), ex.emit("Tanh", [soft])], ex.out())


@RULES.register("softplus")
def _softplus(ex: Exporter, node: Node) -> None:
    x, dtype = _x(ex, node), node.output.dtype
    beta, threshold = node.attrs["beta"], node.attrs["threshold"]
    bx = x if beta == 1 else ex.emit("Mul", [x, _scalar(ex, beta, dtype)])
    soft = ex.emit("Softplus", [bx])
    if beta != 1:
        soft = ex.emit("Div", [soft, _scalar(ex, beta, dtype)])
    linear = ex.emit("Greater", [bx, _scalar(ex, threshold, dtype)])
    ex.emit("Where", [linear, x, soft], ex.out())


@RULES.register("gelu")
def _gelu(ex: Exporter, node: Node) -> None:
    x, dtype = _x(ex, node), node.output.dtype
    approximate = node.attrs["approximate"]
    if ex.opset >= 20:
        ex.emit("Gelu", [x], ex.out(), approximate=approximate)
        return
    if approximate == "tanh":  # 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))
        cube = ex.emit("Mul", [ex.emit("Mul", [x, x]), x])
        inner = ex.emit("Add", [x, ex.emit("Mul", [cube, _scalar(ex, 0.044715, dtype)])])
        core = ex.emit("Tanh", [ex.emit("Mul", [inner, _scalar(ex, math.sqrt(2 / math.pi),
                                                                  dtype)])])
    else:  # 0.5·x·(1 + erf(x / sqrt(2)))
        core = ex.emit("Erf", [ex.emit("Div", [x, _scalar(ex, math.sqrt(2.0), dtype)])])
    half = ex.emit("Mul", [ex.emit("Mul", [x, _scalar(ex, 0.5, dtype)]),
                           ex.emit("Add", [core, _scalar(ex, 1.0, dtype)])])
    ex.emit("Identity", [half], ex.out())


@RULES.register("softmax", "log_softmax")
def _softmax(ex: Exporter, node: Node) -> None:
    op_type = "Softmax" if node.op == "softmax" else "LogSoftmax"
    ex.emit(op_type, [_x(ex, node)], ex.out(), axis=node.attrs["axis"])


@RULES.register("dropout")
def _dropout(ex: Exporter, node: Node) -> None:
    ratio = _scalar(ex, node.attrs["p"], "float32")
    ex.emit("Dropout", [_x(ex, node), ratio], ex.out())


# --- layers ------------------------------------------------------------------------------
@RULES.register("linear")
def _linear(ex: Exporter, node: Node) -> None:
    x = node.inputs[0]
    names = [ex.name(v) for v in node.inputs]
    if x.rank == 2:
        ex.emit("Gemm", names, ex.out())
    elif node.attrs["bias"]:
        ex.emit("Add", [ex.emit("MatMul", names[:2]), names[2]], ex.out())
    else:
        ex.emit("MatMul", names, ex.out())


@RULES.register("einsum")
def _einsum(ex: Exporter, node: Node) -> None:
    ex.emit("Einsum", [ex.name(v) for v in node.inputs], ex.out(),
            equation=node.attrs["equation"])


def _window(node: Node) -> dict[str, Any]:
    a = node.attrs
    return {"strides": list(a["stride"]), "pads": list(a["padding"]),
            "dilations": list(a["dilation"])}


@RULES.register("conv", "conv_transpose")
def _conv(ex: Exporter, node: Node) -> None:
    weight = node.inputs[1]
    attrs = {**_window(node), "group": node.attrs["groups"],
             "kernel_shape": list(weight.shape[2:])}
    if node.op == "conv_transpose":
        attrs["output_padding"] = list(node.attrs["output_padding"])
    op_type = "Conv" if node.op == "conv" else "ConvTranspose"
    ex.emit(op_type, [ex.name(v) for v in node.inputs], ex.out(), **attrs)


def _pool(ex: Exporter, node: Node, op_type: str, out: str, **extra: Any) -> str:
    attrs = {**_window(node), "kernel_shape": list(node.attrs["kernel"]),
             "ceil_mode": int(node.attrs["ceil_mode"]), **extra}
    if all(d == 1 for d in attrs["dilations"]):
        del attrs["dilations"]
    elif op_type == "AveragePool" and ex.opset < 19:
        raise ex.fail("a dilated average pool needs opset 19 or newer")
    return ex.emit(op_type, [_x(ex, node)], out, **attrs)


@RULES.register("max_pool")
def _max_pool(ex: Exporter, node: Node) -> None:
    _pool(ex, node, "MaxPool", ex.out())


@RULES.register("avg_pool")
def _avg_pool(ex: Exporter, node: Node) -> None:
    divisor = node.attrs["divisor"]
    if divisor is None:
        _pool(ex, node, "AveragePool", ex.out(),
              count_include_pad=int(node.attrs["count_include_pad"]))
        return
    if node.attrs["ceil_mode"]:
        raise ex.fail("a fixed divisor with ceil_mode has no ONNX form")
    mean = _pool(ex, node, "AveragePool", ex.fresh(), count_include_pad=1)
    factor = math.prod(node.attrs["kernel"]) / divisor
    ex.emit("Mul", [mean, _scalar(ex, factor, node.output.dtype)], ex.out())


@RULES.register("adaptive_avg_pool", "adaptive_max_pool")
def _adaptive_pool(ex: Exporter, node: Node) -> None:
    x = node.inputs[0]
    sizes, outs = x.shape[2:], node.attrs["output_size"]
    average = node.op == "adaptive_avg_pool"
    if all(o == 1 for o in outs):
        ex.emit("GlobalAveragePool" if average else "GlobalMaxPool", [_x(ex, node)], ex.out())
    elif all(s % o == 0 for s, o in zip(sizes, outs)):
        kernel = [s // o for s, o in zip(sizes, outs)]
        attrs = {"kernel_shape": kernel, "strides": kernel}
        ex.emit("AveragePool" if average else "MaxPool", [_x(ex, node)], ex.out(), **attrs)
    else:  # PyTorch's bins [floor(i·S/O), ceil((i+1)·S/O)), one axis after the other
        h = _x(ex, node)
        reduce = "ReduceMean" if average else "ReduceMax"
        for axis, (s, o) in enumerate(zip(sizes, outs), start=2):
            parts = [ex.reduce(reduce, ex.emit("Slice", [h, ex.ints([i * s // o]),
                                                         ex.ints([-(-(i + 1) * s // o)]),
                                                         ex.ints([axis])]), [axis], True)
                     for i in range(o)]
            h = ex.emit("Concat", parts, axis=axis) if len(parts) > 1 else parts[0]
        ex.emit("Identity", [h], ex.out())


def _ones(ex: Exporter, shape: tuple[int, ...], dtype: str, value: float = 1.0) -> str:
    return ex.const(np.full(shape, value), dtype)


@RULES.register("batch_norm")
def _batch_norm(ex: Exporter, node: Node) -> None:
    x, mean, var, *rest = node.inputs
    a, dtype, channels = node.attrs, x.dtype, (x.shape[1],)
    scale = ex.name(rest.pop(0)) if a["scale"] else _ones(ex, channels, dtype)
    bias = ex.name(rest.pop(0)) if a["bias"] else _ones(ex, channels, dtype, 0.0)
    ex.emit("BatchNormalization", [ex.name(x), scale, bias, ex.name(mean), ex.name(var)],
            ex.out(), epsilon=a["eps"], momentum=1.0 - a["momentum"])


def _affine(ex: Exporter, y: str, node: Node, params: list[Any], shape: tuple[int, ...],
            flags: tuple[str, ...]) -> str:
    """``y·w + b`` with the node's optional weight and bias reshaped to ``shape``."""
    for flag, op_type in zip(flags, ("Mul", "Add")):
        if node.attrs[flag]:
            p = params.pop(0)
            name = ex.name(p) if p.shape == shape else ex.emit(
                "Reshape", [ex.name(p), ex.ints(shape)])
            y = ex.emit(op_type, [y, name])
    return y


def _normalize(ex: Exporter, x: str, axes: list[int], eps: float, dtype: str,
               center: bool = True) -> str:
    """(x - mean) / sqrt(var + eps) over ``axes`` (x / sqrt(mean(x²) + eps) uncentered)."""
    d = ex.emit("Sub", [x, ex.reduce("ReduceMean", x, axes, True)]) if center else x
    var = ex.reduce("ReduceMean", ex.emit("Mul", [d, d]), axes, True)
    std = ex.emit("Sqrt", [ex.emit("Add", [var, _scalar(ex, eps, dtype)])])
    return ex.emit("Div", [d, std])


@RULES.register("layer_norm")
def _layer_norm(ex: Exporter, node: Node) -> None:
    x, *params = node.inputs
    a = node.attrs
    shape = x.shape[a["axis"]:]
    if ex.opset >= 17:
        scale = ex.name(params.pop(0)) if a["scale"] else _ones(ex, shape, x.dtype)
        bias = [ex.name(params.pop(0))] if a["bias"] else []
        ex.emit("LayerNormalization", [ex.name(x), scale] + bias, ex.out(), axis=a["axis"],
                epsilon=a["eps"])
        return
    y = _normalize(ex, ex.name(x), list(range(a["axis"], x.rank)), a["eps"], x.dtype)
    ex.emit("Identity", [_affine(ex, y, node, params, shape, ("scale", "bias"))], ex.out())


@RULES.register("rms_norm")
def _rms_norm(ex: Exporter, node: Node) -> None:
    x, *params = node.inputs
    a = node.attrs
    shape = x.shape[a["axis"]:]
    if ex.opset >= 23:
        scale = ex.name(params[0]) if a["scale"] else _ones(ex, shape, x.dtype)
        ex.emit("RMSNormalization", [ex.name(x), scale], ex.out(), axis=a["axis"],
                epsilon=a["eps"])
        return
    y = _normalize(ex, ex.name(x), list(range(a["axis"], x.rank)), a["eps"], x.dtype, False)
    ex.emit("Identity", [_affine(ex, y, node, params, shape, ("scale",))], ex.out())


@RULES.register("weight_norm")
def _weight_norm(ex: Exporter, node: Node) -> None:
    """g·v/‖v‖ over ``axes``: ReduceL2 (keeping the axes), Div, Mul."""
    v, g = (ex.name(i) for i in node.inputs)
    norm = ex.reduce("ReduceL2", v, node.attrs["axes"], True)
    ex.emit("Mul", [ex.emit("Div", [v, norm]), g], ex.out())


@RULES.register("group_norm")
def _group_norm(ex: Exporter, node: Node) -> None:
    x, *params = node.inputs
    a, channels = node.attrs, (x.shape[1],)
    if ex.opset >= 21:
        scale = ex.name(params.pop(0)) if a["scale"] else _ones(ex, channels, x.dtype)
        bias = ex.name(params.pop(0)) if a["bias"] else _ones(ex, channels, x.dtype, 0.0)
        ex.emit("GroupNormalization", [ex.name(x), scale, bias], ex.out(),
                num_groups=a["num_groups"], epsilon=a["eps"])
        return
    grouped = ex.emit("Reshape", [ex.name(x), ex.ints([x.shape[0], a["num_groups"], -1])])
    y = _normalize(ex, grouped, [2], a["eps"], x.dtype)
    y = ex.emit("Reshape", [y, ex.ints(x.shape)])
    shape = (1, x.shape[1]) + (1,) * (x.rank - 2)
    ex.emit("Identity", [_affine(ex, y, node, params, shape, ("scale", "bias"))], ex.out())


@RULES.register("embedding")
def _embedding(ex: Exporter, node: Node) -> None:
    indices, weight = node.inputs
    max_norm = node.attrs.get("max_norm")
    if max_norm is None:
        ex.emit("Gather", [ex.name(weight), ex.name(indices)], ex.out(), axis=0)
        return
    dtype, p = weight.dtype, node.attrs.get("norm_type", 2.0)
    rows = ex.emit("Gather", [ex.name(weight), ex.name(indices)], axis=0)
    powered = ex.emit("Pow", [ex.emit("Abs", [rows]), _scalar(ex, p, dtype)])
    norm = ex.emit("Pow", [ex.reduce("ReduceSum", powered, [-1], True),
                           _scalar(ex, 1.0 / p, dtype)])
    limit = _scalar(ex, max_norm, dtype)
    scale = ex.emit("Where", [ex.emit("Greater", [norm, limit]),
                              ex.emit("Div", [limit, ex.emit("Add", [norm, _scalar(
                                  ex, 1e-7, dtype)])]), _scalar(ex, 1.0, dtype)])
    ex.emit("Mul", [rows, scale], ex.out())


@RULES.register("attention")
def _attention(ex: Exporter, node: Node) -> None:
    """softmax(scale·q·kᵀ (+ mask)) · v, with k and v heads repeated for grouped queries."""
    q, k, v, *mask = node.inputs
    dtype, a = q.dtype, node.attrs
    keys, vals = ex.name(k), ex.name(v)
    if q.rank >= 3 and k.shape[-3] != q.shape[-3]:
        keys, vals = (_repeat_heads(ex, name, t.shape, q.shape[-3] // k.shape[-3])
                      for name, t in ((keys, k), (vals, v)))
    perm = list(range(k.rank - 2)) + [k.rank - 1, k.rank - 2]
    scores = ex.emit("MatMul", [ex.name(q), ex.emit("Transpose", [keys], perm=perm)])
    scores = ex.emit("Mul", [scores, _scalar(ex, a["scale"], dtype)])
    minus_inf = _scalar(ex, -np.inf, dtype) if a["causal"] or mask else ""
    if a["causal"]:
        keep = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        scores = ex.emit("Where", [ex.const(keep, "bool"), scores, minus_inf])
    boolean = bool(mask) and mask[0].dtype == "bool"
    if boolean:
        scores = ex.emit("Where", [ex.name(mask[0]), scores, minus_inf])
    elif mask:
        scores = ex.emit("Add", [scores, ex.operand(mask[0], dtype)])
    weights = ex.emit("Softmax", [scores], axis=-1)
    if boolean:  # a row keeping no key: NaN from the softmax, zeros as PyTorch's exporter
        weights = ex.emit("Where", [ex.emit("IsNaN", [weights]), _scalar(ex, 0.0, dtype),
                                    weights])
    ex.emit("MatMul", [weights, vals], ex.out())


@RULES.register("rotary_embedding")
def _rotary_embedding(ex: Exporter, node: Node) -> None:
    """x·cos + rotated(x)·sin over the first ``dim`` features, the angles position·ωᵢ with
    ωᵢ = 1 / theta^(2i/dim) computed from ``Range`` (float32; float64 for float64 inputs)."""
    (x,) = node.inputs
    a, rank = node.attrs, node.inputs[0].rank
    dim, dtype = a["dim"], x.dtype
    work = "float64" if dtype == "float64" else "float32"

    def steps(start: int, end: int, step: int) -> str:
        return ex.emit("Cast", [ex.emit("Range", [_scalar(ex, start, "int64"),
                                                  _scalar(ex, end, "int64"),
                                                  _scalar(ex, step, "int64")])],
                       to=ex.elem(work))

    exponent = ex.emit("Div", [steps(0, dim, 2), _scalar(ex, dim, work)])
    inv_freq = ex.emit("Reciprocal", [ex.emit("Pow", [_scalar(ex, a["theta"], work), exponent])])
    if a.get("factor", 1.0) != 1.0:  # linear scaling: the frequencies divided by the factor
        inv_freq = ex.emit("Div", [inv_freq, _scalar(ex, a["factor"], work)])
    freqs = ex.emit("Mul", [ex.emit("Unsqueeze", [steps(0, x.shape[a["axis"]], 1), ex.ints([1])]),
                            ex.emit("Unsqueeze", [inv_freq, ex.ints([0])])])
    shape = [1] * rank
    shape[a["axis"]], shape[-1] = x.shape[a["axis"]], dim // 2
    cos, sin = (ex.emit("Reshape", [ex.emit("Cast", [ex.emit(f, [freqs])], to=ex.elem(dtype)),
                                    ex.ints(shape)]) for f in ("Cos", "Sin"))

    def part(start: int, end: int, step: int = 1) -> str:
        return ex.emit("Slice", [ex.name(x), ex.ints([start]), ex.ints([end]),
                                 ex.ints([rank - 1]), ex.ints([step])])

    first, second = ((part(0, dim // 2), part(dim // 2, dim)) if a["layout"] == "half"
                     else (part(0, dim, 2), part(1, dim, 2)))
    turned_a = ex.emit("Sub", [ex.emit("Mul", [first, cos]), ex.emit("Mul", [second, sin])])
    turned_b = ex.emit("Add", [ex.emit("Mul", [second, cos]), ex.emit("Mul", [first, sin])])
    if a["layout"] == "half":
        turned = ex.emit("Concat", [turned_a, turned_b], axis=-1)
    else:
        pairs = [ex.emit("Unsqueeze", [t, ex.ints([rank])]) for t in (turned_a, turned_b)]
        turned = ex.emit("Reshape", [ex.emit("Concat", pairs, axis=-1),
                                     ex.ints(x.shape[:-1] + (dim,))])
    if dim == x.shape[-1]:
        ex.emit("Identity", [turned], ex.out())
    else:
        ex.emit("Concat", [turned, part(dim, x.shape[-1])], ex.out(), axis=-1)


def _repeat_heads(ex: Exporter, name: str, shape: tuple[int, ...], times: int) -> str:
    """[..., H, S, E] -> [..., H·times, S, E], each head repeated ``times`` in a row."""
    head = len(shape) - 3
    wide = shape[:head + 1] + (times,) + shape[head + 1:]
    h = ex.emit("Unsqueeze", [name, ex.ints([head + 1])])
    h = ex.emit("Expand", [h, ex.ints(wide)])
    return ex.emit("Reshape", [h, ex.ints(shape[:head] + (shape[head] * times,) + shape[-2:])])


@RULES.register("resize")
def _resize(ex: Exporter, node: Node) -> None:
    """``Resize`` of its attributes, the output's full shape as ``sizes`` (or the inverse
    steps as ``scales`` where a step is not the sizes' ratio: a scale factor given)."""
    a = node.attrs
    x = node.inputs[0]
    if a["antialias"] and ex.opset < 18:
        raise ex.fail("an antialiased resize needs opset 18 or newer")
    ratios = [x.shape[axis] / size for axis, size in zip(a["axes"], a["sizes"])]
    attrs: dict[str, Any] = {"mode": a["mode"], "coordinate_transformation_mode":
                             a["coordinates"]}
    if a["mode"] == "cubic":
        attrs.update(cubic_coeff_a=float(a["cubic_coeff"]),
                     exclude_outside=int(a["exclude_outside"]))
    if a["antialias"]:
        attrs["antialias"] = 1
    if all(abs(r - s) <= 1e-7 * r for r, s in zip(ratios, a["steps"])):
        inputs = [_x(ex, node), "", "", ex.ints(list(node.output.shape))]
    else:
        scales = [1.0] * x.rank
        for axis, step in zip(a["axes"], a["steps"]):
            scales[axis] = 1.0 / step
        inputs = [_x(ex, node), "", ex.const(np.asarray(scales, dtype=np.float32), "float32")]
    ex.emit("Resize", inputs, ex.out(), **attrs)
