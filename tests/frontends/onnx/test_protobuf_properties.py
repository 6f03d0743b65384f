"""Any mutation of a small valid ONNX model keeps the contract of ``specgraph show FILE --format
json``: exit 0 or 2 (never 3), no traceback, JSON on stdout, and no file opened outside the
model's folder and the Python install. The mutations are byte flips, insertions, deletions
and truncations of the serialized model, and edits of its fields: dimensions, dtypes,
attribute values, op types, node inputs, versions, and external data pointing anywhere
(absolute paths, ``..``, a link leading out, a folder, huge or non-numeric offsets).
Bounded here; ``SPECGRAPH_PROPERTY_EXAMPLES=2000 pytest
tests/frontends/onnx/test_protobuf_properties.py`` runs a longer search."""

from __future__ import annotations

import json
import os
import site
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import specgraph
import specgraph.renderers
from specgraph.cli import main
from specgraph.errors import FactoryError
from specgraph.frontends import onnx as onnx_frontend
from specgraph.frontends.onnx import external, inputs, sparse
from tests.frontends.onnx import opens

EXAMPLES = int(os.environ.get("SPECGRAPH_PROPERTY_EXAMPLES", "100"))
SMALL_BOUND = 2**24  # inputs and dense tensors up to 16 MiB keep every example quick

N = helper.make_node
_RNG = np.random.default_rng(0)
W = _RNG.standard_normal((4, 3)).astype(np.float32)

# --- the seed models: small, valid, each a different corner of the format --------------
def _info(name: str, dims, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs_, outputs, inits=(), functions=(), domains=(),
           sparse_inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "seed", inputs_, outputs, initializer=list(inits),
                              sparse_initializer=list(sparse_inits))
    opsets = [helper.make_opsetid("", 18)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10,
                             functions=list(functions))


def _tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _mlp() -> onnx.ModelProto:
    inits = [_tensor("W1", W), _tensor("b1", np.ones(3, np.float32)),
             _tensor("W2", W[:3]), _tensor("b2", np.zeros(3, np.float32))]
    nodes = [N("Gemm", ["x", "W1", "b1"], ["h"], name="/fc1/Gemm"), N("Relu", ["h"], ["r"]),
             N("Gemm", ["r", "W2", "b2"], ["g"], alpha=0.5), N("Softmax", ["g"], ["y"], axis=-1)]
    return _model(nodes, [_info("x", ["batch", 4])], [_info("y", ["batch", 3])], inits)


def _conv() -> onnx.ModelProto:
    kernel = _RNG.standard_normal((2, 1, 3, 3)).astype(np.float32)
    nodes = [N("Conv", ["x", "K"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
             N("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Flatten", ["p"], ["y"], axis=1)]
    return _model(nodes, [_info("x", [1, 1, 4, 4])], [_info("y", [1, 8])],
                  [_tensor("K", kernel)])


def _external() -> onnx.ModelProto:
    """A MatMul whose weight lies in ``w.bin`` next to the model."""
    weight = _tensor("W", W)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(W.nbytes))):
        weight.external_data.add(key=key, value=value)
    return _model([N("MatMul", ["x", "W"], ["y"])], [_info("x", [2, 4])], [_info("y", [2, 3])],
                  [weight])


def _sparse() -> onnx.ModelProto:
    value = helper.make_sparse_tensor(_tensor("s", np.array([1.5, -2], np.float32)),
                                      _tensor("i", np.array([1, 4], np.int64)), [2, 3])
    table = helper.make_sparse_tensor(_tensor("t", np.array([3.0], np.float32)),
                                      _tensor("j", np.array([[0, 2]], np.int64)), [2, 3])
    nodes = [N("Constant", [], ["c"], sparse_value=value), N("Add", ["x", "c"], ["a"]),
             N("Mul", ["a", "t"], ["y"])]
    return _model(nodes, [_info("x", [2, 3])], [_info("y", [2, 3])], sparse_inits=[table])


def _branch() -> onnx.ModelProto:
    out = _info("t", [2, 3])
    then = helper.make_graph([N("Add", ["x", "B"], ["t"])], "then", [], [out],
                             initializer=[_tensor("B", np.ones((2, 3), np.float32))])
    other = helper.make_graph([N("Neg", ["x"], ["t"])], "else", [], [out])
    nodes = [N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["cond"]),
             N("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    return _model(nodes, [_info("x", [2, 3])], [_info("y", [2, 3])],
                  [_tensor("zero", np.array(0, np.float32))])


