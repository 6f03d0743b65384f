"""Terminal renderer: aligned tables and Unicode equations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgraph.renderers.base import Renderer
from specgraph.renderers.side_by_side import Fold, Line, layout
from specgraph.report import (AcceptRule, DiffReport, Finding, Row, Side, SpecFinding,
                              SpecReport)
from specgraph.summary import LayerRow, ModelSummary
from specgraph.symbolic import group_by_scope

__all__ = ["TextRenderer", "format_value", "format_shape", "table", "seed_text"]


def format_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(s) for s in shape) + "]"


def format_value(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(format_value(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows padded into columns, with a rule under the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), line(["─" * w for w in widths]), *(line(r) for r in rows)]


_PLACES = 6  # the places of a repeated finding listed in the text unless --full


def _count(n: int) -> str:
    return f"{n:,}"


class TextRenderer(Renderer):
    """Human-readable output for a terminal; ``color`` highlights differences (ANSI),
    ``full`` shows every row of a diff's side-by-side view and every place of a finding."""

    format = "text"

    def __init__(self, color: bool = False, full: bool = False) -> None:
        self.color = color
        self.full = full

    def _mark(self, line: str, code: str) -> str:
        return f"\033[{code}m{line}\033[0m" if self.color else line

    def _render_ModelSummary(self, s: ModelSummary) -> str:
        out = [f"{s.reference}  ({s.framework}, {len(s.layers)} nodes, "
               f"{_count(s.param_count)} parameters)", ""]
        ins = ", ".join(f"{t.name}: {t.dtype}{format_shape(t.shape)}" for t in s.inputs)
        outs = ", ".join(f"{t.name}: {t.dtype}{format_shape(t.shape)}" for t in s.outputs)
        out += [f"inputs   {ins}", f"outputs  {outs}", "", "Layers"]
        out += table(["#", "scope", "op", "attributes", "shape", "params", "count", "source"],
                     [self._row(r) for r in s.layers])
        out += ["", "Equations"]
        for scope, lines in group_by_scope(list(s.equations)):
            out.append(f"  {scope or '<model>'}")
            out.extend(f"    {e.text}" for e in lines)
        return "\n".join(out) + "\n"

    def _row(self, r: LayerRow) -> list[str]:
        attrs = " ".join(f"{k}={format_value(v)}" for k, v in r.attrs.items())
        ins = " ".join(format_shape(s) for s in r.inputs)
        outs = " ".join(format_shape(s) for s in r.outputs)
        params = " ".join(f"{p.name}{format_shape(p.shape)}" for p in r.params)
        return [str(r.index), r.scope or "<model>", r.op, attrs, f"{ins} → {outs}".strip(),
                params, _count(r.param_count) if r.params else "", r.source]

    def _render_DiffReport(self, r: DiffReport) -> str:
        out = [f"lhs  {r.lhs}  ({r.lhs_framework})", f"rhs  {r.rhs}  ({r.rhs_framework})", ""]
        out += self._side_by_side(r.rows)
        out.append("")
        if r.numeric is not None:
            out += _numeric_lines(r.numeric)
        if r.notes:
            out += [f"note: {n}" for n in r.notes] + [""]
        if r.findings:
            out.append(f"Findings ({len(r.findings)})")
            out += self._findings(r.findings)
            out.append("")
        if r.accepted:
            out.append(f"Accepted ({len(r.accepted)}): known differences the accept rules "
                       "cover, not counted")
            out += self._findings([a.finding for a in r.accepted], [a.rules for a in
                                                                   r.accepted])
            out.append("")
        accepted = f", {len(r.accepted)} accepted" if r.accepted else ""
        if r.findings:
            noun = "difference" if len(r.findings) == 1 else "differences"
            out.append(self._mark(f"verdict: NOT EQUIVALENT, {len(r.findings)} {noun}"
                                  f"{accepted}", "1;31"))
        else:
            if r.accepted:
                checked = (f"{len(r.accepted)} known "
                           f"{'difference' if len(r.accepted) == 1 else 'differences'} "
                           "accepted")
            elif any(row.differs or row.settled for row in r.rows):
                # rows the numbers settled (``~``) are written differently too
                checked = "written differently, computes the same"
            else:
                checked = "same canonical graph"
            if r.numeric is not None:
                seeds = seed_text(r.numeric.seeds)
                if _numbers_part(r.numeric):
                    checked += f"; numbers compared over {seeds}"
                else:
                    what = "outputs and gradients" if any(
                        layer.backward is not None for layer in r.numeric.layers) else "outputs"
                    checked += f"; {what} agree layer by layer over {seeds}"
            out.append(self._mark(f"verdict: EQUIVALENT ({checked})", "1;32"))
        return "\n".join(out) + "\n"

    def _render_SpecReport(self, r: SpecReport) -> str:
        """A check against a spec: the two sides aligned, the numbers, the findings at the
        spec's line and column and the model's source line, the statements, the verdict."""
        names = ("model", "spec")
        out = [f"spec   {r.spec}" + (f"  ({r.paper['title']})" if r.paper and
                                      r.paper.get("title") else ""),
               f"model  {r.model}  ({r.framework})", ""]
        c = r.comparison
        if c is not None:
            out += self._side_by_side(c.rows, names) + [""]
            if c.numeric is not None:
                out += _numeric_lines(c.numeric, ("the implementation", "the spec"))
        out += [f"note: {n}" for n in r.notes] + ([""] if r.notes else [])
        if r.findings:
            out.append(f"Findings ({len(r.findings)})")
            out += self._findings([f.finding for f in r.findings],
                                  where=[_placed(f) for f in r.findings])
            out.append("")
        if r.accepted:
            out.append(f"Accepted ({len(r.accepted)}): known differences the accept rules "
                       "cover, not counted")
            out += self._findings([a.finding.finding for a in r.accepted],
                                  [a.rules for a in r.accepted],
                                  [_placed(a.finding) for a in r.accepted])
            out.append("")
        counts = {k: sum(s.status == k for s in r.statements)
                  for k in ("passed", "failed", "unchecked")}
        excused = sum(bool(s.accepted) and s.status == "passed" for s in r.statements)
        out.append(f"Statements: {len(r.statements)}, {counts['passed']} passed"
                   + (f" ({excused} with accepted differences)" if excused else "")
                   + f", {counts['failed']} failed, {counts['unchecked']} left unspecified")
        out += [f"  failed: {s.scope} ({s.op}) at {s.at}" for s in r.statements
                if s.status == "failed"][:12]
        out.append("")
        if r.findings:
            noun = "difference" if len(r.findings) == 1 else "differences"
            accepted = f", {len(r.accepted)} accepted" if r.accepted else ""
            out.append(self._mark(f"verdict: SPEC NOT SATISFIED, {len(r.findings)} {noun}"
                                  f"{accepted}", "1;31"))
        else:
            said = "what the spec states holds"
            if r.accepted:
                noun = "difference" if len(r.accepted) == 1 else "differences"
                said = f"{len(r.accepted)} known {noun} accepted, the rest holds"
            if c is not None and c.numeric is not None:
                said += f"; numbers agree over {seed_text(c.numeric.seeds)}"
            out.append(self._mark(f"verdict: SPEC SATISFIED ({said})", "1;32"))
        return "\n".join(out) + "\n"

    def _side_by_side(self, rows: Sequence[Row], names: tuple[str, str] = ("lhs", "rhs")
                      ) -> list[str]:
        """The table of aligned rows, identical runs folded and rows grouped by block
        (``renderers.side_by_side``); every row with ``full``; ``names`` head the two
        sides' columns."""
        lines = layout(rows, full=self.full)
        cells = [[_marker(item.row), item.lhs_scope,
                  item.row.lhs if item.row else "", item.row.rhs if item.row else "",
                  item.rhs_scope] for item in lines if isinstance(item, Line)]
        left, right = names
        header, rule, *body = table(["", f"{left} scope", left, right, f"{right} scope"],
                                    cells)
        indent = " " * header.index(f"{left} scope")
        out, text = [header, rule], iter(body)
        for item in lines:
            if isinstance(item, Fold):
                out.append(indent + item.text)
                continue
            line = next(text)
            out.append(self._mark(line, "1;31") if item.row is not None and item.row.differs
                       else line)
        return out

    def _findings(self, findings: Sequence[Finding],
                  rules: Sequence[Sequence[AcceptRule]] = (),
                  where: Sequence[Sequence[tuple[str, str]]] = ()) -> list[str]:
        """Numbered findings with where each is (``where``: per finding, the (name, place)
        lines to show instead of each side's source), its places and accepting rules."""
        out = []
        for i, f in enumerate(findings, 1):
            out.append(f"  {i}. [{f.code}] {f.message}")
            lines = where[i - 1] if i <= len(where) else [
                (name, side.source) for name, side in (("lhs", f.lhs), ("rhs", f.rhs))
                if side is not None and side.source]
            out += [f"       {name}: {place}" for name, place in lines]
            if f.places:
                out.append(f"       places: {self._places(f)}")
            if i <= len(rules):
                out.append("       accepted by " + ", ".join(
                    f"{rule.text} ({rule.origin})" for rule in rules[i - 1]))
        return out

    def _places(self, f: Finding) -> str:
        """Every place's scope (rhs's after a slash where it differs), the first few unless
        ``full``."""
        def where(lhs: Side | None, rhs: Side | None) -> str:
            if lhs is None or rhs is None:
                return (lhs or rhs).scope if (lhs or rhs) else "?"
            return lhs.scope if lhs.scope == rhs.scope else f"{lhs.scope} / {rhs.scope}"

        shown = f.places if self.full else f.places[:_PLACES]
        text = ", ".join(where(a, b) for a, b in shown)
        rest = len(f.places) - len(shown)
        return text + (f" and {rest} more (--full or --format json lists them all)"
                       if rest else "")


