"""Shapes as researchers write them: ``"B T d_model"`` (jaxtyping-like, each part a size or an
expression over sizes) and einops patterns (``"B T (heads d_head) -> B heads T d_head"``)
turned into canonical reshape and transpose steps.

Example:
    >>> shape("B T 4*d", {"B": 2, "T": 8, "d": 16})
    (2, 8, 64)
    >>> [(op, attrs) for op, attrs, _ in rearrange("b t (h d) -> b h t d", (2, 8, 32), {"h": 4})]
    [('reshape', {'shape': (2, 8, 4, 8)}), ('transpose', {'perm': (0, 2, 1, 3)})]
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from specgraph.spec.expr import ExprError, evaluate

__all__ = ["MAX_SIZE", "MAX_ELEMENTS", "size", "shape", "tokens", "rearrange", "Step"]

MAX_SIZE = 1 << 24  # one axis
MAX_ELEMENTS = 1 << 24  # one tensor (the interpreter holds it in float64)

Step = tuple[str, dict[str, Any], tuple[int, ...]]


def size(value: Any, names: Mapping[str, int | float], *, low: int = 1) -> int:
    """A size: a whole number from ``low`` to MAX_SIZE, given as a number or an expression."""
    number = evaluate(value, names)
    if float(number) != math.floor(number):
        raise ExprError(f"{value!r} is {number:g}, not a whole number; a size is a whole number")
    if not low <= number <= MAX_SIZE:
        raise ExprError(f"{value!r} is {int(number):,}; a size here is a whole number from "
                        f"{low} to {MAX_SIZE:,}")
    return int(number)


def tokens(text: str) -> list[str]:
    """``text`` split at spaces outside parentheses: ``"B (T + 1) d"`` -> 3 parts."""
    parts: list[str] = []
    depth, current = 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char.isspace() and depth == 0:
            if current:
                parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return parts


def shape(value: Any, names: Mapping[str, int | float], *, low: int = 1) -> tuple[int, ...]:
    """A shape: ``"B T d_model"``, a list of sizes, or one size."""
    if isinstance(value, str):
        parts: list[Any] = tokens(value)
    elif isinstance(value, list):
        parts = value
    else:
        parts = [value]
    out = tuple(size(p, names, low=low) for p in parts)
    if math.prod(out) > MAX_ELEMENTS:
        raise ExprError(f"{list(out)} holds {math.prod(out):,} elements, more than the "
                        f"{MAX_ELEMENTS:,} a spec's tensors may hold; use smaller example sizes")
    return out


_TOKEN = re.compile(r"\s*(\(|\)|->|[A-Za-z_][A-Za-z0-9_]*|1|\.\.\.|\S)")


def _side(text: str, pattern: str) -> list[list[str]]:
    """One side of a pattern as groups of axis names (a unit axis ``1`` or ``()`` is [])."""
    groups: list[list[str]] = []
    group: list[str] | None = None
    for token in _TOKEN.findall(text):
        if token == "(":
            if group is not None:
                raise ExprError(f"{pattern!r} nests parentheses; group axes one level deep")
            group = []
        elif token == ")":
            if group is None:
                raise ExprError(f"{pattern!r} closes a parenthesis it did not open")
            groups.append(group)
            group = None
        elif token == "1":
            if group is None:
                groups.append([])
        elif token == "...":
            raise ExprError(f"{pattern!r} uses ...; name every axis (B T d)")
        elif token.isidentifier():
            if group is None:
                groups.append([token])
            else:
                group.append(token)
        else:
            raise ExprError(f"{pattern!r} holds {token!r}; a pattern is axis names, 1 and "
                            "parenthesized groups on both sides of ->")
    if group is not None:
        raise ExprError(f"{pattern!r} leaves a parenthesis open")
    return groups


def _names(groups: list[list[str]], side: str, pattern: str) -> list[str]:
    flat = [n for g in groups for n in g]
    twice = sorted({n for n in flat if flat.count(n) > 1})
    if twice:
        raise ExprError(f"{pattern!r} names {twice[0]} twice on the {side}; every axis once")
    return flat


def rearrange(pattern: str, in_shape: tuple[int, ...], sizes: Mapping[str, int]
              ) -> list[Step]:
    """The canonical steps (op, attrs, output shape) that rearrange an ``in_shape`` tensor
    by the einops ``pattern``: a reshape into single axes where the left side groups them,
    a transpose, and a reshape into the right side's groups. Axis sizes come from
    ``sizes`` where named there, else from the input's shape."""
    left, arrow, right = pattern.partition("->")
    if not arrow or "->" in right:
        raise ExprError(f"{pattern!r} is no einops pattern; write it as 'b t (h d) -> b h t d'")
    lhs, rhs = _side(left, pattern), _side(right, pattern)
    lnames, rnames = _names(lhs, "left", pattern), _names(rhs, "right", pattern)
    for a, b, side in ((lnames, rnames, "right"), (rnames, lnames, "left")):
        missing = [n for n in a if n not in b]
        if missing:
            raise ExprError(f"{pattern!r}: {missing[0]} is not on the {side} side; rearrange "
                            "moves axes, so both sides name the same axes")
    if len(lhs) != len(in_shape):
        raise ExprError(f"{pattern!r}: the left side has {len(lhs)} axes but the input has "
                        f"{len(in_shape)} ({list(in_shape)})")
    bound = _bind(lhs, in_shape, sizes, pattern)
    steps: list[Step] = []
    current = in_shape
    singles = tuple(bound[n] for n in lnames)
    if singles != current:
        steps.append(("reshape", {"shape": singles}, singles))
        current = singles
    perm = tuple(lnames.index(n) for n in rnames)
    if perm != tuple(range(len(perm))):
        current = tuple(current[p] for p in perm)
        steps.append(("transpose", {"perm": perm}, current))
    final = tuple(math.prod(bound[n] for n in g) for g in rhs)
    if final != current:
        steps.append(("reshape", {"shape": final}, final))
    return steps


def _bind(groups: list[list[str]], in_shape: tuple[int, ...], sizes: Mapping[str, int],
          pattern: str) -> dict[str, int]:
    bound: dict[str, int] = {}
    for group, dim in zip(groups, in_shape):
        known = [n for n in group if n in sizes]
        unknown = [n for n in group if n not in sizes]
        product = math.prod(int(sizes[n]) for n in known)
        bound.update((n, int(sizes[n])) for n in known)
        text = f"({' '.join(group)})" if len(group) != 1 else group[0]
        if not unknown:
            if product != dim:
                raise ExprError(f"{pattern!r}: {text} is {product} but the input's axis is "
                                f"{dim}; fix the sizes or the pattern")
        elif len(unknown) == 1 and product and dim % product == 0:
            bound[unknown[0]] = dim // product
        elif len(unknown) == 1:
            raise ExprError(f"{pattern!r}: the input's axis {dim} does not split into {text} "
                            f"with {' '.join(known)} = {product}")
        else:
            raise ExprError(f"{pattern!r}: {text} splits an axis of {dim} into "
                            f"{len(unknown)} unknown sizes; give all but one in sizes: or as "
                            "hyperparameters")
    return bound
