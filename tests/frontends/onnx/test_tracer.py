"""ONNX frontend: the op table against onnxruntime, hostile files, PyTorch exports, the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgraph.cli import main
from specgraph.errors import TraceError
from specgraph.frontends import onnx as onnx_frontend
from specgraph.interpreter import run

N = helper.make_node
BIG = np.iinfo(np.int64).max
RNG = np.random.default_rng(1)


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _model(nodes, inputs, inits=None, outputs=None, opset: int = 17) -> onnx.ModelProto:
    """A model from nodes; inputs maps name -> shape (float32) or (shape, elem type)."""
    ins = []
    for name, spec in inputs.items():
        shape, elem = spec if spec and isinstance(spec[0], tuple) else (spec, TensorProto.FLOAT)
        ins.append(helper.make_tensor_value_info(name, elem, list(shape)))
    outputs = outputs or [o for o in nodes[-1].output if o]
    graph = helper.make_graph(
        nodes, "case", ins, [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=11 if opset >= 22 else 10)


def _check_faithful(traced, tol: float = 1e-5) -> None:
    got = run(traced.graph, traced.inputs, traced.weights)
    assert set(got) == set(traced.outputs)
    for key, want in traced.outputs.items():
        assert got[key].shape == want.shape, key
        want, have = want.astype(np.float64), got[key].astype(np.float64)
        scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
        err = float(np.max(np.abs(have - want))) / scale if want.size else 0.0
        assert err < tol, (key, err)


def case(name, nodes, inputs, expect, *, opset=17, inits=None, outputs=None):
    return pytest.param(nodes, inputs, set(expect), opset, inits, outputs, id=name)


X = {"x": (2, 3)}
X3 = {"x": (2, 3, 4)}
IMG = {"x": (1, 2, 7, 7)}
UNARY = ["Abs", "Exp", "Neg", "Erf", "Tanh", "Sigmoid", "Relu", "HardSwish", "Mish", "Softplus"]
CASES = [
    case("arithmetic", [N("Add", ["x", "y"], ["a"]), N("Sub", ["a", "y"], ["b"]),
                        N("Mul", ["b", "x"], ["c"]), N("Div", ["c", "d"], ["e"]),
                        N("Pow", ["e", "two"], ["f"]), N("Max", ["f", "x", "y"], ["g"]),
                        N("Min", ["g", "x"], ["h"]), N("Sum", ["h", "x", "y"], ["out"])],
         {"x": (2, 3), "y": (2, 3)}, ["add", "sub", "mul", "div", "pow", "maximum", "minimum"],
         inits={"d": np.abs(_w(3)) + 1, "two": np.float32(2.0)}),
    case("unary", [N(op, ["x"], [op.lower()]) for op in UNARY]
         + [N("Abs", ["x"], ["ax"]), N("Add", ["ax", "one"], ["pos"])]
         + [N(op, ["pos"], [op.lower()]) for op in ("Sqrt", "Log", "Reciprocal")],
         X, ["abs", "exp", "neg", "erf", "tanh", "sigmoid", "relu", "hardswish", "mish",
             "softplus", "sqrt", "log", "reciprocal"], opset=18,
         inits={"one": np.float32(1.0)}, outputs=[op.lower() for op in UNARY]
         + ["sqrt", "log", "reciprocal"]),
    case("activations", [N("LeakyRelu", ["x"], ["a"], alpha=0.2), N("Elu", ["x"], ["b"], alpha=0.5),
                         N("HardSigmoid", ["x"], ["c"]), N("Gelu", ["x"], ["d"]),
                         N("Gelu", ["x"], ["e"], approximate="tanh"),
                         N("PRelu", ["x", "slope"], ["f"])],
         X, ["leaky_relu", "elu", "hardsigmoid", "gelu", "prelu"], opset=20,
         inits={"slope": _w(3)}, outputs=list("abcdef")),
    case("softmax", [N("Softmax", ["x"], ["a"], axis=1), N("LogSoftmax", ["x"], ["b"])], X3,
         ["softmax", "log_softmax"], outputs=["a", "b"]),
    case("softmax_opset11", [N("Softmax", ["x"], ["a"], axis=1)], X3, ["softmax", "reshape"],
         opset=11),
    case("gemm_linear", [N("Gemm", ["x", "W", "b"], ["y"], transB=1)], X, ["linear"],
         inits={"W": _w(4, 3), "b": _w(4)}),
    case("gemm_general", [N("Gemm", ["x", "W", "C"], ["y"], transA=1, alpha=0.5, beta=2.0)],
         {"x": (3, 2)}, ["transpose", "matmul", "mul", "add"],
         inits={"W": _w(3, 4), "C": _w(2, 4)}),
    case("matmul_einsum", [N("MatMul", ["x", "W"], ["a"]), N("Einsum", ["a", "V"], ["b"],
                                                              equation="bij,jk")],
         X3, ["matmul", "einsum"], inits={"W": _w(4, 5), "V": _w(5, 2)}),
    case("conv", [N("Conv", ["x", "W", "b"], ["a"], auto_pad="SAME_UPPER", strides=[2, 2]),
                  N("Conv", ["x", "K"], ["b2"], auto_pad="SAME_LOWER"),
                  N("Conv", ["x", "W"], ["c"], auto_pad="VALID"),
                  N("Conv", ["x", "G"], ["d"], pads=[1, 0, 2, 1], dilations=[2, 1], group=2)],
         IMG, ["conv"], inits={"W": _w(4, 2, 3, 3), "b": _w(4), "K": _w(3, 2, 2, 2),
                               "G": _w(4, 1, 3, 3)}, outputs=["a", "b2", "c", "d"]),
    case("conv_transpose", [N("ConvTranspose", ["x", "W", "b"], ["a"], strides=[2],
                              pads=[1, 0], output_padding=[1]),
                            N("ConvTranspose", ["x", "W"], ["c"], strides=[2],
                              output_shape=[10])],
         {"x": (1, 4, 5)}, ["conv_transpose"], inits={"W": _w(4, 3, 3), "b": _w(3)},
         outputs=["a", "c"]),
    case("pools", [N("MaxPool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], ceil_mode=1),
                   N("MaxPool", ["x"], ["b"], kernel_shape=[2, 2], dilations=[2, 2]),
                   N("AveragePool", ["x"], ["c"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], ceil_mode=1),
                   N("AveragePool", ["x"], ["d"], kernel_shape=[2, 2], pads=[1, 1, 0, 0],
                     count_include_pad=1),
                   N("GlobalAveragePool", ["x"], ["e"]), N("GlobalMaxPool", ["x"], ["f"]),
                   # ONNX shape inference says 3x3 here; onnxruntime (and PyTorch) give 2x2
                   N("MaxPool", ["x5"], ["g"], kernel_shape=[2, 2], strides=[3, 3],
                     pads=[1, 1, 1, 1], ceil_mode=1)],
         {**IMG, "x5": (1, 1, 5, 5)}, ["max_pool", "avg_pool", "adaptive_avg_pool",
                                       "adaptive_max_pool"], opset=19, outputs=list("abcdefg")),
    case("batch_norm", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                          epsilon=1e-3, momentum=0.8)],
         {"x": (2, 3, 4, 4)}, ["batch_norm"],
         inits={"s": _w(3), "b": _w(3), "m": _w(3), "v": np.abs(_w(3)) + 0.5}),
    case("layer_norm", [N("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2, epsilon=1e-6)],
         X3, ["layer_norm"], inits={"s": _w(3, 4), "b": _w(3, 4)}),
    case("group_norm21", [N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
         {"x": (2, 4, 3, 3)}, ["group_norm"], opset=21, inits={"s": _w(4), "b": _w(4)}),
    case("group_norm18", [N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
         {"x": (2, 4, 3, 3)}, ["group_norm", "gather"], opset=18,
         inits={"s": _w(2), "b": _w(2)}),
    case("instance_norm", [N("InstanceNormalization", ["x", "s", "b"], ["y"])],
         {"x": (2, 3, 5)}, ["group_norm"], inits={"s": _w(3), "b": _w(3)}),
    case("rms_norm", [N("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-6)], X3, ["rms_norm"],
         opset=23, inits={"s": _w(4)}),
    case("embedding_gather", [N("Gather", ["table", "ids"], ["a"]),
                              N("Gather", ["x", "idx"], ["b"], axis=1)],
         {"ids": ((2, 3), TensorProto.INT64), "x": (2, 5)}, ["embedding", "gather"],
         inits={"table": _w(10, 4), "idx": _i(-1, 0)}, outputs=["a", "b"]),
    case("gather_nd", [N("GatherND", ["table", "rows"], ["a"]),
                       N("GatherND", ["x", "cells"], ["b"])],
         {"x": (2, 3, 4)}, ["embedding", "gather"],
         inits={"table": _w(6, 4), "rows": np.array([[2], [5], [-1]], np.int64),
                "cells": np.array([[[1, 2], [0, -3]]], np.int64)}, outputs=["a", "b"]),
    case("shape_subgraph", [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["n"]),
                            N("Unsqueeze", ["n", "zero1"], ["n1"]),
                            N("Concat", ["n1", "minus1"], ["shape"], axis=0),
                            N("Reshape", ["x", "shape"], ["y"])],
         X3, ["reshape"], inits={"zero": np.int64(0), "zero1": _i(0), "minus1": _i(-1)}),
    case("movement", [N("Transpose", ["x"], ["a"], perm=[2, 0, 1]),
                      N("Flatten", ["x"], ["b"], axis=2),
                      N("Unsqueeze", ["x", "ax"], ["c"]), N("Squeeze", ["c", "ax"], ["d"]),
                      N("Concat", ["x", "d"], ["e"], axis=-1),
                      N("Expand", ["row", "eshape"], ["f"]), N("Tile", ["x", "reps"], ["g"])],
         X3, ["transpose", "reshape", "unsqueeze", "squeeze", "concat", "expand", "tile"],
         inits={"ax": _i(1), "row": _w(1, 4), "eshape": _i(3, 1), "reps": _i(1, 2, 1)},
         outputs=list("abdefg")),
    case("squeeze_attr", [N("Unsqueeze", ["x"], ["a"], axes=[0]), N("Squeeze", ["a"], ["b"])],
         X, ["unsqueeze", "squeeze"], opset=11),
    case("split13", [N("Split", ["x", "sizes"], ["a", "b"], axis=1)], X3, ["split"], opset=13,
         inits={"sizes": _i(1, 2)}, outputs=["a", "b"]),
    case("split18", [N("Split", ["x"], ["a", "b"], axis=2, num_outputs=2)], X3, ["split"],
         opset=18, outputs=["a", "b"]),
    case("slice", [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (4, 6)}, ["slice"],
         inits={"st": _i(1, -1), "en": _i(BIG, -BIG), "ax": _i(0, 1), "sp": _i(1, -2)}),
    case("pad", [N("Pad", ["x", "p", "v", "ax"], ["a"]),
                 N("Pad", ["x", "p2"], ["b"], mode="reflect"),
                 N("Pad", ["x", "p2"], ["c"], mode="edge")],
         X3, ["pad"], opset=18, inits={"p": _i(1, 2), "v": np.float32(1.5), "ax": _i(2),
                                       "p2": _i(0, 1, 1, 0, 1, 2)}, outputs=list("abc")),
    case("logic", [N("Cast", ["x"], ["xi"], to=7), N("Cast", ["y"], ["yi"], to=7),
                   N("Greater", ["x", "y"], ["g"]), N("Less", ["x", "y"], ["l"]),
                   N("Equal", ["xi", "yi"], ["e"]), N("Not", ["e"], ["ne"]),
                   N("And", ["g", "ne"], ["and"]), N("Or", ["l", "and"], ["or"]),
                   N("Where", ["or", "x", "y"], ["w"])],
         {"x": (3, 4), "y": (3, 4)}, ["greater", "less", "equal", "logical_not",
                                      "logical_and", "logical_or", "where", "cast"],
         outputs=["w", "or"]),
    case("reduce13", [N("ReduceSum", ["x", "ax"], ["a"]), N("ReduceMean", ["x"], ["b"],
                                                          axes=[-1], keepdims=0),
                      N("ReduceMax", ["x"], ["c"], axes=[0, 2]), N("ReduceMin", ["x"], ["d"]),
                      N("ReduceProd", ["x"], ["e"], axes=[1])],
         X3, ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"],
         opset=13, inits={"ax": _i(1)}, outputs=list("abcde")),
    case("reduce18", [N("ReduceMean", ["x", "ax"], ["a"], keepdims=0),
                      N("ReduceSum", ["x"], ["b"]),
                      N("ReduceMax", ["x"], ["c"], noop_with_empty_axes=1),
                      N("ReduceL2", ["x", "ax"], ["d"]), N("ReduceLogSumExp", ["x"], ["e"])],
         X3, ["reduce_mean", "reduce_sum", "identity", "sqrt", "log"], opset=18,
         inits={"ax": _i(-1, 0)}, outputs=list("abcde")),
    case("argmax_cumsum_trilu", [N("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
                                 N("CumSum", ["x", "axis"], ["b"]),
                                 N("Trilu", ["x", "k"], ["c"], upper=0)],
         X3, ["argmax", "cumsum", "trilu"], inits={"axis": np.int64(2), "k": np.int64(1)},
         outputs=list("abc")),
    case("sources", [N("Shape", ["x"], ["s"]), N("Gather", ["s", "two"], ["n"]),
                     N("Range", ["zero", "n", "one"], ["r"]), N("Gather", ["table", "r"], ["rf"]),
                     N("Add", ["x", "rf"], ["a"]),
                     N("ConstantOfShape", ["s"], ["f"], value=numpy_helper.from_array(
                         np.array([2.0], dtype=np.float32))), N("Mul", ["a", "f"], ["y"])],
         X3, ["arange", "embedding", "full"], inits={"two": np.int64(2), "zero": np.int64(0),
                                                      "one": np.int64(1), "table": _w(10)}),
    case("misc", [N("Identity", ["x"], ["a"]), N("Dropout", ["a", "ratio"], ["b"]),
                  N("Clip", ["b", "lo", "hi"], ["c"]), N("Clip", ["x", "y"], ["d"]),
                  N("Constant", [], ["k"], value_float=3.0), N("Mul", ["d", "k"], ["e"])],
         {"x": (2, 3), "y": ()}, ["identity", "dropout", "clip", "maximum"],
         inits={"ratio": np.float32(0.25), "lo": np.float32(-0.5), "hi": np.float32(0.5)},
         outputs=["c", "e"]),
]


@pytest.mark.parametrize(("nodes", "inputs", "expect", "opset", "inits", "outputs"), CASES)
def test_op_table_reproduces_onnxruntime(nodes, inputs, expect, opset, inits, outputs) -> None:
    traced = onnx_frontend.trace_model(_model(nodes, inputs, inits, outputs, opset),
                                       reference="case")
    ops = {n.op for n in traced.graph.nodes}
    assert "opaque" not in ops
    assert expect <= ops, expect - ops
    assert traced.framework == "onnx"
    _check_faithful(traced)


def test_canonical_attributes_and_layouts() -> None:
    w = _w(4, 3)
    nodes = [N("Gemm", ["x", "W", "b"], ["h"], transB=1), N("Unsqueeze", ["h", "ax"], ["h3"]),
             N("BatchNormalization", ["h3", "s", "b2", "m", "v"], ["y"], momentum=0.9)]
    inits = {"W": w, "b": _w(4), "s": _w(4), "b2": _w(4), "m": _w(4), "v": np.ones(4, "f4"),
             "ax": _i(2)}
    traced = onnx_frontend.trace_model(_model(nodes, X, inits), reference="layout")
    assert traced.graph.params["W"].shape == (3, 4)
    np.testing.assert_array_equal(traced.weights["W"], w.T)
    bn = next(n for n in traced.graph.nodes if n.op == "batch_norm")
    assert (bn.attrs["momentum"], bn.attrs["eps"]) == (0.1, 1e-5)  # PyTorch convention
    assert bn.origin == "BatchNormalization"


def test_unknown_op_is_opaque_and_keeps_its_type() -> None:
    traced = onnx_frontend.trace_model(_model([N("Selu", ["x"], ["y"])], X), reference="selu")
    (node,) = traced.graph.nodes
    assert (node.op, node.attrs["target"], node.output.shape) == ("opaque", "Selu", (2, 3))


def test_example_inputs_fill_symbolic_dims_and_respect_tables() -> None:
    nodes = [N("Gather", ["table", "ids"], ["y"])]
    model = _model(nodes, {"ids": (("batch", 5), TensorProto.INT64)}, {"table": _w(3, 2)})
    traced = onnx_frontend.trace_model(model, reference="ids")
    ids = traced.inputs["ids"]
    assert ids.shape == (1, 5) and ids.dtype == np.int64 and ids.max() < 3
    ids = np.array([[2, 0, 1, 1, 0], [0, 0, 2, 2, 1]])
    given = onnx_frontend.trace_model(model, (ids,), reference="ids")
    assert given.graph.inputs[0].shape == (2, 5)
    np.testing.assert_array_equal(given.outputs["y"], _w_table(model)[ids])


def _w_table(model: onnx.ModelProto) -> np.ndarray:
    return numpy_helper.to_array(model.graph.initializer[0])


def test_factory_returning_a_model_proto_traces(tmp_path) -> None:
    from specgraph.loading import trace

    path = tmp_path / "make.py"
    onnx.save(_model([N("Relu", ["x"], ["y"])], X), tmp_path / "relu.onnx")
    path.write_text("import numpy as np, onnx, pathlib\n"
                    "def make():\n"
                    "    model = onnx.load(pathlib.Path(__file__).parent / 'relu.onnx')\n"
                    "    return model, (np.full((2, 3), -1.0, np.float32),)\n")
    traced = trace(f"{path}:make")
    assert traced.framework == "onnx" and [n.op for n in traced.graph.nodes] == ["relu"]
    np.testing.assert_array_equal(traced.outputs["y"], np.zeros((2, 3), np.float32))


def test_local_functions_are_inlined() -> None:
    twice = helper.make_function("local", "Twice", ["a"], ["b"], [N("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    model = _model([N("Twice", ["x"], ["t"], domain="local"), N("Relu", ["t"], ["y"])], X)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(twice)
    traced = onnx_frontend.trace_model(model, reference="functions")
    assert [n.op for n in traced.graph.nodes] == ["add", "relu"]
    _check_faithful(traced)


def test_torchscript_style_node_names_give_scopes(tmp_path) -> None:
    nodes = [N("Relu", ["x"], ["a"], name="/encoder/layer.0/act/Relu"), N("Neg", ["a"], ["y"])]
    path = tmp_path / "named.onnx"
    onnx.save(_model(nodes, X), path)
    traced = onnx_frontend.trace_file(path, reference=str(path))
    assert [n.scope for n in traced.graph.nodes] == ["encoder.layer.0.act", ""]


# --- hostile and broken files ------------------------------------------------------------
def test_corrupt_and_empty_files_are_one_sentence(tmp_path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf\xff\xff")
    with pytest.raises(TraceError, match=r"bad.onnx is not a valid ONNX model: .*; export it"):
        onnx_frontend.trace_file(bad, reference=str(bad))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(TraceError, match="not a valid ONNX model: it has no graph"):
        onnx_frontend.trace_file(empty, reference=str(empty))


def _external(tmp_path, location: str | None = None):
    folder = tmp_path / "model"
    folder.mkdir()
    w = _w(3, 4)
    model = _model([N("MatMul", ["x", "W"], ["y"])], X, {"W": w})
    path = folder / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    if location is not None:
        model = onnx.load(path, load_external_data=False)
        for entry in model.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        onnx.save(model, path)
    return path, w


def test_external_data_next_to_the_model_is_read(tmp_path) -> None:
    path, w = _external(tmp_path)
    traced = onnx_frontend.trace_file(path, reference=str(path))
    np.testing.assert_array_equal(traced.weights["W"], w)
    _check_faithful(traced)


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_folder_is_refused(tmp_path, where: str) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.zeros(12, np.float32).tobytes())
    location = {"parent": "../secret.bin", "absolute": str(secret), "symlink": "link.bin"}[where]
    path, _ = _external(tmp_path, location)
    if where == "symlink":
        os.symlink(secret, path.parent / "link.bin")
    with pytest.raises(TraceError, match=r"outside the model's folder; specgraph reads"):
        onnx_frontend.trace_file(path, reference=str(path))


# --- which initializers are weights -------------------------------------------------------
_SIGNATURE = """
# inputs
p_bias: PARAMETER target='bias'
p_w: PARAMETER target='w'
b_table: BUFFER target='table' persistent=False
b_stats: BUFFER target='stats' persistent=True
x: USER_INPUT
"""


def _signed(signature: bool) -> onnx.ModelProto:
    """x · wᵀ (wᵀ folded by the exporter) + bias + stats, times a table folded from
    ``arange`` and times a non-persistent buffer: what ``torch.onnx.export`` records."""
    nodes = [N("MatMul", ["x", "val_0"], ["h"]), N("Add", ["h", "bias"], ["b"]),
             N("Add", ["b", "stats"], ["s"]), N("Mul", ["s", "cos"], ["c"]),
             N("Mul", ["c", "table"], ["y"])]
    model = _model(nodes, {"x": (2, 3)}, {"val_0": _w(3, 4), "bias": _w(4), "stats": _w(4),
                                          "cos": _w(2, 4), "table": _w(2, 4)})
    if signature:
        key = "pkg.torch.export.ExportedProgram.graph_signature"
        model.graph.metadata_props.add(key=key, value=_SIGNATURE)
        for name, sources in (("val_0", "['w']"), ("cos", "['arange', 'mul', 'val_3']")):
            info = model.graph.value_info.add(name=name)
            info.metadata_props.add(key="pkg.onnxscript.optimizer.folded_from", value=sources)
    return model


def test_exported_initializers_are_weights_as_the_graph_signature_says() -> None:
    """Parameters, persistent buffers and what the exporter folded from a parameter are
    weights; tables folded from nothing trainable and non-persistent buffers constants."""
    traced = onnx_frontend.trace_model(_signed(True), (_w(2, 3),))
    assert sorted(traced.graph.params) == ["bias", "stats", "val_0"]
    assert sorted(v.shape for v in traced.graph.constants) == [(2, 4), (2, 4)]
    _check_faithful(traced)


def test_initializers_without_exporter_metadata_are_weights_by_size_and_name() -> None:
    traced = onnx_frontend.trace_model(_signed(False), (_w(2, 3),))
    assert sorted(traced.graph.params) == ["bias", "cos", "stats", "table", "val_0"]


# --- models exported from PyTorch --------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(name, optimize)``: (module, path) of a zoo model exported with dynamo."""
    torch = pytest.importorskip("torch")
    from tests.zoo.torch_models import MODELS

    folder, cache = tmp_path_factory.mktemp("exports"), {}

    def export(name: str, optimize: bool):
        if (name, optimize) not in cache:
            model, inputs = MODELS[name]()
            path = folder / f"{name}_{int(optimize)}.onnx"
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(model, inputs, path, dynamo=True, optimize=optimize,
                                  external_data=False, verbose=False)
            cache[(name, optimize)] = model, path
        return cache[(name, optimize)]

    return export


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "plain"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "preln_block", "embedding_classifier"])
def test_pytorch_dynamo_exports_trace_faithfully(exported, name: str, optimize: bool) -> None:
    model, path = exported(name, optimize)
    traced = onnx_frontend.trace_file(path, reference=str(path))
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    _check_faithful(traced)
    modules = {n for n, _ in model.named_modules() if n}
    scopes = {n.scope for n in traced.graph.nodes if n.scope}
    assert scopes and scopes <= modules, scopes - modules
    assert all(n.source.split(":")[0].endswith("torch_models.py")
               for n in traced.graph.nodes if n.source)


