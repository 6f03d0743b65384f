"""The one rule for "the same attribute value", and the places that use it."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from specgraph.align import align
from specgraph.diff import diff
from specgraph.ir import GraphBuilder
from specgraph.ops import values
from specgraph.ops.values import same_attrs, same_value, value_key


def test_docstring_example_runs() -> None:
    assert doctest.testmod(values).failed == 0


@pytest.mark.parametrize(("a", "b"), [
    (1e-5, float(np.float32(1e-5))),                    # one eps in float64 and float32
    (8 ** -0.5, float(np.float32(8 ** -0.5))),          # a scale computed in each
    (1.0 / float(np.float32(math.sqrt(48.0))), 48 ** -0.5),  # 1/sqrt(d) two ways
    (math.inf, math.inf),
    (math.nan, math.nan),
    ((1e-5, 2), (float(np.float32(1e-5)), 2)),
    (0.0, -0.0),
])
def test_same_values(a, b) -> None:
    assert same_value(a, b) and value_key(a) == value_key(b)
    assert hash(value_key(a)) == hash(value_key(b))


@pytest.mark.parametrize(("a", "b"), [
    (1e-12, 1e-13),          # eps that rounding to absolute digits would merge
    (1e-5, 1.00001e-5),
    (math.inf, 6.0),         # clamp(max=inf) is not clamp(max=6)
    (math.inf, -math.inf),
    (math.nan, 0.0),
    ((1, 2), (2, 1)),
    ("tanh", "none"),
])
def test_different_values(a, b) -> None:
    assert not same_value(a, b)


def test_same_attrs_needs_the_same_keys() -> None:
    assert same_attrs({"eps": 1e-5}, {"eps": float(np.float32(1e-5))})
    assert not same_attrs({"eps": 1e-5}, {"eps": 1e-5, "axis": -1})


def _norm(eps: float):
    b = GraphBuilder()
    x = b.input("x", (2, 8), "float32")
    b.output("y", b.add("layer_norm", [x], {"axis": 1, "eps": eps, "scale": False,
                                             "bias": False}, shape=(2, 8), dtype="float32"))
    return b.build()


def test_diff_and_alignment_use_the_rule() -> None:
    """A float32 eps and its float64 decimal are one value for the diff; 1e-12 and 1e-13
    are two, however small."""
    same, _ = diff(_norm(1e-5), _norm(float(np.float32(1e-5))))
    assert same == []
    findings, _ = diff(_norm(1e-12), _norm(1e-13))
    assert [(f.code, f.attr) for f in findings] == [("attr-mismatch", "eps")]
    assert align(_norm(1e-12), _norm(1e-13)).covers
