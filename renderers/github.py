"""GitHub Actions workflow commands: an annotation on the spec's line and one on the model's
source line for each finding, then the plain report.

A finding accept rules cover is a notice on the spec's line, never an error: it does not fail
the check, and the rules that accept it are in its message.

GitHub keeps at most 10 annotations of each level per step (and 50 per job) and drops the
rest silently, so errors come first, at most ``LIMIT`` of them, then one notice that says how
many were left out and where they are (the job summary, the plain report below); the
accepted findings' notices share the notices left, the last saying how many more. Values
are escaped as the runner reads them: in the message ``%``, CR and LF; in properties also
``:`` and ``,``.
"""

from __future__ import annotations

from specgraph.renderers.base import Renderer
from specgraph.renderers.text import TextRenderer
from specgraph.report import Location, SpecFinding, SpecReport

__all__ = ["GithubRenderer", "escape_data", "escape_property", "LIMIT"]

LIMIT = 10  # annotations of one level GitHub shows per step


def escape_data(text: str) -> str:
    """A workflow command's message, escaped (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value, escaped (``%``, CR, LF, ``:``, ``,``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, at: Location | None = None, title: str = "") -> str:
    """One workflow command (``::error file=F,line=L,col=C,title=T::message``)."""
    props = []
    if at is not None:
        props += [f"file={escape_property(at.path)}", f"line={at.line}"]
        if at.column:
            props.append(f"col={at.column}")
    if title:
        props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}" if props else \
        f"::{level}::{escape_data(message)}"


class GithubRenderer(Renderer):
    """Annotations (errors first, ``LIMIT`` per level, then a notice) and the plain text."""

    format = "github"

    def _render_SpecReport(self, r: SpecReport) -> str:
        errors = [line for f in r.findings for line in self._annotations(f, r)]
        out = errors[:LIMIT]
        if len(errors) > LIMIT:
            out.append(command(
                "notice", f"{len(errors) - LIMIT} more annotations not shown (GitHub shows "
                f"{LIMIT} per step): the {len(r.findings)} findings are all in the job "
                "summary (--summary $GITHUB_STEP_SUMMARY) and in the report in this log",
                title="specgraph check: more findings"))
        out += self._accepted(r, LIMIT - (len(errors) > LIMIT) - r.satisfied)
        if r.satisfied:
            noun = "difference" if len(r.accepted) == 1 else "differences"
            said = f" ({len(r.accepted)} known {noun} accepted)" if r.accepted else ""
            out.append(command("notice", f"{r.model} satisfies {r.spec}{said}",
                               title="specgraph check: spec satisfied"))
        return "\n".join(out) + "\n" + TextRenderer().render(r)

    def _accepted(self, r: SpecReport, room: int) -> list[str]:
        """A notice for each accepted finding, at most ``room``: the last one says how many
        more there are where they do not fit."""
        out = []
        for a in r.accepted:
            g, where = a.finding.finding, a.finding.statements
            out.append(command("notice", f"{g.message} (accepted by {a.by})",
                               a.finding.spec_at, f"specgraph accepted {g.code}"
                               + (f" at {where[0]}" if where else "")))
        if len(out) <= room:
            return out
        shown = out[:room - 1]
        return [*shown, command(
            "notice", f"{len(out) - len(shown)} more accepted findings not shown (GitHub "
            f"shows {LIMIT} notices per step): the report in this log lists them all",
            title="specgraph check: more accepted findings")]

    def _annotations(self, f: SpecFinding, r: SpecReport) -> list[str]:
        g = f.finding
        where = f" at {f.statements[0]}" if f.statements else ""
        title = f"specgraph {g.code}{where}"
        out = [command("error", g.message, f.spec_at, title)]
        if f.model_at is not None:
            said = f" (the spec: {f.spec_at})" if f.spec_at else f" (the spec: {r.spec})"
            out.append(command("error", g.message + said, f.model_at, title))
        return out
