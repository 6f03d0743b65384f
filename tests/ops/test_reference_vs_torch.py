"""Every registered op's NumPy reference against PyTorch in float64, on random inputs.

The cases form one table: a case names an op, its canonical attributes, how to make each
input, and the PyTorch expression that must agree with the reference (``torch_fn`` gets the
same inputs as tensors, in order). The torch side spells each variant the PyTorch way
(negative dims, ``F.pad`` order, symmetric padding...), so the table also documents how the
canonical conventions of ``specgraph/ops/layers.py`` map onto PyTorch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from specgraph.errors import ExecutionError
from specgraph.ops import OPAQUE, get_spec, registered_ops

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-10
ATOL = 1e-12
INF = float("inf")


@dataclass(frozen=True)
class Case:
    op: str
    name: str
    inputs: tuple  # each: a shape tuple (uniform in [-2, 2)) or a function rng -> array
    attrs: dict
    torch_fn: Callable[..., Any]
    rtol: float = RTOL

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


CASES: list[Case] = []


def case(op: str, name: str, inputs, attrs, torch_fn, rtol: float = RTOL) -> None:
    CASES.append(Case(op, name, tuple(inputs), dict(attrs), torch_fn, rtol))


# -- input factories -----------------------------------------------------------------------


def U(*shape, low=-2.0, high=2.0):
    """Uniform floats."""
    return lambda rng: rng.uniform(low, high, shape)


def POS(*shape):
    """Floats bounded away from zero, positive."""
    return U(*shape, low=0.25, high=3.0)


def NZ(*shape):
    """Floats bounded away from zero, either sign."""
    return lambda rng: rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def INT(low, high, *shape, dtype=np.int64):
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def TIES(*shape):
    """Small integer-valued floats, so comparisons meet equal pairs."""
    return lambda rng: rng.integers(-2, 3, shape).astype(np.float64)


def BOOL(*shape):
    return lambda rng: rng.random(shape) < 0.5


def KEEP(*shape):
    """A boolean attention mask that keeps at least the first key of every query."""

    def make(rng):
        mask = rng.random(shape) < 0.6
        mask[..., 0] = True
        return mask

    return make


def A(values, dtype=np.float64):
    """Fixed values."""
    return lambda rng: np.array(values, dtype=dtype)


def make_input(spec, rng) -> np.ndarray:
    if isinstance(spec, tuple):
        return np.array(rng.uniform(-2.0, 2.0, spec))
    return np.array(spec(rng))


def tpads(pads):
    """ONNX-order pads (all begins, then all ends) as ``F.pad``'s (last axis first)."""
    n = len(pads) // 2
    return tuple(p for i in reversed(range(n)) for p in (pads[i], pads[n + i]))


# -- elementwise -----------------------------------------------------------------------------

for _name, _fn in {"add": torch.add, "sub": torch.sub, "mul": torch.mul,
                   "maximum": torch.maximum, "minimum": torch.minimum}.items():
    case(_name, "broadcast", [(3, 1, 4), (2, 4)], {}, _fn)
    case(_name, "scalar_rhs", [(5,), ()], {}, _fn)
    case(_name, "size1_dims", [(1, 3, 1), (2, 1, 1)], {}, _fn)
    case(_name, "int64", [INT(-9, 9, 2, 3), INT(-9, 9, 3)], {}, _fn)
for _name in ("maximum", "minimum"):
    case(_name, "nan_propagates", [A([1.0, np.nan, 2.0]), A([np.nan, 0.0, 3.0])], {},
         getattr(torch, _name))

case("pow", "positive_base", [POS(2, 3), (2, 3)], {}, torch.pow)
case("pow", "negative_base_int_exponent", [NZ(4), A([2.0, 3.0, 0.0, -1.0])], {}, torch.pow)
case("pow", "broadcast_scalar_exponent", [POS(3, 1, 2), A(0.5)], {}, torch.pow)

case("div", "true", [(3, 4), NZ(4)], {}, torch.div)
case("div", "floor", [U(2, 5, low=-9, high=9), NZ(2, 5)], {"rounding": "floor"},
     lambda a, b: torch.div(a, b, rounding_mode="floor"))
