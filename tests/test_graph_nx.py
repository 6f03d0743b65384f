"""Structural equality of two graphs: constants are part of the structure."""

from __future__ import annotations

import numpy as np

from specgraph.graph_nx import isomorphic
from specgraph.ir import GraphBuilder


def _lookup(ids: np.ndarray, scale: float = 2.0):
    b = GraphBuilder()
    table = b.param("table", (8, 3), "float32")
    rows = b.add("embedding", [b.constant(ids), table], shape=(len(ids), 3), dtype="float32")
    b.output("y", b.add("mul", [rows, b.constant(np.float32(scale))], shape=(len(ids), 3),
                        dtype="float32"))
    return b.build()


def test_constant_tensors_with_the_same_numbers_are_the_same_structure():
    assert isomorphic(_lookup(np.arange(5)), _lookup(np.arange(5, dtype=np.int32)))


def test_constant_tensors_with_other_numbers_are_another_structure():
    assert not isomorphic(_lookup(np.arange(5)), _lookup(np.arange(5) + 2))
    assert not isomorphic(_lookup(np.arange(5)), _lookup(np.arange(5), scale=3.0))
