"""Cases for elementwise ops, activations, reductions and shape ops (no framework here: the
PyTorch expression of each is in ``torch_cases``, by case id)."""

from __future__ import annotations

import numpy as np

from tests.ops.case_types import A, BOOL, INT, NZ, POS, TIES, U, CaseTable

CASES = CaseTable()
case = CASES.add

# -- elementwise -----------------------------------------------------------------------------

for _name in ("add", "sub", "mul", "maximum", "minimum"):
    case(_name, "broadcast", [(3, 1, 4), (2, 4)], {})
    case(_name, "scalar_rhs", [(5,), ()], {})
    case(_name, "size1_dims", [(1, 3, 1), (2, 1, 1)], {})
    case(_name, "int64", [INT(-9, 9, 2, 3), INT(-9, 9, 3)], {})
for _name in ("maximum", "minimum"):
    case(_name, "nan_propagates", [A([1.0, np.nan, 2.0]), A([np.nan, 0.0, 3.0])], {})

case("pow", "positive_base", [POS(2, 3), (2, 3)], {})
case("pow", "negative_base_int_exponent", [NZ(4), A([2.0, 3.0, 0.0, -1.0])], {})
case("pow", "broadcast_scalar_exponent", [POS(3, 1, 2), A(0.5)], {})

case("div", "true", [(3, 4), NZ(4)], {})
case("div", "floor", [U(2, 5, low=-9, high=9), NZ(2, 5)], {"rounding": "floor"})
case("div", "trunc", [U(2, 5, low=-9, high=9), NZ(2, 5)], {"rounding": "trunc"})
case("div", "int_floor", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)],
     {"rounding": "floor"})
case("div", "int_trunc", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)],
     {"rounding": "trunc"})
case("div", "floor_is_python_floordiv", [A([1.0, -1.0, 0.3, 7.0]), A([0.1, 0.1, 0.1, -0.7])],
     {"rounding": "floor"})
case("div", "int_beyond_float53", [A([2**53 + 1, -(2**53 + 1), 2**62 + 3], np.int64),
                                   A([1, 2, -5], np.int64)], {"rounding": "trunc"})
case("div", "int_floor_beyond_float53", [A([2**53 + 1, -(2**53 + 1), 2**62 + 3], np.int64),
                                         A([1, 2, -5], np.int64)], {"rounding": "floor"})
case("div", "int_true", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)], {})

_UNARY = {
    "neg": (2, 3),
    "exp": (2, 3),
    "log": POS(2, 3),
    "sqrt": POS(2, 3),
    "rsqrt": POS(2, 3),
    "reciprocal": NZ(2, 3),
    "abs": (2, 3),
    "erf": U(2, 3, low=-4, high=4),
    "erfc": U(2, 3, low=-6, high=6),
    "sin": U(2, 3, low=-7, high=7),
    "cos": U(2, 3, low=-7, high=7),
    "floor": A([-1.5, -0.5, -0.0, 0.0, 0.5, 2.0, 2.7]),
    "ceil": A([-1.5, -0.5, -0.0, 0.0, 0.5, 2.0, 2.7]),
    "sign": A([-1.5, -0.0, 0.0, 0.5, 2.0]),
    "identity": (1, 3, 1),
    "logical_not": BOOL(2, 3),
}
for _name, _x in _UNARY.items():
    case(_name, "basic", [_x], {})
for _name in ("neg", "exp", "abs", "sin"):
    case(_name, "scalar", [()], {})
case("floor", "random", [U(3, 4, low=-5, high=5)], {})
case("ceil", "random", [U(3, 4, low=-5, high=5)], {})
case("sign", "int", [INT(-3, 4, 6)], {})
case("logical_not", "float_with_zeros", [TIES(2, 4)], {})

for _name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    case(_name, "broadcast_ties", [TIES(3, 1, 4), TIES(2, 4)], {})
    case(_name, "int_scalar", [INT(-2, 3, 5), A(0, np.int64)], {})
