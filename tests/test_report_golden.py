"""The terminal report on a real model: HF's 12-layer BERT, PyTorch against its Flax port,
with one LayerNorm's eps changed, fits a screen (identical rows folded, rows grouped by
block) and names the eps, beside the training-only difference the ports really have."""

from __future__ import annotations

import pytest

from specgraph.cli import main

pytest.importorskip("transformers")
pytest.importorskip("flax")
pytest.importorskip("torch")

MODELS = "tests/zoo/hf_bert.py"


def test_twelve_layer_bert_with_one_eps_changed(repo_root, capsys, golden) -> None:
    code = main(["diff", f"{MODELS}:torch_eps_changed", f"{MODELS}:flax"])
    out = capsys.readouterr().out
    assert code == 1
    lines = out.splitlines()
    assert len(lines) < 60, len(lines)
    assert ("[attr-mismatch] layer_norm eps is 1e-05 in lhs (encoder.layer.5.output.LayerNorm)"
            " but 1e-12 in rhs") in out
    assert "identical rows" in out and "verdict: NOT EQUIVALENT, 2 differences" in out
    golden("diff_bert12_eps.txt", out)