def test_pytorch_export_keeps_names_and_canonical_layout(exported) -> None:
    model, path = exported("mlp", False)
    traced = onnx_frontend.trace_file(path, reference=str(path))
    first = traced.graph.nodes[0]
    assert (first.op, first.scope, first.origin) == ("linear", "fc1", "Gemm")
    np.testing.assert_array_equal(traced.weights["fc1.weight"],
                                  model.fc1.weight.detach().numpy().T)


# --- the command line --------------------------------------------------------------------
def test_cli_show_reads_onnx_files(tmp_path, capsys) -> None:
    path = tmp_path / "tiny.onnx"
    nodes = [N("Gemm", ["x", "W", "b"], ["h"], transB=1, name="/fc/Gemm"), N("Relu", ["h"], ["y"])]
    onnx.save(_model(nodes, X, {"W": _w(4, 3), "b": _w(4)}), path)
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and f"{path}  (onnx, 2 nodes, 16 parameters)" in out
    assert main(["show", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(layer["scope"], layer["op"]) for layer in data["layers"]] == [("fc", "linear"),
                                                                           ("", "relu")]


def test_cli_show_bad_onnx_file_exits_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    assert main(["show", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"specgraph: error: {bad} is not a valid ONNX model: ")
    assert len(err.strip().splitlines()) == 1
