"""Notes for gradient differences judged no divergence: one layer's told in full, many
layers' of one kind told together, over every seed compared."""

from __future__ import annotations

from specgraph.numeric.findings import Passed, passed_notes


def test_one_layer_is_told_in_full() -> None:
    (note,) = passed_notes([Passed("inherited", "attention at enc.attn", 1.34e-4, 3)])
    assert note == (
        "gradients of attention at enc.attn differ by 1.34e-04 (seed 3), yet its pullback "
        "agrees when fed the same inputs and output gradients: the difference comes from the "
        "gradients that reached it (within tolerance there, grown where its own gradient "
        "cancels), not reported as a divergence")
    (note,) = passed_notes([Passed("kink", "relu at layer2_3", 5.3e-2, 0)])
    assert note.startswith("gradients of relu at layer2_3 differ by 5.30e-02 (seed 0) where "
                           "its input lies within rounding of a kink")


def test_many_layers_of_one_kind_are_one_note_with_the_largest_difference() -> None:
    passed = [Passed("kink", f"relu at layer{i}", 0.01 * (i + 1), seed)
              for seed in (0, 1, 2) for i in range(6)]
    passed.insert(4, Passed("ties", "max_pool at stem", 0.2, 1))
    kink, ties = passed_notes(passed)
    assert kink.startswith(
        "gradients of 6 layers (relu at layer0, relu at layer1, relu at layer2, relu at "
        "layer3 and 2 more) differ by up to 6.00e-02 (18 times, seeds 0-2), each where its "
        "input lies within rounding of a kink")
    assert kink.endswith("not reported as divergences")
    assert ties.startswith("gradients of max_pool at stem differ by 2.00e-01 (seed 1) where "
                           "its input ties for the maximum")
    (again,) = passed_notes([Passed("inherited", "attention at a", 1e-4, 0),
                             Passed("inherited", "attention at a", 3e-4, 4)])
    assert again.startswith("gradients of attention at a differ by up to 3.00e-04 (2 times, "
                            "seeds 0, 4), yet each one's pullback agrees")
    assert passed_notes([]) == []


def test_a_layer_judged_twice_in_one_seed_is_counted_once_with_its_larger_difference() -> None:
    """The gradient reaching a layer is judged as its reader's input and again at the layer
    itself: one layer, one seed, one count."""
    from specgraph.ir import GraphBuilder
    from specgraph.numeric.localize import Localizer
    from specgraph.numeric.stats import Stats

    b = GraphBuilder()
    x = b.input("x", (4,), "float32")
    b.output("y", b.add("relu", [x], shape=(4,), dtype="float32"))
    relu = b.build().nodes[0]
    loc = Localizer.__new__(Localizer)
    loc.passed, loc.seed = {}, 0
    for size in (1e-4, 3e-4, 2e-4):
        loc._passed("kink", relu, Stats(size, size, 0.1, 1.0, 1.0))
    assert [(p.size, p.seed) for p in loc.passed.values()] == [(3e-4, 0)]
    first = list(loc.passed.values())
    loc.passed, loc.seed = {}, 1  # the next seed's localizer
    loc._passed("kink", relu, Stats(5e-5, 5e-5, 0.1, 1.0, 1.0))
    (note,) = passed_notes(first + list(loc.passed.values()))
    assert "differ by up to 3.00e-04 (2 times, seeds 0-1)" in note


def test_a_nan_difference_is_the_largest() -> None:
    (note,) = passed_notes([Passed("kink", "relu at a", 1e-3, 0),
                            Passed("kink", "relu at b", float("nan"), 0)])
    assert "differ by up to nan" in note


def test_a_definition_gap_says_it_is_too_small_to_show_only_where_it_is() -> None:
    """An upstream layer whose two definitions part by less than the tolerance (an epsilon)
    is "too little to stand out"; a gap past it, or no number at all, is not said to be."""
    import math

    from specgraph.ir import GraphBuilder
    from specgraph.numeric.findings import subtle_definition
    from specgraph.numeric.stats import Stats, Tolerance

    b = GraphBuilder()
    x = b.input("x", (2, 4), "float32")
    h = b.add("tanh", [x], shape=(2, 4), dtype="float32", scope="ln")
    b.add("relu", [h], shape=(2, 4), dtype="float32", scope="out")
    g = b.build()
    first, later = g.nodes
    stats = Stats(1.0, 0.5, 1.0, 0.9, 2.0)
    tol = Tolerance(2e-5, 2e-5)
    words = [subtle_definition(g, first, g, first, gap, later, later, stats, tol, 0).message
             for gap in (1e-6, 3.0, math.inf)]
    assert "1.00e-06 of the values' scale apart in float64, too little to stand out" in \
        words[0]
    assert "(3.00e+00 of the values' scale apart in float64)" in words[1]
    assert "(their float64 values part)" in words[2]
    assert not any("too little" in w for w in words[1:])


def test_rounding_that_accumulated_is_one_note_for_many_layers() -> None:
    """A deep CNN whose values drift past the tolerance layer after layer, each layer
    agreeing when fed the same inputs, got one note per layer (43 for Keras' MobileNetV2
    against a port): one note tells them all, the largest difference and the first few."""
    (one,) = passed_notes([Passed("accumulated", "conv at block_1", 2.97e-5, 0)])
    assert one == (
        "values at conv at block_1 differ by 2.97e-05 of their scale (seed 0), beyond the "
        "tolerance, yet every layer agrees when fed the same inputs and no definition "
        "differs: rounding that accumulated, not reported as a divergence")
    many = passed_notes([Passed("accumulated", f"conv at block_{i}", 1e-5 * (i + 1), 0)
                         for i in range(43)]
                        + [Passed("kink", "relu at block_3", 0.1, 0)])
    assert len(many) == 2
    assert many[0] == (
        "values of 43 layers (conv at block_0, conv at block_1, conv at block_2, conv at "
        "block_3 and 39 more) differ by up to 4.30e-04 of their scale (43 times, seed 0), "
        "each beyond its tolerance, yet every layer agrees when fed the same inputs and no "
        "definition differs: rounding that accumulated, not reported as divergences")
    assert many[1].startswith("gradients of relu at block_3")