def _function() -> onnx.ModelProto:
    body = [N("Constant", [], ["k"], value_float=2.0), N("Mul", ["a", "k"], ["b"])]
    twice = helper.make_function("local", "Twice", ["a"], ["b"], body,
                                 [helper.make_opsetid("", 18)])
    nodes = [N("Twice", ["x"], ["t"], domain="local"), N("Tanh", ["t"], ["y"])]
    return _model(nodes, [_info("x", [2, 3])], [_info("y", [2, 3])], functions=[twice],
                  domains=["local"])


def _ids() -> onnx.ModelProto:
    table = _tensor("table", _RNG.standard_normal((5, 3)).astype(np.float32))
    nodes = [N("Gather", ["table", "ids"], ["e"]), N("Reshape", ["e", "shape"], ["y"])]
    return _model(nodes, [_info("ids", ["batch", 2], TensorProto.INT64)],
                  [_info("y", [-1, 6])], [table, _tensor("shape", np.array([-1, 6], np.int64))])


SEEDS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": _mlp, "conv": _conv, "external": _external, "sparse": _sparse, "branch": _branch,
    "function": _function, "ids": _ids}


# --- structured mutations: each edits one field somewhere in the model ------------------
_DIMS = st.sampled_from([0, 1, 2, 3, 7, -1, -5, 10**6, 2**31, 2**62])
_INTS = st.sampled_from([-(2**62), -3, -1, 0, 1, 2, 3, 7, 2**31, 2**62])
_FLOATS = st.sampled_from([0.0, -1.0, 0.5, 1e30, float("inf"), float("-inf"), float("nan")])
_LOCATIONS = st.sampled_from(["w.bin", "/etc/passwd", "/dev/zero", "../secret.bin", "link.bin",
                              "folder", "", "w.bin\0/../../secret.bin", "./w.bin",
                              "sub/../w.bin", "../model/w.bin", "C:\\secret.bin",
                              "//server/share/w.bin"])
_NUMBERS = st.sampled_from(["0", "4", "48", "-1", "abc", "1e3", " 4", "0x10", "",
                            str(10**30), str(2**63)])


def _pick(draw, items: list):
    return items[draw(st.integers(0, len(items) - 1))] if items else None


def _graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    return [g for _, g in external.owners(model) if isinstance(g, onnx.GraphProto)]


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for _, t in external.tensors(model)]


def _edit_dims(draw, model: onnx.ModelProto) -> None:
    infos = [i for g in _graphs(model) for i in (*g.input, *g.output, *g.value_info)]
    target = _pick(draw, infos + _tensors(model))
    if isinstance(target, onnx.ValueInfoProto):
        dims = target.type.tensor_type.shape.dim
        if dims and draw(st.booleans()):
            dim = dims[draw(st.integers(0, len(dims) - 1))]
            dim.Clear()
            if draw(st.booleans()):
                dim.dim_value = draw(_DIMS)
            else:
                dim.dim_param = draw(st.sampled_from(["batch", "", "n m", "\0"]))
        else:
            target.type.tensor_type.shape.dim.add().dim_value = draw(_DIMS)
    elif target is not None:
        del target.dims[:]
        target.dims.extend(draw(st.lists(_DIMS, max_size=3)))


def _edit_dtype(draw, model: onnx.ModelProto) -> None:
    infos = [i for g in _graphs(model) for i in (*g.input, *g.output)]
    target = _pick(draw, infos + _tensors(model))
    elem = draw(st.sampled_from([0, 1, 2, 6, 7, 8, 9, 10, 11, 16, 17, 23, 25, 99]))
    if isinstance(target, onnx.ValueInfoProto):
        target.type.tensor_type.elem_type = elem
    elif target is not None:
        target.data_type = elem


def _edit_attribute(draw, model: onnx.ModelProto) -> None:
    attrs = [a for g in _graphs(model) for n in g.node for a in n.attribute]
    attr = _pick(draw, attrs)
    if attr is None:
        return
    if attr.type == onnx.AttributeProto.INT:
        attr.i = draw(_INTS)
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = draw(_FLOATS)
    elif attr.type == onnx.AttributeProto.INTS:
        del attr.ints[:]
        attr.ints.extend(draw(st.lists(_INTS, max_size=5)))
    elif draw(st.booleans()):
        attr.type = draw(st.sampled_from([0, 1, 2, 3, 7, 13]))  # a kind that no longer fits
    else:
        attr.name = draw(st.sampled_from(["", "axis", "value", "sparse_value", "nope"]))


