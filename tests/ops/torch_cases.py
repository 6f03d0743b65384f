"""The PyTorch expression of every op case, by case id: what ``test_reference_vs_torch``
holds each op's NumPy reference against.

``TORCH[case_id]`` gets the case's inputs as float64/int64/bool tensors, in order. The torch
side spells each variant the PyTorch way (negative dims, ``F.pad`` order, symmetric
padding...), so the table also documents how the canonical conventions of
``specgraph/ops/layers.py`` map onto PyTorch. Ops whose every case is one PyTorch function are
listed once (``_SAME_FOR_EVERY_CASE``); convolutions and pools are spelled from the case's
attributes (``_FROM_ATTRS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from tests.ops.case_types import INF
from tests.ops.cases import CASES

__all__ = ["TORCH", "tpads"]

TORCH: dict[str, Callable[..., Any]] = {}


def expr(case_id: str, fn: Callable[..., Any]) -> None:
    assert case_id not in TORCH, f"two PyTorch expressions for {case_id}"
    TORCH[case_id] = fn


def tpads(pads):
    """ONNX-order pads (all begins, then all ends) as ``F.pad``'s (last axis first)."""
    n = len(pads) // 2
    return tuple(p for i in reversed(range(n)) for p in (pads[i], pads[n + i]))


_SAME_FOR_EVERY_CASE: dict[str, Callable[..., Any]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "pow": torch.pow,
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "abs": torch.abs, "erf": torch.erf,
    "erfc": torch.erfc, "sin": torch.sin, "cos": torch.cos, "floor": torch.floor,
    "ceil": torch.ceil, "sign": torch.sign, "identity": lambda x: x.clone(),
    "logical_not": torch.logical_not,
    "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le,
    "greater": torch.gt, "greater_equal": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "where": torch.where,
    "prelu": lambda x, s: F.prelu(x, s.reshape(-1)),
    "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu,
    "hardswish": F.hardswish, "mish": F.mish, "matmul": torch.matmul,
}

# -- elementwise -----------------------------------------------------------------------------

expr("div-true", torch.div)
for _id, _mode in [("floor", "floor"), ("trunc", "trunc"), ("int_floor", "floor"),
                   ("int_trunc", "trunc"), ("floor_is_python_floordiv", "floor"),
                   ("int_beyond_float53", "trunc"), ("int_floor_beyond_float53", "floor")]:
    expr(f"div-{_id}", lambda a, b, m=_mode: torch.div(a, b, rounding_mode=m))
# torch divides integers into its default float dtype; the reference computes in float64
expr("div-int_true", lambda a, b: torch.div(a.double(), b))

expr("clip-both", lambda x: torch.clamp(x, -0.5, 1.0))
expr("clip-min_only", lambda x: torch.clamp(x, min=0.25))
expr("clip-max_only", lambda x: torch.clamp(x, max=-0.1))
expr("clip-nan_passes", lambda x: torch.clamp(x, -1.0, 1.0))
expr("clip-relu6", F.relu6)

expr("cast-float_to_int64_truncates", lambda x: x.to(torch.int64))
expr("cast-float_to_int32", lambda x: x.to(torch.int32))
expr("cast-int_to_int8", lambda x: x.to(torch.int8))
expr("cast-float_to_uint8", lambda x: x.to(torch.uint8))
expr("cast-float_to_bool", lambda x: x.to(torch.bool))
expr("cast-int_to_float64", lambda x: x.to(torch.float64))
expr("cast-bool_to_int64", lambda x: x.to(torch.int64))
expr("cast-float_to_float32", lambda x: x.to(torch.float32).double())

# -- activations -----------------------------------------------------------------------------

expr("gelu-erf", F.gelu)
expr("gelu-erf_explicit", F.gelu)
expr("gelu-tanh", lambda x: F.gelu(x, approximate="tanh"))
expr("softplus-default", F.softplus)
expr("softplus-beta_threshold", lambda x: F.softplus(x, beta=2.0, threshold=3.0))
expr("softplus-small_beta", lambda x: F.softplus(x, beta=0.5))
expr("leaky_relu-default", F.leaky_relu)
expr("leaky_relu-alpha", lambda x: F.leaky_relu(x, 0.2))
expr("elu-default", F.elu)
expr("elu-alpha", lambda x: F.elu(x, alpha=0.5))
expr("hardsigmoid-torch_default", F.hardsigmoid)
expr("hardsigmoid-onnx_alpha", lambda x: torch.clamp(0.2 * x + 0.5, 0.0, 1.0))
expr("dropout-inference", lambda x: F.dropout(x, 0.3, training=False))

