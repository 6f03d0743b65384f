"""The IR: builder, invariants checked by verify(), immutability, pruning, doctests."""

from __future__ import annotations

import dataclasses
import doctest
from types import MappingProxyType

import numpy as np
import pytest

import specgraph.interpreter
import specgraph.ir
import specgraph.symbolic
from specgraph.errors import ExecutionError, GraphError
from specgraph.interpreter import run
from specgraph.ir import Graph, GraphBuilder, Node, Value, prune


def _mlp() -> Graph:
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 3), "float32")
    w = b.param("fc.weight", (3, 4), "float32")
    h = b.add("linear", [x, w], {"bias": False}, shape=(2, 4), dtype="float32", scope="fc")
    b.output("y", b.add("relu", [h], shape=(2, 4), dtype="float32", scope="act"))
    return b.build()


@pytest.mark.parametrize("module", [specgraph.ir, specgraph.interpreter, specgraph.symbolic])
def test_docstring_examples_run(module) -> None:
    assert doctest.testmod(module).failed == 0


def test_builder_fills_default_attributes_sorted() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    y = b.add("softplus", [x], {"beta": 2}, shape=(2, 3), dtype="float32")
    b.output("y", y)
    node = b.build().nodes[0]
    assert dict(node.attrs) == {"beta": 2.0, "threshold": 20.0}
    assert list(node.attrs) == ["beta", "threshold"]


def test_graph_is_immutable() -> None:
    g = _mlp()
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        g.params["other"] = Value((1,), "float32")  # type: ignore[index]
    with pytest.raises(TypeError):
        g.nodes[0].attrs["bias"] = True  # type: ignore[index]


def test_values_compare_by_identity() -> None:
    a, b = Value((2,), "float32"), Value((2,), "float32")
    assert a != b and a == a and len({a, b}) == 2


@pytest.mark.parametrize(
    ("op", "attrs", "message"),
    [
        ("relu", {"alpha": 1.0}, "has no attribute 'alpha'"),
        ("softmax", {}, "needs attribute 'axis'"),
        ("gelu", {"approximate": "sigmoid"}, "must be one of"),
        ("leaky_relu", {"alpha": "big"}, "must be float"),
        ("no_such_op", {}, "unknown canonical op"),
    ],
)
def test_builder_rejects_bad_nodes(op: str, attrs: dict, message: str) -> None:
    b = GraphBuilder()
    x = b.input("x", (2,), "float32")
    with pytest.raises(GraphError, match=message):
        b.add(op, [x], attrs, shape=(2,), dtype="float32")


def test_builder_rejects_wrong_arity() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    w = b.param("w", (3, 4), "float32")
    with pytest.raises(GraphError, match="takes 3 inputs"):
        b.add("linear", [x, w], {"bias": True}, shape=(2, 4), dtype="float32")


def test_verify_finds_use_before_definition() -> None:
    g = _mlp()
    swapped = tuple(reversed(g.nodes))
    with pytest.raises(GraphError, match="used before it is defined"):
        g.replace(nodes=swapped)


def test_verify_finds_missing_output_and_duplicate_names() -> None:
    g = _mlp()
    with pytest.raises(GraphError, match="not computed"):
        g.replace(outputs=(Value((2, 4), "float32"),))
    with pytest.raises(GraphError, match="used twice"):
        g.replace(outputs=g.outputs * 2, output_names=("y", "y"))


def test_verify_rejects_unnormalized_attrs() -> None:
    g = _mlp()
    bad = g.nodes[1].replace(attrs={})
    bad = Node("softplus", bad.inputs, bad.outputs, bad.attrs)
    with pytest.raises(GraphError, match="not normalized"):
        g.replace(nodes=(g.nodes[0], bad))


def test_lookups() -> None:
    g = _mlp()
    linear, relu = g.nodes
    assert g.producer(relu.inputs[0]) is linear
    assert g.consumers(linear.output) == [relu]
    assert g.param_name(linear.inputs[1]) == "fc.weight"
    assert g.input_name(g.inputs[0]) == "x"
    assert g.param_count() == 12


def test_prune_drops_dead_nodes_and_their_params() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,), "float32")
    w = b.param("unused", (3,), "float32")
    b.add("mul", [x, w], shape=(3,), dtype="float32")
    b.output("y", b.add("relu", [x], shape=(3,), dtype="float32"))
    g = prune(b.build())
    assert [n.op for n in g.nodes] == ["relu"] and dict(g.params) == {}


