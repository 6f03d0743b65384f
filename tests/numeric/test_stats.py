"""``measure``: the statistics of two arrays are those of a plain float64 computation,
whatever the arrays' memory layouts (transposed views are read where they lie) and sizes
(large ones are read once, in pieces)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specgraph.numeric.stats import Tolerance, _in_one_order, _tiled_pass, measure


def _reference(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> tuple[float, float, float]:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    scale = math.sqrt(float(np.mean(a * a)))
    diff = np.abs(a - b)
    atol = tol.atol * scale
    bad = float(np.mean(diff > atol + tol.rtol * np.maximum(np.abs(a), np.abs(b))))
    return float(diff.max()), bad, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _on_the_bound(a: np.ndarray, b: np.ndarray, tol: Tolerance, rel: float) -> int:
    """How many elements lie within ``rel`` of their bound, atol·scale + rtol·max(|a|, |b|)."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    bound = tol.atol * math.sqrt(float(np.mean(a * a))) + tol.rtol * np.maximum(abs(a), abs(b))
    return int(np.count_nonzero(np.abs(np.abs(a - b) - bound) <= rel * bound))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), shape=st.sampled_from([(3, 5), (4, 1, 6), (2, 3, 4, 5),
                                                   (256, 600), (3, 200, 300), (300, 2100),
                                                   (2, 260, 45, 46), (16, 32, 3, 3)]),
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
    assert got.max_abs == want.max_abs
    assert got.scale == want.scale or math.isclose(got.scale, want.scale, rel_tol=1e-6)
    # the scale is a sum, rounded in the order each layout is read: the count of elements
    # outside the tolerance may differ only by those that lie on it within that rounding
    on_the_bound = _on_the_bound(a, b, tol, rel=1e-6)
    assert abs(got.mismatch - want.mismatch) * a.size <= on_the_bound
    max_abs, bad, cosine = _reference(a, b, tol)  # float32 differences: within a rounding
    assert math.isclose(got.max_abs, max_abs, rel_tol=1e-6)
    assert abs(got.mismatch - bad) * a.size <= max(1, on_the_bound)
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


def _assert_measured_as(x: np.ndarray, y: np.ndarray, cx: np.ndarray, cy: np.ndarray,
                        tol: Tolerance) -> None:
    """``x`` against ``y`` (one of them in another memory order) measures as the contiguous
    ``cx`` against ``cy``, a divergence included, and so do they swapped."""
    want, got = measure(cx, cy, tol), measure(x, y, tol)
    assert (got.max_abs, got.mismatch) == (want.max_abs, want.mismatch) and got.diverges
    assert math.isclose(got.cosine, want.cosine, rel_tol=1e-6)
    assert math.isclose(got.scale, want.scale, rel_tol=1e-6)
    back, want_back = measure(y, x, tol), measure(cy, cx, tol)
    assert (back.max_abs, back.mismatch) == (want_back.max_abs, want_back.mismatch)


def test_a_transposed_kernel_and_channels_last_are_walked_in_blocks() -> None:
    """A linear's gradient in PyTorch's layout against JAX's, and channels-last activations
    against channels-first, are read block by block (both in cache), with the statistics of
    the contiguous pair; a wrong element deep inside is seen."""
    rng = np.random.default_rng(4)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    for shape, memory in (((768, 2304), (1, 0)), ((2, 300, 40, 60), (0, 2, 3, 1))):
        a = rng.standard_normal(shape).astype(np.float32)
        b = (a + 1e-6 * rng.standard_normal(shape)).astype(np.float32)
        b.flat[a.size - 12345] += 0.25
        held = np.transpose(np.ascontiguousarray(np.transpose(a, memory)), np.argsort(memory))
        assert _tiled_pass(held, b) is not None and _tiled_pass(b, held) is not None
        _assert_measured_as(held, b, a, b, tol)


