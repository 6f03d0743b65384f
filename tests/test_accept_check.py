"""Accepting known differences in a check against a spec: ``specgraph check --accept``,
``[tool.specgraph] accept``, ``assert_matches_spec(accept=...)`` and an implementation's
``accept:`` in a spec file. WHERE matches the spec statement's name or the implementation's
scope; an accepted finding fails nothing and is shown as accepted in every format."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from specgraph.accept import AcceptError, accept, parse_rule
from specgraph.cli import main
from specgraph.errors import SpecError
from specgraph.renderers import get_renderer
from specgraph.renderers.github import LIMIT
from specgraph.report import SpecReport
from tests.renderers.test_ci_formats import SCHEMA, _report

MODELS = '''
import torch
from torch import nn


def gelu():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)), (torch.randn(3, 8),)
'''

# the implementation computes gelu in the statement fc1 (its scope there is "1")
SPEC = '''
inputs: {x: "B 8"}
dims: {B: 2}
layers:
  - {name: fc1, linear: x, out: 16, activation: relu}
  - {name: fc2, linear: fc1, out: 4}
'''


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    pytest.importorskip("torch")
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / "mlp.spec.yaml").write_text(textwrap.dedent(SPEC), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return "models.py:gelu", "mlp.spec.yaml"


def _check(pair: tuple[str, str], *args: str) -> int:
    return main(["check", pair[0], "--spec", pair[1], *args])


@pytest.mark.parametrize(("where", "code"), [
    ("fc1", 0),      # the spec statement's name
    ("fc*", 0),      # with a wildcard
    ("1", 0),        # the implementation's scope
    ("fc2", 1),      # another statement: nothing accepted
])
def test_where_is_the_statement_or_the_implementations_scope(pair, capsys, where: str,
                                                             code: int) -> None:
    assert _check(pair, "--no-numeric", "--accept", f"op-mismatch:{where}") == code
    out = capsys.readouterr().out
    if code == 0:
        assert "Accepted (1): known differences the accept rules cover, not counted" in out
        assert f"       accepted by op-mismatch:{where} (--accept)" in out
        assert "Statements: 2, 2 passed (1 with accepted differences), 0 failed" in out
        assert out.endswith("verdict: SPEC SATISFIED (1 known difference accepted, the rest "
                            "holds)\n")
    else:
        assert "Accepted" not in out and "verdict: SPEC NOT SATISFIED, 1 difference\n" in out


def test_the_pyproject_list_applies_to_check_and_json_shows_it(pair, capsys) -> None:
    Path("pyproject.toml").write_text('[tool.specgraph]\naccept = ["op-mismatch:fc1"]\n')
    assert _check(pair, "--format", "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["satisfied"] is True and data["findings"] == []
    assert data["accept"] == [{"rule": "op-mismatch:fc1",
                               "origin": "pyproject.toml [tool.specgraph] accept"}]
    (accepted,) = data["accepted"]
    assert accepted["code"] == "op-mismatch" and accepted["statements"] == ["fc1"]
    assert accepted["spec_at"]["line"] == 5 and accepted["accepted_by"] == data["accept"]
    fc1 = next(s for s in data["statements"] if s["scope"] == "fc1")
    assert fc1["status"] == "passed" and fc1["accepted"] == [0] and fc1["findings"] == []


def test_a_malformed_rule_is_one_sentence_and_exit_2_before_tracing(pair, capsys) -> None:
    assert _check(pair, "--accept", "op-mismatch", "--format", "json") == 2
    out, err = capsys.readouterr()
    assert err.startswith("specgraph: error: --accept: accept rule 'op-mismatch' is not "
                          "CODE:WHERE") and err.count("\n") == 1
    assert json.loads(out)["error"]["kind"] == "input"


def _accepted(n: int, ruled: int) -> SpecReport:
    """``_report(n)`` (hostile names) with its first ``ruled`` findings accepted."""
    rules = [parse_rule(f"attr-mismatch:layer.{i},x:y", "--accept") for i in range(ruled)]
    return accept(_report(n, "plain"), rules)


def test_statements_count_accepted_findings_apart() -> None:
    report = _accepted(3, 2)
    assert not report.satisfied and len(report.findings) == 1 and len(report.accepted) == 2
    assert [(s.status, s.findings, s.accepted) for s in report.statements[:3]] == [
        ("passed", (), (0,)), ("passed", (), (1,)), ("failed", (0,), ())]
    text = get_renderer("text").render(report)
    assert "verdict: SPEC NOT SATISFIED, 1 difference, 2 accepted\n" in text


def test_github_an_accepted_finding_is_a_notice_not_an_error() -> None:
    out = get_renderer("github").render(_accepted(2, 1))
    commands = [line for line in out.splitlines() if line.startswith("::")]
    assert [c.split(" ", 1)[0] for c in commands] == ["::error", "::error", "::notice"]
    notice = commands[-1]
    assert "title=specgraph accepted attr-mismatch at layer.0%2Cx%3Ay" in notice
    assert "line=3,col=9" in notice
    assert notice.endswith("plain #0 (accepted by attr-mismatch:layer.0,x:y (--accept))")
    satisfied = get_renderer("github").render(_accepted(1, 1))
    assert "::error" not in satisfied
    assert "satisfies specs/we,ird:name %25.spec.yaml (1 known difference accepted)" \
        in satisfied


def test_github_accepted_notices_stay_within_the_limit() -> None:
    out = get_renderer("github").render(_accepted(14, 14))
    notices = [line for line in out.splitlines() if line.startswith("::notice")]
    assert len(notices) == LIMIT
    assert "6 more accepted findings not shown" in notices[-2]
    assert "satisfies" in notices[-1]


def test_junit_the_case_passes_with_the_acceptance_in_its_output() -> None:
    root = ET.fromstring(get_renderer("junit").render(_accepted(2, 1)))
    suite = root.find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == "3"
    passed, failed = suite.findall("testcase")[:2]
    assert passed.find("failure") is None
    said = passed.find("system-out").text
    assert said.startswith("accepted: [attr-mismatch] plain #0\n  accepted by "
                           "attr-mismatch:layer.0,x:y (--accept)\n  spec: specs/")
    assert failed.find("failure") is not None and failed.find("system-out") is None


def test_sarif_an_accepted_finding_is_a_suppressed_result() -> None:
    log = json.loads(get_renderer("sarif").render(_accepted(2, 1)))
    jsonschema.validate(log, SCHEMA)
    kept, accepted = log["runs"][0]["results"]
    assert "suppressions" not in kept and kept["message"]["text"] == "plain #1"
    assert accepted["message"]["text"] == "plain #0"
    assert accepted["suppressions"] == [{
        "kind": "external", "status": "accepted",
        "justification": "accepted by attr-mismatch:layer.0,x:y (--accept)"}]
    assert log["runs"][0]["properties"]["satisfied"] is False


def test_markdown_lists_accepted_findings_with_their_rules() -> None:
    out = get_renderer("markdown").render(_accepted(2, 2))
    assert out.startswith("## specgraph check: ✅ spec satisfied (2 known differences "
                          "accepted)\n")
    assert "<details><summary>Accepted (2): known differences the accept rules cover, not " \
           "counted</summary>" in out
    assert "| plain \\#0 | attr-mismatch:layer.0,x:y (--accept) |" in out
    assert "2 passed (2 with accepted differences)" in out and "| ☑️ |" in out


def test_no_rules_leave_every_format_as_it_was() -> None:
    report = _report(2, "plain")
    assert accept(report, []) is report
    data = report.to_dict()
    assert "accept" not in data and "accepted" not in data["statements"][0]


def test_assert_matches_spec_takes_accept(pair) -> None:
    from specgraph.testing import assert_matches_spec

    with pytest.raises(AssertionError, match="op-mismatch: the implementation computes gelu"):
        assert_matches_spec(*pair, mode="structure")
    report = assert_matches_spec(*pair, mode="structure", accept=["op-mismatch:fc1"])
    assert report.satisfied and [a.rules[0].origin for a in report.accepted] == [
        "assert_matches_spec(accept=...)"]
    with pytest.raises(AcceptError, match=r"^assert_matches_spec\(accept=...\): accept rule "
                                          "'fc1' is not CODE:WHERE"):
        assert_matches_spec(*pair, mode="structure", accept="fc1")


def test_a_spec_files_accept_is_in_the_schema_and_compiled(tmp_path: Path) -> None:
    import yaml

    from specgraph.spec import load, schema

    text = textwrap.dedent(SPEC) + ("implementations:\n  - model: models.py:gelu\n"
                                    "    accept: [\"op-mismatch:fc1\"]\n")
    path = tmp_path / "mlp.spec.yaml"
    path.write_text(text, encoding="utf-8")
    jsonschema.Draft202012Validator(schema.shipped()).validate(yaml.safe_load(text))
    (listed,) = load(path, name="mlp.spec.yaml").implementations
    assert [(r.text, r.origin) for r in listed.accept] == [("op-mismatch:fc1",
                                                           "mlp.spec.yaml:9:14")]
    path.write_text(text.replace("op-mismatch:fc1", "op-mismatch"), encoding="utf-8")
    with pytest.raises(SpecError, match=r"^mlp\.spec\.yaml:9:14: accept rule 'op-mismatch' "
                                        "is not CODE:WHERE"):
        load(path, name="mlp.spec.yaml")
    bad = yaml.safe_load(text.replace('["op-mismatch:fc1"]', "op-mismatch:fc1"))
    assert list(jsonschema.Draft202012Validator(schema.shipped()).iter_errors(bad))


def test_the_html_report_marks_an_accepted_finding(pair) -> None:
    from specgraph.page import build_page
    from specgraph.spec_check import check_spec

    report = accept(check_spec(*pair, mode="structure"),
                    [parse_rule("op-mismatch:fc1", "--accept")])
    page = build_page(report)
    assert page.verdict["equivalent"] is True
    (row,) = page.findings
    assert row["accepted"] is True and row["code"] == "op-mismatch" and row["spec_line"] == 5
