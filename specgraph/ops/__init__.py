"""The canonical op vocabulary: each op's attributes, NumPy reference and sympy rule."""

from __future__ import annotations

from specgraph.ops.registry import (
    OPAQUE,
    REQUIRED,
    Attr,
    OpSpec,
    get_spec,
    is_registered,
    op,
    register,
    registered_ops,
)

__all__ = [
    "OPAQUE",
    "REQUIRED",
    "Attr",
    "OpSpec",
    "get_spec",
    "is_registered",
    "op",
    "register",
    "registered_ops",
]