for _name in ("logical_and", "logical_or"):
    case(_name, "bool_broadcast", [BOOL(3, 1), BOOL(1, 4)], {})
    case(_name, "float_with_zeros", [TIES(2, 3), TIES(3)], {})

case("where", "broadcast", [BOOL(3, 1, 4), (2, 4), ()], {})
case("prelu", "per_channel", [(2, 3, 4, 5), (3, 1, 1)], {})
case("prelu", "shared", [(2, 3, 4), (1,)], {})
case("where", "int", [BOOL(2, 3), INT(-5, 5, 2, 3), INT(-5, 5, 1, 3)], {})

case("clip", "both", [(3, 4)], {"min": -0.5, "max": 1.0})
case("clip", "min_only", [(3, 4)], {"min": 0.25})
case("clip", "max_only", [(3, 4)], {"max": -0.1})
case("clip", "nan_passes", [A([np.nan, -3.0, 0.5, 3.0])], {"min": -1, "max": 1})
case("clip", "relu6", [U(8, low=-3, high=9)], {"min": 0, "max": 6})

case("cast", "float_to_int64_truncates", [U(3, 4, low=-5, high=5)], {"dtype": "int64"})
case("cast", "float_to_int32", [U(6, low=-50, high=50)], {"dtype": "int32"})
case("cast", "int_to_int8", [INT(-100, 100, 5)], {"dtype": "int8"})
case("cast", "float_to_uint8", [U(5, low=0, high=255)], {"dtype": "uint8"})
case("cast", "float_to_bool", [A([0.0, -0.0, 1.5, -2.0, 1e-300])], {"dtype": "bool"})
case("cast", "int_to_float64", [INT(-9, 9, 2, 3)], {"dtype": "float64"})
case("cast", "bool_to_int64", [BOOL(4)], {"dtype": "int64"})
# floating targets stay float64 in the reference: agreement only to float32 rounding
case("cast", "float_to_float32", [(3, 4)], {"dtype": "float32"}, rtol=1e-7)

# -- activations -----------------------------------------------------------------------------

WIDE = U(4, 7, low=-6, high=6)
case("relu", "basic", [WIDE], {})
case("gelu", "erf", [WIDE], {})
case("gelu", "erf_explicit", [WIDE], {"approximate": "none"})
case("gelu", "tanh", [WIDE], {"approximate": "tanh"})
case("sigmoid", "wide", [U(50, low=-40, high=40)], {})
case("tanh", "basic", [WIDE], {})
case("silu", "basic", [WIDE], {})
case("softplus", "default", [U(50, low=-30, high=30)], {})
case("softplus", "beta_threshold", [WIDE], {"beta": 2.0, "threshold": 3.0})
case("softplus", "small_beta", [WIDE], {"beta": 0.5})
case("leaky_relu", "default", [WIDE], {})
case("leaky_relu", "alpha", [WIDE], {"alpha": 0.2})
case("elu", "default", [WIDE], {})
case("elu", "alpha", [WIDE], {"alpha": 0.5})
case("hardswish", "basic", [WIDE], {})
case("hardsigmoid", "torch_default", [WIDE], {})
case("hardsigmoid", "onnx_alpha", [WIDE], {"alpha": 0.2, "beta": 0.5})
case("mish", "basic", [U(40, low=-30, high=30)], {})
case("dropout", "inference", [(3, 4)], {"p": 0.3})

for _name in ("softmax", "log_softmax"):
    case(_name, "last_axis", [(2, 3, 4)], {"axis": 2})
    case(_name, "first_axis", [(2, 3, 4)], {"axis": 0})
    case(_name, "middle_size1", [(3, 1, 5)], {"axis": 1})
    case(_name, "large_values", [U(2, 7, low=-80, high=80)], {"axis": 1})
    case(_name, "vector", [(7,)], {"axis": 0})

# -- reductions ------------------------------------------------------------------------------

