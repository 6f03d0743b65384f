"""Helpers for the sympy rules of ops: named functions that carry their attributes."""

from __future__ import annotations

from typing import Any

import sympy

__all__ = ["call", "fn", "literal", "plus", "minus"]


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def fn(name: str, **attrs: Any) -> Any:
    """A sympy function class named ``name`` whose printed form shows ``attrs``."""
    shown = tuple(sorted((k, _hashable(v)) for k, v in attrs.items() if v is not None))
    return sympy.Function(name, sg_attrs=shown)


def call(name: str, *args: Any, **attrs: Any) -> Any:
    """``name(args; attrs)`` as a sympy expression."""
    return fn(name, **attrs)(*args)


def literal(value: float) -> Any:
    """A number as sympy shows it: integers exactly, other floats to 6 significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return sympy.Integer(int(value))
    return sympy.Float(float(f"{value:.6g}"), 6)


def plus(a: Any, b: Any) -> Any:
    """``a + b`` kept in graph order (``x·W + b``, not sympy's sorted ``b + x·W``)."""
    return sympy.Add(a, b, evaluate=False)


def minus(a: Any, b: Any) -> Any:
    """``a - b`` kept in graph order."""
    return sympy.Add(a, sympy.Mul(-1, b, evaluate=False), evaluate=False)