case("div", "trunc", [U(2, 5, low=-9, high=9), NZ(2, 5)], {"rounding": "trunc"},
     lambda a, b: torch.div(a, b, rounding_mode="trunc"))
case("div", "int_floor", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)],
     {"rounding": "floor"}, lambda a, b: torch.div(a, b, rounding_mode="floor"))
case("div", "int_trunc", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)],
     {"rounding": "trunc"}, lambda a, b: torch.div(a, b, rounding_mode="trunc"))
# torch divides integers into its default float dtype; the reference computes in float64
case("div", "int_true", [INT(-20, 20, 3, 4), A([-3, -2, 2, 7], np.int64)], {},
     lambda a, b: torch.div(a.double(), b))

_UNARY = {
    "neg": ((2, 3), torch.neg),
    "exp": ((2, 3), torch.exp),
    "log": (POS(2, 3), torch.log),
    "sqrt": (POS(2, 3), torch.sqrt),
    "rsqrt": (POS(2, 3), torch.rsqrt),
    "reciprocal": (NZ(2, 3), torch.reciprocal),
    "abs": ((2, 3), torch.abs),
    "erf": (U(2, 3, low=-4, high=4), torch.erf),
    "sin": (U(2, 3, low=-7, high=7), torch.sin),
    "cos": (U(2, 3, low=-7, high=7), torch.cos),
    "floor": (A([-1.5, -0.5, -0.0, 0.0, 0.5, 2.0, 2.7]), torch.floor),
    "ceil": (A([-1.5, -0.5, -0.0, 0.0, 0.5, 2.0, 2.7]), torch.ceil),
    "sign": (A([-1.5, -0.0, 0.0, 0.5, 2.0]), torch.sign),
    "identity": ((1, 3, 1), lambda x: x.clone()),
    "logical_not": (BOOL(2, 3), torch.logical_not),
}
for _name, (_x, _fn) in _UNARY.items():
    case(_name, "basic", [_x], {}, _fn)
for _name in ("neg", "exp", "abs", "sin"):
    case(_name, "scalar", [()], {}, getattr(torch, _name))
case("floor", "random", [U(3, 4, low=-5, high=5)], {}, torch.floor)
case("ceil", "random", [U(3, 4, low=-5, high=5)], {}, torch.ceil)
case("sign", "int", [INT(-3, 4, 6)], {}, torch.sign)
case("logical_not", "float_with_zeros", [TIES(2, 4)], {}, torch.logical_not)

for _name, _fn in {"equal": torch.eq, "not_equal": torch.ne, "less": torch.lt,
                   "less_equal": torch.le, "greater": torch.gt,
                   "greater_equal": torch.ge}.items():
    case(_name, "broadcast_ties", [TIES(3, 1, 4), TIES(2, 4)], {}, _fn)
    case(_name, "int_scalar", [INT(-2, 3, 5), A(0, np.int64)], {}, _fn)
for _name in ("logical_and", "logical_or"):
    case(_name, "bool_broadcast", [BOOL(3, 1), BOOL(1, 4)], {}, getattr(torch, _name))
    case(_name, "float_with_zeros", [TIES(2, 3), TIES(3)], {}, getattr(torch, _name))

case("where", "broadcast", [BOOL(3, 1, 4), (2, 4), ()], {}, torch.where)
case("where", "int", [BOOL(2, 3), INT(-5, 5, 2, 3), INT(-5, 5, 1, 3)], {}, torch.where)

case("clip", "both", [(3, 4)], {"min": -0.5, "max": 1.0},
     lambda x: torch.clamp(x, -0.5, 1.0))
case("clip", "min_only", [(3, 4)], {"min": 0.25}, lambda x: torch.clamp(x, min=0.25))
case("clip", "max_only", [(3, 4)], {"max": -0.1}, lambda x: torch.clamp(x, max=-0.1))
case("clip", "relu6", [U(8, low=-3, high=9)], {"min": 0, "max": 6}, F.relu6)

case("cast", "float_to_int64_truncates", [U(3, 4, low=-5, high=5)], {"dtype": "int64"},
     lambda x: x.to(torch.int64))
