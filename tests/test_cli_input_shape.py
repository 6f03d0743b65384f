"""``--input-shape NAME=D1,D2,...`` on ``show`` and ``diff``: validated when parsed, checked
against the ONNX model it sizes, and every refusal one sentence with exit 2 (and a JSON
``error`` with ``--format json``); inputs over the size bound are refused before anything is
allocated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgraph.cli import main

N = helper.make_node


def _save(path: Path, name: str, dims, nodes, out_dims, inits=()) -> str:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                                         dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)],
                              initializer=list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=10), path)
    return str(path)


@pytest.fixture
def models(tmp_path: Path) -> dict[str, str]:
    """``x`` and ``inp``: the same linear layer on [batch, 3] under two input names; ``huge``
    declares a [1000000, 1000000] input; ``reshape`` runs only on 12 elements."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "W")
    to = numpy_helper.from_array(np.array([2, 6], np.int64), "to")
    factory = tmp_path / "factory.py"
    factory.write_text("import numpy as np, onnx, pathlib\nprint('factory prints')\n"
                       "def make():\n"
                       "    model = onnx.load(pathlib.Path(__file__).parent / 'x.onnx')\n"
                       "    return model, (np.ones((2, 3), np.float32),)\n")
    return {
        "x": _save(tmp_path / "x.onnx", "x", ["batch", 3], [N("MatMul", ["x", "W"], ["y"])],
                   ["batch", 4], [w]),
        "inp": _save(tmp_path / "inp.onnx", "inp", ["batch", 3],
                     [N("MatMul", ["inp", "W"], ["y"])], ["batch", 4], [w]),
        "huge": _save(tmp_path / "huge.onnx", "x", [10**6, 10**6], [N("Relu", ["x"], ["y"])],
                      [10**6, 10**6]),
        "reshape": _save(tmp_path / "reshape.onnx", "x", ["batch", "n"],
                         [N("Reshape", ["x", "to"], ["y"])], [2, 6], [to]),
        "factory": f"{factory}:make",
    }


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _error(capsys, *args: str) -> dict:
    """Run with --format json: exit 2, stdout the error object alone, stderr its sentence."""
    code, out, err = _run(capsys, *args, "--format", "json")
    data = json.loads(out)
    assert code == 2 and set(data) == {"error"}, (code, out, err)
    error = data["error"]
    assert error["exit_code"] == 2 and error["command"] == args[0]
    assert err.endswith(f"specgraph: error: {error['message']}\n") and "Traceback" not in err
    assert "\n" not in error["message"]
    return error


def test_show_sizes_the_symbolic_dimensions(capsys, models) -> None:
    code, out, _ = _run(capsys, "show", models["x"], "--input-shape", "x=5,3", "--format",
                        "json")
    report = json.loads(out)
    assert code == 0 and report["inputs"][0]["shape"] == [5, 3]
    assert report["outputs"][0]["shape"] == [5, 4]
    code, out, _ = _run(capsys, "show", models["x"], "--format", "json")
    assert code == 0 and json.loads(out)["inputs"][0]["shape"] == [1, 3]


@pytest.mark.parametrize("command", ["show", "diff"])
@pytest.mark.parametrize("value, said", [
    ("x", "'x' is no NAME=D1,D2,...; pass an input's name and its sizes, whole numbers from 1"),
    ("=3", "'=3' is no NAME=D1,D2,..."),
    ("x=", "'x=' is no NAME=D1,D2,..."),
    ("x=0,3", "'x=0,3' is no NAME=D1,D2,..."),
    ("x=-1,3", "'x=-1,3' is no NAME=D1,D2,..."),
    ("x=1.5", "'x=1.5' is no NAME=D1,D2,..."),
    ("x=1_000", "'x=1_000' is no NAME=D1,D2,..."),
    ("x= 4", "'x= 4' is no NAME=D1,D2,..."),
    ("x=99999999999999999999", "is no NAME=D1,D2,..."),
    ("x=" + ",".join(["1"] * 33), "gives 33 sizes; specgraph makes inputs of at most 32 "
                                  "dimensions"),
    ("x=100000,100000", "'x=100000,100000' makes 10,000,000,000 elements; an input specgraph "
                        "makes holds at most 1,073,741,824 bytes"),
])
def test_malformed_shapes_are_usage_errors(capsys, models, command, value, said) -> None:
    sides = [models["x"]] if command == "show" else [models["x"], models["x"]]
    error = _error(capsys, command, *sides, "--input-shape", value)
    assert error["kind"] == "usage"
    assert error["message"].startswith("argument --input-shape: ") and said in error["message"]


def test_an_input_named_twice_is_a_usage_error(capsys, models) -> None:
    error = _error(capsys, "show", models["x"], "--input-shape", "x=2,3", "--input-shape",
                   "x=4,3")
    assert error["kind"] == "usage"
    assert error["message"] == ("argument --input-shape: 'x' is given twice; pass each "
                                "input's sizes once")


