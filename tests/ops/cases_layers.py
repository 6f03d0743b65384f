"""Cases for layer ops: linear, conv, pooling, norms, embedding, rotary position embedding,
attention (no framework here:
the PyTorch expression of each is in ``torch_cases``, by case id)."""

from __future__ import annotations

import numpy as np

from tests.ops.case_types import A, INT, KEEP, POS, CaseTable

CASES = CaseTable()
case = CASES.add

# -- layers ----------------------------------------------------------------------------------

case("linear", "bias", [(2, 5), (5, 3), (3,)], {})
case("linear", "batched_no_bias", [(2, 4, 5), (5, 1)], {"bias": False})
case("linear", "size1", [(1, 1), (1, 1), (1,)], {"bias": True})

case("embedding", "padding_idx", [INT(0, 6, 2, 3), (6, 4)], {"padding_idx": 1})
case("embedding", "vector", [A([5, 0, 5], np.int64), (6, 2)], {})
case("embedding", "max_norm", [A([5, 0, 5, 2], np.int64), (6, 3)],
     {"max_norm": 0.5, "norm_type": 2.0})
case("embedding", "max_norm_l1", [INT(0, 6, 2, 3), (6, 4)], {"max_norm": 1.0, "norm_type": 1.0})


def conv_case(name, x, w, *, stride=None, padding=None, dilation=None, groups=1, bias=True):
    rank = len(x) - 2
    stride, dilation = stride or (1,) * rank, dilation or (1,) * rank
    padding = padding or (0,) * (2 * rank)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    case("conv", name, [x, w, (w[0],)] if bias else [x, w], attrs)


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
    rank = len(x) - 2
    dilation = dilation or (1,) * rank
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias,
                 output_padding=output_padding)
    inputs = [x, w, (w[1] * groups,)] if bias else [x, w]
    case("conv_transpose", name, inputs, attrs)


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


def pool_case(op, name, x, kernel, *, stride=None, padding=None, dilation=None,
              ceil_mode=False, count_include_pad=True, divisor=None):
    rank = len(kernel)
    stride, dilation = stride or kernel, dilation or (1,) * rank
    padding = padding or (0,) * (2 * rank)
    attrs = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                 ceil_mode=ceil_mode)
    if op == "avg_pool":
        attrs.update(count_include_pad=count_include_pad, divisor=divisor)
    case(op, name, [x], attrs)


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

for _name in ("adaptive_avg_pool", "adaptive_max_pool"):
    for _label, _x, _out in [("1d_uneven", (2, 3, 10), (3,)), ("2d_uneven", (1, 2, 7, 5), (3, 2)),
                             ("3d_uneven", (1, 2, 5, 4, 3), (2, 3, 1)),
                             ("2d_upsample", (1, 1, 3, 5), (5, 7)),
                             ("2d_global", (2, 3, 4, 4), (1, 1))]:
        case(_name, _label, [_x], {"output_size": _out})

for _label, _x, _size, _mode, _coords, _aa in [
        ("2d_linear_up", (1, 2, 5, 6), (10, 9), "linear", "pytorch_half_pixel", False),
        ("2d_linear_corners_down", (1, 2, 7, 9), (4, 5), "linear", "align_corners", False),
        ("2d_cubic_up", (2, 3, 6, 5), (9, 11), "cubic", "pytorch_half_pixel", False),
        ("1d_linear_up", (2, 3, 7), (11,), "linear", "pytorch_half_pixel", False),
        ("2d_linear_antialias_down", (1, 2, 9, 8), (4, 3), "linear", "pytorch_half_pixel",
         True)]:
    _axes = tuple(range(2, len(_x)))
    case("resize", _label, [_x], {
        "axes": _axes, "sizes": _size, "mode": _mode, "coordinates": _coords,
        "steps": tuple(_x[a] / n for a, n in zip(_axes, _size)), "antialias": _aa})

case("batch_norm", "affine", [(4, 3, 5, 2), (3,), POS(3), (3,), (3,)], {"eps": 1e-3})
case("batch_norm", "no_affine_2d_input", [(5, 3), (3,), POS(3)],
     {"scale": False, "bias": False})
case("batch_norm", "bias_only", [(2, 4, 3), (4,), POS(4), (4,)], {"scale": False})
case("batch_norm", "scale_only", [(2, 4, 3), (4,), POS(4), (4,)], {"bias": False})

