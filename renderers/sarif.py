"""SARIF 2.1.0, for GitHub code scanning and other readers of static-analysis results.

One run of the ``specgraph`` tool; finding codes are the rules (``ruleId``); each result sits
at the spec's line and column, with the model's source line as a related location. URIs are
relative (to the working directory the check ran in, ``%SRCROOT%``), so the file is the same
on every machine; upload it from the repository root. A finding accept rules cover is a
result with an ``external`` suppression whose status is ``accepted`` and whose justification
names the rules (code scanning shows it as dismissed, not as an alert).
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import quote

from specgraph import __version__
from specgraph.renderers.base import Renderer
from specgraph.report import (CODES, DESCRIPTIONS, Accepted, Location, SpecFinding,
                              SpecReport)

__all__ = ["SarifRenderer", "SCHEMA_URI"]

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_INFO = "https://pypi.org/project/specgraph-check/"


def _location(at: Location, message: str | None = None, ident: int | None = None
              ) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": at.line}
    if at.column:
        region["startColumn"] = at.column
    out: dict[str, Any] = {"physicalLocation": {
        "artifactLocation": {"uri": quote(at.path.replace("\\", "/")),
                             "uriBaseId": "%SRCROOT%"},
        "region": region}}
    if ident is not None:
        out["id"] = ident
    if message is not None:
        out["message"] = {"text": message}
    return out


def _rule(code: str) -> dict[str, Any]:
    text = DESCRIPTIONS.get(code, code)
    return {"id": code, "name": "".join(p.capitalize() for p in code.split("-")),
            "shortDescription": {"text": text}, "fullDescription": {"text": text},
            "help": {"text": f"{code}: {text}"},
            "defaultConfiguration": {"level": "error"}}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class SarifRenderer(Renderer):
    """A SARIF 2.1.0 log with one run."""

    format = "sarif"

    def _render_SpecReport(self, r: SpecReport) -> str:
        placed = [*r.findings, *(a.finding for a in r.accepted)]
        codes = sorted({f.finding.code for f in placed},
                       key=lambda c: CODES.index(c) if c in CODES else len(CODES))
        results = [_result(f, r.model, codes) for f in r.findings]
        results += [_result(a.finding, r.model, codes, a) for a in r.accepted]
        log = {
            "$schema": SCHEMA_URI, "version": "2.1.0",
            "runs": [{
                "tool": {"driver": {"name": "specgraph", "version": __version__,
                                    "informationUri": _INFO,
                                    "rules": [_rule(c) for c in codes]}},
                "automationDetails": {"id": f"specgraph check/{r.spec}/"},
                "results": results,
                "properties": {"spec": r.spec, "model": r.model, "framework": r.framework,
                               "satisfied": r.satisfied},
            }],
        }
        return json.dumps(_finite(log), indent=2, ensure_ascii=False) + "\n"


def _result(f: SpecFinding, model: str, codes: list[str], accepted: Accepted | None = None
            ) -> dict[str, Any]:
    """One result; suppressed, with the rules as its justification, where ``accepted``."""
    g = f.finding
    result: dict[str, Any] = {
        "ruleId": g.code, "ruleIndex": codes.index(g.code), "level": "error",
        "message": {"text": g.message},
        "properties": {"statements": list(f.statements), "blame": g.blame},
    }
    if f.spec_at is not None:
        result["locations"] = [_location(f.spec_at)]
    if f.model_at is not None:
        result["relatedLocations"] = [_location(f.model_at, f"the implementation ({model})", 1)]
    if accepted is not None:
        result["suppressions"] = [{"kind": "external", "status": "accepted",
                                   "justification": f"accepted by {accepted.by}"}]
    return result
