"""``specgraph check`` on every example under examples/specs: each implementation a spec lists
satisfies it or differs from it as the spec says, from the CLI, in every output format; each
that differs is named at the spec's line and column and at the model's source line.

The check itself runs once per implementation (its report is kept and handed to the later
runs of the CLI): the formats differ in rendering, not in what is checked.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

import specgraph.spec_check
from specgraph.cli import main
from specgraph.renderers.markdown import cell
from specgraph.spec import load
from specgraph.spec_check import listed, unexpected

ROOT = Path(__file__).resolve().parents[2]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "renderers" / "sarif-schema-2.1.0.json")
                          .read_text(encoding="utf-8"))


def _cases() -> list:
    out = []
    for path in sorted((ROOT / "examples" / "specs").glob("*.spec.yaml")):
        spec = path.relative_to(ROOT).as_posix()
        for impl in load(path).implementations:
            out.append(pytest.param(spec, impl, id=f"{path.name}-{impl.model}"))
    return out


CASES = _cases()
_REPORTS: dict[tuple, object] = {}


@pytest.fixture
def once(monkeypatch: pytest.MonkeyPatch):
    """The CLI's check runs once per (model, spec); later CLI runs reuse its report."""
    real = specgraph.spec_check.check_spec

    def cached(model, spec, **kwargs):
        key = (model, str(spec), kwargs.get("mode"))
        if key not in _REPORTS:
            _REPORTS[key] = real(model, spec, **kwargs)
        return _REPORTS[key]

    monkeypatch.setattr(specgraph.spec_check, "check_spec", cached)


def test_every_example_lists_implementations_both_ways() -> None:
    specs = {c.values[0] for c in CASES}
    assert len(specs) >= 6
    expects = [c.values[1].expect for c in CASES]
    assert expects.count("differs") >= 8 and expects.count("satisfied") >= 8


@pytest.mark.parametrize(("spec", "impl"), CASES)
def test_example_in_every_format(repo_root, capsys, once, tmp_path, spec, impl) -> None:
    model = listed(spec, impl)
    differs = impl.expect == "differs"
    want = 1 if differs else 0
    files = {k: tmp_path / f"side.{k}" for k in ("junit", "sarif", "summary")}
    outputs = {}
    for fmt in ("json", "text", "github", "junit", "sarif", "markdown"):
        extra = [a for k, p in files.items() for a in (f"--{k}", str(p))] if fmt == "json" \
            else []
        code = main(["check", model, "--spec", spec, "--format", fmt, *extra])
        outputs[fmt] = capsys.readouterr().out
        assert code == want, f"{fmt}: exit {code}\n{outputs[fmt]}"
    assert files["junit"].read_text(encoding="utf-8") == outputs["junit"]
    assert files["sarif"].read_text(encoding="utf-8") == outputs["sarif"]
    assert files["summary"].read_text(encoding="utf-8") == outputs["markdown"]

    data = json.loads(outputs["json"])
    report = _REPORTS[(model, spec, "both")]
    assert unexpected(report, impl) == []
    assert data["satisfied"] is not differs and data["equivalent"] is not differs
    findings = data["findings"]
    _check_junit(outputs["junit"], spec, findings)
    _check_sarif(outputs["sarif"], spec, findings)
    assert ("❌" if differs else "✅") in outputs["markdown"]
    if not differs:
        assert findings == [] and "verdict: SPEC SATISFIED" in outputs["text"]
        assert "::error" not in outputs["github"]
        return
    for f in findings:  # each names the spec's line and column and the model's line
        assert f["spec_at"]["path"] == spec and f["spec_at"]["line"] >= 1
        assert f["spec_at"]["column"] >= 1 and f["blame"] == "lhs"
        model_file = f["model_at"]["path"]  # the factory's file, one it imports, or HF's
        assert (ROOT / model_file).is_file() or model_file.startswith("transformers/")
        assert f["model_at"]["line"] >= 1
        at = f"{spec}:{f['spec_at']['line']}:{f['spec_at']['column']}"
        source = f"{model_file}:{f['model_at']['line']}"
        assert f"spec: {at}" in outputs["text"] and f"implementation: {source}" in \
            outputs["text"]
        assert (f"::error file={spec},line={f['spec_at']['line']},"
                f"col={f['spec_at']['column']},") in outputs["github"]
        assert f"::error file={model_file},line={f['model_at']['line']}," in \
            outputs["github"]
        assert cell(at) in outputs["markdown"] and cell(source) in outputs["markdown"]
    assert "verdict: SPEC NOT SATISFIED" in outputs["text"]


def _check_junit(text: str, spec: str, findings: list) -> None:
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("tests")) == len(cases) >= 1
    assert int(suite.get("failures")) == len(failed)
    assert all(c.get("classname") == spec and c.get("name") for c in cases)
    assert bool(failed) == bool(findings)
    if not findings:
        assert any(c.find("failure") is None and c.find("skipped") is None for c in cases)
    for case in failed:
        for failure in case.findall("failure"):
            assert failure.text.startswith(failure.get("message"))
            assert re.search(rf"spec: {re.escape(spec)}:\d+:\d+", failure.text)


def _check_sarif(text: str, spec: str, findings: list) -> None:
    log = json.loads(text)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)
    (run,) = log["runs"]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert len(run["results"]) == len(findings)
    for result, f in zip(run["results"], findings):
        assert result["ruleId"] == f["code"] and rules[result["ruleIndex"]] == f["code"]
        (where,) = result["locations"]
        location = where["physicalLocation"]
        assert location["artifactLocation"]["uri"] == spec
        assert location["region"]["startLine"] == f["spec_at"]["line"]
        (related,) = result["relatedLocations"]
        assert related["physicalLocation"]["region"]["startLine"] == f["model_at"]["line"]
        assert not related["physicalLocation"]["artifactLocation"]["uri"].startswith(
            ("/", "file:"))
