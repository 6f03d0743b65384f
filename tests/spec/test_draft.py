"""``specgraph spec init``: a spec drafted from an implementation compiles, folds repeated
blocks into ``repeat:``, and the implementation satisfies it; on HF transformers' BERT (12
layers, small width, random weights) the Flax port satisfies the draft of the PyTorch model
too, and with one LayerNorm's eps changed fails at that eps's line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specgraph.cli import main
from specgraph.spec import load
from specgraph.spec_check import check_spec

HF = "examples/specs/hf_bert.py"


def _init(capsys, model: str, out: Path) -> str:
    assert main(["spec", "init", model, "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    return out.read_text(encoding="utf-8")


def test_a_draft_of_a_small_model_compiles_and_is_satisfied(repo_root, capsys) -> None:
    assert main(["spec", "init", "examples/xor/model_torch.py:correct"]) == 0
    text = capsys.readouterr().out
    data = yaml.safe_load(text)
    assert data["dims"] == {"B": 4} and data["param_count"] == 42
    assert "# h1 = relu(x·W_hidden + b_hidden)" in text  # the equations, as comments
    for model in ("examples/xor/model_torch.py:correct", "examples/xor/model_jax.py:correct"):
        path = repo_root / "examples" / "xor" / "drafted.spec.yaml"
        try:
            path.write_text(text, encoding="utf-8")
            report = check_spec(model, path)
        finally:
            path.unlink()
        assert report.satisfied, [f.finding.message for f in report.findings]


def test_a_model_that_cannot_be_traced_is_a_user_error(repo_root, capsys) -> None:
    assert main(["spec", "init", "examples/xor/model_torch.py:nothing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specgraph: error: model reference") and err.count("\n") == 1


@pytest.fixture(scope="module")
def bert_draft(tmp_path_factory) -> Path:
    import os

    root = Path(__file__).resolve().parents[2]
    here = os.getcwd()
    os.chdir(root)
    try:
        out = tmp_path_factory.mktemp("draft") / "bert.spec.yaml"
        assert main(["spec", "init", f"{HF}:bert_torch", "-o", str(out)]) == 0
    finally:
        os.chdir(here)
    return out


def test_hf_bert_is_drafted_with_its_twelve_layers_folded(repo_root, bert_draft) -> None:
    text = bert_draft.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert data["hyper"]["layers"] == 12 and data["hyper"]["eps"] == 1e-12
    assert data["hyper"]["d_model"] == 32 and data["hyper"]["heads"] == 4
    (block,) = [s for s in data["layers"] if "repeat" in s]
    assert block["repeat"] == "layers" and block["name"] == "encoder.layer.{i}"
    assert text.count("layer_norm:") == 3  # the embeddings' and one layer's two
    spec = load(bert_draft)
    assert spec.counts[-1].stated == 107_904
    assert text.count('equation: "(x - mean(x)) / sqrt(var(x) + eps) * weight + bias"') == 3
    assert 'equation: "softmax(scale * q @ k.T) @ v"' in text
    assert 'equation: "x * (1 + erf(x / sqrt(2))) / 2"' in text
    report = check_spec(f"{HF}:bert_torch", bert_draft)
    assert report.satisfied, [f.finding.message for f in report.findings]
    assert report.comparison.numeric is not None
    assert not [n for n in report.notes if "equation" in n]  # each one compared, and equal


@pytest.mark.slow
def test_the_flax_port_satisfies_the_draft_and_fails_with_one_eps_changed(
        repo_root, bert_draft) -> None:
    assert check_spec(f"{HF}:bert_flax", bert_draft).satisfied
    report = check_spec(f"{HF}:bert_flax_eps", bert_draft)
    (f,) = report.findings
    assert f.finding.code == "attr-mismatch" and f.finding.attr == "eps"
    assert "layer_norm eps is 1e-05 in the implementation" in f.finding.message
    assert "but 1e-12 in the spec (encoder.layer.5.output.LayerNorm)" in f.finding.message
    assert f.statements == ("encoder.layer.5.output.LayerNorm",)
    line = bert_draft.read_text(encoding="utf-8").splitlines()[f.spec_at.line - 1]
    assert re.search(r'name: "output\.LayerNorm", layer_norm: .*eps: "eps"', line)
    assert line[f.spec_at.column - 1:].startswith("eps:")
    assert f.model_at.path == HF
