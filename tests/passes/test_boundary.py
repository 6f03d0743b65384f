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


def _scaled_by(shape: tuple[int, ...], view: tuple[int, ...]) -> TracedModel:
    """x [2, 3, 4] times a parameter g stored as ``shape`` and read through a reshape."""
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4), "float32")
    g = b.param("g", shape, "float32")
    seen = b.add("reshape", [g], {"shape": view}, shape=view, dtype="float32")
    b.output("y", b.add("mul", [x, seen], shape=(2, 3, 4), dtype="float32"))
    weights = {"g": np.arange(1.0, 5.0).reshape(shape)}
    return TracedModel(b.build(), weights, {"x": np.ones((2, 3, 4))}, {}, "tf", "t")


def test_a_parameter_read_with_its_unit_axes_moved_is_stored_that_way():
    # TF's weight_norm g [k, 1, 1] read as [1, 1, k], where PyTorch stores [1, 1, k]; a mul
    # broadcasts it from [k] alike, so it is stored [k]
    c = canonicalize_model(_scaled_by((4, 1, 1), (1, 1, 4)))
    assert c.graph.params["g"].shape == (4,) and c.weights["g"].shape == (4,)
    assert [n.op for n in c.graph.nodes] == ["mul"]
    assert c.param_layouts["g"] == (("reshape", (1, 1, 4)), ("reshape", (4,)))
    np.testing.assert_array_equal(run(c.graph, [np.ones((2, 3, 4))], c.weights)["y"],
                                  np.broadcast_to(np.arange(1.0, 5.0), (2, 3, 4)))


def test_a_parameter_read_with_axes_added_for_broadcasting_keeps_its_shape():
    c = canonicalize_model(_scaled_by((4,), (1, 1, 4)))
    assert c.graph.params["g"].shape == (4,)


def test_a_parameter_with_leading_unit_axes_that_only_broadcasts_is_stored_without_them():
    """An exporter's folded position table [1, T, d] added to [B, T, d] is the [T, d]
    table PyTorch's CLIP adds whole: one shape, so the two pair; one that a result takes
    its shape from keeps it."""
    def added(shape, out_shape=(2, 3, 4)):
        b = GraphBuilder()
        x = b.input("x", (2, 3, 4), "float32")
        b.output("y", b.add("add", [x, b.param("p", shape, "float32")], shape=out_shape,
                            dtype="float32"))
        weights = {"p": np.arange(12.0).reshape(shape)}
        return TracedModel(b.build(), weights, {"x": np.ones((2, 3, 4))}, {}, "onnx", "t")

    c = canonicalize_model(added((1, 3, 4)))
    assert c.graph.params["p"].shape == (3, 4) and c.weights["p"].shape == (3, 4)
    assert c.param_layouts["p"] == (("reshape", (3, 4)),)
    np.testing.assert_array_equal(run(c.graph, [np.ones((2, 3, 4))], c.weights)["y"],
                                  1.0 + np.arange(12.0).reshape(1, 3, 4).repeat(2, 0))
    wide = canonicalize_model(added((1, 1, 3, 4), (1, 2, 3, 4)))  # the result's rank is its
    assert wide.graph.params["p"].shape == (1, 1, 3, 4)


def _preprocessed(read_elsewhere: bool = False):
    """x [N, H, W, C]: (x * s - mean) / std, then a transpose to NCHW before a conv."""
    b = GraphBuilder()
    x = b.input("x", (2, 4, 4, 3), "float32")
    scale = b.constant(np.float32(1 / 255))
    mean = b.constant(np.array([0.5, 0.25, 0.125], np.float32))
    std = b.constant(np.array([2.0, 4.0, 0.5], np.float32))
    h = b.add("mul", [x, scale], shape=x.shape, dtype="float32")
    h = b.add("sub", [h, mean], shape=x.shape, dtype="float32")
    h = b.add("div", [h, std], shape=x.shape, dtype="float32")
    t = b.add("transpose", [h], {"perm": (0, 3, 1, 2)}, shape=(2, 3, 4, 4), dtype="float32")
    w = b.param("w", (5, 3, 1, 1), "float32")
    conv = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
            "bias": False}
    b.output("y", b.add("conv", [t, w], conv, shape=(2, 5, 4, 4), dtype="float32"))
    if read_elsewhere:
        b.output("h", h)
    weights = {"w": np.random.default_rng(0).standard_normal((5, 3, 1, 1))}
    inputs = {"x": np.random.default_rng(1).uniform(0, 255, (2, 4, 4, 3))}
    return TracedModel(b.build(), weights, inputs, {}, "tf", "t")


def test_an_input_preprocessed_elementwise_takes_the_layout_of_the_transpose_after():
    traced = _preprocessed()
    c = canonicalize_model(traced)
    assert c.input_layouts == {"x": (0, 3, 1, 2)}
    assert [n.op for n in c.graph.nodes] == ["mul", "sub", "mul", "conv"]  # / std: * (1 / std)
    assert c.graph.inputs[0].shape == (2, 3, 4, 4)
    want = run(traced.graph, [traced.inputs["x"]], traced.weights)["y"]
    got = run(c.graph, [c.inputs["x"]], c.weights)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_preprocessed_input_read_elsewhere_keeps_its_layout():
    c = canonicalize_model(_preprocessed(read_elsewhere=True))
    assert c.input_layouts == {}
    assert "transpose" in [n.op for n in c.graph.nodes]
