"""JUnit XML: one test case per spec statement checked, read by GitLab, Jenkins and the
GitHub actions that publish test results.

A failed statement's case holds one ``failure`` per finding, its message both in the
``message`` attribute and in the element's text (GitLab shows only the text); a statement
marked ``unspecified`` is a skipped case; findings no statement holds get a case of their own;
a clean run has its passing cases. A finding accept rules cover fails nothing: its
statement's case passes (or it has a passing case of its own) with the finding and the rules
that accept it in ``system-out``. Cases carry ``file`` and ``line`` (the spec's), which
some readers use for annotations. Text that XML 1.0 cannot hold (control characters) is
replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from specgraph.renderers.base import Renderer
from specgraph.report import Accepted, SpecFinding, SpecReport

__all__ = ["JunitRenderer"]

_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    """``value`` as text XML 1.0 can hold."""
    return _ILLEGAL.sub("\ufffd", str(value))


def _failure(case: ET.Element, f: SpecFinding) -> None:
    g = f.finding
    message = f"[{g.code}] {g.message}"
    element = ET.SubElement(case, "failure", message=_text(message), type=_text(g.code))
    lines = [message]
    if f.spec_at is not None:
        lines.append(f"spec: {f.spec_at}")
    if f.model_at is not None:
        lines.append(f"implementation: {f.model_at}")
    element.text = _text("\n".join(lines))


def _accepted(case: ET.Element, accepted: list[Accepted]) -> None:
    """The accepted findings of a passing case, in its ``system-out``."""
    lines = []
    for a in accepted:
        f = a.finding
        lines.append(f"accepted: [{f.finding.code}] {f.finding.message}")
        lines.append(f"  accepted by {a.by}")
        lines += [f"  {name}: {at}" for name, at in (("spec", f.spec_at),
                                                     ("implementation", f.model_at)) if at]
    ET.SubElement(case, "system-out").text = _text("\n".join(lines))


class JunitRenderer(Renderer):
    """One ``testsuite`` for the spec, one ``testcase`` per statement."""

    format = "junit"

    def _render_SpecReport(self, r: SpecReport) -> str:
        suites = ET.Element("testsuites", name="specgraph check")
        suite = ET.SubElement(suites, "testsuite", name=_text(r.spec))
        props = ET.SubElement(suite, "properties")
        for name, value in (("spec", r.spec), ("model", r.model), ("framework", r.framework)):
            ET.SubElement(props, "property", name=name, value=_text(value))
        tests = failures = skipped = 0
        held: set[int] = set()
        excused: set[int] = set()
        for s in r.statements:
            case = ET.SubElement(suite, "testcase", classname=_text(r.spec),
                                 name=_text(f"{s.scope} ({s.op})"), file=_text(s.at.path),
                                 line=str(s.at.line), time="0")
            tests += 1
            if s.status == "unchecked":
                skipped += 1
                ET.SubElement(case, "skipped", message="the spec marks it unspecified")
            for k in s.findings:
                _failure(case, r.findings[k])
                held.add(k)
            failures += bool(s.findings)
            if s.accepted:
                _accepted(case, [r.accepted[k] for k in s.accepted])
                excused.update(s.accepted)
        for k, f in enumerate(r.findings):
            if k in held:
                continue
            _failure(self._own_case(suite, r.spec, f), f)
            tests, failures = tests + 1, failures + 1
        for k, a in enumerate(r.accepted):
            if k not in excused:
                _accepted(self._own_case(suite, r.spec, a.finding), [a])
                tests += 1
        if tests == 0:
            ET.SubElement(suite, "testcase", classname=_text(r.spec), name="spec satisfied",
                          time="0")
            tests = 1
        counts = {"tests": str(tests), "failures": str(failures), "errors": "0",
                  "skipped": str(skipped), "time": "0"}
        suite.attrib.update(counts)
        suites.attrib.update({k: v for k, v in counts.items() if k != "skipped"})
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(
            suites, encoding="unicode") + "\n"

    @staticmethod
    def _own_case(suite: ET.Element, spec: str, f: SpecFinding) -> ET.Element:
        """A case for a finding no statement holds, named by its code."""
        at = f.spec_at
        return ET.SubElement(suite, "testcase", classname=_text(spec),
                             name=_text(f"{f.finding.code}"), time="0",
                             **({"file": _text(at.path), "line": str(at.line)} if at else {}))