def test_interpreter_checks_shapes_and_weights() -> None:
    g = _mlp()
    w = np.ones((3, 4))
    out = run(g, {"x": np.ones((2, 3))}, {"fc.weight": w})
    np.testing.assert_array_equal(out["y"], np.full((2, 4), 3.0))
    with pytest.raises(ExecutionError, match="no weights"):
        run(g, {"x": np.ones((2, 3))}, {})
    with pytest.raises(ExecutionError, match=r"input 'x' has shape \(3,\)"):
        run(g, {"x": np.ones(3)}, {"fc.weight": w})


def test_interpreter_errors_name_the_node() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    b.output("y", b.add("reshape", [x], {"shape": (4, 2)}, shape=(4, 2), dtype="float32",
                        scope="block.view", source="model.py:12"))
    with pytest.raises(ExecutionError, match=r"reshape at block\.view .*model\.py:12"):
        run(b.build(), [np.ones((2, 3))])


def test_interpreter_catches_wrong_declared_shape() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    b.output("y", b.add("reduce_sum", [x], {"axes": (1,)}, shape=(3,), dtype="float32"))
    with pytest.raises(ExecutionError, match="converted this op wrongly"):
        run(b.build(), [np.ones((2, 3))])


def test_interpreter_computes_in_float64() -> None:
    b = GraphBuilder()
    x = b.input("x", (1,), "float32")
    b.output("y", b.add("sub", [b.add("add", [x, b.constant(np.float32(1e8))], shape=(1,),
                                      dtype="float32"), b.constant(np.float32(1e8))],
                        shape=(1,), dtype="float32"))
    assert run(b.build(), [np.array([0.25], dtype=np.float32)])["y"][0] == 0.25


def test_natives_follow_reshapes_and_transposes_to_the_values_they_equal() -> None:
    """A projection whose program value has its heads split (``(2, 6, 4, 8)``) stands for
    the graph's merged ``(2, 6, 32)`` through the reshape; so does the head-major value a
    transpose makes; a reshape of a transposed native is no native of anything."""
    b = GraphBuilder()
    x = b.input("x", (2, 6, 32), "float32")
    w = b.param("w", (32, 32), "float32")
    f32 = {"dtype": "float32"}
    merged = b.add("linear", [x, w, b.param("b", (32,), "float32")], shape=(2, 6, 32), **f32)
    split = b.add("reshape", [merged], {"shape": (2, 6, 4, 8)}, shape=(2, 6, 4, 8), **f32)
    heads = b.add("transpose", [split], {"perm": (0, 2, 1, 3)}, shape=(2, 4, 6, 8), **f32)
    flat = b.add("reshape", [heads], {"shape": (2, 4, 48)}, shape=(2, 4, 48), **f32)
    b.native(split, "program split")
    b.output("y", flat)
    g = b.build()
    assert g.natives[merged] == specgraph.ir.Native("program split", None, (2, 6, 32))
    assert g.natives[heads] == specgraph.ir.Native("program split", (0, 2, 1, 3), None)
    assert flat not in g.natives
    native = np.arange(2 * 6 * 4 * 8, dtype=np.float32).reshape(2, 6, 4, 8)
    np.testing.assert_array_equal(g.natives[merged].canonical(native), native.reshape(2, 6, 32))
    np.testing.assert_array_equal(g.natives[heads].canonical(native),
                                  native.transpose(0, 2, 1, 3))


def test_an_elementwise_node_whose_output_is_not_its_inputs_broadcast_is_rejected() -> None:
    """A rewrite that replaces a value by one in another layout (a raise that dropped the
    transpose back to its output's layout) left a ReLU reading [2, 8, 6, 6] and giving
    [2, 6, 6, 8]; verify said nothing and the diff called two equal graphs different."""
    x = Value((2, 8, 6, 6), "float32")
    y = Value((2, 6, 6, 8), "float32")
    node = Node("relu", (x,), (y,), MappingProxyType({}), "", "", "")
    graph = Graph(inputs=(x,), input_names=("x",), params=MappingProxyType({}),
                  constants=MappingProxyType({}), nodes=(node,), outputs=(y,),
                  output_names=("y",))
    with pytest.raises(GraphError, match=r"make \[2, 8, 6, 6\], not its output's"):
        graph.verify()
