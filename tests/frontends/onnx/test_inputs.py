"""Example inputs of an ONNX model: sized by the model and by ``shapes`` (``--input-shape``),
checked against what the model declares, and bounded in bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgraph.errors import FactoryError, TraceError
from specgraph.frontends import onnx as onnx_frontend
from specgraph.frontends.onnx.inputs import make_inputs, unsized
from specgraph.limits import MAX_RANK, MAX_TENSOR_BYTES

N = helper.make_node


def _model(dims, nodes=None, inits=(), elem=TensorProto.FLOAT, out=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes or [N("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", elem, dims)],
                              [helper.make_tensor_value_info("y", elem, out)],
                              initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _reshape() -> onnx.ModelProto:
    """A model that runs only on inputs of 12 elements: its symbolic [batch, n] as 1 fails."""
    to = numpy_helper.from_array(np.array([2, 6], np.int64), "to")
    return _model(["batch", "n"], [N("Reshape", ["x", "to"], ["y"])], [to])


def test_shapes_size_the_symbolic_dimensions_and_the_rest_are_one() -> None:
    model = _model(["batch", 3, None])
    assert make_inputs(model)["x"].shape == (1, 3, 1)
    assert make_inputs(model, shapes={"x": (4, 3, 7)})["x"].shape == (4, 3, 7)
    assert unsized(model, {}, {}) == ["input 'x' [batch, 3, ?]"]
    assert unsized(model, {}, {"x": (4, 3, 7)}) == []


def test_an_input_without_a_declared_shape_takes_any_rank() -> None:
    model = _model(None)
    assert make_inputs(model, shapes={"x": (2, 5)})["x"].shape == (2, 5)
    assert unsized(model, {}, {}) == ["input 'x' of undeclared shape"]


@pytest.mark.parametrize("shapes, said", [
    ({"x": (4,)}, r"m.onnx: --input-shape x=4 gives 1 size\(s\) for input 'x', declared "
                  r"float32\[batch, 3\] with 2 dimension\(s\); pass one size per dimension"),
    ({"x": (4, 5)}, r"m.onnx: --input-shape x=4,5 sets dimension 1 to 5, but input 'x' is "
                    r"declared float32\[batch, 3\], that dimension fixed at 3; pass "
                    r"--input-shape x=4,3"),
    ({"z": (4, 3)}, r"m.onnx: --input-shape names 'z', which is no input of the model; its "
                    "inputs are x"),
    ({"x": (2**29, 3)}, r"m.onnx: --input-shape x=536870912,3 makes input 'x' "
                        r"float32\[536870912, 3\], 6,442,450,944 bytes, over specgraph's "
                        r"bound of 1,073,741,824 bytes per input; pass smaller sizes"),
])
def test_shapes_that_do_not_fit_the_model_are_one_sentence(shapes, said) -> None:
    with pytest.raises(TraceError, match=f"^{said}$"):
        make_inputs(_model(["batch", 3]), shapes=shapes, reference="m.onnx")


def test_shared_shapes_leave_names_of_other_models_aside() -> None:
    inputs = make_inputs(_model(["batch", 3]), shapes={"z": (4, 3)}, shared_shapes=True)
    assert inputs["x"].shape == (1, 3)


def test_given_inputs_must_name_inputs_of_the_model() -> None:
    with pytest.raises(FactoryError, match="the model has no input 'z'; its inputs are x"):
        make_inputs(_model([2, 3]), {"z": np.zeros((2, 3))})


@pytest.mark.parametrize("dims, elem, size", [
    ([10**6, 10**6], TensorProto.FLOAT, "float32[1000000, 1000000], 4,000,000,000,000"),
    (["batch", 2**31], TensorProto.BOOL, "bool[batch, 2147483648], 2,147,483,648"),
])
def test_a_declared_input_over_the_bound_is_refused_before_any_allocation(dims, elem,
                                                                          size) -> None:
    sizes = ",".join(f"D{i + 1}" for i in range(len(dims)))
    with pytest.raises(TraceError) as info:
        make_inputs(_model(dims, elem=elem), reference="m.onnx")
    assert str(info.value) == (
        f"m.onnx: input 'x' is declared {size} bytes, over specgraph's bound of "
        f"{MAX_TENSOR_BYTES:,} bytes per input; export the model with symbolic dimensions "
        f"there and pass --input-shape x={sizes} with sizes that fit")


def test_an_input_of_more_dimensions_than_specgraph_makes_is_refused() -> None:
    with pytest.raises(TraceError, match=f"declared with {MAX_RANK + 1} dimensions, more "
                                         f"than the {MAX_RANK} specgraph makes"):
        make_inputs(_model([1] * (MAX_RANK + 1)), reference="m.onnx")


def test_a_failed_run_names_the_symbolic_dimensions_set_to_one(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_reshape(), path)
    with pytest.raises(TraceError) as info:
        onnx_frontend.trace_file(path, reference=str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: onnxruntime failed to run the model on its example "
                              "inputs: ") and "\n" not in message
    assert message.endswith("; specgraph sized symbolic dimensions as 1 (input 'x' "
                            "[batch, n]): pass the sizes the model expects with "
                            "--input-shape NAME=D1,D2,...")
    traced = onnx_frontend.trace_file(path, reference=str(path), shapes={"x": (3, 4)})
    assert traced.outputs["y"].shape == (2, 6) and traced.inputs["x"].shape == (3, 4)


def test_a_factory_model_that_fails_on_guessed_sizes_says_to_return_inputs() -> None:
    with pytest.raises(TraceError, match=r"sized symbolic dimensions as 1 \(input 'x' "
                                         r"\[batch, n\]\): return example inputs of the sizes "
                                         "it expects from the factory$"):
        onnx_frontend.trace_model(_reshape(), reference="factory")
    traced = onnx_frontend.trace_model(_reshape(), (np.ones((4, 3), np.float32),))
    assert traced.outputs["y"].shape == (2, 6)


def test_a_failed_run_on_fixed_sizes_keeps_its_plain_advice(tmp_path) -> None:
    to = numpy_helper.from_array(np.array([5], np.int64), "to")
    path = tmp_path / "m.onnx"
    onnx.save(_model([2, 3], [N("Reshape", ["x", "to"], ["y"])], [to]), path)
    with pytest.raises(TraceError, match="; pass inputs that fit the model$"):
        onnx_frontend.trace_file(path, reference=str(path))
