"""What a statement's values are: an attribute written in a spec as its canonical kind, and
a node's output shapes and dtypes, found by running the canonical op's NumPy reference on
zeros of its inputs' shapes (so every canonical op is a spec op), after refusing outputs the
attributes would make huge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from specgraph.errors import first_line
from specgraph.ir import Value
from specgraph.ops import get_spec
from specgraph.spec import shapes
from specgraph.spec.expr import ExprError, evaluate

__all__ = ["attribute", "infer", "listed"]


def attribute(kind: str, value: Any, env: Mapping[str, Any]) -> Any:
    """An attribute's value as its canonical kind (ExprError if it is not one)."""
    if value is None or kind in ("bool", "str", "floats"):
        return tuple(value) if isinstance(value, list) else value
    if kind == "float":
        return float(evaluate(value, env))
    if kind == "int":
        return _whole(evaluate(value, env), value)
    parts = shapes.tokens(value) if isinstance(value, str) else \
        value if isinstance(value, list) else [value]
    return tuple(_whole(evaluate(p, env), p) for p in parts)


def _whole(number: int | float, text: Any) -> int:
    if not float(number).is_integer() or abs(number) > shapes.MAX_SIZE:
        raise ExprError(f"{text!r} is {number:g}; write a whole number up to "
                        f"{shapes.MAX_SIZE:,}")
    return int(number)


def listed(items: list[tuple[int, ...]]) -> str:
    """Shapes as a message lists them."""
    return ", ".join(str(list(s)) for s in items) or "none"


def infer(op: str, args: list[Value], attrs: Mapping[str, Any]
          ) -> list[tuple[tuple[int, ...], str]]:
    """Output (shape, dtype) pairs of ``op`` on ``args``: its reference run on zeros, once
    per op, input shapes and attributes (a block repeated 12 times runs each op once).

    Raises:
        ExprError: the op refuses these shapes or attributes, or its output is too large.
    """
    signature = tuple((v.shape, v.dtype) for v in args)
    try:
        key = (op, signature, tuple(sorted(attrs.items())))
        hash(key)
    except TypeError:  # an attribute that is not hashable: no memo
        return _infer(op, args, attrs)
    return list(_memo(key, lambda: _infer(op, args, attrs)))


_MEMO: dict[Any, tuple[tuple[tuple[int, ...], str], ...]] = {}


def _memo(key: Any, compute: Any) -> tuple[tuple[tuple[int, ...], str], ...]:
    if key not in _MEMO:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        _MEMO[key] = tuple(compute())
    return _MEMO[key]


def _infer(op: str, args: list[Value], attrs: Mapping[str, Any]
           ) -> list[tuple[tuple[int, ...], str]]:
    _guard(op, args, attrs)
    arrays = [np.zeros(v.shape, dtype=np.float32 if v.dtype == "bfloat16" else v.dtype)
              for v in args]
    try:
        with np.errstate(all="ignore"):
            result = get_spec(op).reference(*arrays, **attrs)
    except Exception as err:  # noqa: BLE001  (the reference refuses these shapes)
        raise ExprError(f"cannot take inputs of shapes {listed([v.shape for v in args])}: "
                        f"{first_line(err)}; check the shapes it reads and its attributes"
                        ) from None
    outs = result if isinstance(result, tuple) else (result,)
    floats = [v.dtype for v in args if v.dtype.startswith(("float", "bfloat"))]
    out = []
    for array in outs:
        array = np.asarray(array)
        if array.size > shapes.MAX_ELEMENTS:
            raise ExprError(f"makes {array.size:,} elements, more than "
                            f"{shapes.MAX_ELEMENTS:,}; use smaller example sizes")
        kind = array.dtype.kind
        dtype = "bool" if kind == "b" else array.dtype.name if kind in "iu" else \
            attrs.get("dtype") or (floats[0] if floats else "float32")
        out.append((array.shape, dtype))
    return out


def _guard(op: str, args: list[Value], attrs: Mapping[str, Any]) -> None:
    """Refuse, before running it, an op whose output the attributes would make huge."""
    limit = shapes.MAX_ELEMENTS
    size = args[0].size if args else 1
    if op in ("reshape", "expand", "full") and math.prod(attrs["shape"]) > limit:
        raise ExprError(f"makes shape {list(attrs['shape'])}, more than {limit:,} elements")
    if op == "tile" and size * math.prod(attrs["repeats"]) > limit:
        raise ExprError(f"repeats {list(attrs['repeats'])} into more than {limit:,} elements")
    if op == "arange" and attrs["delta"] and \
            abs((attrs["limit"] - attrs["start"]) / attrs["delta"]) > limit:
        raise ExprError(f"makes a range of more than {limit:,} elements")
    if op == "pad" and any(abs(p) > shapes.MAX_SIZE for p in attrs["pads"]):
        raise ExprError("pads by more than any axis may hold")
    if op in ("matmul", "attention") and len(args) >= 2:
        a, b = args[0].shape, args[1].shape
        if len(a) >= 2 and len(b) >= 2 and \
                math.prod(a[:-1]) * (b[-1] if op == "matmul" else b[-2]) > limit * 4:
            raise ExprError(f"of shapes {list(a)} and {list(b)} makes too large a result")