for _name in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"):
    case(_name, "all", [(3, 4)], {})
    case(_name, "all_keepdims", [(2, 3, 1)], {"axes": None, "keepdims": True})
    case(_name, "last_axis", [(2, 3, 5)], {"axes": [2]})
    case(_name, "two_axes_keepdims", [(3, 1, 4)], {"axes": [0, 2], "keepdims": True})
    case(_name, "size1_axis", [(4, 1)], {"axes": [1]})
case("reduce_max", "nan_propagates", [A([[1.0, np.nan], [2.0, 3.0]])], {"axes": [1]})
case("argmax", "nan_wins", [A([[1.0, np.nan, 5.0], [2.0, 3.0, -1.0]])], {"axis": 1})
case("reduce_sum", "int64", [INT(-9, 9, 3, 4)], {"axes": [0]})

case("reduce_var", "unbiased_all", [(4, 5)], {})
case("reduce_var", "biased_all_keepdims", [(2, 3, 4)], {"correction": 0, "keepdims": True})
case("reduce_var", "unbiased_two_axes", [(3, 2, 5)], {"axes": [0, 2], "correction": 1})
case("reduce_var", "biased_last_keepdims", [(3, 6)],
     {"axes": [1], "correction": 0, "keepdims": True})

for _name in ("argmax", "argmin"):
    case(_name, "axis0", [(4, 3)], {"axis": 0})
    case(_name, "last_keepdims", [(2, 3, 5)], {"axis": 2, "keepdims": True})
    case(_name, "size1_axis", [(3, 1)], {"axis": 1})

case("argsort", "axis0", [(5, 3)], {"axis": 0})
case("argsort", "last_descending", [(2, 3, 6)], {"axis": 2, "descending": True})
case("argsort", "int64_ties", [A([[3, 1, 3, 0, 1, 3]], dtype=np.int64)], {"axis": 1})
case("argsort", "int64_ties_descending", [A([[3, 1, 3, 0, 1, 3]], dtype=np.int64)],
     {"axis": 1, "descending": True})

case("cumsum", "axis0", [(4, 3)], {"axis": 0})
case("cumsum", "last_axis", [(2, 3, 5)], {"axis": 2})
case("cumsum", "int64", [INT(-5, 5, 6)], {"axis": 0})

# -- shape, data movement, sources -----------------------------------------------------------

case("matmul", "2d", [(3, 4), (4, 5)], {})
case("einsum", "attention_scores", [(2, 3, 4, 5), (2, 3, 6, 5)], {"equation": "bhqd,bhkd->bhqk"})
case("einsum", "dense_to_heads", [(2, 3, 4), (4, 2, 5)], {"equation": "abc,cde->abde"})
case("matmul", "batched_broadcast", [(2, 1, 3, 4), (5, 4, 2)], {})
case("matmul", "vector_matrix", [(4,), (2, 4, 3)], {})
case("matmul", "matrix_vector", [(2, 3, 4), (4,)], {})
case("matmul", "dot", [(5,), (5,)], {})

case("reshape", "merge", [(2, 3, 4)], {"shape": [4, 6]})
case("reshape", "flatten", [(2, 3, 4)], {"shape": [24]})
case("reshape", "size1_dims", [(6,)], {"shape": [1, 2, 1, 3]})
case("reshape", "to_scalar", [(1, 1)], {"shape": []})
case("transpose", "rotate", [(2, 3, 4)], {"perm": [2, 0, 1]})
case("transpose", "matrix", [(1, 5)], {"perm": [1, 0]})
case("concat", "three_middle", [(2, 1, 3), (2, 4, 3), (2, 2, 3)], {"axis": 1})
case("concat", "one_input", [(3, 2)], {"axis": 0})
case("split", "rows", [(5, 4)], {"axis": 0, "sizes": [2, 3]})
case("split", "uneven_last", [(2, 4)], {"axis": 1, "sizes": [1, 1, 2]})
case("split", "one_piece", [(4,)], {"axis": 0, "sizes": [4]})

