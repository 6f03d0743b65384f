"""JAX primitive -> canonical op converters: elementwise, casts, reductions and dot_general.

Each converter takes the converter state ``cx`` (``specgraph.frontends.jax.walk``) and one
jaxpr equation, and returns the IR value(s) of the equation's outputs. The shape, layout
and pooling primitives are in ``shape_ops`` and ``layers``. ``FOLDERS`` computes small
constants at trace time.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from specgraph.frontends._common.table import Converter, ConverterTable
from specgraph.frontends.jax.walk import Folder, dtype_name
from specgraph.ir import Value
from specgraph.ops.dtypes import INT_DTYPES

__all__ = ["CONVERTERS", "FOLDERS"]

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register

# --- elementwise -------------------------------------------------------------------------
_UNARY = {
    "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
    "logistic": "sigmoid", "erf": "erf", "abs": "abs", "sign": "sign", "floor": "floor",
    "ceil": "ceil", "sin": "sin", "cos": "cos", "copy": "identity", "copy_p": "identity",
    "stop_gradient": "identity", "sharding_constraint": "identity", "mesh_cast": "identity",
    "reshard": "identity", "pvary": "identity",
}


def _unary(canonical: str) -> Converter:
    def convert(cx: Any, eqn: Any) -> Any:
        return cx.emit(canonical, [cx.value(eqn.invars[0])])

    return convert


for _name, _canonical in _UNARY.items():
    CONVERTERS[_name] = _unary(_canonical)

_BINARY = {
    "add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "max": "maximum",
    "min": "minimum", "pow": "pow", "eq": "equal", "ne": "not_equal", "lt": "less",
    "le": "less_equal", "gt": "greater", "ge": "greater_equal",
}


def _binary(canonical: str) -> Converter:
    def convert(cx: Any, eqn: Any) -> Any:
        a, b = eqn.invars
        return cx.emit(canonical, [cx.value(a), cx.value(b)])

    return convert


for _name, _canonical in _BINARY.items():
    CONVERTERS[_name] = _binary(_canonical)


def _is_bool(var: Any) -> bool:
    return dtype_name(var.aval.dtype) == "bool"


def _is_int(var: Any) -> bool:
    return dtype_name(var.aval.dtype) in INT_DTYPES


@_reg("div")
def _div(cx: Any, eqn: Any) -> Any:
    a, b = eqn.invars
    attrs = {"rounding": "trunc"} if _is_int(eqn.outvars[0]) else {}
    return cx.emit("div", [cx.value(a), cx.value(b)], attrs)


_LOGICAL = {"and": "logical_and", "or": "logical_or", "xor": "not_equal", "not": "logical_not"}


@_reg("and", "or", "xor", "not")
def _logical(cx: Any, eqn: Any) -> Any:
    """Boolean logic; on integers these primitives are bitwise, which has no canonical op."""
    if not all(_is_bool(v) for v in eqn.invars):
        return cx.opaque()
    return cx.emit(_LOGICAL[eqn.primitive.name], [cx.value(v) for v in eqn.invars])


@_reg("integer_pow")
def _integer_pow(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("pow", [x, cx.scalar(eqn.params["y"], x.dtype)])


@_reg("square")
def _square(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("mul", [x, x])


@_reg("exp2")
def _exp2(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("pow", [cx.scalar(2.0, x.dtype), x])


@_reg("log1p")
def _log1p(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    one_plus = cx.emit("add", [x, cx.scalar(1.0, x.dtype)])
    return cx.emit("log", [one_plus])


@_reg("expm1")
def _expm1(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("sub", [cx.emit("exp", [x]), cx.scalar(1.0, x.dtype)])


@_reg("erfc")
def _erfc(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("sub", [cx.scalar(1.0, x.dtype), cx.emit("erf", [x])])


@_reg("select_n")
def _select_n(cx: Any, eqn: Any) -> Any:
    """``select_n(p, a, b)`` is ``b`` where ``p`` is true (or 1), else ``a``."""
    pred, *cases = eqn.invars
    if len(cases) == 1:
        return cx.emit("identity", [cx.value(cases[0])])
    if len(cases) != 2:
        return cx.opaque()
    return cx.emit("where", [cx.value(pred), cx.value(cases[1]), cx.value(cases[0])])


@_reg("clamp")
def _clamp(cx: Any, eqn: Any) -> Any:
    lo, x, hi = eqn.invars
    lo_known, hi_known = cx.known(lo), cx.known(hi)
    if (lo_known is not None and hi_known is not None and lo_known.size == 1
            and hi_known.size == 1 and not _is_int(x)):
        return cx.emit("clip", [cx.value(x)], {"min": float(lo_known), "max": float(hi_known)})
    low = cx.emit("maximum", [cx.value(x), cx.value(lo)])
    return cx.emit("minimum", [low, cx.value(hi)])


@_reg("convert_element_type")
def _convert(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    shape, dtype = cx.out()
    if dtype == x.dtype:
        return cx.emit("identity", [x])
    return cx.emit("cast", [x], {"dtype": dtype})


_PRECISION_BITS = {"float64": (11, 52), "float32": (8, 23), "bfloat16": (8, 7),
                   "float16": (5, 10)}


@_reg("reduce_precision")
def _reduce_precision(cx: Any, eqn: Any) -> Any:
    """A no-op when it rounds to the precision the value already has."""
    x = cx.value(eqn.invars[0])
    bits = (eqn.params["exponent_bits"], eqn.params["mantissa_bits"])
    if _PRECISION_BITS.get(x.dtype) == bits:
        return cx.emit("identity", [x])
    return cx.opaque()


@_reg("optimization_barrier", "device_put")
def _pass_through(cx: Any, eqn: Any) -> Any:
    return tuple(cx.emit("identity", [cx.value(v)], out=cx.aval(v)) for v in eqn.invars)


# --- reductions --------------------------------------------------------------------------
_REDUCE = {"reduce_sum": "reduce_sum", "reduce_max": "reduce_max", "reduce_min": "reduce_min",
           "reduce_prod": "reduce_prod"}


def _reduction(canonical: str) -> Converter:
    def convert(cx: Any, eqn: Any) -> Any:
        axes = tuple(sorted(int(a) for a in eqn.params["axes"]))
        return cx.emit(canonical, [cx.value(eqn.invars[0])], {"axes": axes, "keepdims": False})

    return convert


for _name, _canonical in _REDUCE.items():
    CONVERTERS[_name] = _reduction(_canonical)


@_reg("argmax", "argmin")
def _argmax(cx: Any, eqn: Any) -> Any:
    axes = eqn.params["axes"]
    if len(axes) != 1:
        return cx.opaque()
    return cx.emit(eqn.primitive.name, [cx.value(eqn.invars[0])],
                   {"axis": int(axes[0]), "keepdims": False})


@_reg("cumsum")
def _cumsum(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    axis = int(eqn.params["axis"])
    if not eqn.params.get("reverse", False):
        return cx.emit("cumsum", [x], {"axis": axis})
    flipped = cx.emit("flip", [x], {"axes": (axis,)})
    summed = cx.emit("cumsum", [flipped], {"axis": axis})
    return cx.emit("flip", [summed], {"axes": (axis,)})


# --- dot_general -------------------------------------------------------------------------
def _is_matmul(lhs_rank: int, rhs_rank: int, dims: Any) -> bool:
    """Whether dot_general with these dimension numbers is NumPy's ``matmul``: batch axes
    leading on both sides, lhs contracts its last axis with rhs' first non-batch axis."""
    (lc, rc), (lb, rb) = dims
    nb = len(lb)
    if tuple(lb) != tuple(range(nb)) or tuple(rb) != tuple(range(nb)):
        return False
    if tuple(lc) != (lhs_rank - 1,) or tuple(rc) != (nb,):
        return False
    if nb == 0:
        return rhs_rank in (1, 2) and lhs_rank >= 1
    return rhs_rank == nb + 2 and lhs_rank == nb + 2


