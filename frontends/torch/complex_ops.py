"""Complex tensors as pairs of real ones, for the PyTorch frontend.

Meta's Llama rotates query and key pairs as complex numbers: ``view_as_complex`` of the
pairs, a product with ``polar(1, angles)``, ``view_as_real``. The graph has no complex
dtype; here a complex tensor is its real and imaginary parts, each shaped like it with a
trailing axis of size 1 (``view_as_complex`` slices the pair axis, ``view_as_real``
concatenates them back), and complex products, sums and ``polar`` are written in real
arithmetic: (a + ib)(c + id) = (ac - bd) + i(ad + bc). A complex constant (``polar`` of
constants, folded by the tracer) becomes two real constants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from specgraph.errors import TraceError
from specgraph.frontends._common.table import Converter
from specgraph.ir import Value

__all__ = ["ComplexPair", "with_complex"]

_PARTS = {torch.complex64: "float32", torch.complex128: "float64"}


class ComplexPair(NamedTuple):
    """A complex tensor of shape S as two real tensors of shape S + (1,)."""

    re: Value
    im: Value


def _is_complex(cx: Any, arg: Any) -> bool:
    if not hasattr(arg, "name"):
        return isinstance(arg, complex)
    if isinstance(cx.env.get(arg.name), ComplexPair):
        return True
    static = cx.static.get(arg.name)
    return isinstance(static, torch.Tensor) and static.is_complex()


def _parts_dtype(cx: Any, node: Any) -> str:
    dtype = node.meta["val"].dtype
    if dtype not in _PARTS:
        raise TraceError(f"{cx._at()}complex dtype {dtype} is not supported by specgraph")
    return _PARTS[dtype]


def _pair(cx: Any, arg: Any, dtype: str) -> tuple[Value, Value | None]:
    """``arg`` as (real part, imaginary part or None for a real operand), trailing axis 1."""
    if not hasattr(arg, "name"):
        value = complex(arg)
        return (cx.b.constant(np.array(value.real, dtype=dtype), dtype),
                cx.b.constant(np.array(value.imag, dtype=dtype), dtype) if value.imag else None)
    found = cx.env.get(arg.name)
    if isinstance(found, ComplexPair):
        return found
    static = cx.static.get(arg.name)
    if isinstance(static, torch.Tensor) and static.is_complex():
        data = static.detach().cpu().resolve_conj().numpy()[..., None]
        return (cx.b.constant(np.ascontiguousarray(data.real, dtype=dtype), dtype),
                cx.b.constant(np.ascontiguousarray(data.imag, dtype=dtype), dtype))
    value = cx.operand(arg, dtype)
    if value.rank == 0:
        return value, None
    shape = (*value.shape, 1)
    return cx.emit("reshape", [value], {"shape": shape}, out=(shape, value.dtype)), None


def _shape(*values: Value | None) -> tuple[int, ...]:
    return tuple(int(s) for s in np.broadcast_shapes(*(v.shape for v in values if v)))


def _arith(cx: Any, op: str, a: Value, b: Value) -> Value:
    return cx.emit(op, [a, b], out=(_shape(a, b), a.dtype))


def _mul(cx: Any, x: tuple[Value, Value | None], y: tuple[Value, Value | None]
         ) -> ComplexPair:
    (a, b), (c, d) = x, y
    if b is None:
        (a, b), (c, d) = (c, d), (a, b)
    if d is None:  # (a + ib)·c
        return ComplexPair(_arith(cx, "mul", a, c), _arith(cx, "mul", b, c))
    re = _arith(cx, "sub", _arith(cx, "mul", a, c), _arith(cx, "mul", b, d))
    return ComplexPair(re, _arith(cx, "add", _arith(cx, "mul", a, d), _arith(cx, "mul", b, c)))


def _add_sub(cx: Any, op: str, x: tuple[Value, Value | None], y: tuple[Value, Value | None]
             ) -> ComplexPair:
    (a, b), (c, d) = x, y
    re = _arith(cx, op, a, c)
    if b is None or d is None:
        im = b if d is None else (d if op == "add" else cx.emit("neg", [d], out=(d.shape,
                                                                                d.dtype)))
        if im.shape != re.shape:
            im = cx.emit("expand", [im], {"shape": re.shape}, out=(re.shape, im.dtype))
        return ComplexPair(re, im)
    return ComplexPair(re, _arith(cx, op, b, d))


def _view_as_complex(cx: Any, node: Any) -> ComplexPair:
    x = cx.value(node.args[0])
    axis = x.rank - 1
    shape = (*x.shape[:-1], 1)
    parts = [cx.emit("slice", [x], {"axes": (axis,), "starts": (i,), "ends": (i + 1,),
                                    "steps": (1,)}, out=(shape, x.dtype)) for i in (0, 1)]
    return ComplexPair(*parts)


def _view_as_real(cx: Any, node: Any) -> Value:
    z = cx.env.get(node.args[0].name)
    if not isinstance(z, ComplexPair):
        z = ComplexPair(*_pair(cx, node.args[0], _parts_dtype(cx, node.args[0])))
    return cx.emit("concat", [z.re, z.im], {"axis": z.re.rank - 1})


def _polar(cx: Any, node: Any) -> ComplexPair:
    dtype = _parts_dtype(cx, node)
    magnitude, angle = (_pair(cx, a, dtype)[0] for a in node.args[:2])
    cos = cx.emit("cos", [angle], out=(angle.shape, dtype))
    sin = cx.emit("sin", [angle], out=(angle.shape, dtype))
    return ComplexPair(_arith(cx, "mul", magnitude, cos), _arith(cx, "mul", magnitude, sin))


def _complex_aware(op: str, real: Converter) -> Converter:
    """``real`` unless an operand is complex; then the complex ``op`` on real pairs."""

    def convert(cx: Any, node: Any) -> Any:
        a, b = node.args[0], node.args[1]
        if not (_is_complex(cx, a) or _is_complex(cx, b)):
            return real(cx, node)
        alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
        if alpha != 1:
            raise TraceError(f"{cx._at()}a complex {op} with alpha={alpha} is not supported")
        dtype = _parts_dtype(cx, node)
        x, y = _pair(cx, a, dtype), _pair(cx, b, dtype)
        return _mul(cx, x, y) if op == "mul" else _add_sub(cx, op, x, y)

    return convert


def with_complex(table: Mapping[str, Converter]) -> dict[str, Converter]:
    """``table`` with complex products and sums, ``view_as_complex``, ``view_as_real`` and
    ``polar`` converted on pairs of real tensors."""
    out = dict(table)
    for name, real in table.items():
        op = name.split(".")[1].rstrip("_")
        if op in ("mul", "add", "sub") and name.split(".")[2] in ("Tensor", "Scalar"):
            out[name] = _complex_aware(op, real)
    out["aten.view_as_complex.default"] = _view_as_complex
    out["aten.view_as_real.default"] = _view_as_real
    out["aten.polar.default"] = _polar
    return out
