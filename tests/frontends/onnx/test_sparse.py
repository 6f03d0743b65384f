"""Sparse constants and sparse initializers are made dense before onnxruntime sees the model,
so they trace and give the right numbers; a malformed one is one sentence."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgraph.errors import TraceError
from specgraph.frontends import onnx as onnx_frontend
from specgraph.frontends.onnx import sparse

N = helper.make_node
X = np.arange(6, dtype=np.float32).reshape(2, 3)
DENSE = np.array([[0, 1.5, 0], [-2, 0, 0]], np.float32)


def _sparse(values, indices, dims=(2, 3)) -> onnx.SparseTensorProto:
    return helper.make_sparse_tensor(numpy_helper.from_array(np.asarray(values, np.float32),
                                                             "c"),
                                     numpy_helper.from_array(np.asarray(indices, np.int64)),
                                     list(dims))


LINEAR = _sparse([1.5, -2], [1, 3])  # positions in the flattened [2, 3]
COORDINATES = _sparse([1.5, -2], [[0, 1], [1, 0]])  # one [row, column] per value


def _model(nodes, inits=(), sparse_inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              initializer=list(inits), sparse_initializer=list(sparse_inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _constant(value: onnx.SparseTensorProto) -> onnx.ModelProto:
    return _model([N("Constant", [], ["c"], sparse_value=value), N("Add", ["x", "c"], ["y"])])


@pytest.mark.parametrize("value", [LINEAR, COORDINATES], ids=["linear", "coordinates"])
def test_a_sparse_constant_traces_and_gives_the_right_numbers(value) -> None:
    model = _constant(value)
    traced = onnx_frontend.trace_model(model, (X,), reference="sparse")
    np.testing.assert_array_equal(traced.outputs["y"], X + DENSE)
    assert model.graph.node[0].attribute[0].name == "sparse_value"  # the caller's model kept


def test_a_sparse_initializer_traces_as_a_dense_one() -> None:
    model = _model([N("Mul", ["x", "c"], ["y"])], sparse_inits=[LINEAR])
    traced = onnx_frontend.trace_model(model, (X,), reference="sparse")
    np.testing.assert_array_equal(traced.outputs["y"], X * DENSE)


def test_a_sparse_constant_in_a_subgraph_is_made_dense() -> None:
    out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])
    then = helper.make_graph([N("Constant", [], ["k"], sparse_value=LINEAR),
                              N("Add", ["x", "k"], ["t"])], "then", [], [out])
    other = helper.make_graph([N("Identity", ["x"], ["t"])], "else", [], [out])
    model = _model([N("If", ["go"], ["y"], then_branch=then, else_branch=other)],
                   inits=[numpy_helper.from_array(np.array(True), "go")])
    dense = sparse.densify(model, "m")
    (branch,) = [a.g for a in dense.graph.node[0].attribute if a.name == "then_branch"]
    (value,) = branch.node[0].attribute
    assert value.name == "value"
    np.testing.assert_array_equal(numpy_helper.to_array(value.t), DENSE)


def test_a_model_without_sparse_tensors_is_returned_as_it_is() -> None:
    model = _model([N("Relu", ["x"], ["y"])])
    assert sparse.densify(model, "m") is model


@pytest.mark.parametrize("value, said", [
    (_sparse([1.5, -2], [1, 6]), r"has an index outside its shape \[2, 3\]"),
    (_sparse([1.5, -2], [-1, 0]), "has an index outside its shape"),
    (_sparse([1.5, -2], [[0, 1], [2, 0]]), "has an index outside its shape"),
    (_sparse([1.5, -2], [1]), r"has indices of shape \[1\] for 2 values in 2 dimensions; "
                              r"expected \[2\] or \[2, 2\]"),
    (_sparse([1.5], [0], dims=(10**6, 10**6)),
     r"would take 4,000,000,000,000 bytes dense \(shape \[1000000, 1000000\]\), over "
     r"specgraph's bound of 1,073,741,824 bytes"),
])
def test_a_malformed_sparse_constant_is_one_sentence(value, said) -> None:
    with pytest.raises(TraceError, match=said) as info:
        onnx_frontend.trace_model(_constant(value), (X,), reference="m.onnx")
    message = str(info.value)
    assert message.startswith("m.onnx: the sparse tensor of attribute 'sparse_value' of node "
                              "'' (Constant) ") and "\n" not in message
    assert message.endswith("; export the model again with the tensor stored dense")