def _edit_node(draw, model: onnx.ModelProto) -> None:
    nodes = [n for g in _graphs(model) for n in g.node]
    node = _pick(draw, nodes)
    if node is None:
        return
    names = [name for n in nodes for name in (*n.input, *n.output)]
    what = draw(st.sampled_from(["input", "op", "domain", "output"]))
    if what == "op":
        node.op_type = draw(st.sampled_from(["Relu", "Identity", "Add", "MatMul", "Reshape",
                                             "Transpose", "Softmax", "Twice", "Nope", ""]))
    elif what == "domain":
        node.domain = draw(st.sampled_from(["", "ai.onnx", "local", "com.microsoft", "x"]))
    else:
        slots = node.input if what == "input" else node.output
        if slots:
            index = draw(st.integers(0, len(slots) - 1))
            slots[index] = draw(st.sampled_from(["", "missing", _pick(draw, names) or ""]))


def _edit_version(draw, model: onnx.ModelProto) -> None:
    if draw(st.booleans()):
        model.ir_version = draw(st.sampled_from([0, 1, 3, 7, 10, 99]))
    else:
        model.opset_import[0].version = draw(st.sampled_from([0, 1, 7, 13, 18, 99, 10**9]))


def _edit_external(draw, model: onnx.ModelProto) -> None:
    tensor = _pick(draw, _tensors(model))
    if tensor is None:
        return
    tensor.data_location = draw(st.sampled_from([TensorProto.EXTERNAL] * 3
                                                + [TensorProto.DEFAULT]))
    del tensor.external_data[:]
    keys = draw(st.lists(st.sampled_from(["location", "offset", "length", "checksum",
                                          "basepath", ""]), max_size=4))
    for key in keys:
        value = draw(_LOCATIONS if key in ("location", "basepath") else _NUMBERS)
        tensor.external_data.add(key=key, value=value)
    if draw(st.booleans()):
        tensor.ClearField("raw_data")


EDITS = {"dims": _edit_dims, "dtype": _edit_dtype, "attribute": _edit_attribute,
         "node": _edit_node, "version": _edit_version, "external": _edit_external}


# --- byte mutations of the serialized model ----------------------------------------------
def _mutate_bytes(draw, data: bytes) -> bytes:
    count = draw(st.integers(0, 9))  # most models stay parsable: a byte in a tag breaks it
    for _ in range(count - 6 if count > 6 else 0):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "flip", "flip", "insert", "delete", "truncate"]))
        if kind == "flip":
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
        elif kind == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 8)):]
        else:
            data = data[:at]
    return data


@st.composite
def _cases(draw) -> tuple[str, list[str], bytes]:
    seed = draw(st.sampled_from(sorted(SEEDS)))
    model = SEEDS[seed]()
    edits = draw(st.lists(st.sampled_from(sorted(EDITS)), max_size=3))
    for edit in edits:
        EDITS[edit](draw, model)
    return seed, edits, _mutate_bytes(draw, model.SerializeToString())


# --- the property --------------------------------------------------------------------------
def _layout(root: Path, data: bytes) -> tuple[Path, Path]:
    """``root/model/m.onnx`` holding ``data``, with ``w.bin`` (the weights), ``folder`` (a
    folder) and ``link.bin`` (a link to ``root/secret.bin``, outside) beside it."""
    secret = root / "secret.bin"
    secret.write_bytes(np.full(64, 99, np.uint8).tobytes())
    folder = root / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(W.tobytes())
    (folder / "folder").mkdir()
    os.symlink(secret, folder / "link.bin")
    path = folder / "m.onnx"
    path.write_bytes(data)
    return path, folder