def test_blocks_are_read_along_the_shorter_runs_whichever_side_is_transposed() -> None:
    """fc1's gradient (3072x768) and fc2's (768x3072), each in PyTorch's layout against
    JAX's, on either side: the walk reads across the shorter runs (768 floats apart; 3072
    apart the strides alias in the cache and the pass takes twice as long), with the
    statistics of the contiguous pair either way."""
    from specgraph.numeric.stats import _tile_plan

    rng = np.random.default_rng(9)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    for shape in ((3072, 768), (768, 3072)):
        a = rng.standard_normal(shape).astype(np.float32)
        b = (a + 1e-6 * rng.standard_normal(shape)).astype(np.float32)
        held = np.ascontiguousarray(a.T).T
        for x, y in ((held, b), (b, held)):
            swap, order, merged, strides, axes = _tile_plan(x.shape, x.strides, y.strides,
                                                            x.itemsize)
            assert merged[axes[-2]] <= merged[axes[-1]] == 3072
        _assert_measured_as(held, b, a, b, tol)
        _assert_measured_as(b, held, b, a, tol)


def test_elements_outside_the_tolerance_are_counted_in_pieces_in_any_layout() -> None:
    """Two arrays apart everywhere (a layer past a real bug), in one layout or two: every
    element outside atol + rtol·max(|a|, |b|) is counted, as a plain float32 count does."""
    rng = np.random.default_rng(10)
    tol = Tolerance(rtol=1e-3, atol=1e-4)
    a = rng.standard_normal((2, 64, 40, 50)).astype(np.float32)
    b = (a * (1 + 1e-3 * rng.standard_normal(a.shape))).astype(np.float32)
    scale = np.float32(math.sqrt(float(np.mean(a.astype(np.float64) ** 2))))
    bound = np.float32(tol.atol * float(scale)) + np.float32(tol.rtol) * np.maximum(abs(a),
                                                                                    abs(b))
    want = int(np.count_nonzero(np.abs(a - b) > bound))
    assert 0.1 < want / a.size < 0.9
    def channels_last(x: np.ndarray) -> np.ndarray:
        return np.transpose(np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1))), (0, 3, 1, 2))

    for x, y in ((a, b), (a, channels_last(b)), (channels_last(a), b)):
        got = measure(x, y, tol)
        assert abs(got.mismatch * a.size - want) <= _on_the_bound(a, b, tol, rel=1e-6)


def test_sums_past_the_largest_float_are_judged_alike_in_any_layout() -> None:
    """float64 values whose Σx² overflows while each piece's stays finite: the two-layout
    sums are inf, as the one-layout ones, and the statistics are those of one layout."""
    a = np.full((300, 300), 5e151)
    b = np.ascontiguousarray(a.T).T
    tol = Tolerance(1e-9, 1e-9)
    with np.errstate(over="ignore"):
        want = measure(a, a.copy(), tol)
        got = measure(a, b, tol)
    assert (got.max_abs, got.mismatch, got.scale) == (want.max_abs, want.mismatch, math.inf)
    assert got.lhs_finite and got.rhs_finite


def test_a_view_with_steps_is_not_taken_for_a_contiguous_one() -> None:
    rng = np.random.default_rng(6)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    a = rng.standard_normal((4096, 1024)).astype(np.float32)
    b = np.ascontiguousarray(a.T).T + 1e-3  # the same values in the other memory order
    for x, y in ((a[:, ::2], b[:, ::2]), (a[::2].T, b[::2].T), (a.T[::2], b.T[::2])):
        want = measure(np.ascontiguousarray(x), np.ascontiguousarray(y), tol)
        got = measure(x, y, tol)
        assert (got.max_abs, got.mismatch) == (want.max_abs, want.mismatch)
        assert math.isclose(got.cosine, want.cosine, rel_tol=1e-6)


