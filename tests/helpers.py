"""Small helpers the tests share."""

from __future__ import annotations

import numpy as np


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|, in float64: how the tests measure "within 1e-5"."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return float(np.max(np.abs(got - want))) / scale