def _placed(f: SpecFinding) -> list[tuple[str, str]]:
    """A check's finding's places: the spec's line and column, the model's line."""
    return [(name, str(at)) for name, at in (("spec", f.spec_at),
                                             ("implementation", f.model_at)) if at]


def seed_text(seeds: Sequence[int]) -> str:
    """``seed 0``, ``seeds 0-19`` or ``seeds 1,5,9``."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ",".join(str(s) for s in seeds)


def _worst(values: Any) -> float:
    # values at float32's underflow are no error of either side's (a note says so)
    return max((v.max_rel for v in values if v is not None and not v.shape_differs
                and not getattr(v, "underflow", False)), default=0.0)


def _gradients(gradients: Any) -> str:
    """The parameter gradients' worst error, with the parameter named where it is far
    beyond rounding (1e-2 of its scale), ``zero on lhs`` where lhs gives it none (a
    padding row's, which a finding names)."""
    worst = _worst(gradients.values())
    if not worst > 1e-2:
        return f"{worst:.2e}"
    name, stats = next((k, v) for k, v in sorted(gradients.items())
                       if v is not None and v.max_rel == worst)
    if stats.scale == 0:
        return f"{worst:.2e} (at {name}, zero on lhs)"
    scales = sorted(v.scale for v in gradients.values() if v is not None and v.scale > 0)
    typical = scales[len(scales) // 2] if scales else 0.0
    if stats.scale < 1e-5 * typical:  # an attention key's bias: softmax cancels it
        return (f"{worst:.2e} (at {name}, whose gradient is zero up to rounding on both "
                f"sides: its scale {stats.scale:.1e}, the parameters' typical "
                f"{typical:.1e})")
    return f"{worst:.2e} (at {name})"


def _numeric_lines(n: Any, names: tuple[str, str] = ("lhs", "rhs")) -> list[str]:
    """The numbers section: settings, the worst errors, the layers that part; ``names``
    name the two sides."""
    left, right = names
    moved = f"{left}'s weights moved into {right}" if n.transferred else \
        "each side's own weights"
    mode = "isolated layers" if n.isolated else "end to end"
    out = [f"Numbers  ({left} {n.lhs_context}, {right} {n.rhs_context}; "
           f"{seed_text(n.seeds)}; {moved}; {mode})"]
    fwd = [layer.forward for layer in n.layers]
    bwd = [layer.backward for layer in n.layers if layer.backward is not None]
    parted = [layer for layer in n.layers if (layer.forward and layer.forward.diverges)
              or (layer.backward and layer.backward.diverges)]
    out.append(f"  forward   {len(fwd)} layers, worst error {_worst(fwd):.2e} of the values' "
               f"scale; outputs {_worst(n.outputs.values()):.2e}")
    if bwd:
        out.append(f"  backward  {len(bwd)} layers, worst error {_worst(bwd):.2e}; parameter "
                   f"gradients {_gradients(n.gradients)}")
    if parted:
        # the first layer whose values part is always shown: the gradients flowing back
        # from it part at every layer upstream, which would fill the table before it
        first = next((layer for layer in parted if layer.forward and layer.forward.diverges),
                     None)
        if first is not None and first not in parted[:12]:
            parted = [*parted[:11], first, *[x for x in parted[11:] if x is not first]]
        rows = [[layer.lhs, layer.rhs,
                 f"{layer.forward.max_rel:.2e}" if layer.forward else "",
                 f"{layer.isolated.max_rel:.2e}" if layer.isolated else "",
                 f"{layer.backward.max_rel:.2e}" if layer.backward else ""]
                for layer in parted[:12]]
        out += ["  " + line for line in table(
            [f"{left} layer", f"{right} layer", "forward", "isolated", "backward"], rows)]
        if len(parted) > 12:
            out.append(f"  ... and {len(parted) - 12} more layers that part")
    out += [f"  note: {note}" for note in n.notes]
    out.append("")
    return out


def _numbers_part(numeric: Any) -> bool:
    """Whether any layer's or output's numbers part (an accepted difference's)."""
    stats = [s for layer in numeric.layers for s in (layer.forward, layer.backward)
             if s is not None]
    stats += list(numeric.outputs.values())
    return any(s.diverges for s in stats)


def _marker(row: Row | None) -> str:
    """``!`` on a row that differs, ``~`` on one written differently that the numbers show
    computes the same (a note says so), nothing on the others."""
    if row is None:
        return ""
    return "!" if row.differs else "~" if row.settled else ""