case("cast", "float_to_int32", [U(6, low=-50, high=50)], {"dtype": "int32"},
     lambda x: x.to(torch.int32))
case("cast", "int_to_int8", [INT(-100, 100, 5)], {"dtype": "int8"},
     lambda x: x.to(torch.int8))
case("cast", "float_to_uint8", [U(5, low=0, high=255)], {"dtype": "uint8"},
     lambda x: x.to(torch.uint8))
case("cast", "float_to_bool", [A([0.0, -0.0, 1.5, -2.0, 1e-300])], {"dtype": "bool"},
     lambda x: x.to(torch.bool))
case("cast", "int_to_float64", [INT(-9, 9, 2, 3)], {"dtype": "float64"},
     lambda x: x.to(torch.float64))
case("cast", "bool_to_int64", [BOOL(4)], {"dtype": "int64"}, lambda x: x.to(torch.int64))
# floating targets stay float64 in the reference: agreement only to float32 rounding
case("cast", "float_to_float32", [(3, 4)], {"dtype": "float32"},
     lambda x: x.to(torch.float32).double(), rtol=1e-7)

# -- activations -----------------------------------------------------------------------------

WIDE = U(4, 7, low=-6, high=6)
case("relu", "basic", [WIDE], {}, F.relu)
case("gelu", "erf", [WIDE], {}, F.gelu)
case("gelu", "erf_explicit", [WIDE], {"approximate": "none"}, F.gelu)
case("gelu", "tanh", [WIDE], {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh"))
case("sigmoid", "wide", [U(50, low=-40, high=40)], {}, torch.sigmoid)
case("tanh", "basic", [WIDE], {}, torch.tanh)
case("silu", "basic", [WIDE], {}, F.silu)
case("softplus", "default", [U(50, low=-30, high=30)], {}, F.softplus)
case("softplus", "beta_threshold", [WIDE], {"beta": 2.0, "threshold": 3.0},
     lambda x: F.softplus(x, beta=2.0, threshold=3.0))
case("softplus", "small_beta", [WIDE], {"beta": 0.5}, lambda x: F.softplus(x, beta=0.5))
case("leaky_relu", "default", [WIDE], {}, F.leaky_relu)
case("leaky_relu", "alpha", [WIDE], {"alpha": 0.2}, lambda x: F.leaky_relu(x, 0.2))
case("elu", "default", [WIDE], {}, F.elu)
case("elu", "alpha", [WIDE], {"alpha": 0.5}, lambda x: F.elu(x, alpha=0.5))
case("hardswish", "basic", [WIDE], {}, F.hardswish)
case("hardsigmoid", "torch_default", [WIDE], {}, F.hardsigmoid)
case("hardsigmoid", "onnx_alpha", [WIDE], {"alpha": 0.2, "beta": 0.5},
     lambda x: torch.clamp(0.2 * x + 0.5, 0.0, 1.0))
case("mish", "basic", [U(40, low=-30, high=30)], {}, F.mish)
case("dropout", "inference", [(3, 4)], {"p": 0.3}, lambda x: F.dropout(x, 0.3, training=False))

for _name, _fn in {"softmax": torch.softmax, "log_softmax": torch.log_softmax}.items():
    case(_name, "last_axis", [(2, 3, 4)], {"axis": 2}, lambda x, f=_fn: f(x, dim=-1))
    case(_name, "first_axis", [(2, 3, 4)], {"axis": 0}, lambda x, f=_fn: f(x, dim=-3))
    case(_name, "middle_size1", [(3, 1, 5)], {"axis": 1}, lambda x, f=_fn: f(x, dim=-2))
    case(_name, "large_values", [U(2, 7, low=-80, high=80)], {"axis": 1},
         lambda x, f=_fn: f(x, dim=1))
    case(_name, "vector", [(7,)], {"axis": 0}, lambda x, f=_fn: f(x, dim=-1))

# -- reductions ------------------------------------------------------------------------------


def _torch_prod(x, dim=None, keepdim=False):
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
    for d in sorted((d % x.ndim for d in dims), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


for _name, _fn in {"reduce_sum": torch.sum, "reduce_mean": torch.mean,
                   "reduce_max": torch.amax, "reduce_min": torch.amin,
                   "reduce_prod": _torch_prod}.items():
    case(_name, "all", [(3, 4)], {}, lambda x, f=_fn: f(x, dim=(0, 1)))
    case(_name, "all_keepdims", [(2, 3, 1)], {"axes": None, "keepdims": True},
         lambda x, f=_fn: f(x, dim=(0, 1, 2), keepdim=True))
    case(_name, "last_axis", [(2, 3, 5)], {"axes": [2]}, lambda x, f=_fn: f(x, dim=-1))
    case(_name, "two_axes_keepdims", [(3, 1, 4)], {"axes": [0, 2], "keepdims": True},
         lambda x, f=_fn: f(x, dim=(0, -1), keepdim=True))
    case(_name, "size1_axis", [(4, 1)], {"axes": [1]}, lambda x, f=_fn: f(x, dim=1))
case("reduce_sum", "int64", [INT(-9, 9, 3, 4)], {"axes": [0]}, lambda x: torch.sum(x, 0))

case("reduce_var", "unbiased_all", [(4, 5)], {}, lambda x: torch.var(x))
case("reduce_var", "biased_all_keepdims", [(2, 3, 4)], {"correction": 0, "keepdims": True},
     lambda x: torch.var(x, dim=(0, 1, 2), correction=0, keepdim=True))
case("reduce_var", "unbiased_two_axes", [(3, 2, 5)], {"axes": [0, 2], "correction": 1},
     lambda x: torch.var(x, dim=(0, -1), correction=1))
case("reduce_var", "biased_last_keepdims", [(3, 6)],
     {"axes": [1], "correction": 0, "keepdims": True},
     lambda x: torch.var(x, dim=-1, correction=0, keepdim=True))

for _name, _fn in {"argmax": torch.argmax, "argmin": torch.argmin}.items():
    case(_name, "axis0", [(4, 3)], {"axis": 0}, lambda x, f=_fn: f(x, dim=0))
    case(_name, "last_keepdims", [(2, 3, 5)], {"axis": 2, "keepdims": True},
         lambda x, f=_fn: f(x, dim=-1, keepdim=True))
    case(_name, "size1_axis", [(3, 1)], {"axis": 1}, lambda x, f=_fn: f(x, dim=-1))

case("cumsum", "axis0", [(4, 3)], {"axis": 0}, lambda x: torch.cumsum(x, 0))
case("cumsum", "last_axis", [(2, 3, 5)], {"axis": 2}, lambda x: torch.cumsum(x, -1))
case("cumsum", "int64", [INT(-5, 5, 6)], {"axis": 0}, lambda x: torch.cumsum(x, 0))

# -- shape, data movement, sources -----------------------------------------------------------

case("matmul", "2d", [(3, 4), (4, 5)], {}, torch.matmul)
case("matmul", "batched_broadcast", [(2, 1, 3, 4), (5, 4, 2)], {}, torch.matmul)
case("matmul", "vector_matrix", [(4,), (2, 4, 3)], {}, torch.matmul)
case("matmul", "matrix_vector", [(2, 3, 4), (4,)], {}, torch.matmul)
case("matmul", "dot", [(5,), (5,)], {}, torch.matmul)

case("reshape", "merge", [(2, 3, 4)], {"shape": [4, 6]}, lambda x: x.reshape(4, 6))
case("reshape", "flatten", [(2, 3, 4)], {"shape": [24]}, lambda x: x.reshape(-1))
case("reshape", "size1_dims", [(6,)], {"shape": [1, 2, 1, 3]}, lambda x: x.reshape(1, 2, 1, 3))
case("reshape", "to_scalar", [(1, 1)], {"shape": []}, lambda x: x.reshape(()))
case("transpose", "rotate", [(2, 3, 4)], {"perm": [2, 0, 1]}, lambda x: x.permute(2, 0, 1))
case("transpose", "matrix", [(1, 5)], {"perm": [1, 0]}, lambda x: x.T)
case("concat", "three_middle", [(2, 1, 3), (2, 4, 3), (2, 2, 3)], {"axis": 1},
     lambda *xs: torch.cat(xs, dim=-2))
case("concat", "one_input", [(3, 2)], {"axis": 0}, lambda x: torch.cat([x], 0))
case("split", "rows", [(5, 4)], {"axis": 0, "sizes": [2, 3]},
     lambda x: torch.split(x, [2, 3], 0))
case("split", "uneven_last", [(2, 4)], {"axis": 1, "sizes": [1, 1, 2]},
     lambda x: torch.split(x, [1, 1, 2], -1))
case("split", "one_piece", [(4,)], {"axis": 0, "sizes": [4]}, lambda x: torch.split(x, [4]))

_BIG = 2**31 - 1  # ONNX's "to the end"
case("slice", "steps", [(7, 6)], {"axes": [0, 1], "starts": [1, 0], "ends": [7, 5],
                                  "steps": [2, 3]}, lambda x: x[1::2, 0:5:3])
case("slice", "negative_start", [(2, 7)], {"axes": [1], "starts": [-3], "ends": [_BIG],
                                           "steps": [1]}, lambda x: x[:, -3:])
case("slice", "resolved_negative_start", [(2, 7)],
     {"axes": [1], "starts": [4], "ends": [6], "steps": [1]}, lambda x: x[:, -3:-1])
case("slice", "negative_end_clamped", [(5, 3, 4)],
     {"axes": [0, 2], "starts": [-10, 1], "ends": [-1, 100], "steps": [1, 2]},
     lambda x: x[:-1, :, 1::2])
case("slice", "negative_step", [(6, 2)],
     {"axes": [0], "starts": [4], "ends": [0], "steps": [-2]},
     lambda x: torch.flip(x, [0])[1:5:2])
case("slice", "reverse_all", [(5,)], {"axes": [0], "starts": [-1], "ends": [-_BIG],
                                      "steps": [-1]}, lambda x: torch.flip(x, [0]))

case("gather", "negative_indices", [(3, 4, 2), A([[0, -1], [2, -3]], np.int64)], {"axis": 1},
     lambda x, i: x[:, i])
case("gather", "first_axis", [(5, 3), A([4, 0, -5, 1], np.int64)], {"axis": 0},
     lambda x, i: x[i])
case("gather", "scalar_index_last", [(2, 3, 4), A(-1, np.int64)], {"axis": 2},
     lambda x, i: x[:, :, i])
case("squeeze", "two_axes", [(1, 3, 1, 2)], {"axes": [0, 2]},
     lambda x: torch.squeeze(x, (0, -2)))
case("squeeze", "last", [(3, 1)], {"axes": [1]}, lambda x: x.squeeze(-1))
case("unsqueeze", "front_and_back", [(3, 4)], {"axes": [0, 3]},
     lambda x: x.unsqueeze(0).unsqueeze(-1))
case("unsqueeze", "scalar", [()], {"axes": [0]}, lambda x: x.unsqueeze(0))
case("expand", "new_leading", [(3, 1)], {"shape": [2, 3, 4]}, lambda x: x.expand(2, 3, 4))
case("expand", "size1", [(1,)], {"shape": [5]}, lambda x: x.expand(5))
case("tile", "matrix", [(2, 3)], {"repeats": [2, 1]}, lambda x: torch.tile(x, (2, 1)))
case("tile", "more_repeats_than_rank", [(3,)], {"repeats": [2, 2]},
     lambda x: torch.tile(x, (2, 2)))
case("flip", "two_axes", [(2, 3, 4)], {"axes": [0, 2]}, lambda x: torch.flip(x, (0, -1)))
case("flip", "one_axis", [(5,)], {"axes": [0]}, lambda x: torch.flip(x, (0,)))

case("pad", "constant_value", [(2, 3)], {"pads": [1, 0, 2, 1], "value": 1.5},
     lambda x: F.pad(x, tpads([1, 0, 2, 1]), value=1.5))
case("pad", "negative_crops", [(4, 5)], {"pads": [-1, 2, 0, -2]},
     lambda x: F.pad(x, tpads([-1, 2, 0, -2])))
case("pad", "reflect", [(2, 4, 5)], {"pads": [0, 1, 2, 0, 2, 1], "mode": "reflect"},
     lambda x: F.pad(x, tpads([0, 1, 2, 0, 2, 1])[:4], mode="reflect"))
case("pad", "edge", [(2, 4, 5)], {"pads": [0, 3, 0, 0, 1, 2], "mode": "edge"},
     lambda x: F.pad(x, tpads([0, 3, 0, 0, 1, 2])[:4], mode="replicate"))
case("pad", "reflect_with_crop", [(2, 5, 6)], {"pads": [0, -1, 2, 0, 1, -1], "mode": "reflect"},
     lambda x: F.pad(x[:, 1:, :-1], (2, 0, 0, 1), mode="reflect"))

case("trilu", "upper", [(4, 5)], {"upper": True}, torch.triu)
case("trilu", "lower_below", [(4, 5)], {"upper": False, "k": -1}, lambda x: torch.tril(x, -1))
case("trilu", "batched_upper_k2", [(2, 3, 3)], {"upper": True, "k": 2},
     lambda x: torch.triu(x, 2))
case("trilu", "tall_lower_k1", [(5, 3)], {"upper": False, "k": 1}, lambda x: torch.tril(x, 1))

case("full", "float", [], {"shape": [2, 3], "value": 1.5, "dtype": "float64"},
     lambda: torch.full((2, 3), 1.5, dtype=torch.float64))
case("full", "int", [], {"shape": [4], "value": -3, "dtype": "int64"},
     lambda: torch.full((4,), -3, dtype=torch.int64))
case("full", "bool_scalar", [], {"shape": [], "value": 1, "dtype": "bool"},
     lambda: torch.full((), True))
case("full", "empty", [], {"shape": [0, 3], "value": 2.0, "dtype": "float32"},
     lambda: torch.full((0, 3), 2.0, dtype=torch.float64))
case("arange", "int", [], {"start": 0, "limit": 5, "dtype": "int64"},
     lambda: torch.arange(0, 5, dtype=torch.int64))
case("arange", "int_negative_delta", [], {"start": 5, "limit": -3, "delta": -2,
                                          "dtype": "int64"},
     lambda: torch.arange(5, -3, -2, dtype=torch.int64))
case("arange", "float", [], {"start": 0.5, "limit": 3.2, "delta": 0.3, "dtype": "float64"},
     lambda: torch.arange(0.5, 3.2, 0.3, dtype=torch.float64))

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


# -- the tests -------------------------------------------------------------------------------


def _check_output(got, expected, rtol):
    expected = expected.detach().numpy()
    got = np.asarray(got)
    assert got.shape == expected.shape, f"shape {got.shape}, torch {expected.shape}"
    if expected.dtype.kind == "f":
        assert got.dtype.kind == "f", f"dtype {got.dtype}, torch {expected.dtype}"
    else:
        assert got.dtype == expected.dtype, f"dtype {got.dtype}, torch {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=ATOL)


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_reference_matches_torch(c: Case) -> None:
    spec = get_spec(c.op)
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    arrays = [make_input(s, rng) for s in c.inputs]
    attrs = spec.normalize_attrs(c.attrs)
    spec.input_names(attrs, len(arrays))  # the case feeds the inputs the schema names
    got = spec.reference(*(a.copy() for a in arrays), **attrs)
    with torch.no_grad():
        expected = c.torch_fn(*(torch.from_numpy(a) for a in arrays))
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _check_output(g, e, c.rtol)
    else:
        _check_output(got, expected, c.rtol)


def test_every_registered_op_has_a_torch_case() -> None:
    ops = set(registered_ops())
    covered = {c.op for c in CASES}
    assert sorted(ops - covered - {OPAQUE}) == [], "ops without a case in this table"
    assert sorted(covered - ops) == [], "cases for ops that are not registered"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"


def test_opaque_reference_raises_execution_error() -> None:
    spec = get_spec(OPAQUE)
    attrs = spec.normalize_attrs({"target": "aten.frobnicate.default"})
    with pytest.raises(ExecutionError, match="aten.frobnicate.default"):
        spec.reference(np.ones(3), np.zeros(2), **attrs)
