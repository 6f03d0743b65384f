"""The IR's dtypes, defined once: every dtype, the floating ones, the integer ones."""

from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "DTYPE_NAMES", "FLOAT_DTYPES", "INT_DTYPES", "is_float", "numpy_dtype"]

_FLOATS = ("float64", "float32", "float16", "bfloat16")
_INTS = ("int64", "int32", "int16", "int8", "uint8")
DTYPE_NAMES = (*_FLOATS, *_INTS, "bool")  # in the order messages list them
DTYPES = frozenset(DTYPE_NAMES)
FLOAT_DTYPES = frozenset(_FLOATS)
INT_DTYPES = frozenset(_INTS)


def is_float(dtype: str) -> bool:
    """Whether IR dtype ``dtype`` is floating (``bfloat16`` included)."""
    return dtype in FLOAT_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype the reference interpreter uses for canonical ``dtype`` (floats: float64)."""
    if dtype in FLOAT_DTYPES:
        return np.dtype(np.float64)
    return np.dtype(dtype)
