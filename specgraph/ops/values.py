"""When two attribute values are the same: one rule for the whole of specgraph.

Floats are the same when they agree to 6 significant digits: a value written in float32 by
one framework and in float64 by another (an eps of 1e-5, a scale of 1/sqrt(8)) is one value,
while an eps of 1e-12 and one of 1e-13 are two. ``value_key`` gives the form in which two
values compare equal exactly when they are the same, so alignment can hash it and the diff
can compare it; NaN is the same as NaN, and infinities only as themselves.

Example:
    >>> same_value(1e-5, float(np.float32(1e-5))), same_value(1e-12, 1e-13)
    (True, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["SIGNIFICANT_DIGITS", "value_key", "same_value", "same_attrs", "same_numbers"]

SIGNIFICANT_DIGITS = 6


def value_key(value: Any) -> Any:
    """``value`` in the form two same values share (floats rounded to significant digits,
    tuples element by element); hashable whenever ``value`` is."""
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isnan(x):
            return "nan"
        return float(f"{x:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(x) else x
    if isinstance(value, (tuple, list)):
        return tuple(value_key(v) for v in value)
    return value


def same_value(a: Any, b: Any) -> bool:
    """Whether two attribute values are the same (see the module docstring)."""
    return value_key(a) == value_key(b)


def same_attrs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two attribute dicts have the same keys and the same value for each."""
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def same_numbers(x: Any, y: Any) -> bool:
    """Whether two constant tensors hold the same numbers, a float32 rounding apart."""
    a, b = np.asarray(x), np.asarray(y)
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    a, b = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)) or \
            not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return False
    scale = float(np.max(np.abs(a[finite]), initial=0.0))
    return bool(np.allclose(a[finite], b[finite], rtol=1e-5, atol=1e-6 * scale))
