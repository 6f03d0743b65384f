"""LaTeX renderer: the equations of a model, grouped by layer, ready to hold against a paper."""

from __future__ import annotations

from specgraph.renderers.base import Renderer
from specgraph.summary import ModelSummary
from specgraph.symbolic import escape_latex, group_by_scope
from specgraph.terminal import strip_controls

__all__ = ["LatexRenderer"]


class LatexRenderer(Renderer):
    """An ``align*`` environment per scope, with the scope as a comment line."""

    format = "latex"

    def _render_ModelSummary(self, s: ModelSummary) -> str:
        reference = strip_controls(s.reference.replace("\n", " "))  # one comment line
        out = [f"% {reference} ({s.framework}, {s.param_count} parameters)"]
        for scope, lines in group_by_scope(list(s.equations)):
            out.append(f"% {escape_latex(scope or '<model>')}")
            out.append(r"\begin{align*}")
            body = [e.latex.replace(" = ", " &= ", 1) for e in lines]
            out.append(" \\\\\n".join(body))
            out.append(r"\end{align*}")
        return "\n".join(out) + "\n"
