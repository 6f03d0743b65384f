"""The model's boundary: an integer parameter (an index table TF keeps as a non-trainable
variable) is a constant of the canonical graph, never a weight."""

from __future__ import annotations

import numpy as np

from specgraph.interpreter import run
from specgraph.ir import GraphBuilder
from specgraph.model import TracedModel
from specgraph.passes import canonicalize_model


def test_an_integer_parameter_is_a_constant():
    b = GraphBuilder()
    x = b.input("x", (2, 4), "float32")
    table = b.param("bias_table", (5, 4), "float32")
    index = b.param("relative_position_index", (2,), "int64")
    bias = b.add("embedding", [index, table], shape=(2, 4), dtype="float32")
    b.output("y", b.add("add", [x, bias], shape=(2, 4), dtype="float32"))
    weights = {"bias_table": np.arange(20.0).reshape(5, 4),
               "relative_position_index": np.array([4, 1])}
    traced = TracedModel(b.build(), weights, {"x": np.ones((2, 4))}, {}, "tf", "t")
    c = canonicalize_model(traced)
    assert list(c.graph.params) == ["bias_table"] and list(c.weights) == ["bias_table"]
    got = run(c.graph, [np.ones((2, 4))], c.weights)["y"]
    np.testing.assert_array_equal(got, 1 + weights["bias_table"][[4, 1]])