def test_a_gradient_summed_over_tokens_is_judged_against_that_sum() -> None:
    """A linear's bias gradient sums the gradient of every token (256 here): the rounding
    the gradients reaching it carry adds up as the square root of their count, so its floor
    grows so, as does a broadcast operand's; a weight, an input the op reads whole and one
    it only places in its output (concat: a class token, 1 row of 257) keep theirs."""
    from specgraph.ir import GraphBuilder
    from specgraph.numeric.stats import share_floor

    b = GraphBuilder("m")
    x = b.input("x", (2, 128, 64), "float32")
    w = b.param("fc.weight", (64, 32), "float32")
    bias = b.param("fc.bias", (32,), "float32")
    h = b.add("linear", [x, w, bias], shape=(2, 128, 32), dtype="float32", scope="fc")
    y = b.add("add", [h, b.param("shift", (32,), "float32")], shape=(2, 128, 32),
              dtype="float32", scope="shift")
    r = b.add("relu", [y], shape=(2, 128, 32), dtype="float32", scope="act")
    token = b.param("cls", (2, 1, 32), "float32")
    b.output("y", b.add("concat", [token, r], {"axis": 1}, shape=(2, 129, 32),
                        dtype="float32", scope="cat"))
    g = b.build()
    linear, add, relu, concat = g.nodes
    assert share_floor(1e-5, linear, 2) == 1e-5 * math.sqrt(256)
    assert share_floor(1e-5, add, 1) == 1e-5 * math.sqrt(256)
    assert share_floor(1e-5, linear, 1) == share_floor(1e-5, linear, 0) == 1e-5
    assert share_floor(1e-5, add, 0) == share_floor(1e-5, relu, 0) == 1e-5
    assert share_floor(1e-5, concat, 0) == share_floor(1e-5, concat, 1) == 1e-5
    # a sum of 256 rounding-sized differences passes; a wrong bias gradient still parts
    rng = np.random.default_rng(7)
    oct_ = rng.standard_normal((256, 32)).astype(np.float32) * 1e-5
    noise = rng.standard_normal((256, 32)).astype(np.float32) * 1e-5 * 2e-5
    lhs, rhs = oct_.sum(0), (oct_ + noise).sum(0)
    tol = Tolerance(1e-4, 1e-4)
    floor = share_floor(float(np.sqrt(np.mean(oct_ ** 2))), linear, 2)
    assert not measure(lhs, rhs, tol, floor).diverges
    assert measure(lhs, 2 * rhs, tol, floor).diverges


def test_a_pair_is_remembered_only_where_the_caller_asks() -> None:
    """Within ``remembering`` the same two arrays are measured once; outside it (and for a
    new array) every measure reads them, so an array changed in place is seen."""
    from specgraph.numeric import stats

    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    tol = Tolerance(1e-5, 1e-6)
    assert not measure(a, b, tol).diverges
    b[3, 3] = 5.0
    assert measure(a, b, tol).diverges  # nothing remembered out here
    calls: list[int] = []
    real = stats._one_pass
    try:
        stats._one_pass = lambda x, y: calls.append(1) or real(x, y)
        with stats.remembering():
            first = measure(a, b, tol)
            again = measure(a, b, Tolerance(1e-2, 1e-2))
            assert len(calls) == 1 and again.max_abs == first.max_abs
            measure(a, b.copy(), tol)
            assert len(calls) == 2
        measure(a, b, tol)
        assert len(calls) == 3
    finally:
        stats._one_pass = real


def test_finite_checks_and_floors_reuse_a_measures_sums_while_remembering() -> None:
    """Within ``remembering`` the Σx² a measure found for each of its arrays answers the
    finite check and the root mean square that read them next (an Inf a measure saw is
    still seen); outside it they read the array again."""
    from specgraph.numeric import stats
    from specgraph.numeric.arrays import HostArrays

    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = a.copy()
    tol, ax = Tolerance(1e-5, 1e-6), HostArrays()
    with stats.remembering():
        measure(a, b, tol)
        calls: list[int] = []
        real = stats.flat
        try:
            stats.flat = lambda x: calls.append(1) or real(x)
            assert ax.finite(b) and ax.nan_free(a)
            assert math.isclose(ax.rms(b), math.sqrt(float(np.mean(b.astype(np.float64) ** 2))),
                                rel_tol=1e-6)
            assert not calls  # read from the measure's sums
            c = b.copy()
            assert ax.finite(c) and calls == [1]  # another array: read
            assert ax.finite(c) and calls == [1]  # ... once
        finally:
            stats.flat = real
        bad = b.copy()
        bad[7, 7] = np.inf
        measure(a, bad, tol)
        assert not ax.finite(bad) and ax.rms(bad) == math.inf
    b[0, 0] = np.nan  # changed in place, out here: seen
    assert not ax.finite(b) and not ax.nan_free(b)


