"""PyTorch cases for layer ops: linear, conv, pooling, norms, embedding, attention."""

from __future__ import annotations

import numpy as np
import torch

from tests.ops.torch_cases import A, INF, INT, KEEP, POS, CaseTable, tpads

F = torch.nn.functional
CASES = CaseTable()
case = CASES.add

# -- layers ----------------------------------------------------------------------------------

case("linear", "bias", [(2, 5), (5, 3), (3,)], {}, lambda x, w, b: F.linear(x, w.T, b))
case("linear", "batched_no_bias", [(2, 4, 5), (5, 1)], {"bias": False},
     lambda x, w: F.linear(x, w.T))
case("linear", "size1", [(1, 1), (1, 1), (1,)], {"bias": True},
     lambda x, w, b: F.linear(x, w.T, b))

case("embedding", "padding_idx", [INT(0, 6, 2, 3), (6, 4)], {"padding_idx": 1},
     lambda i, w: F.embedding(i, w, padding_idx=1))
case("embedding", "vector", [A([5, 0, 5], np.int64), (6, 2)], {},
     lambda i, w: F.embedding(i, w))

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def conv_case(name, x, w, *, stride=None, padding=None, dilation=None, groups=1, bias=True):
    """Torch pads explicitly with F.pad (asymmetric padding), then convolves unpadded."""
    rank = len(x) - 2
    stride, dilation = stride or (1,) * rank, dilation or (1,) * rank
    padding = padding or (0,) * (2 * rank)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)

    def expected(x, w, b=None):
        return _CONV[rank](F.pad(x, tpads(padding)), w, b, stride, 0, dilation, groups)

    case("conv", name, [x, w, (w[0],)] if bias else [x, w], attrs, expected)


conv_case("1d_stride_pad_dilation", (2, 3, 11), (4, 3, 3), stride=(2,), padding=(1, 1),
          dilation=(2,))
conv_case("1d_asym_pad_groups_no_bias", (1, 4, 8), (6, 2, 3), padding=(2, 0), groups=2,
          bias=False)
conv_case("2d_stride_asym_pad_dilation", (2, 3, 7, 6), (5, 3, 3, 2), stride=(2, 1),
          padding=(1, 0, 0, 2), dilation=(1, 2))
conv_case("2d_depthwise", (1, 4, 5, 5), (8, 1, 3, 3), padding=(1, 1, 1, 1), groups=4)
conv_case("2d_1x1_size1", (3, 2, 1, 1), (4, 2, 1, 1))
conv_case("3d_stride_pad_dilation", (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), stride=(1, 2, 1),
          padding=(1, 0, 1, 0, 1, 1), dilation=(2, 1, 1))
conv_case("3d_groups_no_bias", (2, 4, 3, 4, 5), (2, 2, 1, 2, 3), groups=2, bias=False)


def conv_t_case(name, x, w, *, stride, padding, output_padding, dilation=None, groups=1,
                bias=True):
    """Symmetric padding goes to torch as is; asymmetric padding crops torch's full output."""
    rank = len(x) - 2
    dilation = dilation or (1,) * rank
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias,
                 output_padding=output_padding)
    symmetric = tuple(padding[:rank]) == tuple(padding[rank:])

    def expected(x, w, b=None):
        pad = padding[:rank] if symmetric else 0
        y = _CONV_T[rank](x, w, b, stride, pad, output_padding, groups, dilation)
        if symmetric:
            return y
        crop = tuple(slice(padding[i], y.shape[2 + i] - padding[rank + i]) for i in range(rank))
        return y[(slice(None), slice(None)) + crop]

    inputs = [x, w, (w[1] * groups,)] if bias else [x, w]
    case("conv_transpose", name, inputs, attrs, expected)


conv_t_case("1d_stride_pad_output_padding", (2, 3, 5), (3, 4, 3), stride=(2,),
            padding=(1, 1), output_padding=(1,))
conv_t_case("1d_groups_dilation", (1, 4, 4), (4, 3, 3), stride=(3,), padding=(0, 0),
            output_padding=(2,), dilation=(2,), groups=2)
conv_t_case("1d_size1", (2, 2, 1), (2, 3, 2), stride=(1,), padding=(0, 0),
            output_padding=(0,), bias=False)
conv_t_case("2d_all_attrs", (2, 4, 3, 4), (4, 2, 3, 2), stride=(2, 3), padding=(1, 0, 1, 0),
            output_padding=(1, 2), dilation=(1, 2), groups=2)
conv_t_case("2d_asym_pad", (1, 2, 3, 3), (2, 3, 3, 3), stride=(2, 2), padding=(0, 1, 2, 0),
            output_padding=(1, 0))
