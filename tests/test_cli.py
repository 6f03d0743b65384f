"""``specgraph show`` end to end: golden renders, determinism, and one-sentence errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specgraph.cli import main

XOR = "examples/xor/model_torch.py:correct"
FORGOT = "examples/xor/model_torch.py:forgot_activation"


def _show(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["show", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("fmt", "suffix"), [("text", "txt"), ("json", "json"), ("latex", "tex")])
def test_show_xor_matches_golden(repo_root, capsys, golden, fmt: str, suffix: str) -> None:
    code, out, err = _show(capsys, XOR, "--format", fmt)
    assert (code, err) == (0, "")
    golden(f"show_xor.{suffix}", out)


def test_show_names_the_missing_activation_in_the_equations(repo_root, capsys) -> None:
    _, correct, _ = _show(capsys, XOR)
    _, forgot, _ = _show(capsys, FORGOT)
    assert "h1 = relu(x·W_hidden + b_hidden)" in correct
    assert "h1 = x·W_hidden + b_hidden" in forgot and "relu" not in forgot


def test_show_json_is_deterministic_and_complete(repo_root, capsys) -> None:
    _, first, _ = _show(capsys, XOR, "--format", "json")
    _, second, _ = _show(capsys, XOR, "--format", "json")
    assert first == second
    data = json.loads(first)
    assert [layer["op"] for layer in data["layers"]][:3] == ["linear", "relu", "linear"]
    assert data["layers"][0]["params"][0] == {"name": "hidden.weight", "shape": [2, 8],
                                              "dtype": "float32"}
    assert data["layers"][0]["source"].startswith("examples/xor/model_torch.py:")


FACTORIES = '''
import torch

def raises():
    raise RuntimeError("weights file missing")

def three():
    return torch.nn.ReLU(), (torch.ones(2),), 3

def not_a_model():
    return {"a": 1}, (1,)

def data_dependent():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x
    return M(), (torch.ones(3),)

@torch.library.custom_op("specgraph_cli_test::odd", mutates_args=())
def odd(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1)

@odd.register_fake
def _(x):
    return torch.empty_like(x)

def custom_op():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(odd(x))
    return M(), (torch.ones(2, 3),)

NOT_CALLABLE = 3
'''


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    path = tmp_path / "factories.py"
    path.write_text(FACTORIES)
    return path


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("raises", "the factory raised RuntimeError: weights file missing; run it directly"),
        ("three", "returned a 3-tuple (ReLU, tuple, int); a torch factory returns "
                  "(module, example_inputs)"),
        ("not_a_model", "returned a 2-tuple (dict, tuple), which is no model specgraph knows"),
        ("data_dependent", "torch.export could not trace the model"),
        ("missing", "has no factory 'missing'; functions in the file: raises, three"),
        ("NOT_CALLABLE", "NOT_CALLABLE is a int, not a function"),
    ],
)
def test_bad_factories_give_one_sentence_and_exit_2(capsys, factories: Path, factory: str,
                                                    message: str) -> None:
    code, out, err = _show(capsys, f"{factories}:{factory}")
    assert code == 2 and out == ""
    assert err.startswith("specgraph: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_and_missing_factory_name(capsys, tmp_path: Path, factories: Path) -> None:
    code, _, err = _show(capsys, str(tmp_path / "nope.py:make"))
    assert code == 2 and "nope.py does not exist; pass path/to/file.py:factory" in err
    code, _, err = _show(capsys, str(factories))
    assert code == 2 and "names no factory; pass" in err and "raises, three" in err


def test_opaque_op_still_shows(capsys, factories: Path) -> None:
    code, out, _ = _show(capsys, f"{factories}:custom_op")
    assert code == 0
    assert "opaque" in out and "specgraph_cli_test.odd.default" in out
    assert "h1 = opaque[specgraph_cli_test.odd.default](x)" in out
    assert "output = relu(h1)" in out


def test_debug_shows_the_traceback(factories: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "specgraph", "show", f"{factories}:raises",
                           "--debug"], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_usage_errors_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "specgraph", "show"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "the following arguments are required: MODEL" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "specgraph", "show", XOR, "--format", "pdf"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'pdf'" in proc.stderr


@pytest.mark.parametrize("source", ["model_torch", "model_jax", "model_keras"])
def test_show_reads_the_same_equations_from_every_framework(repo_root, capsys, source):
    pytest.importorskip("jax" if source == "model_jax" else "torch")
    if source == "model_keras":
        pytest.importorskip("tensorflow")
    code, out, _ = _show(capsys, f"examples/xor/{source}.py:correct")
    assert code == 0
    equations = out.split("Equations")[1]
    assert "h1 = relu(x·W_hidden + b_hidden)" in equations
    assert "h2 = h1·W_head + b_head" in equations
    assert "xor_logit = gather(h2, 0; axis=1)" in equations
    code, out, _ = _show(capsys, f"examples/xor/{source}.py:forgot_activation")
    assert code == 0 and "h1 = x·W_hidden + b_hidden" in out and "relu" not in out


def test_show_onnx_file(tmp_path: Path, capsys) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    weight = helper.make_tensor("fc.weight", TensorProto.FLOAT, [3, 2], [0.5] * 6)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "fc.weight"], ["h"], transB=1, name="/fc/Gemm"),
         helper.make_node("Relu", ["h"], ["y"], name="/act/Relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    code, out, _ = _show(capsys, str(path))
    assert code == 0 and "y = relu(x·W_fc)" in out
    path.write_bytes(b"not a model")
    code, _, err = _show(capsys, str(path))
    assert code == 2 and "is not a valid ONNX model" in err


FLAX_FACTORIES = """
from tests.zoo import jax_models