_BIG = 2**31 - 1  # ONNX's "to the end"
case("slice", "steps", [(7, 6)], {"axes": [0, 1], "starts": [1, 0], "ends": [7, 5],
                                  "steps": [2, 3]})
case("slice", "negative_start", [(2, 7)], {"axes": [1], "starts": [-3], "ends": [_BIG],
                                           "steps": [1]})
case("slice", "resolved_negative_start", [(2, 7)],
     {"axes": [1], "starts": [4], "ends": [6], "steps": [1]})
case("slice", "negative_end_clamped", [(5, 3, 4)],
     {"axes": [0, 2], "starts": [-10, 1], "ends": [-1, 100], "steps": [1, 2]})
case("slice", "negative_step", [(6, 2)],
     {"axes": [0], "starts": [4], "ends": [0], "steps": [-2]})
case("slice", "empty", [(6, 2)], {"axes": [0], "starts": [5], "ends": [2], "steps": [1]})
case("slice", "reverse_all", [(5,)], {"axes": [0], "starts": [-1], "ends": [-_BIG],
                                      "steps": [-1]})

case("gather", "negative_indices", [(3, 4, 2), A([[0, -1], [2, -3]], np.int64)], {"axis": 1})
case("gather", "first_axis", [(5, 3), A([4, 0, -5, 1], np.int64)], {"axis": 0})
case("gather", "scalar_index_last", [(2, 3, 4), A(-1, np.int64)], {"axis": 2})
case("squeeze", "two_axes", [(1, 3, 1, 2)], {"axes": [0, 2]})
case("squeeze", "last", [(3, 1)], {"axes": [1]})
case("unsqueeze", "front_and_back", [(3, 4)], {"axes": [0, 3]})
case("unsqueeze", "scalar", [()], {"axes": [0]})
case("expand", "new_leading", [(3, 1)], {"shape": [2, 3, 4]})
case("expand", "size1", [(1,)], {"shape": [5]})
case("tile", "matrix", [(2, 3)], {"repeats": [2, 1]})
case("tile", "more_repeats_than_rank", [(3,)], {"repeats": [2, 2]})
case("flip", "two_axes", [(2, 3, 4)], {"axes": [0, 2]})
case("flip", "one_axis", [(5,)], {"axes": [0]})

case("pad", "constant_value", [(2, 3)], {"pads": [1, 0, 2, 1], "value": 1.5})
case("pad", "negative_crops", [(4, 5)], {"pads": [-1, 2, 0, -2]})
case("pad", "reflect", [(2, 4, 5)], {"pads": [0, 1, 2, 0, 2, 1], "mode": "reflect"})
case("pad", "edge", [(2, 4, 5)], {"pads": [0, 3, 0, 0, 1, 2], "mode": "edge"})
case("pad", "reflect_with_crop", [(2, 5, 6)], {"pads": [0, -1, 2, 0, 1, -1], "mode": "reflect"})

case("trilu", "upper", [(4, 5)], {"upper": True})
case("trilu", "lower_below", [(4, 5)], {"upper": False, "k": -1})
case("trilu", "batched_upper_k2", [(2, 3, 3)], {"upper": True, "k": 2})
case("trilu", "tall_lower_k1", [(5, 3)], {"upper": False, "k": 1})

case("full", "float", [], {"shape": [2, 3], "value": 1.5, "dtype": "float64"})
case("full", "int", [], {"shape": [4], "value": -3, "dtype": "int64"})
case("full", "bool_scalar", [], {"shape": [], "value": 1, "dtype": "bool"})
case("full", "empty", [], {"shape": [0, 3], "value": 2.0, "dtype": "float32"})
case("arange", "int", [], {"start": 0, "limit": 5, "dtype": "int64"})
case("arange", "int_negative_delta", [], {"start": 5, "limit": -3, "delta": -2,
                                          "dtype": "int64"})
case("arange", "float", [], {"start": 0.5, "limit": 3.2, "delta": 0.3, "dtype": "float64"})
