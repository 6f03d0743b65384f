"""ONNX external data is read by specgraph, only from the model's folder, wherever it hides."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import specgraph
from specgraph.cli import main
from specgraph.errors import TraceError
from specgraph.frontends import onnx as onnx_frontend
from specgraph.frontends.onnx import external
from tests.frontends.onnx import opens

N = helper.make_node
X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
SECRET = np.full(6, 99, np.float32).tobytes()

def _ext(name: str, array: np.ndarray, entries: dict[str, str]) -> TensorProto:
    """``array`` as a tensor whose data is said to lie in another file."""
    tensor = numpy_helper.from_array(array, name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    return tensor


def _model(nodes, extra_inputs=(), inits=(), functions=(), domains=()) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), *extra_inputs]
    graph = helper.make_graph(nodes, "case", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              initializer=list(inits))
    opsets = [helper.make_opsetid("", 21)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10,
                             functions=list(functions))


def _initializer(entries: dict[str, str]) -> onnx.ModelProto:
    return _model([N("Add", ["x", "W"], ["y"])], inits=[_ext("W", W, entries)])


def _function_constant(entries: dict[str, str]) -> onnx.ModelProto:
    body = [N("Constant", [], ["c"], value=_ext("fc", W, entries)), N("Add", ["a", "c"], ["b"])]
    fn = helper.make_function("local", "AddW", ["a"], ["b"], body,
                              [helper.make_opsetid("", 21)])
    return _model([N("AddW", ["x"], ["y"], domain="local")], functions=[fn],
                  domains=["local"])


def _sparse_constant(entries: dict[str, str]) -> onnx.ModelProto:
    sparse = helper.make_sparse_tensor(_ext("sv", W.ravel(), entries),
                                       numpy_helper.from_array(np.arange(6, dtype=np.int64)),
                                       [2, 3])
    return _model([N("Constant", [], ["c"], sparse_value=sparse), N("Add", ["x", "c"], ["y"])])


def _if_subgraph(entries: dict[str, str]) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])
    then = helper.make_graph([N("Add", ["x", "W"], ["t"])], "then", [], [out],
                             initializer=[_ext("W", W, entries)])
    other = helper.make_graph([N("Identity", ["x"], ["t"])], "else", [], [out])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    return _model([N("If", ["cond"], ["y"], then_branch=then, else_branch=other)], [cond])


def _loop_body(entries: dict[str, str], inner: list[onnx.NodeProto] | None = None
               ) -> onnx.ModelProto:
    """A Loop that runs once, its body adding W (kept in the body, or by ``inner`` nodes
    that make ``t`` from ``v``) to the carried value."""
    scalar = helper.make_tensor_value_info
    body = helper.make_graph(
        [*(inner or [N("Add", ["v", "W"], ["t"])]), N("Identity", ["c"], ["c_out"]),
         N("Identity", ["t"], ["v_out"])], "body",
        [scalar("i", TensorProto.INT64, []), scalar("c", TensorProto.BOOL, []),
         scalar("v", TensorProto.FLOAT, [2, 3])],
        [scalar("c_out", TensorProto.BOOL, []), scalar("v_out", TensorProto.FLOAT, [2, 3])],
        initializer=[] if inner else [_ext("W", W, entries)])
    once = [numpy_helper.from_array(np.array(1, np.int64), "n"),
            numpy_helper.from_array(np.array(True), "go")]
    return _model([N("Loop", ["n", "go", "x"], ["y"], body=body)], inits=once)


def _if_in_loop_body(entries: dict[str, str]) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3])
    then = helper.make_graph([N("Add", ["v", "W"], ["u"])], "then", [], [out],
                             initializer=[_ext("W", W, entries)])
    other = helper.make_graph([N("Identity", ["v"], ["u"])], "else", [], [out])
    return _loop_body(entries, [N("If", ["c"], ["t"], then_branch=then, else_branch=other)])


def _scan_body(entries: dict[str, str]) -> onnx.ModelProto:
    """A Scan over one step whose body adds W (kept in the body) to its state."""
    info = helper.make_tensor_value_info
    body = helper.make_graph([N("Add", ["s", "W"], ["s_out"])], "body",
                             [info("s", TensorProto.FLOAT, [2, 3]),
                              info("step", TensorProto.FLOAT, [])],
                             [info("s_out", TensorProto.FLOAT, [2, 3])],
                             initializer=[_ext("W", W, entries)])
    steps = numpy_helper.from_array(np.zeros(1, np.float32), "steps")
    return _model([N("Scan", ["x", "steps"], ["y"], body=body, num_scan_inputs=1)],
                  inits=[steps])


CARRIERS = {"initializer": _initializer, "function Constant": _function_constant,
            "sparse Constant": _sparse_constant, "If subgraph": _if_subgraph,
            "Loop body": _loop_body, "Scan body": _scan_body,
            "If in a Loop body": _if_in_loop_body}
OUTSIDE = "outside the model's folder; specgraph reads"
HOSTILE = {  # name: (external data entries, or None for a link, the sentence expected)
    "parent": ({"location": "../secret.bin"}, OUTSIDE),
    "absolute": ({"location": "<secret>"}, OUTSIDE),
    "symlink": ({"location": "link.bin"}, OUTSIDE),
    "nul": ({"location": "w.bin\0/../../secret.bin"}, OUTSIDE),
    "huge length": ({"location": "w.bin", "length": str(10**30)}, "reaches past the end"),
    "huge offset": ({"location": "w.bin", "offset": str(10**30)},
                    r"\(offset 10{30}, length to the end\) reaches past the end of w.bin"),
    "length past end": ({"location": "w.bin", "offset": "8", "length": "24"},
                        r"\(offset 8, length 24\) reaches past the end of w.bin, which holds 24"),
    "non-numeric offset": ({"location": "w.bin", "offset": "abc"},
                           "offset of .* is 'abc', not a non-negative integer; export"),
    "negative offset": ({"location": "w.bin", "offset": "-4"}, "not a non-negative integer"),
    "no location": ({"length": "24"}, "names none"),
    "missing file": ({"location": "gone.bin"}, "does not exist next to the model"),
}


def _layout(tmp_path: Path, carrier: str, entries: dict[str, str]) -> tuple[Path, Path]:
    """A model folder with ``w.bin`` (the weights) and ``link.bin`` (a link to a secret file
    outside it), the model pointing with ``entries``; returns the model and the folder."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(W.tobytes())
    os.symlink(secret, folder / "link.bin")
    entries = {k: v.replace("<secret>", str(secret)) for k, v in entries.items()}
    path = folder / "m.onnx"
    path.write_bytes(CARRIERS[carrier](entries).SerializeToString())
    return path, folder