conv_t_case("3d_stride_no_bias", (1, 2, 2, 3, 2), (2, 2, 2, 2, 2), stride=(2, 2, 2),
            padding=(1, 0, 0, 1, 0, 0), output_padding=(0, 1, 0), bias=False)

_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def pool_case(op, name, x, kernel, *, stride=None, padding=None, dilation=None,
              ceil_mode=False, count_include_pad=True, divisor=None):
    """Symmetric padding goes to torch as is; asymmetric padding through F.pad."""
    rank = len(kernel)
    stride, dilation = stride or kernel, dilation or (1,) * rank
    padding = padding or (0,) * (2 * rank)
    symmetric = tuple(padding[:rank]) == tuple(padding[rank:])
    attrs = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                 ceil_mode=ceil_mode)
    if op == "avg_pool":
        attrs.update(count_include_pad=count_include_pad, divisor=divisor)

    def expected(x):
        pad = padding[:rank]
        if not symmetric:
            fill = -INF if op == "max_pool" else 0.0
            x, pad = F.pad(x, tpads(padding), value=fill), 0
        if op == "max_pool":
            return _MAX_POOL[rank](x, kernel, stride, pad, dilation, ceil_mode)
        extra = {} if rank == 1 else {"divisor_override": divisor}
        return _AVG_POOL[rank](x, kernel, stride, pad, ceil_mode, count_include_pad, **extra)

    case(op, name, [x], attrs, expected)


pool_case("max_pool", "1d_pad_ceil", (2, 3, 10), (3,), stride=(2,), padding=(1, 1),
          ceil_mode=True)
pool_case("max_pool", "2d_pad_dilation", (2, 3, 9, 5), (3, 2), stride=(2, 1),
          padding=(1, 0, 1, 0), dilation=(2, 1))
pool_case("max_pool", "2d_ceil_odd", (1, 1, 7, 6), (3, 3), stride=(2, 2), ceil_mode=True)
pool_case("max_pool", "2d_ceil_drops_window_in_pad", (1, 2, 4, 4), (2, 2), stride=(3, 3),
          padding=(1, 1, 1, 1), ceil_mode=True)
pool_case("max_pool", "2d_asym_pad", (1, 3, 4, 5), (2, 2), stride=(1, 1), padding=(1, 0, 0, 1))
pool_case("max_pool", "3d_ceil", (1, 2, 5, 4, 3), (2, 2, 2), ceil_mode=True)
pool_case("avg_pool", "1d_ceil_count_pad", (2, 3, 10), (3,), stride=(2,), padding=(1, 1),
          ceil_mode=True, count_include_pad=True)
pool_case("avg_pool", "1d_ceil_exclude_pad", (2, 3, 10), (3,), stride=(2,), padding=(1, 1),
          ceil_mode=True, count_include_pad=False)
pool_case("avg_pool", "2d_ceil_exclude_pad", (1, 2, 7, 6), (3, 3), stride=(2, 2),
          padding=(1, 1, 1, 1), ceil_mode=True, count_include_pad=False)
pool_case("avg_pool", "2d_ceil_drops_window_in_pad", (1, 2, 4, 4), (2, 2), stride=(3, 3),
          padding=(1, 1, 1, 1), ceil_mode=True)
pool_case("avg_pool", "2d_divisor", (1, 1, 5, 6), (2, 3), stride=(1, 2), padding=(1, 1, 1, 1),
          divisor=5)
pool_case("avg_pool", "2d_asym_pad", (1, 2, 5, 5), (2, 2), padding=(0, 1, 1, 0))
pool_case("avg_pool", "3d_ceil", (1, 2, 5, 4, 7), (2, 2, 3), stride=(2, 2, 2), ceil_mode=True)

for _name, _torch in {"adaptive_avg_pool": (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d,
                                            F.adaptive_avg_pool3d),
                      "adaptive_max_pool": (F.adaptive_max_pool1d, F.adaptive_max_pool2d,
                                            F.adaptive_max_pool3d)}.items():
    for _label, _x, _out in [("1d_uneven", (2, 3, 10), (3,)), ("2d_uneven", (1, 2, 7, 5), (3, 2)),
                             ("3d_uneven", (1, 2, 5, 4, 3), (2, 3, 1)),
                             ("2d_upsample", (1, 1, 3, 5), (5, 7)),
                             ("2d_global", (2, 3, 4, 4), (1, 1))]:
        case(_name, _label, [_x], {"output_size": _out},
             lambda x, f=_torch[len(_out) - 1], o=_out: f(x, o))

