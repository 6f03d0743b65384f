"""Elementwise arithmetic, comparisons and casts (NumPy broadcasting, as ONNX)."""

from __future__ import annotations

import numpy as np
import sympy
from scipy import special

from specgraph.ops._sym import call, minus, plus
from specgraph.ops.dtypes import DTYPE_NAMES, numpy_dtype
from specgraph.ops.registry import Attr, op

BINARY = ("a", "b")



@op("add", BINARY, equation=plus, onnx="Add", commutative=True)
def add(a, b):
    """a + b."""
    return np.add(a, b)


@op("sub", BINARY, equation=minus, onnx="Sub")
def sub(a, b):
    """a - b."""
    return np.subtract(a, b)


@op("mul", BINARY, equation=lambda a, b: a * b, onnx="Mul", commutative=True)
def mul(a, b):
    """a * b (elementwise)."""
    return np.multiply(a, b)


def _div_eq(a, b, rounding=None):
    q = a / b
    return call(rounding, q) if rounding else q


@op(
    "div",
    BINARY,
    attrs={"rounding": Attr("str", None, optional=True, choices=("floor", "trunc"))},
    equation=_div_eq,
    onnx="Div",
)
def div(a, b, rounding=None):
    """a / b, optionally rounded toward -inf (floor) or zero (trunc).

    Rounded division follows PyTorch: ``floor`` is Python's ``//`` (``1.0 // 0.1 == 9``,
    where ``floor(1.0 / 0.1) == 10``) and integer inputs stay exact integers.
    """
    integer = np.issubdtype(np.result_type(a, b), np.integer)
    if rounding == "floor":
        return np.floor_divide(a, b)
    if rounding == "trunc":
        return _trunc_divide(a, b) if integer else np.trunc(np.true_divide(a, b))
    return np.true_divide(np.asarray(a, dtype=np.float64) if integer else a, b)


def _trunc_divide(a, b):
    """Integer a / b rounded toward zero, exactly (no detour through float64)."""
    q = np.floor_divide(a, b)
    inexact = np.remainder(a, b) != 0
    return q + (inexact & ((np.asarray(a) < 0) != (np.asarray(b) < 0))).astype(q.dtype)


@op("pow", BINARY, equation=lambda a, b: a**b, onnx="Pow")
def pow_(a, b):
    """a ** b."""
    return np.power(a, b)


@op("maximum", BINARY, equation=lambda a, b: call("max", a, b), onnx="Max",
    commutative=True)
def maximum(a, b):
    """max(a, b), elementwise; NaN propagates."""
    return np.maximum(a, b)


@op("minimum", BINARY, equation=lambda a, b: call("min", a, b), onnx="Min",
    commutative=True)
def minimum(a, b):
    """min(a, b), elementwise; NaN propagates."""
    return np.minimum(a, b)


def _unary(name, np_fn, equation, onnx=None, doc=""):
    op(name, equation=equation, onnx=onnx, doc=doc)(lambda x: np_fn(x))


_unary("neg", np.negative, lambda x: -x, "Neg", "-x.")
_unary("exp", np.exp, sympy.exp, "Exp", "e**x.")
_unary("log", np.log, sympy.log, "Log", "Natural logarithm.")
_unary("sqrt", np.sqrt, sympy.sqrt, "Sqrt", "Square root.")
_unary("rsqrt", lambda x: 1.0 / np.sqrt(x), lambda x: 1 / sympy.sqrt(x), None, "1 / sqrt(x).")
_unary("reciprocal", lambda x: 1.0 / np.asarray(x, dtype=np.float64), lambda x: 1 / x, "Reciprocal",
       "1 / x.")
_unary("abs", np.abs, lambda x: call("abs", x), "Abs", "|x|.")
_unary("erf", special.erf, sympy.erf, "Erf", "The error function.")
_unary("erfc", special.erfc, sympy.erfc, None,
       "The complementary error function, 1 - erf(x) (TF writes exact GELU with it).")
_unary("sin", np.sin, sympy.sin, "Sin", "Sine.")
_unary("cos", np.cos, sympy.cos, "Cos", "Cosine.")
_unary("floor", np.floor, sympy.floor, "Floor", "Round toward -inf.")
_unary("ceil", np.ceil, sympy.ceiling, "Ceil", "Round toward +inf.")
_unary("sign", np.sign, sympy.sign, "Sign", "Sign of x (-1, 0, 1).")
_unary("identity", lambda x: np.array(x, copy=True), lambda x: x, "Identity", "x unchanged.")
_unary("logical_not", np.logical_not, lambda x: call("not", x), "Not", "Boolean not.")


def _compare(name, np_fn, onnx):
    op(name, BINARY, equation=lambda a, b: call(name, a, b), onnx=onnx,
       commutative=name in ("equal", "not_equal", "logical_and", "logical_or"),
       doc=f"Boolean {name}(a, b).")(lambda a, b: np_fn(a, b))


_compare("equal", np.equal, "Equal")
_compare("not_equal", np.not_equal, None)
_compare("less", np.less, "Less")
_compare("less_equal", np.less_equal, "LessOrEqual")
_compare("greater", np.greater, "Greater")
_compare("greater_equal", np.greater_equal, "GreaterOrEqual")
_compare("logical_and", np.logical_and, "And")
_compare("logical_or", np.logical_or, "Or")


@op("prelu", ("x", "slope"), equation=lambda x, s: call("prelu", x, s), onnx="PRelu")
def prelu(x, slope):
    """x where x >= 0, else slope·x (``slope`` broadcast to x: one per channel, or one)."""
    x = np.asarray(x)
    return np.where(x >= 0, x, np.asarray(slope) * x)


@op("where", ("cond", "a", "b"), equation=lambda c, a, b: call("where", c, a, b), onnx="Where")
def where(cond, a, b):
    """a where cond is true, else b."""
    return np.where(np.asarray(cond, dtype=bool), a, b)


@op(
    "clip",
    attrs={
        "min": Attr("float", None, optional=True, doc="lower bound, or none"),
        "max": Attr("float", None, optional=True, doc="upper bound, or none"),
    },
    equation=lambda x, min=None, max=None: call("clip", x, min=min, max=max),
    onnx="Clip",
)
def clip(x, min=None, max=None):
    """x limited to [min, max] (relu6 and hardtanh are clips)."""
    out = np.asarray(x)
    if min is not None:
        out = np.maximum(out, min)
    if max is not None:
        out = np.minimum(out, max)
    return out


@op(
    "cast",
    attrs={"dtype": Attr("str", choices=DTYPE_NAMES, doc="target dtype")},
    equation=lambda x, dtype: call("cast", x, dtype=dtype),
    onnx="Cast",
)
def cast(x, dtype):
    """x converted to ``dtype`` (floating targets stay float64 in the reference interpreter)."""
    return np.asarray(x).astype(numpy_dtype(dtype))