@pytest.fixture
def watched(monkeypatch):
    """Files Python opens, and a check that every model onnxruntime gets is self-contained."""
    real = onnxruntime.InferenceSession

    def session(model, *args, **kwargs):
        assert isinstance(model, bytes), "onnxruntime must get bytes, never a path"
        assert not external.external(onnx.load_from_string(model))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    with opens.recording() as opened:
        yield opened


def _outside(opened: list[str], tmp_path: Path, folder: Path) -> list[str]:
    """What was opened under the test's folder but outside the model's folder."""
    root, inside = tmp_path.resolve(), folder.resolve()
    paths = [Path(p).resolve() for p in opened]
    return [str(p) for p in paths if p.is_relative_to(root) and not p.is_relative_to(inside)]


@pytest.mark.parametrize("carrier", CARRIERS)
def test_external_data_in_the_folder_is_read_wherever_it_is(tmp_path, watched, carrier) -> None:
    path, folder = _layout(tmp_path, carrier, {"location": "w.bin", "offset": "0",
                                               "length": "24"})
    watched.clear()  # from here on: what specgraph opens
    traced = onnx_frontend.trace_file(path, reference=str(path), inputs={"x": X})
    np.testing.assert_allclose(traced.outputs["y"], X + W)
    assert _outside(watched, tmp_path, folder) == []
    assert any(Path(p).name == "w.bin" for p in watched)  # specgraph read it, not onnxruntime


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("carrier", CARRIERS)
def test_hostile_references_are_one_sentence_and_open_nothing_outside(
        tmp_path, watched, carrier, hostile) -> None:
    entries, sentence = HOSTILE[hostile]
    path, folder = _layout(tmp_path, carrier, entries)
    watched.clear()  # from here on: what specgraph opens
    with pytest.raises(TraceError, match=sentence) as info:
        onnx_frontend.trace_file(path, reference=str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert _outside(watched, tmp_path, folder) == []


def test_the_sentence_names_where_the_tensor_is(tmp_path) -> None:
    path, _ = _layout(tmp_path, "function Constant", {"location": "../secret.bin"})
    with pytest.raises(TraceError, match=r"attribute 'value' of node '' \(Constant\) in "
                                         r"function 'local.AddW' keeps its data in '../secret"):
        onnx_frontend.trace_file(path, reference=str(path))
    path, _ = _layout(tmp_path / "if", "If subgraph", {"location": "/etc/passwd"})
    with pytest.raises(TraceError, match=r"initializer 'W' in the subgraph of attribute "
                                         r"'then_branch' of node '' \(If\) keeps its data"):
        onnx_frontend.trace_file(path, reference=str(path))
    path, _ = _layout(tmp_path / "loop", "If in a Loop body", {"location": "../secret.bin"})
    with pytest.raises(TraceError, match=r"initializer 'W' in the subgraph of attribute "
                                         r"'then_branch' of node '' \(If\) in the subgraph "
                                         r"of attribute 'body' of node '' \(Loop\) keeps"):
        onnx_frontend.trace_file(path, reference=str(path))


def test_in_memory_model_with_external_data_anywhere_is_refused() -> None:
    model = _function_constant({"location": "w.bin"})
    with pytest.raises(TraceError, match=r"external files \(attribute 'value' of node '' "
                                         r"\(Constant\) in function 'local.AddW' first\); load"):
        onnx_frontend.trace_model(model, reference="factory")


def test_cli_exits_2_with_one_line(tmp_path, capsys) -> None:
    path, _ = _layout(tmp_path, "sparse Constant", {"location": "w.bin", "offset": "1e3"})
    assert main(["show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"specgraph: error: {path}: the external data offset of attribute "
                          "'sparse_value' of node '' (Constant) is '1e3', not a non-negative")


def test_nested_subgraphs_are_walked_to_the_bottom() -> None:
    graph = helper.make_graph([], "leaf", [], [], initializer=[_ext("deep", W, {})])
    for _ in range(20):  # protobuf itself refuses nesting past about 100 messages
        graph = helper.make_graph([N("Loop", ["n", "c"], ["o"], body=graph)], "g", [], [])
    model = helper.make_model(graph)
    assert [t.name for _, t in external.external(model)][:1] == ["deep"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_no_process_level_open_outside_the_folder(tmp_path) -> None:
    """The audit hook sees only Python's opens; strace sees onnxruntime's too."""
    cases = []
    for carrier in CARRIERS:
        for hostile, (entries, _) in HOSTILE.items():
            path, _ = _layout(tmp_path / f"{carrier}-{hostile}", carrier, entries)
            cases.append(str(path))
    script = textwrap.dedent("""
        import sys
        from specgraph.errors import TraceError
        from specgraph.frontends import onnx as f
        for path in sys.argv[1:]:
            try:
                f.trace_file(path, reference=path)
            except TraceError:
                pass
            else:
                raise SystemExit(f"{path} traced")
    """)
    log = tmp_path / "strace.log"
    done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,openat2,creat",
                           "-o", str(log), sys.executable, "-c", script, *cases],
                          capture_output=True, text=True, cwd=Path(specgraph.__file__).parents[1])
    if "ptrace" in done.stderr and done.returncode != 0:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert sum("m.onnx" in line for line in lines) >= len(cases)  # strace saw the opens
    assert [line for line in lines if "secret.bin" in line] == []
