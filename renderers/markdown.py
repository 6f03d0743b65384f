"""A Markdown job summary (GitHub-flavoured, for ``$GITHUB_STEP_SUMMARY``): the verdict, a
table of the top findings, the rest and the statements in ``<details>``.

Findings accept rules cover are in ``<details>`` of their own, each with the rules that
accept it; a statement that passes with accepted findings is marked ☑️. GitHub refuses a
step summary over 1 MiB; the summary stays under ``MAX_BYTES`` by leaving rows out (saying
how many) where the findings are too many. Names are text, never markup:
every cell is HTML-escaped and Markdown's own characters are escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from specgraph.renderers.base import Renderer
from specgraph.renderers.text import seed_text
from specgraph.report import SpecFinding, SpecReport

__all__ = ["MarkdownRenderer", "MAX_BYTES", "TOP"]

MAX_BYTES = 1_000_000  # GitHub takes up to 1 MiB per step summary
TOP = 10  # findings in the first table
_MARKUP = re.compile(r"([\\`*_{}\[\]#+!~|])")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def cell(text: object) -> str:
    """``text`` as the plain text of one table cell."""
    plain = _CONTROLS.sub("\ufffd", " ".join(str(text).split()))
    escaped = html.escape(plain, quote=False)
    return _MARKUP.sub(r"\\\1", escaped)


def _rows(findings: Sequence[tuple[int, SpecFinding]]) -> list[str]:
    out = ["| # | code | statement | spec | implementation | finding |",
           "|---|---|---|---|---|---|"]
    for k, f in findings:
        g = f.finding
        out.append(f"| {k} | {cell(g.code)} | {cell(', '.join(f.statements[:3]))} | "
                   f"{cell(f.spec_at or '')} | {cell(f.model_at or '')} | "
                   f"{cell(g.message)} |")
    return out


def _accepted(r: SpecReport, shown: int) -> list[str]:
    """The accepted findings, at most ``shown``, in ``<details>``, each with its rules."""
    if not r.accepted:
        return []
    out = ["", f"<details><summary>Accepted ({len(r.accepted)}): known differences the "
           "accept rules cover, not counted</summary>", "",
           "| # | code | statement | spec | implementation | finding | accepted by |",
           "|---|---|---|---|---|---|---|"]
    for k, a in enumerate(r.accepted[:shown], 1):
        f, g = a.finding, a.finding.finding
        out.append(f"| {k} | {cell(g.code)} | {cell(', '.join(f.statements[:3]))} | "
                   f"{cell(f.spec_at or '')} | {cell(f.model_at or '')} | {cell(g.message)} | "
                   f"{cell(a.by)} |")
    if shown < len(r.accepted):
        out += ["", f"{len(r.accepted) - shown} more accepted findings are left out to keep "
                "this summary under GitHub's limit; `--format json` lists them all."]
    return [*out, "", "</details>"]


class MarkdownRenderer(Renderer):
    """The job summary of a check."""

    format = "markdown"

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def _render_SpecReport(self, r: SpecReport) -> str:
        statements = self._statements(r)
        shown = max(len(r.findings), len(r.accepted))
        while True:  # too long: the statements' table goes first, then half the findings
            text = self._compose(r, shown, statements)
            if len(text.encode("utf-8")) <= self.max_bytes or shown == 0:
                return text
            if len(statements) > 1:
                statements = [f"{len(r.statements)} statements: `--format json` lists them"]
            else:
                shown //= 2

    def _compose(self, r: SpecReport, shown: int, statements: list[str]) -> str:
        numbered = list(enumerate(r.findings[:shown], 1))
        top, rest = numbered[:TOP], numbered[TOP:]
        parts = self._head(r)
        if top:
            parts += ["", *_rows(top)]
        if rest:
            parts += ["", f"<details><summary>{len(rest)} more findings</summary>", "",
                      *_rows(rest), "", "</details>"]
        if shown < len(r.findings):
            parts += ["", f"{len(r.findings) - shown} more findings are left out to keep this "
                      "summary under GitHub's limit; `--format json` lists them all."]
        parts += _accepted(r, shown)
        return "\n".join([*parts, "", *statements, ""])

    def _head(self, r: SpecReport) -> list[str]:
        noun = "difference" if len(r.findings) == 1 else "differences"
        verdict = "✅ spec satisfied" if r.satisfied else \
            f"❌ spec not satisfied: {len(r.findings)} {noun}"
        if r.accepted:
            known = "difference" if len(r.accepted) == 1 else "differences"
            verdict += (f" ({len(r.accepted)} known {known} accepted)" if r.satisfied
                        else f", {len(r.accepted)} accepted")
        paper = (r.paper or {}).get("title")
        out = [f"## specgraph check: {verdict}", "",
               f"- **spec** {cell(r.spec)}" + (f" ({cell(paper)})" if paper else ""),
               f"- **implementation** {cell(r.model)} ({cell(r.framework)})"]
        c = r.comparison
        if c is not None and c.numeric is not None:
            out.append(f"- **numbers** compared over {seed_text(c.numeric.seeds)} "
                       f"({cell(c.numeric.lhs_context)} against the spec)")
        counts = {k: sum(s.status == k for s in r.statements)
                  for k in ("passed", "failed", "unchecked")}
        excused = sum(bool(s.accepted) and s.status == "passed" for s in r.statements)
        out.append(f"- **statements** {len(r.statements)}: {counts['passed']} passed"
                   + (f" ({excused} with accepted differences)" if excused else "")
                   + f", {counts['failed']} failed, {counts['unchecked']} left unspecified")
        out += [f"- note: {cell(n)}" for n in r.notes]
        return out

    def _statements(self, r: SpecReport) -> list[str]:
        if not r.statements:
            return []
        mark = {"passed": "✅", "failed": "❌", "unchecked": "➖"}
        rows = [f"| {'☑️' if s.accepted and s.status == 'passed' else mark[s.status]} | "
                f"{cell(s.scope)} | {cell(s.op)} | {cell(s.at)} |" for s in r.statements]
        return [f"<details><summary>Statements ({len(r.statements)})</summary>", "",
                "| | statement | op | spec |", "|---|---|---|---|", *rows, "", "</details>"]