for _name, _fn in {"softmax": torch.softmax, "log_softmax": torch.log_softmax}.items():
    expr(f"{_name}-last_axis", lambda x, f=_fn: f(x, dim=-1))
    expr(f"{_name}-first_axis", lambda x, f=_fn: f(x, dim=-3))
    expr(f"{_name}-middle_size1", lambda x, f=_fn: f(x, dim=-2))
    expr(f"{_name}-large_values", lambda x, f=_fn: f(x, dim=1))
    expr(f"{_name}-vector", lambda x, f=_fn: f(x, dim=-1))

# -- reductions ------------------------------------------------------------------------------


def _torch_prod(x, dim=None, keepdim=False):
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
    for d in sorted((d % x.ndim for d in dims), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


for _name, _fn in {"reduce_sum": torch.sum, "reduce_mean": torch.mean,
                   "reduce_max": torch.amax, "reduce_min": torch.amin,
                   "reduce_prod": _torch_prod}.items():
    expr(f"{_name}-all", lambda x, f=_fn: f(x, dim=(0, 1)))
    expr(f"{_name}-all_keepdims", lambda x, f=_fn: f(x, dim=(0, 1, 2), keepdim=True))
    expr(f"{_name}-last_axis", lambda x, f=_fn: f(x, dim=-1))
    expr(f"{_name}-two_axes_keepdims", lambda x, f=_fn: f(x, dim=(0, -1), keepdim=True))
    expr(f"{_name}-size1_axis", lambda x, f=_fn: f(x, dim=1))
expr("reduce_max-nan_propagates", lambda x: torch.amax(x, dim=1))
expr("argmax-nan_wins", lambda x: torch.argmax(x, dim=1))
expr("reduce_sum-int64", lambda x: torch.sum(x, 0))

expr("reduce_var-unbiased_all", lambda x: torch.var(x))
expr("reduce_var-biased_all_keepdims",
     lambda x: torch.var(x, dim=(0, 1, 2), correction=0, keepdim=True))
expr("reduce_var-unbiased_two_axes", lambda x: torch.var(x, dim=(0, -1), correction=1))
expr("reduce_var-biased_last_keepdims",
     lambda x: torch.var(x, dim=-1, correction=0, keepdim=True))

for _name, _fn in {"argmax": torch.argmax, "argmin": torch.argmin}.items():
    expr(f"{_name}-axis0", lambda x, f=_fn: f(x, dim=0))
    expr(f"{_name}-last_keepdims", lambda x, f=_fn: f(x, dim=-1, keepdim=True))
    expr(f"{_name}-size1_axis", lambda x, f=_fn: f(x, dim=-1))

expr("argsort-axis0", lambda x: torch.argsort(x, dim=0))
expr("argsort-last_descending", lambda x: torch.argsort(x, dim=-1, descending=True))
expr("argsort-int64_ties", lambda x: torch.argsort(x, dim=1, stable=True))
expr("argsort-int64_ties_descending",
     lambda x: torch.argsort(x, dim=1, descending=True, stable=True))

expr("cumsum-axis0", lambda x: torch.cumsum(x, 0))
expr("cumsum-last_axis", lambda x: torch.cumsum(x, -1))
expr("cumsum-int64", lambda x: torch.cumsum(x, 0))

# -- shape, data movement, sources -----------------------------------------------------------

expr("einsum-attention_scores", lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k))
expr("einsum-dense_to_heads", lambda x, w: torch.einsum("abc,cde->abde", x, w))