def einsum_equation(lhs_rank: int, rhs_rank: int, dims: Any) -> str:
    """The einsum subscripts of dot_general: output is batch, lhs free, rhs free axes."""
    (lc, rc), (lb, rb) = dims
    letters = iter(string.ascii_letters)
    lhs = [next(letters) for _ in range(lhs_rank)]
    rhs: list[str] = [""] * rhs_rank
    for l_axis, r_axis in zip((*lb, *lc), (*rb, *rc)):
        rhs[int(r_axis)] = lhs[int(l_axis)]
    for i in range(rhs_rank):
        rhs[i] = rhs[i] or next(letters)
    used_l = {int(a) for a in (*lb, *lc)}
    used_r = {int(a) for a in (*rb, *rc)}
    out = [lhs[int(a)] for a in lb]
    out += [lhs[i] for i in range(lhs_rank) if i not in used_l]
    out += [rhs[i] for i in range(rhs_rank) if i not in used_r]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@_reg("dot_general")
def _dot_general(cx: Any, eqn: Any) -> Any:
    lhs, rhs = eqn.invars
    dims = eqn.params["dimension_numbers"]
    lr, rr = len(lhs.aval.shape), len(rhs.aval.shape)
    a, b = cx.value(lhs), cx.value(rhs)
    if _is_matmul(lr, rr, dims):
        return cx.emit("matmul", [a, b])
    return cx.emit("einsum", [a, b], {"equation": einsum_equation(lr, rr, dims)})


