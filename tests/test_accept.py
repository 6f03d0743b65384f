"""Accepting known differences: ``--accept CODE:WHERE`` and ``[tool.specgraph] accept`` in
pyproject.toml take findings out of the verdict and list them in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgraph.accept import AcceptError, accept, parse_rule, rules_from
from specgraph.cli import main
from specgraph.diff import diff
from specgraph.report import DiffReport
from tests.test_grouping import BLOCKS, _resnet

ROOT = Path(__file__).resolve().parent.parent
CORRECT = f"{ROOT}/examples/xor/model_torch.py:correct"
FORGOT = f"{ROOT}/examples/xor/model_torch.py:forgot_activation"


def _report(**mutation) -> DiffReport:
    findings, rows = diff(_resnet(), _resnet(**mutation))
    return DiffReport("a.py:f", "b.py:g", "torch", "tf", tuple(findings), tuple(rows))


@pytest.mark.parametrize(("text", "says"), [
    ("attr-mismatch", "is not CODE:WHERE"),
    ("attr-mismatch:", "is not CODE:WHERE"),
    (":encoder.*", "is not CODE:WHERE"),
    ("eps-mismatch:*", "names no finding code 'eps-mismatch'; the codes are missing-op"),
])
def test_malformed_rules_are_one_sentence(text: str, says: str) -> None:
    with pytest.raises(AcceptError, match="^--accept: accept rule ") as err:
        parse_rule(text, "--accept")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_where_matches_either_scope_with_wildcards() -> None:
    report = _report(conv_bias=True)  # lhs has no add: the finding's rhs side names it
    (finding,) = report.findings
    assert finding.lhs is None and finding.rhs.scope == "stage1.0.conv"
    assert accept(report, [parse_rule("missing-op:stage*.conv", "--accept")]).equivalent
    assert not accept(report, [parse_rule("attr-mismatch:*", "--accept")]).equivalent
    assert not accept(report, [parse_rule("missing-op:stage1.*", "--accept")]).equivalent


def test_a_finding_in_many_places_needs_every_place_covered() -> None:
    report = _report(eps=1.001e-5)
    first = parse_rule("attr-mismatch:stage1.*", "--accept")
    rest = parse_rule("attr-mismatch:stage[2-9].*", "pyproject.toml [tool.specgraph] accept")
    partly = accept(report, [first])
    assert partly.findings == report.findings and partly.accepted == ()
    both = accept(report, [first, rest])
    assert both.equivalent and len(both.accepted) == 1
    (accepted,) = both.accepted
    assert accepted.rules == (first, rest) and len(accepted.finding.places) == BLOCKS
    data = both.to_dict()
    assert data["findings"] == [] and data["equivalent"] is True
    assert data["accept"] == [
        {"rule": "attr-mismatch:stage1.*", "origin": "--accept"},
        {"rule": "attr-mismatch:stage[2-9].*",
         "origin": "pyproject.toml [tool.specgraph] accept"}]
    assert data["accepted"][0]["accepted_by"] == data["accept"]
    assert data["accepted"][0]["code"] == "attr-mismatch"


def test_no_rules_leaves_the_report_and_its_json_as_they_were() -> None:
    report = _report(eps=1.001e-5)
    assert accept(report, []) is report
    assert "accepted" not in report.to_dict() and "accept" not in report.to_dict()


def test_the_flag_accepts_and_the_report_shows_it(repo_root, capsys) -> None:
    pytest.importorskip("torch")
    code = main(["diff", CORRECT, FORGOT, "--accept", "missing-op:act"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Findings" not in out
    assert "Accepted (1): known differences the accept rules cover, not counted" in out
    assert "  1. [missing-op] rhs has no relu between linear at hidden and linear at head" in out
    assert "       accepted by missing-op:act (--accept)" in out
    assert "verdict: EQUIVALENT (1 known difference accepted; numbers compared over seed 0)" in out
    code = main(["diff", CORRECT, FORGOT, "--accept", "missing-op:act", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["equivalent"] is True and data["findings"] == []
    assert [a["code"] for a in data["accepted"]] == ["missing-op"]
    code = main(["diff", CORRECT, FORGOT, "--accept", "missing-op:head"])
    assert code == 1 and "verdict: NOT EQUIVALENT, 1 difference" in capsys.readouterr().out


def test_the_pyproject_list_is_found_from_the_working_directory_up(tmp_path, monkeypatch,
                                                                   capsys) -> None:
    pytest.importorskip("torch")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "port"\n\n[tool.specgraph]\naccept = ["missing-op:a*"]\n')
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    monkeypatch.chdir(tmp_path / "src" / "deep")
    rules = rules_from([], Path.cwd())
    assert [(r.text, r.origin) for r in rules] == [
        ("missing-op:a*", "../../pyproject.toml [tool.specgraph] accept")]
    code = main(["diff", CORRECT, FORGOT, "--accept", "attr-mismatch:*", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["rule"] for r in data["accept"]] == ["missing-op:a*",
                                                                 "attr-mismatch:*"]
    assert data["accepted"][0]["accepted_by"] == [
        {"rule": "missing-op:a*", "origin": "../../pyproject.toml [tool.specgraph] accept"}]


@pytest.mark.parametrize(("pyproject", "says"), [
    ('[tool.specgraph]\naccept = ["missing-op"]\n',
     "pyproject.toml [tool.specgraph] accept: accept rule 'missing-op' is not CODE:WHERE"),
    ('[tool.specgraph]\naccept = "missing-op:*"\n',
     'pyproject.toml: [tool.specgraph] accept is a str; make it a list of strings'),
    ('[tool.specgraph\naccept = 1\n', "pyproject.toml: cannot read it as TOML"),
])
def test_a_malformed_pyproject_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys,
                                                          pyproject: str, says: str) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    monkeypatch.chdir(tmp_path)
    code = main(["diff", CORRECT, FORGOT, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 2 and says in err and err.count("\n") == 1
    assert json.loads(out)["error"]["kind"] == "input"


def test_a_malformed_flag_is_one_sentence_and_exit_2(capsys) -> None:
    code = main(["diff", CORRECT, FORGOT, "--accept", "missing-op"])
    err = capsys.readouterr().err
    assert code == 2 and err == (
        "specgraph: error: --accept: accept rule 'missing-op' is not CODE:WHERE; write e.g. "
        "'attr-mismatch:encoder.layer.*.LayerNorm' (WHERE matches a finding's lhs or rhs "
        "scope, or in a check the spec statement's name, with * for any scope)\n")


def test_docstring_example_runs() -> None:
    import doctest

    import specgraph.accept

    assert doctest.testmod(specgraph.accept).failed == 0