expr("reshape-merge", lambda x: x.reshape(4, 6))
expr("reshape-flatten", lambda x: x.reshape(-1))
expr("reshape-size1_dims", lambda x: x.reshape(1, 2, 1, 3))
expr("reshape-to_scalar", lambda x: x.reshape(()))
expr("transpose-rotate", lambda x: x.permute(2, 0, 1))
expr("transpose-matrix", lambda x: x.T)
expr("concat-three_middle", lambda *xs: torch.cat(xs, dim=-2))
expr("concat-one_input", lambda x: torch.cat([x], 0))
expr("split-rows", lambda x: torch.split(x, [2, 3], 0))
expr("split-uneven_last", lambda x: torch.split(x, [1, 1, 2], -1))
expr("split-one_piece", lambda x: torch.split(x, [4]))

expr("slice-steps", lambda x: x[1::2, 0:5:3])
expr("slice-negative_start", lambda x: x[:, -3:])
expr("slice-resolved_negative_start", lambda x: x[:, -3:-1])
expr("slice-negative_end_clamped", lambda x: x[:-1, :, 1::2])
expr("slice-negative_step", lambda x: torch.flip(x, [0])[1:5:2])
expr("slice-empty", lambda x: x[5:2])
expr("slice-reverse_all", lambda x: torch.flip(x, [0]))

expr("gather-negative_indices", lambda x, i: x[:, i])
expr("gather-first_axis", lambda x, i: x[i])
expr("gather-scalar_index_last", lambda x, i: x[:, :, i])
expr("squeeze-two_axes", lambda x: torch.squeeze(x, (0, -2)))
expr("squeeze-last", lambda x: x.squeeze(-1))
expr("unsqueeze-front_and_back", lambda x: x.unsqueeze(0).unsqueeze(-1))
expr("unsqueeze-scalar", lambda x: x.unsqueeze(0))
expr("expand-new_leading", lambda x: x.expand(2, 3, 4))
expr("expand-size1", lambda x: x.expand(5))
expr("tile-matrix", lambda x: torch.tile(x, (2, 1)))
expr("tile-more_repeats_than_rank", lambda x: torch.tile(x, (2, 2)))
expr("flip-two_axes", lambda x: torch.flip(x, (0, -1)))
expr("flip-one_axis", lambda x: torch.flip(x, (0,)))

expr("pad-constant_value", lambda x: F.pad(x, tpads([1, 0, 2, 1]), value=1.5))
expr("pad-negative_crops", lambda x: F.pad(x, tpads([-1, 2, 0, -2])))
expr("pad-reflect", lambda x: F.pad(x, tpads([0, 1, 2, 0, 2, 1])[:4], mode="reflect"))
expr("pad-edge", lambda x: F.pad(x, tpads([0, 3, 0, 0, 1, 2])[:4], mode="replicate"))
expr("pad-reflect_with_crop", lambda x: F.pad(x[:, 1:, :-1], (2, 0, 0, 1), mode="reflect"))

expr("trilu-upper", torch.triu)
expr("trilu-lower_below", lambda x: torch.tril(x, -1))
expr("trilu-batched_upper_k2", lambda x: torch.triu(x, 2))
expr("trilu-tall_lower_k1", lambda x: torch.tril(x, 1))

expr("full-float", lambda: torch.full((2, 3), 1.5, dtype=torch.float64))
expr("full-int", lambda: torch.full((4,), -3, dtype=torch.int64))
expr("full-bool_scalar", lambda: torch.full((), True))
expr("full-empty", lambda: torch.full((0, 3), 2.0, dtype=torch.float64))
expr("arange-int", lambda: torch.arange(0, 5, dtype=torch.int64))
expr("arange-int_negative_delta", lambda: torch.arange(5, -3, -2, dtype=torch.int64))
expr("arange-float", lambda: torch.arange(0.5, 3.2, 0.3, dtype=torch.float64))

# -- layers ----------------------------------------------------------------------------------

expr("linear-bias", lambda x, w, b: F.linear(x, w.T, b))
expr("linear-batched_no_bias", lambda x, w: F.linear(x, w.T))
expr("linear-size1", lambda x, w, b: F.linear(x, w.T, b))

expr("embedding-padding_idx", lambda i, w: F.embedding(i, w, padding_idx=1))
expr("embedding-vector", lambda i, w: F.embedding(i, w))
expr("embedding-max_norm", lambda i, w: F.embedding(i, w.detach().clone(), max_norm=0.5))
expr("embedding-max_norm_l1",
     lambda i, w: F.embedding(i, w.detach().clone(), max_norm=1.0, norm_type=1.0))