# --- control flow with a branch known at trace time --------------------------------------
@_reg("cond")
def _cond(cx: Any, eqn: Any) -> Any:
    index = cx.known(eqn.invars[0])
    if index is None:
        return cx.opaque()
    branches = eqn.params["branches"]
    branch = branches[int(np.clip(int(index), 0, len(branches) - 1))]
    return cx.call_body(branch, [cx.atom(v) for v in eqn.invars[1:]], eqn)


# --- small constants known at trace time (see JaxprConverter.fold) ----------------------
def _fold_broadcast(a: np.ndarray, shape: Any, broadcast_dimensions: Any, **_: Any) -> Any:
    aligned = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        aligned[int(d)] = a.shape[i]
    return np.broadcast_to(np.reshape(a, aligned), tuple(shape))


FOLDERS: dict[str, Folder] = {
    "convert_element_type": lambda a, new_dtype, **_: a.astype(new_dtype),
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": lambda a, b: np.maximum(a, b), "min": lambda a, b: np.minimum(a, b),
    "neg": lambda a: -a, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "select_n": lambda p, *cases: np.choose(p.astype(np.int64), cases),
    "broadcast_in_dim": _fold_broadcast,
    "reshape": lambda a, new_sizes, **_: np.reshape(a, tuple(new_sizes)),
    "squeeze": lambda a, dimensions: np.squeeze(a, tuple(int(d) for d in dimensions)),
    "copy": lambda a: a, "copy_p": lambda a: a,
}


# --- sorting ---------------------------------------------------------------------------
def _positions_along(shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Each element's position along ``axis`` (an iota of that dimension)."""
    at = [1] * len(shape)
    at[axis] = shape[axis]
    return np.broadcast_to(np.arange(shape[axis]).reshape(at), shape)


@_reg("sort")
def _sort(cx: Any, eqn: Any) -> Any:
    """``lax.sort`` by its first operand (``num_keys=1``: ``jnp.sort``, ``jnp.argsort``): the
    canonical stable ``argsort`` of it, and each operand gathered at those indices; an
    operand that is the positions along the axis (``jnp.argsort``'s iota) gives the indices
    themselves, and one that is those positions reversed (a descending ``jnp.argsort``
    sorts the reversed input with them) gives ``n - 1 -`` the indices."""
    from specgraph.frontends._common.points import emit_along_gather

    axis, keys = int(eqn.params["dimension"]), int(eqn.params["num_keys"])
    if keys != 1:
        return cx.opaque()
    x = cx.value(eqn.invars[0])
    shape = tuple(x.shape)
    axis %= len(shape)
    index = cx.emit("argsort", [x], {"axis": axis, "descending": False},
                    out=(shape, "int64"))
    steps = _positions_along(shape, axis)
    outs = []
    for k, v in enumerate(eqn.invars):
        dtype = cx.out(k)[1]
        known = None
        if k:  # an iota is arange nodes, computed from constants alone
            known = cx.known(v)
            if known is None and isinstance(cx.atom(v), Value):
                known = cx.b.constant_of(cx.atom(v))
        if known is not None and known.shape == shape and np.array_equal(known, steps):
            found = index
        elif known is not None and known.shape == shape and \
                np.array_equal(known, shape[axis] - 1 - steps):
            found = cx.emit("sub", [cx.constant(np.asarray(shape[axis] - 1, np.int64)), index],
                            out=(shape, "int64"))
        else:
            outs.append(emit_along_gather(cx, cx.value(v), index, axis, shape, cx.constant))
            continue
        outs.append(found if dtype == "int64" else
                    cx.emit("cast", [found], {"dtype": dtype}, out=(shape, dtype)))
    return tuple(outs)


@_reg("top_k")
def _top_k(cx: Any, eqn: Any) -> Any:
    """``lax.top_k``: the canonical descending ``argsort`` (equal values in index order:
    stable) cut to the first k, and the operand gathered at those indices."""
    from specgraph.frontends._common.points import emit_top_k

    x = cx.value(eqn.invars[0])
    axis = int(eqn.params.get("axis", x.rank - 1)) % x.rank
    return emit_top_k(cx, x, axis, int(eqn.params["k"]), True, cx.constant, cx.out(1)[1])