case("layer_norm", "last_axis", [(2, 3, 6), (6,), (6,)], {"axis": 2})
case("layer_norm", "two_axes_eps", [(2, 3, 4), (3, 4), (3, 4)], {"axis": 1, "eps": 1e-2})
case("layer_norm", "no_affine", [(4, 5)], {"axis": 1, "scale": False, "bias": False})
case("layer_norm", "scale_only", [(4, 5), (5,)], {"axis": 1, "bias": False})
case("layer_norm", "bias_only_size1", [(3, 1), (1,)], {"axis": 1, "scale": False})

case("group_norm", "groups3", [(2, 6, 4, 3), (6,), (6,)], {"num_groups": 3})
case("group_norm", "one_group_eps", [(2, 4, 5), (4,), (4,)], {"num_groups": 1, "eps": 1e-3})
case("group_norm", "per_channel_no_affine", [(3, 4, 2, 2, 2)],
     {"num_groups": 4, "scale": False, "bias": False})

case("rms_norm", "last_axis", [(2, 3, 6), (6,)], {"axis": 2, "eps": 1e-6})
case("rms_norm", "two_axes", [(2, 3, 4), (3, 4)], {"axis": 1, "eps": 1e-3})
case("rms_norm", "no_scale", [(4, 5)], {"axis": 1, "eps": 1e-5, "scale": False})

case("weight_norm", "conv1d_dim2", [(6, 4, 5), (1, 1, 5)], {"axes": (0, 1)})
case("weight_norm", "dim0", [(4, 3, 2), (4, 1, 1)], {"axes": (1, 2)})
case("rotary_embedding", "half_heads_first", [(2, 3, 5, 8)],
     {"theta": 10000.0, "dim": 8, "layout": "half", "axis": 2})
case("rotary_embedding", "half_positions_first", [(2, 6, 3, 4)],
     {"theta": 500000.0, "dim": 4, "layout": "half", "axis": 1})
case("rotary_embedding", "interleaved", [(2, 7, 6)],
     {"theta": 10000.0, "dim": 6, "layout": "interleaved", "axis": 1})
case("rotary_embedding", "partial_half", [(1, 2, 5, 10)],
     {"theta": 100.0, "dim": 4, "layout": "half", "axis": 2})
case("rotary_embedding", "partial_interleaved", [(5, 2, 6)],
     {"theta": 10000.0, "dim": 4, "layout": "interleaved", "axis": 0})
case("rotary_embedding", "linear_scaling", [(2, 3, 7, 8)],
     {"theta": 10000.0, "dim": 8, "layout": "half", "axis": 2, "factor": 2.0})

case("attention", "plain", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 7)], {"scale": 0.5})
case("attention", "causal_square", [(2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)],
     {"scale": 0.5, "causal": True})
case("attention", "causal_short_query", [(1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4)],
     {"scale": 1.0, "causal": True})
case("attention", "bool_mask_broadcast", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), KEEP(5, 6)],
     {"scale": 0.5, "has_mask": True})
case("attention", "float_mask", [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4), (2, 1, 5, 6)],
     {"scale": 0.25, "has_mask": True})
case("attention", "grouped_kv_heads", [(2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6)],
     {"scale": 8**-0.5})
case("attention", "grouped_kv_causal", [(1, 6, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)],
     {"scale": 0.5, "causal": True})
case("attention", "causal_and_bool_mask", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3), KEEP(4, 4)],
     {"scale": 0.7, "causal": True, "has_mask": True})
case("attention", "causal_and_float_mask", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3), (4, 4)],
     {"scale": 0.7, "causal": True, "has_mask": True})
case("attention", "no_head_axis", [(2, 5, 4), (2, 6, 4), (2, 6, 3)], {"scale": 0.5})
case("attention", "bool_mask_empty_row",  # the query keeping no key gives zeros (SDPA)
     [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4),
      A([[True, False, True], [False, False, False], [True, True, True]], dtype=bool)],
     {"scale": 0.5, "has_mask": True})
case("attention", "causal_and_bool_mask_empty_row",  # row 0 keeps key 0 only, masked
     [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4),
      A([[False, True, True], [True, True, False], [True, False, True]], dtype=bool)],
     {"scale": 0.7, "causal": True, "has_mask": True})
case("attention", "float_mask_blocked_row",  # an additive -inf row: its softmax is NaN
     [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4),
      A([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf], [0.0, 0.0, 0.0]])],
     {"scale": 0.5, "has_mask": True})