expr("batch_norm-affine",
     lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3))
expr("batch_norm-no_affine_2d_input",
     lambda x, m, v: F.batch_norm(x, m, v, training=False, eps=1e-5))
expr("batch_norm-bias_only", lambda x, m, v, b: F.batch_norm(x, m, v, None, b, training=False))
expr("batch_norm-scale_only",
     lambda x, m, v, w: F.batch_norm(x, m, v, w, None, training=False))

expr("layer_norm-last_axis", lambda x, w, b: F.layer_norm(x, (6,), w, b))
expr("layer_norm-two_axes_eps", lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-2))
expr("layer_norm-no_affine", lambda x: F.layer_norm(x, (5,)))
expr("layer_norm-scale_only", lambda x, w: F.layer_norm(x, (5,), w))
expr("layer_norm-bias_only_size1", lambda x, b: F.layer_norm(x, (1,), None, b))

expr("group_norm-groups3", lambda x, w, b: F.group_norm(x, 3, w, b))
expr("group_norm-one_group_eps", lambda x, w, b: F.group_norm(x, 1, w, b, eps=1e-3))
expr("group_norm-per_channel_no_affine", lambda x: F.group_norm(x, 4))

expr("rms_norm-last_axis", lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6))
expr("rms_norm-two_axes", lambda x, w: F.rms_norm(x, (3, 4), w, eps=1e-3))
expr("rms_norm-no_scale", lambda x: F.rms_norm(x, (5,), eps=1e-5))

expr("weight_norm-conv1d_dim2", lambda v, g: torch._weight_norm(v, g, 2))
expr("weight_norm-dim0", lambda v, g: torch._weight_norm(v, g, 0))



def _rope(theta, dim, layout, axis, factor=1.0):
    """HF's Llama (rotate_half, the angles repeated as two halves) and GPT-J (every two, the
    angles repeated per pair) in float64, the features past ``dim`` passed through; with a
    linear scaling ``factor``, the positions divided by it (as HF's ``rope_scaling``)."""

    def fn(x):
        inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        positions = torch.arange(x.shape[axis], dtype=torch.float64) / factor
        freqs = torch.outer(positions, inv_freq)
        shape = [1] * x.ndim
        shape[axis], shape[-1] = x.shape[axis], dim
        rot, rest = x[..., :dim], x[..., dim:]
        if layout == "half":
            emb = torch.cat((freqs, freqs), dim=-1)
            x1, x2 = rot[..., : dim // 2], rot[..., dim // 2:]
            turned = torch.cat((-x2, x1), dim=-1)
        else:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
            turned = torch.stack((-rot[..., 1::2], rot[..., ::2]), dim=-1).flatten(-2)
        y = rot * emb.cos().reshape(shape) + turned * emb.sin().reshape(shape)
        return torch.cat((y, rest), dim=-1)

    return fn


expr("rotary_embedding-half_heads_first", _rope(10000.0, 8, "half", 2))
expr("rotary_embedding-half_positions_first", _rope(500000.0, 4, "half", 1))
expr("rotary_embedding-interleaved", _rope(10000.0, 6, "interleaved", 1))
expr("rotary_embedding-partial_half", _rope(100.0, 4, "half", 2))
expr("rotary_embedding-partial_interleaved", _rope(10000.0, 4, "interleaved", 0))
expr("rotary_embedding-linear_scaling", _rope(10000.0, 8, "half", 2, factor=2.0))

def _sdpa(scale, **kw):
    return lambda q, k, v, *m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m[0] if m else None, scale=scale, **kw)


def _causal_and(mask_fn):
    """Torch refuses attn_mask together with is_causal: fold the causal mask into it."""

    def fn(q, k, v, mask):
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(mask, keep), scale=0.7)

    return fn