def linen():
    return jax_models.MODELS["mlp/linen"]()

def nnx():
    return jax_models.MODELS["mlp/nnx"]()
"""


@pytest.mark.parametrize("factory", ["linen", "nnx"])
def test_show_flax_models(tmp_path: Path, capsys, repo_root, factory: str) -> None:
    pytest.importorskip("flax")
    path = tmp_path / "flax_factories.py"
    path.write_text(FLAX_FACTORIES)
    code, out, err = _show(capsys, f"{path}:{factory}")
    assert code == 0, err
    assert "(flax, 5 nodes" in out and "relu(x·W_" in out


PADDED = '''
import numpy as np

IDS = np.zeros((2, 5), np.int64)


def torch_padded():
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.Embedding(6, 4, padding_idx=0)
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, i):
            return self.fc(self.emb(i))

    return M(), (torch.from_numpy(IDS),)


def jax_plain():
    import jax.numpy as jnp

    def apply(p, i):
        return jnp.take(p["emb"], i, axis=0) @ p["w"] + p["b"]

    r = np.random.default_rng(0)
    return apply, {"emb": r.standard_normal((6, 4)).astype(np.float32),
                   "w": r.standard_normal((4, 3)).astype(np.float32),
                   "b": np.zeros(3, np.float32)}, (IDS,)
'''


def test_the_summary_names_the_parameter_whose_gradients_part(tmp_path, capsys) -> None:
    """Lxmert against TF read "parameter gradients inf" and nothing said which parameter:
    PyTorch's padding rows get no gradient. The summary names the worst parameter when its
    gradients part beyond rounding."""
    pytest.importorskip("jax")
    models = tmp_path / "padded.py"
    models.write_text(PADDED)
    assert main(["diff", f"{models}:torch_padded", f"{models}:jax_plain"]) == 1
    out = capsys.readouterr().out
    (line,) = [s for s in out.splitlines() if s.strip().startswith("backward")]
    assert line.endswith("(at emb.weight)"), line
    assert "padding_idx is 0 in lhs" in out
