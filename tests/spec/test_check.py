"""``check_spec`` semantics: the spec's dims bound to the model's inputs, what the spec leaves
open never a finding (an unstated bias, a stand-in activation, an unspecified block), stated
parameter counts and tolerances held, the spec's words in blame, and the Python helper."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from specgraph.cli import main
from specgraph.spec_check import check_spec
from specgraph.testing import assert_matches_spec

BERT = "examples/specs/bert_layer.spec.yaml"

MODELS = '''
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, bias=True, act=nn.ReLU, width=16):
        super().__init__()
        self.fc1 = nn.Linear(8, width, bias=bias)
        self.act = act()
        self.fc2 = nn.Linear(width, 4, bias=bias)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _make(**kw):
    torch.manual_seed(0)
    return Mlp(**kw), (torch.randn(3, 8),)


def mlp():
    return _make()


def mlp_no_bias():
    return _make(bias=False)


def mlp_gelu():
    return _make(act=nn.GELU)


def mlp_wide():
    return _make(width=32)


def bert_sized():
    import sys
    sys.path.insert(0, "examples/specs")
    from bert_torch import Encoder
    torch.manual_seed(0)
    return Encoder(), (torch.randn(3, 5, 32),)


def bert_wide():
    import sys
    sys.path.insert(0, "examples/specs")
    from bert_torch import Encoder
    torch.manual_seed(0)
    return Encoder(d_model=64, heads=4, d_ff=256), (torch.randn(2, 8, 64),)
'''

HEAD = '''
inputs: {x: "B 8"}
dims: {B: 2}
layers:'''

SPEC = '''
inputs:
  x: "B 8"
dims: {B: 2}
layers:
  - {name: fc1, linear: x, out: 16, activation: %s}
  - {name: fc2, linear: fc1, out: 4%s}
param_count: %s
'''


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")

    def spec(activation: str = "unspecified", fc2: str = "", count: str = "8*16 + 16*4 + 20",
             text: str | None = None) -> str:
        path = tmp_path / "mlp.spec.yaml"
        path.write_text(textwrap.dedent(text or SPEC % (activation, fc2, count)), "utf-8")
        return str(path)

    return tmp_path, spec


def test_dims_bind_to_the_models_input_sizes(files) -> None:
    folder, _ = files
    report = check_spec(f"{folder}/models.py:bert_sized", BERT)  # B 3, T 5 where it says 2, 8
    assert report.satisfied, [f.finding.message for f in report.findings]
    assert report.comparison.numeric is not None


def test_an_input_the_spec_sizes_otherwise_is_one_finding_at_the_input(files, capsys) -> None:
    folder, _ = files
    code = main(["check", f"{folder}/models.py:bert_wide", "--spec", BERT, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    (finding,) = data["findings"]
    assert finding["code"] == "shape-mismatch"
    assert "axis 2 of input x is d_model = 32 in the spec but 64 in the model" in \
        finding["message"]
    assert finding["spec_at"] == {"path": BERT, "line": 19, "column": 3}
    assert finding["model_at"]["path"] == "examples/specs/bert_torch.py"  # what reads it


def test_open_parts_are_never_findings(files) -> None:
    folder, spec = files
    path = spec(count="8*16 + 16*4 + 20")
    for model in ("mlp", "mlp_gelu"):  # a stand-in activation: GELU where it is open
        report = check_spec(f"{folder}/models.py:{model}", path)
        assert report.satisfied, [f.finding.message for f in report.findings]
    report = check_spec(f"{folder}/models.py:mlp_no_bias", path)  # bias not stated
    codes = [f.finding.code for f in report.findings]
    assert codes == ["param-count-mismatch"]  # only the stated count (with biases) fails
    assert "states 212 parameters for the whole model but the implementation has 192" in \
        report.findings[0].finding.message
    assert (report.findings[0].spec_at.line, report.findings[0].spec_at.column) == (8, 1)
    assert report.comparison.numeric is not None  # the weights moved: the bias follows
    report = check_spec(f"{folder}/models.py:mlp_no_bias", spec(count="8*16 + 16*4 + 20",
                                                                activation="relu"))
    assert [f.finding.code for f in report.findings] == ["param-count-mismatch"]


def test_a_stated_bias_and_activation_are_checked(files) -> None:
    folder, spec = files
    path = spec(activation="relu", fc2=", bias: true")
    report = check_spec(f"{folder}/models.py:mlp_gelu", path)
    assert [f.finding.code for f in report.findings] == ["op-mismatch"]
    f = report.findings[0]
    assert "the implementation computes gelu where the spec computes relu" in \
        f.finding.message
    assert (f.spec_at.line, f.spec_at.column) == (6, 37)  # the activation key
    assert f.model_at.path.endswith("models.py") and f.model_at.line == 14
    report = check_spec(f"{folder}/models.py:mlp_no_bias", path)
    assert any(f.finding.code == "attr-mismatch" and f.finding.attr == "bias"
               for f in report.findings)


def test_a_stated_parameter_count_is_held_against_the_implementation(files, capsys) -> None:
    folder, spec = files
    path = spec(count="1000")
    code = main(["check", f"{folder}/models.py:mlp", "--spec", path, "--format", "json"])
    assert code == 2  # the spec's own shapes hold 212: the spec is malformed
    assert "states 1,000 parameters but its statements hold 212" in \
        json.loads(capsys.readouterr().out)["error"]["message"]


def test_an_unspecified_block_is_not_checked(files) -> None:
    folder, spec = files
    text = HEAD + '''
  - {name: fc1, linear: x, out: 16}
  - {name: act, relu: fc1}
  - name: head
    unspecified: true
    layers:
      - {name: fc2, linear: act, out: 99}
'''
    report = check_spec(f"{folder}/models.py:mlp", spec(text=text))
    assert report.satisfied, [f.finding.message for f in report.findings]
    assert [s.status for s in report.statements] == ["passed", "passed", "unchecked"]


def test_a_statements_tolerance_applies_to_its_layers(files) -> None:
    folder, spec = files
    text = HEAD + '''
  - {name: fc1, linear: x, out: 16, activation: relu%s}
  - {name: fc2, linear: fc1, out: 4}
%s
'''
    model = f"{folder}/models.py:mlp_gelu"  # GELU where the spec states ReLU: numbers part
    said = []
    for fc1, rest in (("", ""), (", tolerance: 1e-3", ""), (", tolerance: 100", ""),
                      ("", "tolerance: 100")):
        report = check_spec(model, spec(text=text % (fc1, rest)), mode="numbers")
        said.append(" ".join(f.finding.message for f in report.findings))
    assert "values part at gelu at act (the spec: relu at fc1)" in said[0]
    assert "(rtol 2.0e-05)" in said[0] and "(rtol 1.0e-03)" in said[1]
    assert "the difference grows until linear at fc2 parts" in said[2]
    assert said[3] == ""  # the spec-wide tolerance covers every statement


def test_blame_reads_as_the_spec_being_the_definition(files) -> None:
    folder, spec = files
    report = check_spec(f"{folder}/models.py:mlp_gelu", spec(activation="relu"),
                        mode="numbers")
    (f,) = report.findings
    assert f.finding.code == "numeric-divergence" and f.finding.blame == "lhs"
    assert "the implementation computes its own layer faithfully, but the spec's own " \
           "statement is relu" in f.finding.message
    assert "the implementation leaves the spec" in f.finding.message


def test_assert_matches_spec(files) -> None:
    folder, spec = files
    path = spec(activation="relu")
    assert assert_matches_spec(f"{folder}/models.py:mlp", path).satisfied
    with pytest.raises(AssertionError, match=r"op-mismatch.*\n\s+spec: .*mlp\.spec\.yaml:6:"
                                             r"37\n\s+implementation: .*models\.py:14"):
        assert_matches_spec(f"{folder}/models.py:mlp_gelu", path)


def test_a_spec_that_is_no_yaml_file_is_a_user_error(files, capsys) -> None:
    folder, _ = files
    code = main(["check", f"{folder}/models.py:mlp", "--spec", "models.py"])
    assert code == 2
    assert "a spec is a .yaml file" in capsys.readouterr().err


def test_an_activation_the_spec_leaves_unnamed_is_never_called_by_its_stand_in(
        repo_root) -> None:
    from specgraph.spec_check import check_spec

    report = check_spec("examples/specs/cnn_torch.py:cnn_no_activation",
                        "examples/specs/small_cnn.spec.yaml", mode="structure")
    (f,) = report.findings
    assert f.finding.code == "missing-op" and f.finding.message.startswith(
        "the implementation has no activation between batch_norm at stage2.bn")
    assert "relu" not in f.finding.message and f.finding.ops == ("activation",)