expr("attention-plain", _sdpa(0.5))
expr("attention-causal_square", _sdpa(0.5, is_causal=True))
expr("attention-causal_short_query", _sdpa(1.0, is_causal=True))
expr("attention-bool_mask_broadcast", _sdpa(0.5))
expr("attention-float_mask", _sdpa(0.25))
expr("attention-grouped_kv_heads", _sdpa(8**-0.5, enable_gqa=True))
expr("attention-grouped_kv_causal", _sdpa(0.5, is_causal=True, enable_gqa=True))
expr("attention-causal_and_bool_mask", _causal_and(lambda m, keep: m & keep))
expr("attention-causal_and_float_mask", _causal_and(lambda m, keep: m.masked_fill(~keep, -INF)))
expr("attention-no_head_axis", _sdpa(0.5))
expr("attention-bool_mask_empty_row", _sdpa(0.5))
expr("attention-causal_and_bool_mask_empty_row", _causal_and(lambda m, keep: m & keep))
expr("attention-float_mask_blocked_row",  # SDPA zeros a blocked row: written out, it is NaN
     lambda q, k, v, m: torch.softmax(q @ k.transpose(-1, -2) * 0.5 + m, dim=-1) @ v)

# -- convolutions and pools, spelled from the case's attributes ------------------------------

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_ADAPTIVE = {"adaptive_avg_pool": (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d,
                                   F.adaptive_avg_pool3d),
             "adaptive_max_pool": (F.adaptive_max_pool1d, F.adaptive_max_pool2d,
                                   F.adaptive_max_pool3d)}


def _conv(attrs):
    """Torch pads explicitly with F.pad (asymmetric padding), then convolves unpadded."""
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    conv = _CONV[len(stride)]

    def expected(x, w, b=None):
        return conv(F.pad(x, tpads(padding)), w, b, stride, 0, dilation, attrs["groups"])

    return expected


def _conv_transpose(attrs):
    """Symmetric padding goes to torch as is; asymmetric padding crops torch's full output."""
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    rank = len(stride)
    symmetric = tuple(padding[:rank]) == tuple(padding[rank:])

    def expected(x, w, b=None):
        pad = padding[:rank] if symmetric else 0
        y = _CONV_T[rank](x, w, b, stride, pad, attrs["output_padding"], attrs["groups"],
                          dilation)
        if symmetric:
            return y
        crop = tuple(slice(padding[i], y.shape[2 + i] - padding[rank + i]) for i in range(rank))
        return y[(slice(None), slice(None)) + crop]

    return expected


def _pool(op):
    """Symmetric padding goes to torch as is; asymmetric padding through F.pad."""

    def spell(attrs):
        kernel, stride, padding = attrs["kernel"], attrs["stride"], attrs["padding"]
        rank = len(kernel)
        symmetric = tuple(padding[:rank]) == tuple(padding[rank:])

        def expected(x):
            pad = padding[:rank]
            if not symmetric:
                fill = -INF if op == "max_pool" else 0.0
                x, pad = F.pad(x, tpads(padding), value=fill), 0
            if op == "max_pool":
                return _MAX_POOL[rank](x, kernel, stride, pad, attrs["dilation"],
                                       attrs["ceil_mode"])
            extra = {} if rank == 1 else {"divisor_override": attrs["divisor"]}
            return _AVG_POOL[rank](x, kernel, stride, pad, attrs["ceil_mode"],
                                   attrs["count_include_pad"], **extra)

        return expected

    return spell


def _adaptive(op):
    def spell(attrs):
        out = attrs["output_size"]
        return lambda x: _ADAPTIVE[op][len(out) - 1](x, out)

    return spell


def _resize(attrs):
    mode = {"linear": ("linear", "bilinear", "trilinear"), "cubic": ("", "bicubic", "")}
    return lambda x: F.interpolate(x, size=attrs["sizes"],
                                   mode=mode[attrs["mode"]][len(attrs["sizes"]) - 1],
                                   align_corners=attrs["coordinates"] == "align_corners",
                                   antialias=attrs["antialias"])


_FROM_ATTRS = {"resize": _resize, "conv": _conv, "conv_transpose": _conv_transpose,
               "max_pool": _pool("max_pool"),
               "avg_pool": _pool("avg_pool"), "adaptive_avg_pool": _adaptive("adaptive_avg_pool"),
               "adaptive_max_pool": _adaptive("adaptive_max_pool")}

for _case in CASES:
    if _case.op in _SAME_FOR_EVERY_CASE:
        expr(_case.id, _SAME_FOR_EVERY_CASE[_case.op])
    elif _case.op in _FROM_ATTRS:
        expr(_case.id, _FROM_ATTRS[_case.op](_case.attrs))
