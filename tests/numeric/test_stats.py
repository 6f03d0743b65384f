"""``measure``: the statistics of two arrays are those of a plain float64 computation,
whatever the arrays' memory layouts (transposed views are read where they lie) and sizes
(large ones are read once, in pieces)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specgraph.numeric.stats import Tolerance, measure


def _reference(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> tuple[float, float, float]:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    scale = math.sqrt(float(np.mean(a * a)))
    diff = np.abs(a - b)
    atol = tol.atol * scale
    bad = float(np.mean(diff > atol + tol.rtol * np.maximum(np.abs(a), np.abs(b))))
    return float(diff.max()), bad, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), shape=st.sampled_from([(3, 5), (4, 1, 6), (2, 3, 4, 5),
                                                   (256, 600), (3, 200, 300)]),
       noise=st.sampled_from([0.0, 1e-7, 1e-5, 1e-2]), perm_a=st.randoms(),
       perm_b=st.randoms())
def test_statistics_do_not_depend_on_memory_layout(seed, shape, noise, perm_a, perm_b):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32)
    b = (a + noise * rng.standard_normal(shape)).astype(np.float32)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    want = measure(a, b, tol)

    def stored(x: np.ndarray, order: list[int]) -> np.ndarray:
        """``x`` as a view of an array laid out in another axis order."""
        held = np.ascontiguousarray(np.transpose(x, order))
        return np.transpose(held, np.argsort(order))

    order_a = list(range(len(shape)))
    order_b = list(range(len(shape)))
    perm_a.shuffle(order_a)
    perm_b.shuffle(order_b)
    got = measure(stored(a, order_a), stored(b, order_b), tol)
    assert (got.max_abs, got.mismatch) == (want.max_abs, want.mismatch)
    assert got.scale == want.scale or math.isclose(got.scale, want.scale, rel_tol=1e-6)
    max_abs, bad, cosine = _reference(a, b, tol)  # float32 differences: within a rounding
    assert math.isclose(got.max_abs, max_abs, rel_tol=1e-6)
    assert abs(got.mismatch - bad) <= 1 / a.size
    assert math.isclose(got.cosine, cosine, rel_tol=1e-6)


def test_a_large_array_is_judged_by_its_every_element() -> None:
    """One element far into a large array, past the first pieces, decides its statistics;
    NaN and Inf there are seen too."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(1_000_003).astype(np.float32)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    assert measure(a, a.copy(), tol).max_abs == 0.0
    b = a.copy()
    b[987_654] += 0.5
    got = measure(a, b, tol)
    assert got.max_abs == np.float32(np.abs(a[987_654] - b[987_654]))
    assert got.mismatch == 1 / a.size and got.diverges
    for bad in (np.nan, np.inf):
        c = a.copy()
        c[999_999] = bad
        out = measure(a, c, tol)
        assert not out.rhs_finite and out.lhs_finite and out.diverges
