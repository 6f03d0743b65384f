"""Notes for gradient differences judged no divergence: one layer's told in full, many
layers' of one kind told together, over every seed compared."""

from __future__ import annotations

from specgraph.numeric.findings import Passed, passed_notes


def test_one_layer_is_told_in_full() -> None:
    (note,) = passed_notes([Passed("inherited", "attention at enc.attn", 1.34e-4, 3)])
    assert note == (
        "gradients of attention at enc.attn differ by 1.34e-04 (seed 3), yet its pullback "
        "agrees when fed the same inputs and output gradients: rounding in the gradients "
        "that reached it, not reported as a divergence")
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
