"""``specgraph diff`` with numbers: on by default where the alignment covers both graphs,
its flags, one-sentence errors, and the repro folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgraph.cli import main

pytest.importorskip("torch")
pytest.importorskip("jax")

TORCH = "examples/xor/model_torch.py"
JAX = "examples/xor/model_jax.py"


def test_equivalent_pair_agrees_in_numbers_by_default(repo_root, capsys) -> None:
    assert main(["diff", f"{TORCH}:correct", f"{JAX}:correct", "--seed", "0-2"]) == 0
    out = capsys.readouterr().out
    assert "Numbers  (lhs torch cpu,eager,float32, rhs jax cpu,eager,float32; seeds 0-2" in out
    assert "outputs and gradients agree layer by layer over seeds 0-2" in out


def test_no_numeric_and_numbers_confirm_a_structural_difference(repo_root, capsys) -> None:
    assert main(["diff", f"{TORCH}:correct", f"{JAX}:forgot_activation", "--no-numeric"]) == 1
    assert "Numbers" not in capsys.readouterr().out
    # where the structure differs the numbers still run; what they find downstream of the
    # missing relu is that finding's consequence, said in it, not a second finding
    assert main(["diff", f"{TORCH}:correct", f"{JAX}:forgot_activation",
                 "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [finding] = report["findings"]
    assert finding["code"] == "missing-op" and finding["op"] == "relu"
    assert "the numbers confirm it: values part at linear at head" in finding["message"]
    assert report["numeric"]["layers"]


def test_numeric_only_localizes_the_missing_activation(repo_root, capsys) -> None:
    code = main(["diff", f"{TORCH}:correct", f"{JAX}:forgot_activation", "--numeric-only",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    [finding] = report["findings"]
    assert finding["code"] == "numeric-divergence"
    assert "lhs's relu at act, which rhs has no counterpart for" in finding["message"]


def test_batch_seed_and_contexts_reach_the_report(repo_root, capsys) -> None:
    code = main(["diff", f"{TORCH}:correct", f"{JAX}:correct", "--batch", "6", "--seed",
                 "1,3", "--rhs-context", "cpu,compiled", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["equivalent"]
    numeric = report["numeric"]
    assert numeric["seeds"] == [1, 3]
    assert numeric["rhs_context"] == "jax cpu,compiled,float32"


@pytest.mark.parametrize(("args", "says"), [
    (["--lhs-context", "cpu,warp"], "'warp' is no device"),
])
def test_bad_numeric_options_are_one_sentence(repo_root, capsys, args, says) -> None:
    assert main(["diff", f"{TORCH}:correct", f"{JAX}:correct", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_repro_folder_for_a_planted_fault(repo_root, capsys, tmp_path: Path) -> None:
    from tests.zoo.torch_faults import wrong_softmax

    folder = tmp_path / "repro"
    models = tmp_path / "models.py"
    models.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(repo_root)!r})\n"
        "from tests.zoo import torch_models, jax_models\n"
        "def torch_wide():\n    return torch_models.MODELS['wide_classifier']()\n"
        "def jax_wide():\n    return jax_models.MODELS['wide_classifier/jax']()\n")
    with wrong_softmax():
        code = main(["diff", f"{models}:jax_wide", f"{models}:torch_wide", "--repro",
                     str(folder)])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 1 and "rhs (torch) leaves the fp64 reference" in out
    assert sorted(p.name for p in folder.iterdir()) == ["case.npz", "repro_jax.py",
                                                       "repro_torch.py"]
    # where the scripts went is said on stderr, in any format (not only at a terminal)
    said = [line for line in captured.err.splitlines() if line.startswith("--repro: ")]
    assert [line.split(": ")[1] for line in said] == [
        str(folder / name) for name in ("case.npz", "repro_jax.py", "repro_torch.py")]
    # the report carries the paths written, nothing else of the repro
    json_folder = tmp_path / "repro_json"
    with wrong_softmax():
        main(["diff", f"{models}:jax_wide", f"{models}:torch_wide", "--format", "json",
              "--repro", str(json_folder)])
    written = json.loads(capsys.readouterr().out)["numeric"]["repro"]
    assert [line.split(": ", 1)[0] for line in written] == [
        str(json_folder / name) for name in ("case.npz", "repro_jax.py", "repro_torch.py")]


def test_a_repro_folder_with_nothing_to_write_says_so(repo_root, capsys,
                                                      tmp_path: Path) -> None:
    folder = tmp_path / "repro"
    assert main(["diff", f"{TORCH}:correct", f"{JAX}:correct", "--repro", str(folder)]) == 0
    err = capsys.readouterr().err
    assert f"--repro: nothing written to {folder}: no layer's numbers diverge\n" in err
    assert not folder.exists()


def test_weights_that_cannot_move_are_one_sentence(capsys, tmp_path: Path) -> None:
    models = tmp_path / "widths.py"
    models.write_text(
        "import torch\n"
        "def build(width):\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.ReLU(),\n"
        "                              torch.nn.Linear(width, 2))\n"
        "    return net, (torch.randn(4, 3),)\n"
        "def narrow():\n    return build(8)\n"
        "def wide():\n    return build(16)\n")
    assert main(["diff", f"{models}:narrow", f"{models}:wide", "--numeric-only"]) == 2
    err = capsys.readouterr().err
    assert "cannot move weights from lhs to rhs" in err and err.count("\n") == 1


def test_batch_is_refused_for_onnx_files(capsys, tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"")
    assert main(["diff", str(model), str(model), "--batch", "2"]) == 2
    err = capsys.readouterr().err
    assert "an .onnx file's batch size is fixed" in err and err.count("\n") == 1


WIDER = '''
import numpy as np

X = np.ones((2, 4), np.float32)


def torch_model():
    import torch

    torch.manual_seed(0)
    return (torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)),
            (torch.from_numpy(X),))


def jax_model():  # a hidden layer twice as wide: no weight of lhs fits it
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    params = {"a": rng.standard_normal((4, 16)).astype(np.float32),
              "b": rng.standard_normal((16, 2)).astype(np.float32)}
    return (lambda p, x: jnp.tanh(x @ p["a"]) @ p["b"]), params, (X,)
'''


def test_weights_that_cannot_move_are_a_note_that_says_what_to_do(tmp_path, capsys) -> None:
    path = tmp_path / "wider.py"
    path.write_text(WIDER)
    assert main(["diff", f"{path}:torch_model", f"{path}:jax_model", "--format", "json"]) == 1
    notes = json.loads(capsys.readouterr().out)["notes"]
    (note,) = [n for n in notes if n.startswith("numbers not compared")]
    assert "cannot move weights" in note and "--no-transfer" in note, note
