"""ATen op -> canonical op converters for the PyTorch frontend, kept as a table of data.

Each converter takes the frontend's converter state ``cx`` and one FX node, reads the node's
arguments by schema name with ``cx.bind``, and emits canonical nodes with ``cx.emit``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from specgraph.errors import TraceError
from specgraph.frontends._common.einsum import explicit_einsum, tensordot_equation
from specgraph.frontends._common.points import emit_along_gather, emit_top_k, positions
from specgraph.frontends._common.resize import emit_gathers, nearest_positions, resize_attrs
from specgraph.frontends._common.table import Converter, ConverterTable
from specgraph.ops.dtypes import numpy_dtype

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def rank_of(arg: Any) -> int:
    """The rank of an FX tensor argument."""
    return len(arg.meta["val"].shape)


def shape_of(arg: Any) -> tuple[int, ...]:
    """The static shape of an FX tensor argument."""
    return tuple(int(s) for s in arg.meta["val"].shape)


def wrap_dim(d: int, rank: int) -> int:
    """Dimension ``d`` (negative counts from the end) as an index into ``rank`` axes."""
    return int(d) % rank if rank else 0


def _ntuple(v: Any, n: int) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, (list, tuple)):
        v = tuple(int(i) for i in v)
        return v * n if len(v) == 1 else v
    return (int(v),) * n


def _out_dtype(cx: Any) -> str:
    return cx.meta(cx.current)[0][1]


# --- elementwise -------------------------------------------------------------------------
_UNARY = {
    "relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "sigmoid_": "sigmoid",
    "tanh": "tanh", "tanh_": "tanh", "silu": "silu", "silu_": "silu", "mish": "mish",
    "hardswish": "hardswish", "hardswish_": "hardswish", "neg": "neg", "exp": "exp",
    "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "abs": "abs",
    "erf": "erf", "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil", "sign": "sign",
    "logical_not": "logical_not",
    "clone": "identity", "alias": "identity", "detach": "identity", "detach_": "identity",
    "lift_fresh_copy": "identity", "contiguous": "identity",
}


def _unary(canonical: str) -> Converter:
    def convert(cx: Any, node: Any) -> Any:
        return cx.emit(canonical, [cx.value(node.args[0])])

    return convert


for _name, _canonical in _UNARY.items():
    for _overload in ("default",):
        CONVERTERS[f"aten.{_name}.{_overload}"] = _unary(_canonical)

_BINARY = {
    "mul": "mul", "mul_": "mul", "div": "div", "div_": "div", "pow": "pow",
    "maximum": "maximum", "minimum": "minimum", "eq": "equal", "ne": "not_equal",
    "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "logical_and": "logical_and", "logical_or": "logical_or",
    # a clamp on one side is a maximum or a minimum (F.normalize's guard on the norm)
    "clamp_min": "maximum", "clamp_min_": "maximum", "clamp_max": "minimum",
    "clamp_max_": "minimum",
}
# bitwise ops on booleans are the logical ones; on integers they are not (kept opaque)
_BITWISE = {"bitwise_and": "logical_and", "bitwise_or": "logical_or",
            "__and__": "logical_and", "__or__": "logical_or"}


def _binary(canonical: str) -> Converter:
    def convert(cx: Any, node: Any) -> Any:
        a, b = node.args[0], node.args[1]
        dtype = _operand_dtype(cx, node, a, b)
        attrs = {}
        if canonical == "div" and node.kwargs.get("rounding_mode"):
            attrs["rounding"] = node.kwargs["rounding_mode"]
        return cx.emit(canonical, [cx.operand(a, dtype), cx.operand(b, dtype)], attrs)

    return convert


def _operand_dtype(cx: Any, node: Any, a: Any, b: Any) -> str:
    """The dtype a Python scalar operand takes: that of the tensor it meets."""
    for t in (a, b):
        if hasattr(t, "meta") and isinstance(t.meta.get("val"), torch.Tensor):
            dt = cx.meta(t)[0][1]
            other = b if t is a else a
            if isinstance(other, float) and not dt.startswith(("float", "bfloat")):
                return _out_dtype(cx)
            return dt
    return _out_dtype(cx)


def _booleans_only(logical: Converter) -> Converter:
    """A bitwise op: on booleans the logical one (``logical``), on integers opaque."""
    def convert(cx: Any, node: Any) -> Any:
        return logical(cx, node) if cx.meta(node)[0][1] == "bool" else cx.opaque(node)

    return convert


for _name, _canonical in _BINARY.items():
    for _overload in ("Tensor", "Scalar", "Tensor_Scalar", "Tensor_Tensor", "Scalar_Tensor",
                      "Tensor_mode", "default"):
        CONVERTERS[f"aten.{_name}.{_overload}"] = _binary(_canonical)
CONVERTERS["aten.bitwise_not.default"] = _booleans_only(_unary("logical_not"))
for _name, _canonical in _BITWISE.items():
    for _overload in ("Tensor", "Scalar", "Tensor_Scalar", "Tensor_Tensor", "Scalar_Tensor"):
        CONVERTERS[f"aten.{_name}.{_overload}"] = _booleans_only(_binary(_canonical))


@_reg("aten.add.Tensor", "aten.add.Scalar", "aten.add_.Tensor", "aten.add_.Scalar",
      "aten.sub.Tensor", "aten.sub.Scalar", "aten.sub_.Tensor", "aten.sub_.Scalar")
def _add_sub(cx: Any, node: Any) -> Any:
    a, b = node.args[0], node.args[1]
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    dtype = _operand_dtype(cx, node, a, b)
    rhs = cx.operand(b, dtype)
    if alpha != 1:
        rhs = cx.emit("mul", [rhs, cx.operand(alpha, dtype)], out=(rhs.shape, rhs.dtype))
    op = "add" if str(node.target).startswith("aten.add") else "sub"
    return cx.emit(op, [cx.operand(a, dtype), rhs])


@_reg("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(cx: Any, node: Any) -> Any:
    a, b = node.args[0], node.args[1]
    alpha = node.kwargs.get("alpha", 1)
    dtype = _operand_dtype(cx, node, a, b)
    x = cx.operand(a, dtype)
    if alpha != 1:
        x = cx.emit("mul", [x, cx.operand(alpha, dtype)], out=(x.shape, x.dtype))
    return cx.emit("sub", [cx.operand(b, dtype), x])


@_reg("aten.log1p.default", "aten.log1p_.default")
def _log1p(cx: Any, node: Any) -> Any:
    """log(1 + x), as JAX's and TensorFlow's frontends write it: one canonical form (the
    program, run as written, keeps log1p's accuracy for small x)."""
    x = cx.value(node.args[0])
    one_plus = cx.emit("add", [x, cx.operand(1.0, x.dtype)], out=(x.shape, x.dtype))
    return cx.emit("log", [one_plus])


@_reg("aten.expm1.default", "aten.expm1_.default")
def _expm1(cx: Any, node: Any) -> Any:
    """exp(x) - 1, as JAX's and TensorFlow's frontends write it."""
    x = cx.value(node.args[0])
    e = cx.emit("exp", [x], out=(x.shape, x.dtype))
    return cx.emit("sub", [e, cx.operand(1.0, x.dtype)])


@_reg("aten.gelu.default", "aten.gelu_.default")
def _gelu(cx: Any, node: Any) -> Any:
    return cx.emit("gelu", [cx.value(node.args[0])],
                   {"approximate": node.kwargs.get("approximate", "none")})


@_reg("aten.leaky_relu.default", "aten.leaky_relu_.default")
def _leaky_relu(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    return cx.emit("leaky_relu", [cx.value(a["self"])], {"alpha": a["negative_slope"]})


@_reg("aten.prelu.default", "aten._prelu_kernel.default")
def _prelu(cx: Any, node: Any) -> Any:
    """``nn.PReLU``: ``prelu(x, slope)``, a slope per channel (axis 1) laid out to
    broadcast, or one for all."""
    x, weight = node.args[:2]
    rank = rank_of(x)
    size = int(np.prod(shape_of(weight)))
    slope = (cx.weight(weight, f"channels{rank}") if size > 1 and rank in (3, 4, 5)
             else cx.value(weight))
    return cx.emit("prelu", [cx.value(x), slope])


@_reg("aten.elu.default", "aten.elu_.default")
def _elu(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    if a["scale"] != 1 or a["input_scale"] != 1:
        return cx.opaque(node)  # selu-like scaling has no canonical op yet
    return cx.emit("elu", [cx.value(a["self"])], {"alpha": a["alpha"]})


@_reg("aten.softplus.default")
def _softplus(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    return cx.emit("softplus", [cx.value(a["self"])],
                   {"beta": a["beta"], "threshold": a["threshold"]})


@_reg("aten.hardsigmoid.default", "aten.hardsigmoid_.default")
def _hardsigmoid(cx: Any, node: Any) -> Any:
    return cx.emit("hardsigmoid", [cx.value(node.args[0])], {"alpha": 1 / 6, "beta": 0.5})


@_reg("aten.hardtanh.default", "aten.hardtanh_.default", "aten.clamp.default",
      "aten.clamp_.default", "aten.clip.default", "aten.relu6.default")
def _clip(cx: Any, node: Any) -> Any:
    name = str(node.target)
    if "relu6" in name:
        lo, hi = 0.0, 6.0
    else:
        a = cx.bind(node)
        lo = a.get("min_val", a.get("min"))
        hi = a.get("max_val", a.get("max"))
    return cx.emit("clip", [cx.value(node.args[0])], {"min": lo, "max": hi})


@_reg("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def _where(cx: Any, node: Any) -> Any:
    cond, a, b = node.args
    dtype = _out_dtype(cx)
    return cx.emit("where", [cx.value(cond), cx.operand(a, dtype), cx.operand(b, dtype)])


@_reg("aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.masked_fill_.Scalar",
      "aten.masked_fill_.Tensor")
def _masked_fill(cx: Any, node: Any) -> Any:
    x, mask, value = node.args
    dtype = _out_dtype(cx)
    return cx.emit("where", [cx.value(mask), cx.operand(value, dtype), cx.value(x)])


@_reg("aten.to.dtype", "aten.to.dtype_layout", "aten._to_copy.default", "aten.type_as.default",
      "aten.to.device", "aten.to.other")
def _cast(cx: Any, node: Any) -> Any:
    x = cx.value(node.args[0])
    dtype = _out_dtype(cx)
    if dtype == x.dtype:
        return cx.emit("identity", [x])
    return cx.emit("cast", [x], {"dtype": dtype})


@_reg("aten.dropout.default", "aten.dropout_.default", "aten.feature_dropout.default",
      "aten.alpha_dropout.default")
def _dropout(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    if a.get("train"):
        raise TraceError(f"{cx._at()}dropout is in training mode; specgraph traces in eval "
                         "mode, so pass training=self.training to F.dropout")
    return cx.emit("dropout", [cx.value(node.args[0])], {"p": a["p"]})


# --- layers ------------------------------------------------------------------------------
@_reg("aten.linear.default")
def _linear(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    inputs = [cx.value(a["input"]), cx.weight(a["weight"], "linear")]
    if a["bias"] is not None:
        inputs.append(cx.value(a["bias"]))
    return cx.emit("linear", inputs, {"bias": a["bias"] is not None})


def _same_padding(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, ...]:
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)


def _conv_attrs(a: dict[str, Any], weight: Any, transposed: bool = False) -> dict[str, Any]:
    n = rank_of(weight) - 2
    stride = _ntuple(a["stride"], n)
    dilation = _ntuple(a["dilation"], n)
    pad = a["padding"]
    if isinstance(pad, str):
        kernel = shape_of(weight)[2:]
        padding = (0,) * (2 * n) if pad == "valid" else _same_padding(kernel, dilation)
    else:
        padding = _ntuple(pad, n) * 2
    attrs = {"stride": stride, "padding": padding, "dilation": dilation,
             "groups": int(a["groups"]), "bias": a["bias"] is not None}
    if transposed:
        attrs["output_padding"] = _ntuple(a["output_padding"], n)
    return attrs


def _conv_inputs(cx: Any, a: dict[str, Any]) -> list[Any]:
    inputs = [cx.value(a["input"]), cx.value(a["weight"])]
    if a["bias"] is not None:
        inputs.append(cx.value(a["bias"]))
    return inputs


@_reg("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default",
      "aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding")
def _conv(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    return cx.emit("conv", _conv_inputs(cx, a), _conv_attrs(a, a["weight"]))


@_reg("aten.conv_transpose1d.default", "aten.conv_transpose2d.input",
      "aten.conv_transpose3d.input")
def _conv_transpose(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    return cx.emit("conv_transpose", _conv_inputs(cx, a), _conv_attrs(a, a["weight"], True))


@_reg("aten.convolution.default", "aten._convolution.default")
def _convolution(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    op = "conv_transpose" if a["transposed"] else "conv"
    return cx.emit(op, _conv_inputs(cx, a), _conv_attrs(a, a["weight"], a["transposed"]))


@_reg("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default",
      "aten.native_batch_norm.default", "aten._native_batch_norm_legit_functional.default")
def _batch_norm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    if a.get("training"):
        raise TraceError(f"{cx._at()}batch norm runs in training mode; call model.eval() or "
                         "keep running statistics (track_running_stats=True)")
    if a["running_mean"] is None:
        raise TraceError(f"{cx._at()}batch norm has no running statistics; "
                         "specgraph compares models in inference")
    inputs = [cx.value(a["input"]), cx.value(a["running_mean"]), cx.value(a["running_var"])]
    for key in ("weight", "bias"):
        if a[key] is not None:
            inputs.append(cx.value(a[key]))
    attrs = {"eps": a["eps"], "momentum": a["momentum"] if a["momentum"] is not None else 0.1,
             "scale": a["weight"] is not None, "bias": a["bias"] is not None}
    x_meta = cx.meta(a["input"])[0]
    out = cx.emit("batch_norm", inputs, attrs, out=x_meta)
    if "legit" in str(node.target) or "native" in str(node.target):
        return (out,) + tuple(out for _ in cx.meta(node)[1:])
    return out


def _norm_inputs(cx: Any, a: dict[str, Any]) -> tuple[list[Any], dict[str, bool]]:
    inputs = [cx.value(a["input"])]
    flags = {"scale": a["weight"] is not None, "bias": a.get("bias") is not None}
    if flags["scale"]:
        inputs.append(cx.value(a["weight"]))
    if flags["bias"]:
        inputs.append(cx.value(a["bias"]))
    return inputs, flags


@_reg("aten.layer_norm.default")
def _layer_norm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    inputs, flags = _norm_inputs(cx, a)
    axis = rank_of(a["input"]) - len(a["normalized_shape"])
    return cx.emit("layer_norm", inputs, {"axis": axis, "eps": a["eps"], **flags})


@_reg("aten.group_norm.default")
def _group_norm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    inputs, flags = _norm_inputs(cx, a)
    return cx.emit("group_norm", inputs, {"num_groups": a["num_groups"], "eps": a["eps"], **flags})


@_reg("aten.instance_norm.default")
def _instance_norm(cx: Any, node: Any) -> Any:
    """``nn.InstanceNorm*d`` normalizing by the input's own statistics: a group norm with a
    group per channel (running statistics in eval mode stay opaque)."""
    a = cx.bind(node)
    if not a["use_input_stats"]:
        return cx.opaque(node)
    inputs, flags = _norm_inputs(cx, a)
    return cx.emit("group_norm", inputs, {"num_groups": shape_of(a["input"])[1],
                                          "eps": a["eps"], **flags})


@_reg("aten.rms_norm.default")
def _rms_norm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    a["bias"] = None
    inputs, flags = _norm_inputs(cx, a)
    eps = a["eps"]
    if eps is None:
        eps = float(torch.finfo(a["input"].meta["val"].dtype).eps)
    axis = rank_of(a["input"]) - len(a["normalized_shape"])
    return cx.emit("rms_norm", inputs, {"axis": axis, "eps": eps, "scale": flags["scale"]})


@_reg("aten._weight_norm.default")
def _weight_norm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    rank = rank_of(a["v"])
    dim = a.get("dim", 0)
    axes = tuple(range(rank)) if dim == -1 else tuple(d for d in range(rank) if d != dim % rank)
    return cx.emit("weight_norm", [cx.value(a["v"]), cx.value(a["g"])], {"axes": axes})


def _through_detach(arg: Any) -> Any:
    """The FX node ``arg`` aliases through ``detach``es (the tensor itself)."""
    while hasattr(arg, "target") and str(arg.target) in ("aten.detach.default",
                                                          "aten.alias.default") and arg.args:
        arg = arg.args[0]
    return arg


@_reg("aten.embedding_renorm_.default")
def _embedding_renorm(cx: Any, node: Any) -> Any:
    """``nn.Embedding(max_norm=...)`` renormalizes the rows it is about to look up, in
    place, on a detached alias of its weight; the lookup after it reads the renormed rows.
    The lookup of those indices in that weight gets ``max_norm`` (``_embedding``)."""
    a = cx.bind(node)
    weight, indices = _through_detach(a["self"]), a["indices"]
    cx.renormed[(getattr(weight, "name", None), getattr(indices, "name", None))] = (
        float(a["max_norm"]), float(a["norm_type"]))
    return cx.value(a["self"])


@_reg("aten.embedding.default")
def _embedding(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    pad = a["padding_idx"]
    attrs: dict[str, Any] = {"padding_idx": None if pad is None or pad < 0 else pad,
                             "scale_grad_by_freq": bool(a["scale_grad_by_freq"])}
    key = (getattr(_through_detach(a["weight"]), "name", None),
           getattr(a["indices"], "name", None))
    renorm = cx.renormed.get(key)
    if renorm is not None:
        attrs["max_norm"], attrs["norm_type"] = renorm
    return cx.emit("embedding", [cx.value(a["indices"]), cx.value(a["weight"])], attrs)


def _pool_attrs(a: dict[str, Any], n: int) -> dict[str, Any]:
    kernel = _ntuple(a["kernel_size"], n)
    stride = _ntuple(a["stride"], n) or kernel
    attrs = {"kernel": kernel, "stride": stride, "padding": _ntuple(a["padding"], n) * 2,
             "ceil_mode": bool(a["ceil_mode"])}
    attrs["dilation"] = _ntuple(a.get("dilation", 1), n)
    return attrs


@_reg("aten.max_pool1d.default", "aten.max_pool2d.default", "aten.max_pool3d.default",
      "aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def _max_pool(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    n = rank_of(a["self"]) - 2
    out = cx.emit("max_pool", [cx.value(a["self"])], _pool_attrs(a, n), out=cx.meta(node)[0])
    if "with_indices" in str(node.target):
        return (out, cx.opaque_output(node, 1))
    return out


@_reg("aten.avg_pool1d.default", "aten.avg_pool2d.default", "aten.avg_pool3d.default")
def _avg_pool(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    n = rank_of(a["self"]) - 2
    attrs = _pool_attrs(a, n)
    attrs["count_include_pad"] = bool(a["count_include_pad"])
    attrs["divisor"] = a.get("divisor_override")
    return cx.emit("avg_pool", [cx.value(a["self"])], attrs)


@_reg("aten.adaptive_avg_pool1d.default", "aten.adaptive_avg_pool2d.default",
      "aten.adaptive_avg_pool3d.default", "aten._adaptive_avg_pool2d.default")
def _adaptive_avg(cx: Any, node: Any) -> Any:
    shape = cx.meta(node)[0][0]
    n = rank_of(node.args[0]) - 2
    return cx.emit("adaptive_avg_pool", [cx.value(node.args[0])], {"output_size": shape[-n:]})


@_reg("aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default",
      "aten.adaptive_max_pool3d.default")
def _adaptive_max(cx: Any, node: Any) -> Any:
    metas = cx.meta(node)
    n = rank_of(node.args[0]) - 2
    out = cx.emit("adaptive_max_pool", [cx.value(node.args[0])],
                  {"output_size": metas[0][0][-n:]}, out=metas[0])
    return (out, cx.opaque_output(node, 1))


@_reg("aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int",
      "aten._log_softmax.default")
def _softmax(cx: Any, node: Any) -> Any:
    x = node.args[0]
    op = "log_softmax" if "log_softmax" in str(node.target) else "softmax"
    return cx.emit(op, [cx.value(x)], {"axis": wrap_dim(node.args[1], rank_of(x))})


@_reg("aten.scaled_dot_product_attention.default")
def _sdpa(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    scale = a["scale"]
    if scale is None:
        scale = 1.0 / math.sqrt(shape_of(a["query"])[-1])
    inputs = [cx.value(a["query"]), cx.value(a["key"]), cx.value(a["value"])]
    if a["attn_mask"] is not None:
        inputs.append(cx.value(a["attn_mask"]))
    return cx.emit("attention", inputs, {"scale": scale, "causal": bool(a["is_causal"]),
                                         "has_mask": a["attn_mask"] is not None})


# --- matmul and reductions ---------------------------------------------------------------
@_reg("aten.matmul.default", "aten.mm.default", "aten.bmm.default")
def _matmul(cx: Any, node: Any) -> Any:
    return cx.emit("matmul", [cx.value(node.args[0]), cx.value(node.args[1])])


@_reg("aten.outer.default", "aten.ger.default")
def _outer(cx: Any, node: Any) -> Any:
    """``torch.outer(a, b)``: a column times a row, the product of an [n, 1] and a [1, m]
    matrix, as ``einsum('i,j->ij')`` lowers in TF and JAX."""
    a, b = cx.value(node.args[0]), cx.value(node.args[1])
    (n,), (m,) = a.shape, b.shape
    column = cx.emit("reshape", [a], {"shape": (n, 1)}, out=((n, 1), a.dtype))
    row = cx.emit("reshape", [b], {"shape": (1, m)}, out=((1, m), b.dtype))
    return cx.emit("matmul", [column, row])


@_reg("aten.addmm.default", "aten.baddbmm.default")
def _addmm(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    shape, dtype = cx.meta(node)[0]
    prod = cx.emit("matmul", [cx.value(node.args[1]), cx.value(node.args[2])])
    if a.get("alpha", 1) != 1:
        prod = cx.emit("mul", [prod, cx.operand(a["alpha"], dtype)])
    base = cx.value(a["self"])
    if a.get("beta", 1) != 1:
        base = cx.emit("mul", [base, cx.operand(a["beta"], dtype)], out=(base.shape, dtype))
    return cx.emit("add", [base, prod])


def _steps(before: tuple[int, ...], after: tuple[int, ...], scales: Any) -> list[float]:
    """Each spatial axis's input distance between two output positions, as PyTorch's
    kernels take it: the inverse of the scale factor given, else in/out."""
    return [1.0 / float(scales[k]) if scales is not None and float(scales[k]) > 0
            else before[axis] / after[axis] for k, axis in enumerate(range(2, len(before)))]


@_reg("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec",
      "aten.upsample_nearest3d.vec", "aten._upsample_nearest_exact1d.vec",
      "aten._upsample_nearest_exact2d.vec", "aten._upsample_nearest_exact3d.vec")
def _upsample_nearest(cx: Any, node: Any) -> Any:
    """``interpolate(mode='nearest')`` (``floor(o·s)``) and ``'nearest-exact'``
    (``floor((o + ½)·s)``), ``s`` the inverse of the scale factor given, else in/out: a
    gather per spatial axis at the positions PyTorch's kernel reads
    (``frontends._common.resize``)."""
    a = cx.bind(node)
    x, scales = a["input"], a.get("scale_factors")
    (shape, _), = cx.meta(node)
    before = tuple(x.meta["val"].shape)
    exact = "exact" in str(node.target)
    positions = []
    for axis, step in zip(range(2, len(before)), _steps(before, shape, scales)):
        n_in, n_out = int(before[axis]), int(shape[axis])
        if exact:
            at = nearest_positions(n_in, n_out, "tf_half_pixel_for_nn", "floor", step)
        elif n_out in (n_in, 2 * n_in):  # the kernel's own cases, whatever the scale
            at = np.arange(n_out) // (n_out // n_in)
        else:
            at = nearest_positions(n_in, n_out, "asymmetric", "floor", step)
        positions.append((axis, at))
    return emit_gathers(cx, cx.value(x), positions)


@_reg("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec",
      "aten.upsample_trilinear3d.vec", "aten.upsample_bicubic2d.vec",
      "aten._upsample_bilinear2d_aa.vec", "aten._upsample_bicubic2d_aa.vec")
def _upsample(cx: Any, node: Any) -> Any:
    """``interpolate(mode='bilinear' | 'bicubic' | ...)``: a ``resize`` of the spatial axes,
    half-pixel coordinates unless ``align_corners`` (to a size of 1 too, as the kernel
    computes them: not ONNX's ``pytorch_half_pixel``, which reads position 0), the step the
    inverse of the scale factor given, else in/out; bicubic with Keys' a = -0.75, or -0.5
    antialiased (PyTorch's filters). To the size it has at scale 1 (Data2VecVision and BEiT
    resize their relative position table to the window it was made for), the identity."""
    a = cx.bind(node)
    x, scales = a["input"], a.get("scale_factors")
    (shape, _), = cx.meta(node)
    before = tuple(int(d) for d in x.meta["val"].shape)
    if before == tuple(shape) and (scales is None or all(float(f) == 1.0 for f in scales)):
        return cx.emit("identity", [cx.value(x)])
    target = str(node.target)
    corners = bool(a.get("align_corners", False))
    axes = tuple(range(2, len(before)))
    steps = _steps(before, shape, scales)
    cubic = "bicubic" in target
    antialias = "_aa" in target
    attrs = resize_attrs(before, axes, [shape[a] for a in axes], "cubic" if cubic else "linear",
                         "align_corners" if corners else "half_pixel", steps,
                         cubic_coeff=-0.5 if antialias else -0.75, antialias=antialias)
    if attrs is None:
        return cx.emit("identity", [cx.value(x)])
    return cx.emit("resize", [cx.value(x)], attrs)


@_reg("aten.einsum.default")
def _einsum(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    operands = list(a["tensors"])
    equation = explicit_einsum(a["equation"], [rank_of(t) for t in operands])
    return cx.emit("einsum", [cx.value(t) for t in operands], {"equation": equation})


@_reg("aten.tensordot.default")
def _tensordot(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    x, y = a["self"], a["other"]
    equation = tensordot_equation(rank_of(x), rank_of(y), a["dims_self"], a["dims_other"])
    return cx.emit("einsum", [cx.value(x), cx.value(y)], {"equation": equation})


def _axes(dims: Any, rank: int) -> tuple[int, ...] | None:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return tuple(sorted(wrap_dim(d, rank) for d in dims))


_REDUCE = {"sum": "reduce_sum", "mean": "reduce_mean", "amax": "reduce_max",
           "amin": "reduce_min", "prod": "reduce_prod"}


def _reduction(canonical: str) -> Converter:
    def convert(cx: Any, node: Any) -> Any:
        x = node.args[0]
        rank = rank_of(x)
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        value = cx.value(x)
        dtype = _out_dtype(cx)
        if dtype != value.dtype and canonical in ("reduce_sum", "reduce_mean", "reduce_prod"):
            value = cx.emit("cast", [value], {"dtype": dtype}, out=(value.shape, dtype))
        return cx.emit(canonical, [value], {"axes": _axes(dims, rank), "keepdims": bool(keep)})

    return convert


for _name, _canonical in _REDUCE.items():
    for _overload in ("default", "dim_IntList", "dim", "dim_int"):
        CONVERTERS[f"aten.{_name}.{_overload}"] = _reduction(_canonical)


@_reg("aten.max.dim", "aten.min.dim")
def _max_dim(cx: Any, node: Any) -> Any:
    x = node.args[0]
    dim = wrap_dim(node.args[1], rank_of(x))
    keep = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim", False))
    (vshape, vdtype), (ishape, idtype) = cx.meta(node)[:2]
    is_max = "max" in str(node.target)
    values = cx.emit("reduce_max" if is_max else "reduce_min", [cx.value(x)],
                     {"axes": (dim,), "keepdims": keep}, out=(vshape, vdtype))
    index = cx.emit("argmax" if is_max else "argmin", [cx.value(x)],
                    {"axis": dim, "keepdims": keep}, out=(ishape, idtype))
    return (values, index)


@_reg("aten.max.default", "aten.min.default")
def _max_all(cx: Any, node: Any) -> Any:
    op = "reduce_max" if "max" in str(node.target) else "reduce_min"
    return cx.emit(op, [cx.value(node.args[0])], {"axes": None})


@_reg("aten.max.other", "aten.min.other")
def _max_other(cx: Any, node: Any) -> Any:
    op = "maximum" if "max" in str(node.target) else "minimum"
    return cx.emit(op, [cx.value(node.args[0]), cx.value(node.args[1])])


@_reg("aten.argmax.default", "aten.argmin.default")
def _argmax(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    x = cx.value(a["self"])
    if a["dim"] is None:
        flat = cx.emit("reshape", [x], {"shape": (x.size,)}, out=((x.size,), x.dtype))
        x, dim = flat, 0
    else:
        dim = wrap_dim(a["dim"], x.rank)
    op = "argmax" if "argmax" in str(node.target) else "argmin"
    return cx.emit(op, [x], {"axis": dim, "keepdims": bool(a["keepdim"])})


@_reg("aten.scatter.value", "aten.scatter_.value")
def _scatter_value(cx: Any, node: Any) -> Any:
    """``x.scatter(dim, index, v)`` with one index per row along ``dim`` (GroupViT's hard
    one-hot, ``zeros.scatter_(dim, argmax(keepdim=True), 1.0)``) is
    ``where(index == arange, v, x)``: as TF's ``one_hot`` and JAX's comparison write it.
    Other scatters stay opaque."""
    x, dim, index, value = node.args[:4]
    xv, iv = cx.value(x), cx.value(index)
    dim = wrap_dim(dim, xv.rank)
    if node.kwargs.get("reduce") is not None or iv.rank != xv.rank or \
            iv.shape[dim] != 1 or \
            any(a != b for k, (a, b) in enumerate(zip(iv.shape, xv.shape)) if k != dim):
        return cx.opaque(node)
    line = cx.b.constant(positions(xv.shape[dim], dim, xv.rank, numpy_dtype(iv.dtype)),
                         iv.dtype)
    hit = cx.emit("equal", [iv, line], out=(xv.shape, "bool"))
    return cx.emit("where", [hit, cx.operand(value, xv.dtype), xv])


@_reg("aten.one_hot.default")
def _one_hot(cx: Any, node: Any) -> Any:
    """``F.one_hot(i, n)`` is ``cast(expand(i) == arange(n), int64)``: as JAX's
    ``one_hot`` and TF's ``OneHot`` write it (LongT5's block aggregates)."""
    shape, dtype = cx.meta(node)[0]
    iv = cx.value(node.args[0])
    keyed = tuple(iv.shape) + (1,)
    index = cx.emit("reshape", [iv], {"shape": keyed}, out=(keyed, iv.dtype))
    line = cx.b.constant(positions(shape[-1], len(shape) - 1, len(shape),
                                   numpy_dtype(iv.dtype)), iv.dtype)
    hit = cx.emit("equal", [index, line], out=(tuple(shape), "bool"))
    return cx.emit("cast", [hit], {"dtype": dtype}, out=(tuple(shape), dtype))


@_reg("aten.var.correction", "aten.var.dim", "aten.var.default", "aten.std.correction",
      "aten.std.dim", "aten.std.default")
def _var(cx: Any, node: Any) -> Any:
    a = cx.bind(node)
    x = a["self"]
    correction = a.get("correction")
    if correction is None:
        correction = 1 if a.get("unbiased", True) else 0
    attrs = {"axes": _axes(a.get("dim"), rank_of(x)), "keepdims": bool(a.get("keepdim", False)),
             "correction": int(correction)}
    if "std" in str(node.target):
        var = cx.emit("reduce_var", [cx.value(x)], attrs)
        return cx.emit("sqrt", [var])
    return cx.emit("reduce_var", [cx.value(x)], attrs)


@_reg("aten.linalg_vector_norm.default")
def _vector_norm(cx: Any, node: Any) -> Any:
    """‖x‖_p over ``dim`` written out as the formula (p = 2: √Σx², as
    ``v.pow(2).sum().sqrt()`` traces; 1: Σ|x|; ±inf: max or min |x|; another p > 0:
    (Σ|x|^p)^(1/p))."""
    a = cx.bind(node)
    shape, dtype = cx.meta(node)[0]
    x = cx.value(a["self"])
    if x.dtype != dtype:
        x = cx.emit("cast", [x], {"dtype": dtype}, out=(x.shape, dtype))
    p = float(a["ord"])
    attrs = {"axes": _axes(a["dim"], x.rank), "keepdims": bool(a["keepdim"])}
    if abs(p) == math.inf:
        return cx.emit("reduce_max" if p > 0 else "reduce_min",
                       [cx.emit("abs", [x], out=(x.shape, dtype))], attrs)
    if not p > 0:
        return cx.opaque(node)  # p = 0 counts nonzeros; p < 0 is no norm
    if p == 2:
        terms = cx.emit("pow", [x, cx.operand(2.0, dtype)], out=(x.shape, dtype))
        return cx.emit("sqrt", [cx.emit("reduce_sum", [terms], attrs, out=(shape, dtype))])
    terms = cx.emit("abs", [x], out=(x.shape, dtype))
    if p == 1:
        return cx.emit("reduce_sum", [terms], attrs)
    terms = cx.emit("pow", [terms, cx.operand(p, dtype)], out=(x.shape, dtype))
    total = cx.emit("reduce_sum", [terms], attrs, out=(shape, dtype))
    return cx.emit("pow", [total, cx.operand(1.0 / p, dtype)])


@_reg("aten.cumsum.default")
def _cumsum(cx: Any, node: Any) -> Any:
    x = node.args[0]
    return cx.emit("cumsum", [cx.value(x)], {"axis": wrap_dim(node.args[1], rank_of(x))})


@_reg("aten.square.default")
def _square(cx: Any, node: Any) -> Any:
    """x², as TF's Square and JAX's square are written: x·x."""
    x = cx.value(node.args[0])
    return cx.emit("mul", [x, x])


@_reg("aten.addcmul.default", "aten.addcmul_.default")
def _addcmul(cx: Any, node: Any) -> Any:
    """self + value·t₁·t₂ (optimizers' and ConvBERT's fused product-and-add)."""
    a = cx.bind(node)
    shape, dtype = cx.meta(node)[0]
    t1, t2 = cx.value(a["tensor1"]), cx.value(a["tensor2"])
    prod = cx.emit("mul", [t1, t2], out=(np.broadcast_shapes(t1.shape, t2.shape), dtype))
    if a["value"] != 1:
        prod = cx.emit("mul", [prod, cx.operand(a["value"], dtype)], out=(prod.shape, dtype))
    return cx.emit("add", [cx.value(a["self"]), prod])


@_reg("aten.lerp.Scalar", "aten.lerp.Tensor", "aten.lerp_.Scalar", "aten.lerp_.Tensor")
def _lerp(cx: Any, node: Any) -> Any:
    """self + weight·(end − self), as the formula reads."""
    a = cx.bind(node)
    dtype = cx.meta(node)[0][1]
    start, end = cx.value(a["self"]), cx.value(a["end"])
    weight = cx.operand(a["weight"], dtype)
    gap = cx.emit("sub", [end, start], out=(np.broadcast_shapes(start.shape, end.shape), dtype))
    step = cx.emit("mul", [weight, gap],
                   out=(np.broadcast_shapes(weight.shape, gap.shape), dtype))
    return cx.emit("add", [start, step])


# the same ops under other names: torch.multiply, torch.subtract, torch.greater, ...
_ALIASES = {"multiply": "mul", "multiply_": "mul_", "subtract": "sub", "subtract_": "sub_",
            "divide": "div", "divide_": "div_", "true_divide": "div", "true_divide_": "div_",
            "absolute": "abs", "negative": "neg", "greater": "gt", "greater_equal": "ge",
            "less": "lt", "less_equal": "le", "not_equal": "ne"}
for _alias, _name in _ALIASES.items():
    for _key in [k for k in CONVERTERS if k.startswith(f"aten.{_name}.")]:
        CONVERTERS.setdefault(f"aten.{_alias}.{_key[len(_name) + 6:]}", CONVERTERS[_key])


@_reg("aten.argsort.default", "aten.argsort.stable", "aten.sort.default", "aten.sort.stable")
def _argsort(cx: Any, node: Any) -> Any:
    """``argsort`` and ``sort`` along one axis: the canonical ``argsort`` (stable: PyTorch's
    unstable sort orders equal values as it likes, any order of them being a sort); a
    sort's values are the input gathered at those indices, as ``torch.gather`` is."""
    a = cx.bind(node)
    x, dim, descending = a["self"], a.get("dim", -1), bool(a.get("descending", False))
    value = cx.value(x)
    axis = wrap_dim(dim, value.rank)
    shape = tuple(value.shape)
    index = cx.emit("argsort", [value], {"axis": axis, "descending": descending},
                    out=(shape, "int64"))
    if "argsort" in str(node.target):
        return index
    values = emit_along_gather(cx, value, index, axis, shape,
                               lambda a: cx.b.constant(a, str(a.dtype)))
    return (values, index)


@_reg("aten.topk.default")
def _topk(cx: Any, node: Any) -> Any:
    """``torch.topk`` sorted: the canonical stable ``argsort`` (descending for the largest)
    cut to the first k, and the values gathered at those indices (MoE routers, TF's and
    JAX's top_k); unsorted, opaque (PyTorch is free to give them in any order)."""
    a = cx.bind(node)
    if not a.get("sorted", True):
        return cx.opaque(node)
    value = cx.value(a["self"])
    return emit_top_k(cx, value, wrap_dim(a.get("dim", -1), value.rank), int(a["k"]),
                      bool(a["largest"]), lambda arr: cx.b.constant(arr, str(arr.dtype)))


@_reg("aten.floor_divide.default", "aten.floor_divide.Scalar", "aten.floor_divide_.Tensor",
      "aten.floor_divide_.Scalar")
def _floor_divide(cx: Any, node: Any) -> Any:
    """``a // b`` (``torch.floor_divide``): division rounded toward minus infinity, as
    ``div(rounding_mode="floor")`` and TF's ``FloorDiv`` compute it (Speech2Text's
    subsampled lengths)."""
    a, b = node.args[0], node.args[1]
    dtype = _operand_dtype(cx, node, a, b)
    return cx.emit("div", [cx.operand(a, dtype), cx.operand(b, dtype)], {"rounding": "floor"})


@_reg("aten.pixel_shuffle.default", "aten.pixel_unshuffle.default")
def _pixel_shuffle(cx: Any, node: Any) -> Any:
    """``nn.PixelShuffle(r)``: ``[N, C·r·r, H, W]`` to ``[N, C, H·r, W·r]``, each channel's
    r·r block (channel slowest) spread over an r×r patch: reshape, transpose, reshape, as
    a port writes it by hand (``nn.PixelUnshuffle`` the inverse)."""
    x = cx.value(node.args[0])
    r = int(node.args[1])
    if x.rank != 4:
        return cx.opaque(node)
    n, c, h, w = x.shape
    if "unshuffle" in str(node.target):
        split = (n, c, h // r, r, w // r, r)
        perm, shape = (0, 1, 3, 5, 2, 4), (n, c * r * r, h // r, w // r)
    else:
        split = (n, c // (r * r), r, r, h, w)
        perm, shape = (0, 1, 4, 2, 5, 3), (n, c // (r * r), h * r, w * r)
    y = cx.emit("reshape", [x], {"shape": split}, out=(split, x.dtype))
    moved = tuple(split[p] for p in perm)
    y = cx.emit("transpose", [y], {"perm": perm}, out=(moved, x.dtype))
    return cx.emit("reshape", [y], {"shape": shape}, out=(shape, x.dtype))