def _installed() -> list[Path]:
    """Where Python and the packages specgraph imports live: opening files there is
    importing, not reading the user's files."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages()}
    roots |= {os.path.dirname(p) for p in (specgraph.__file__, specgraph.frontends.__file__,
                                           specgraph.renderers.__file__)}
    return sorted({Path(r).resolve() for r in roots})


def _outside(opened: list[str], folder: Path) -> list[str]:
    allowed = [folder.resolve(), *_installed()]
    paths = [Path(p).resolve() for p in opened]
    return [str(p) for p in paths if not any(p.is_relative_to(a) for a in allowed)]


def _show(path: Path) -> tuple[int, list[str]]:
    """``specgraph show PATH --format json`` in-process: the exit code and every file Python
    opened meanwhile (stdout and stderr are the caller's to read)."""
    with opens.recording() as opened:
        code = main(["show", str(path), "--format", "json"])
    return code, opened


@pytest.fixture
def small_bound(monkeypatch):
    """Keep every example quick: inputs and dense tensors bounded at SMALL_BOUND bytes."""
    monkeypatch.setattr(inputs, "MAX_TENSOR_BYTES", SMALL_BOUND)
    monkeypatch.setattr(sparse, "MAX_TENSOR_BYTES", SMALL_BOUND)


def _check_contract(path: Path, folder: Path, capsys, case) -> dict:
    """Run ``show`` on ``path`` and check the contract; returns the JSON document."""
    capsys.readouterr()
    code, opened = _show(path)
    out, err = capsys.readouterr()
    assert code in (0, 2), (case, code, err[-2000:])
    assert "Traceback" not in out + err, (case, err[-2000:])
    document = json.loads(out)
    if code == 2:
        assert set(document) == {"error"} and document["error"]["kind"] == "input", case
        assert "\n" not in document["error"]["message"], case
    assert _outside(opened, folder) == [], case
    return document


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(case=_cases())
def test_any_mutated_model_keeps_the_contract(case, capsys, tmp_path_factory,
                                               small_bound) -> None:
    _, _, data = case
    path, folder = _layout(tmp_path_factory.mktemp("case"), data)
    _check_contract(path, folder, capsys, case)


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_every_seed_model_traces(seed, capsys, tmp_path) -> None:
    """The seeds are valid: unmutated, each one shows (exit 0)."""
    path, folder = _layout(tmp_path, SEEDS[seed]().SerializeToString())
    document = _check_contract(path, folder, capsys, seed)
    assert "error" not in document and document["layers"], seed


# --- what the property found, kept as plain cases ----------------------------------------
def test_a_name_that_is_not_utf8_is_one_sentence(capsys, tmp_path) -> None:
    """protobuf hands a proto2 string field holding no UTF-8 over as bytes; joining the
    input names then raised TypeError (exit 3)."""
    data = _ids().SerializeToString().replace(b"ids", b"\xe9ds")
    path, folder = _layout(tmp_path, data)
    error = _check_contract(path, folder, capsys, "not utf-8")["error"]
    assert error["message"] == (f"{path} is not a valid ONNX model: graph.input[0].name is "
                                "not UTF-8 text; export it again or pass the right file")
    with pytest.raises(FactoryError, match=r"factory: the model's graph\.input\[0\]\.name is "
                                           "not UTF-8 text; give every name"):
        onnx_frontend.trace_model(onnx.load_from_string(data), reference="factory")


def test_an_external_offset_past_the_end_without_a_length_is_one_sentence(capsys,
                                                                          tmp_path) -> None:
    """An offset beyond the file with no length made a negative length and an offset that
    file.seek cannot take (ValueError, exit 3)."""
    model = _external()
    entries = model.graph.initializer[0].external_data
    del entries[:]
    entries.add(key="location", value="w.bin")
    entries.add(key="offset", value=str(10**30))
    path, folder = _layout(tmp_path, model.SerializeToString())
    error = _check_contract(path, folder, capsys, "offset past the end")["error"]
    assert error["message"] == (f"{path}: the external data of initializer 'W' (offset "
                                f"{10**30}, length to the end) reaches past the end of w.bin, "
                                "which holds 48 bytes; export the model again")


def test_a_recursive_local_function_is_one_sentence(capsys, tmp_path) -> None:
    """onnx's inliner raises ValidationError on a function that calls itself (exit 3)."""
    model = _function()
    body = model.functions[0].node
    body[1].op_type, body[1].domain = "Twice", "local"
    path, folder = _layout(tmp_path, model.SerializeToString())
    error = _check_contract(path, folder, capsys, "recursive function")["error"]
    assert error["message"].startswith(f"{path}: onnx cannot inline the model's local "
                                       "functions: Cycle detected in model-local function "
                                       "references: local::Twice -> local::Twice")
    assert error["message"].endswith("; check it with onnx.checker.check_model")
