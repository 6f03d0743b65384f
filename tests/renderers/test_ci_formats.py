"""The CI formats of a spec check on hostile names: GitHub workflow commands escaped as the
runner reads them, JUnit that XML readers parse, SARIF valid against the 2.1.0 schema,
Markdown that stays text and under GitHub's limit."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from specgraph.renderers import get_renderer
from specgraph.renderers.github import LIMIT, escape_data, escape_property
from specgraph.renderers.markdown import MarkdownRenderer
from specgraph.report import (Finding, Location, Side, SpecFinding, SpecReport,
                              StatementResult)

SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text("utf-8"))
HOSTILE = "50% a,b:c::d\r\nnext %0A line, x=1 <script>|`*_"
SPEC = "specs/we,ird:name %.spec.yaml"
MODEL = "models/m,o:d%el.py"


def _report(n: int = 1, message: str = HOSTILE) -> SpecReport:
    findings = []
    for i in range(n):
        f = Finding("attr-mismatch", f"{message} #{i}", op="layer_norm", attr="eps",
                    lhs=Side(f"a,b:c.{i}", f"{i}:layer_norm", f"{MODEL}:{10 + i}", 1e-5),
                    rhs=Side(f"s:c,{i}", f"{i}:layer_norm", f"{SPEC}:{3 + i}", 1e-12),
                    blame="lhs")
        findings.append(SpecFinding(f, Location(SPEC, 3 + i, 9), Location(MODEL, 10 + i),
                                    (f"layer.{i},x:y",)))
    statements = [StatementResult(f"layer.{i},x:y", "layer_norm", Location(SPEC, 3 + i, 5),
                                  "failed", (i,)) for i in range(n)]
    statements.append(StatementResult("head\x1b[31m", "linear", Location(SPEC, 99, 5),
                                      "unchecked"))
    return SpecReport(SPEC, f"{MODEL}:make", "torch", tuple(findings), tuple(statements),
                      None, (f"a note with {message}",), {"title": "T <b>"})


def _unescape(text: str) -> str:
    return (text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":")
            .replace("%2C", ",").replace("%25", "%"))


def test_escaping_follows_the_runner() -> None:
    assert escape_data("100%\r\n") == "100%25%0D%0A"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    for text in (HOSTILE, "%25", "::", "a,b", "%%0A"):
        assert _unescape(escape_property(text)) == text
        assert _unescape(escape_data(text)) == text


def test_github_annotations_are_one_line_each_with_their_properties_intact() -> None:
    out = get_renderer("github").render(_report())
    commands = [line for line in out.splitlines() if line.startswith("::")]
    assert len(commands) == 2  # the spec's line and the model's line
    for line in commands:
        match = re.fullmatch(r"::error ([^:]*)::(.*)", line)
        assert match, line
        props = dict(p.split("=", 1) for p in match.group(1).split(","))
        assert set(props) <= {"file", "line", "col", "title"}
        assert _unescape(match.group(2)).startswith(HOSTILE)
        assert _unescape(props["file"]) in (SPEC, MODEL)
        assert "layer.0,x:y" in _unescape(props["title"])
    spec_line = next(c for c in commands if _unescape(c).count(SPEC) >= 1 and "col=9" in c)
    assert "line=3" in spec_line
    assert "verdict: SPEC NOT SATISFIED" in out  # the plain report follows


def test_github_errors_first_at_most_ten_then_one_notice() -> None:
    out = get_renderer("github").render(_report(12, "plain"))
    commands = [line for line in out.splitlines() if line.startswith("::")]
    levels = [c.split(" ", 1)[0] for c in commands]
    assert levels == ["::error"] * LIMIT + ["::notice"]
    assert "14 more annotations" in _unescape(commands[-1])
    assert "job summary" in commands[-1]


def test_junit_parses_with_the_message_in_the_attribute_and_the_text() -> None:
    text = get_renderer("junit").render(_report(3))
    root = ET.fromstring(text.encode("utf-8"))  # control characters made XML-safe
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "layer.0,x:y (layer_norm)", "layer.1,x:y (layer_norm)", "layer.2,x:y (layer_norm)",
        "head\ufffd[31m (linear)"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "3", "1")
    failure = cases[0].find("failure")
    assert failure.get("type") == "attr-mismatch"
    assert failure.get("message").startswith("[attr-mismatch] 50% a,b:c::d\r\nnext")
    assert failure.text.startswith(failure.get("message").replace("\r\n", "\n"))
    assert f"spec: {SPEC}:3:9" in failure.text and f"implementation: {MODEL}:10" in failure.text
    assert cases[3].find("skipped") is not None
    assert cases[0].get("file") == SPEC and cases[0].get("line") == "3"


def test_junit_has_a_passing_case_on_a_clean_run() -> None:
    clean = SpecReport(SPEC, "m.py:make", "torch", (), (
        StatementResult("x", "relu", Location(SPEC, 1, 1), "passed"),))
    root = ET.fromstring(get_renderer("junit").render(clean))
    (case,) = root.iter("testcase")
    assert list(case) == [] and root.get("failures") == "0"
    empty = SpecReport(SPEC, "m.py:make", "torch", ())
    (case,) = ET.fromstring(get_renderer("junit").render(empty)).iter("testcase")
    assert case.get("name") == "spec satisfied"


def test_sarif_is_valid_with_relative_uris_and_the_model_as_related_location() -> None:
    log = json.loads(get_renderer("sarif").render(_report(2)))
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    (run,) = log["runs"]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["attr-mismatch"]
    result = run["results"][0]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "specs/we%2Cird%3Aname%20%25.spec.yaml"
    related = result["relatedLocations"][0]["physicalLocation"]
    assert related["region"] == {"startLine": 10}
    assert not related["artifactLocation"]["uri"].startswith(("/", "file:"))
    clean = json.loads(get_renderer("sarif").render(SpecReport(SPEC, "m", "torch", ())))
    jsonschema.Draft4Validator(SCHEMA).validate(clean)
    assert clean["runs"][0]["results"] == []


def test_markdown_is_text_and_keeps_the_rest_in_details() -> None:
    out = get_renderer("markdown").render(_report(13))
    assert "<script>" not in out and "&lt;script&gt;" in out and "\x1b" not in out
    assert "<details><summary>3 more findings</summary>" in out
    table = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert len(table) == 1 and table[0].count(" | ") == 5  # the | in names is escaped
    assert out.startswith("## specgraph check: ❌ spec not satisfied: 13 differences")


def test_markdown_stays_under_the_limit() -> None:
    report = _report(4000, "x" * 400)
    full = MarkdownRenderer().render(report)
    assert len(full.encode("utf-8")) < 1_000_000
    small = MarkdownRenderer(max_bytes=50_000).render(report)
    assert len(small.encode("utf-8")) <= 50_000
    assert "more findings are left out" in small and "#0" in small


@pytest.mark.parametrize(("fmt", "suffix"), [("text", "txt"), ("json", "json"),
                                             ("github", "github.txt"), ("junit", "xml"),
                                             ("sarif", "sarif"), ("markdown", "md")])
def test_renders_match_golden(golden, fmt: str, suffix: str) -> None:
    report = _report(2, HOSTILE.replace("\r", ""))  # golden files are read as text: no CR
    golden(f"check_hostile.{suffix}", get_renderer(fmt).render(report))