@pytest.mark.parametrize("value, said", [
    ("z=2,3", "{x}: --input-shape names 'z', which is no input of the model; its inputs "
              "are x"),
    ("x=2", "{x}: --input-shape x=2 gives 1 size(s) for input 'x', declared "
            "float32[batch, 3] with 2 dimension(s); pass one size per dimension"),
    ("x=2,4", "{x}: --input-shape x=2,4 sets dimension 1 to 4, but input 'x' is declared "
              "float32[batch, 3], that dimension fixed at 3; pass --input-shape x=2,3"),
])
def test_a_shape_that_does_not_fit_the_model_is_one_sentence(capsys, models, value,
                                                             said) -> None:
    error = _error(capsys, "show", models["x"], "--input-shape", value)
    assert error["kind"] == "input" and error["message"] == said.format(**models)
    code, out, err = _run(capsys, "show", models["x"], "--input-shape", value)
    assert (code, out) == (2, "") and err == f"specgraph: error: {said.format(**models)}\n"


def test_a_declared_input_over_the_bound_is_refused(capsys, models) -> None:
    error = _error(capsys, "show", models["huge"])
    assert error["message"] == (
        f"{models['huge']}: input 'x' is declared float32[1000000, 1000000], "
        "4,000,000,000,000 bytes, over specgraph's bound of 1,073,741,824 bytes per input; "
        "export the model with symbolic dimensions there and pass --input-shape x=D1,D2 "
        "with sizes that fit")


def test_a_run_that_fails_on_symbolic_sizes_suggests_input_shape(capsys, models) -> None:
    error = _error(capsys, "show", models["reshape"])
    assert error["message"].startswith(f"{models['reshape']}: onnxruntime failed to run the "
                                       "model on its example inputs: ")
    assert error["message"].endswith("; specgraph sized symbolic dimensions as 1 (input 'x' "
                                     "[batch, n]): pass the sizes the model expects with "
                                     "--input-shape NAME=D1,D2,...")
    code, out, _ = _run(capsys, "show", models["reshape"], "--input-shape", "x=3,4",
                        "--format", "json")
    assert code == 0 and json.loads(out)["outputs"][0]["shape"] == [2, 6]


def test_show_refuses_input_shape_for_a_factory_before_running_it(capsys, models) -> None:
    error = _error(capsys, "show", models["factory"], "--input-shape", "x=2,3")
    assert error["message"] == (f"model reference {models['factory']!r}: --input-shape sizes "
                                "the inputs of .onnx files, and a factory's example inputs "
                                "fix its own; return inputs of the sizes you want")
    code, _, err = _run(capsys, "show", models["factory"], "--input-shape", "x=2,3")
    assert code == 2 and "factory prints" not in err  # refused before the file was imported


def test_diff_sizes_each_onnx_side_that_has_the_input(capsys, models) -> None:
    both = ["diff", models["x"], models["inp"], "--input-shape", "x=5,3"]
    error = _error(capsys, *both)  # inp stays [1, 3]: the sides take different inputs
    assert "the models take different inputs" in error["message"]
    assert "(x: [5, 3])" in error["message"] and "(inp: [1, 3])" in error["message"]
    code, out, _ = _run(capsys, *both, "--input-shape", "inp=5,3", "--format", "json")
    assert code == 0 and json.loads(out)["equivalent"] is True


def test_diff_refuses_a_name_no_onnx_side_has(capsys, models) -> None:
    error = _error(capsys, "diff", models["x"], models["inp"], "--input-shape", "z=5,3")
    assert error["kind"] == "input" and error["message"] == (
        f"--input-shape names 'z', which is no input of {models['x']} (inputs: x) or "
        f"{models['inp']} (inputs: inp); pass the name of an input")


def test_diff_with_one_onnx_side_sizes_that_side_only(capsys, models) -> None:
    code, out, err = _run(capsys, "diff", models["factory"], models["x"], "--input-shape",
                          "x=2,3", "--format", "json")
    assert code == 0 and json.loads(out)["equivalent"] is True, err
    error = _error(capsys, "diff", models["factory"], models["x"], "--input-shape", "x=4,3")
    assert "(x: [2, 3])" in error["message"] and "(x: [4, 3])" in error["message"]


def test_diff_refuses_input_shape_when_no_side_is_onnx_before_running(capsys,
                                                                      models) -> None:
    error = _error(capsys, "diff", models["factory"], models["factory"], "--input-shape",
                   "x=1,3")
    assert error["message"] == (f"--input-shape sizes the inputs of .onnx files, and "
                                f"{models['factory']} and {models['factory']} are none; a "
                                "factory's example inputs fix its own")
    code, _, err = _run(capsys, "diff", models["factory"], models["factory"],
                        "--input-shape", "x=1,3")
    assert code == 2 and "factory prints" not in err


def test_a_refusal_in_a_real_process_is_json_on_stdout_alone(models) -> None:
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "specgraph", "show", models["huge"],
                           "--format", "json"], capture_output=True, text=True, cwd=root,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "input" and "4,000,000,000,000 bytes" in error["message"]
    assert proc.stderr.count("specgraph: error:") == 1 and "Traceback" not in proc.stderr