case("batch_norm", "affine", [(4, 3, 5, 2), (3,), POS(3), (3,), (3,)], {"eps": 1e-3},
     lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3))
case("batch_norm", "no_affine_2d_input", [(5, 3), (3,), POS(3)],
     {"scale": False, "bias": False},
     lambda x, m, v: F.batch_norm(x, m, v, training=False, eps=1e-5))
case("batch_norm", "bias_only", [(2, 4, 3), (4,), POS(4), (4,)], {"scale": False},
     lambda x, m, v, b: F.batch_norm(x, m, v, None, b, training=False))
case("batch_norm", "scale_only", [(2, 4, 3), (4,), POS(4), (4,)], {"bias": False},
     lambda x, m, v, w: F.batch_norm(x, m, v, w, None, training=False))

case("layer_norm", "last_axis", [(2, 3, 6), (6,), (6,)], {"axis": 2},
     lambda x, w, b: F.layer_norm(x, (6,), w, b))
case("layer_norm", "two_axes_eps", [(2, 3, 4), (3, 4), (3, 4)], {"axis": 1, "eps": 1e-2},
     lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-2))
case("layer_norm", "no_affine", [(4, 5)], {"axis": 1, "scale": False, "bias": False},
     lambda x: F.layer_norm(x, (5,)))
case("layer_norm", "scale_only", [(4, 5), (5,)], {"axis": 1, "bias": False},
     lambda x, w: F.layer_norm(x, (5,), w))
case("layer_norm", "bias_only_size1", [(3, 1), (1,)], {"axis": 1, "scale": False},
     lambda x, b: F.layer_norm(x, (1,), None, b))

case("group_norm", "groups3", [(2, 6, 4, 3), (6,), (6,)], {"num_groups": 3},
     lambda x, w, b: F.group_norm(x, 3, w, b))
case("group_norm", "one_group_eps", [(2, 4, 5), (4,), (4,)], {"num_groups": 1, "eps": 1e-3},
     lambda x, w, b: F.group_norm(x, 1, w, b, eps=1e-3))
case("group_norm", "per_channel_no_affine", [(3, 4, 2, 2, 2)],
     {"num_groups": 4, "scale": False, "bias": False}, lambda x: F.group_norm(x, 4))

case("rms_norm", "last_axis", [(2, 3, 6), (6,)], {"axis": 2, "eps": 1e-6},
     lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6))
case("rms_norm", "two_axes", [(2, 3, 4), (3, 4)], {"axis": 1, "eps": 1e-3},
     lambda x, w: F.rms_norm(x, (3, 4), w, eps=1e-3))
case("rms_norm", "no_scale", [(4, 5)], {"axis": 1, "eps": 1e-5, "scale": False},
     lambda x: F.rms_norm(x, (5,), eps=1e-5))


def _sdpa(scale, **kw):
    return lambda q, k, v, *m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m[0] if m else None, scale=scale, **kw)


def _causal_and(mask_fn):
    """Torch refuses attn_mask together with is_causal: fold the causal mask into it."""

    def fn(q, k, v, mask):
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(mask, keep), scale=0.7)

    return fn


case("attention", "plain", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 7)], {"scale": 0.5},
     _sdpa(0.5))
case("attention", "causal_square", [(2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)],
     {"scale": 0.5, "causal": True}, _sdpa(0.5, is_causal=True))
case("attention", "causal_short_query", [(1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4)],
     {"scale": 1.0, "causal": True}, _sdpa(1.0, is_causal=True))
case("attention", "bool_mask_broadcast", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), KEEP(5, 6)],
     {"scale": 0.5, "has_mask": True}, _sdpa(0.5))
case("attention", "float_mask", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 1, 5, 6)],
     {"scale": 0.25, "has_mask": True}, _sdpa(0.25))
case("attention", "grouped_kv_heads", [(2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6)],
     {"scale": 8**-0.5}, _sdpa(8**-0.5, enable_gqa=True))
case("attention", "grouped_kv_causal", [(1, 6, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)],
     {"scale": 0.5, "causal": True}, _sdpa(0.5, is_causal=True, enable_gqa=True))
case("attention", "causal_and_bool_mask", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3), KEEP(4, 4)],
     {"scale": 0.7, "causal": True, "has_mask": True}, _causal_and(lambda m, keep: m & keep))
case("attention", "causal_and_float_mask", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3), (4, 4)],
     {"scale": 0.7, "causal": True, "has_mask": True},
     _causal_and(lambda m, keep: m.masked_fill(~keep, -INF)))
case("attention", "no_head_axis", [(2, 5, 4), (2, 6, 4), (2, 6, 3)], {"scale": 0.5},
     _sdpa(0.5))
