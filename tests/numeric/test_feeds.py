"""Inputs drawn for seeds other than 0 are like the example inputs: same spread, same domain."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.ir import GraphBuilder
from specgraph.model import TracedModel
from specgraph.numeric.feeds import example_inputs
from specgraph.ops.values import same_numbers


def _model(example: np.ndarray) -> TracedModel:
    b = GraphBuilder("m")
    x = b.input("x", example.shape, str(example.dtype))
    y = b.add("abs", [x], shape=example.shape, dtype=str(example.dtype))
    b.output("y", y)
    return TracedModel(graph=b.build(), weights={}, inputs={"x": example},
                       outputs={"y": np.abs(example)}, framework="torch", reference="m")


@pytest.mark.parametrize("name, example, low, high", [
    ("magnitudes", np.random.default_rng(1).random((64,)) * 5, 0.0, np.inf),
    ("probabilities", np.random.default_rng(2).random((64,)), 0.0, 1.0),
    ("negatives", -np.random.default_rng(3).random((64,)) * 3, -np.inf, 0.0),
    ("0/1 pairs", np.array([[0, 0], [0, 1], [1, 0], [1, 1]], float), 0.0, 1.0),
])
def test_seeded_floats_stay_in_the_example_domain(name, example, low, high):
    model = _model(example.astype(np.float32))
    for seed in range(1, 30):
        x = example_inputs(model, seed)["x"]
        assert x.dtype == np.float32 and x.shape == example.shape
        assert low <= x.min() and x.max() <= high, (name, seed)
        assert np.std(x) > 0  # drawn anew, not the example again


def test_seeded_floats_of_a_signed_example_keep_its_mean_and_spread():
    example = (3.0 + 2.0 * np.random.default_rng(0).standard_normal(4096)).astype(np.float32)
    x = example_inputs(_model(example), 7)["x"]
    assert x.min() < 0 < x.max()
    assert abs(float(x.mean()) - 3.0) < 0.2 and abs(float(x.std()) - 2.0) < 0.2


def test_seed_0_is_the_example_itself():
    example = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    assert np.array_equal(example_inputs(_model(example), 0)["x"], example)


def test_constant_tensors_with_nan_in_the_same_places_are_the_same():
    a = np.array([1.0, np.nan, -np.inf])
    assert same_numbers(a, a.copy())
    assert not same_numbers(a, np.array([1.0, 0.0, -np.inf]))
    assert not same_numbers(a, np.array([1.0, np.nan, np.inf]))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_a_drawn_mask_keeps_the_first_position_where_the_example_does(dtype):
    """A padded batch's attention mask starts every row kept: so do its draws, or a causal
    model's first query would see no key, where frameworks fill the attention differently
    (a PyTorch GPT-2 and its Flax port part there and nowhere else)."""
    mask = np.ones((4, 12), dtype)
    mask[1, 9:] = 0
    draws = [example_inputs(_model(mask), seed)["x"] for seed in range(1, 20)]
    assert all(d.dtype == mask.dtype and np.all(d[:, 0]) for d in draws)
    assert any(not np.all(d[:, 1:]) for d in draws)  # the rest is drawn
    left_padded = mask.copy()
    left_padded[2, :3] = 0  # the example does not keep it: neither do the draws
    firsts = np.concatenate([example_inputs(_model(left_padded), s)["x"][:, 0]
                             for s in range(1, 20)])
    assert not np.all(firsts)