def test_short_runs_are_compared_after_one_copy_into_the_others_order() -> None:
    """A 3x3 kernel (OIHW) against one laid out HWIO, and 8x8 channels-first activations
    against channels-last: the contiguous one is copied into the other's memory order and
    both are read once, together; the statistics are the contiguous pair's."""
    rng = np.random.default_rng(8)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    for shape, memory in (((64, 48, 3, 3), (2, 3, 1, 0)), ((2, 128, 8, 8), (0, 2, 3, 1))):
        a = rng.standard_normal(shape).astype(np.float32)
        b = (a + 1e-6 * rng.standard_normal(shape)).astype(np.float32)
        b.flat[a.size // 2 + 7] -= 0.5
        held = np.transpose(np.ascontiguousarray(np.transpose(b, memory)), np.argsort(memory))
        assert _in_one_order(a, held) is not None and _in_one_order(held, a) is not None
        _assert_measured_as(a, held, a, b, tol)


def test_long_arrays_are_measured_in_parts_on_threads_with_the_same_figures() -> None:
    """Past a few million elements a pair in two layouts (a transposed kernel's gradient)
    is walked in parts on the measuring threads, one layout in one pass: the figures are a
    plain float64 computation's, an element wrong in the last part is found, and measuring
    again gives the same figures to the last bit (the parts' sums are combined in a fixed
    order)."""
    from specgraph.numeric.stats import _PART

    rng = np.random.default_rng(11)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    for shape, memory in (((5_000_003,), None), ((3072, 2048), (1, 0))):
        a = rng.standard_normal(shape).astype(np.float32)
        b = (a + 1e-7 * rng.standard_normal(shape)).astype(np.float32)
        assert a.size > 2 * _PART
        b.flat[a.size - 7] += 0.5
        held = b if memory is None else \
            np.transpose(np.ascontiguousarray(np.transpose(b, memory)), np.argsort(memory))
        got = measure(a, held, tol)
        max_abs, bad, cosine = _reference(a, b, tol)
        assert got.max_abs == max_abs and got.mismatch == bad and got.diverges
        assert math.isclose(got.cosine, cosine, rel_tol=1e-7)
        again = measure(a, held, tol)
        assert (again.cosine, again.scale, again.max_abs) == (got.cosine, got.scale,
                                                              got.max_abs)


def test_a_pullback_that_sums_over_more_terms_than_the_forward_is_allowed_their_rounding(
) -> None:
    """A 1x1 conv from 96 to 576 channels (MobileNetV3's) sums 96 terms forward and 576 for
    its input's gradient: the backward tolerance follows the larger count (a linear's
    output features, likewise); the forward keeps its own."""
    from specgraph.ir import GraphBuilder
    from specgraph.numeric.stats import pullback_size, tolerance

    b = GraphBuilder()
    x = b.input("x", (2, 96, 4, 4), "float32")
    w = b.param("w", (576, 96, 1, 1), "float32")
    y = b.add("conv", [x, w], {"stride": (1, 1), "padding": (0, 0, 0, 0),
                               "dilation": (1, 1), "groups": 1, "bias": False},
              shape=(2, 576, 4, 4), dtype="float32")
    h = b.input("h", (2, 16), "float32")
    wl = b.param("wl", (16, 1024), "float32")
    z = b.add("linear", [h, wl], {"bias": False}, shape=(2, 1024), dtype="float32")
    b.output("y", y)
    b.output("z", z)
    graph = b.build()
    conv, linear = graph.nodes
    assert pullback_size(conv) == 576 and pullback_size(linear) == 1024
    fp32 = ("float32", "float32")
    assert math.isclose(tolerance(conv, fp32).rtol, 2e-5 * math.sqrt(96 / 64))
    assert math.isclose(tolerance(conv, fp32, backward=True).rtol, 4e-5 * math.sqrt(576 / 64))
    assert math.isclose(tolerance(linear, fp32).rtol, 2e-5)
    assert math.isclose(tolerance(linear, fp32, backward=True).rtol, 4e-5 * 4)


def test_an_error_against_zeros_is_told_against_the_other_sides_scale() -> None:
    """A GRU's first hidden state is exactly zero on one side: "inf of the values' scale"
    said nothing; the error is told against the other side's RMS."""
    lhs = np.zeros((4, 8), np.float32)
    rhs = np.full((4, 8), 0.5, np.float32)
    got = measure(lhs, rhs, Tolerance(rtol=1e-5, atol=1e-6))
    assert got.diverges and math.isfinite(got.max_rel)
    assert math.isclose(got.max_rel, 1.0, rel_tol=1e-6)
