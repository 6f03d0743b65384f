"""LaTeX renderer: the equations of a model, grouped by layer, ready to hold against a paper."""

from __future__ import annotations

from specgraph.renderers.base import Renderer
from specgraph.summary import ModelSummary
from specgraph.symbolic import group_by_scope

__all__ = ["LatexRenderer"]


def _escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"),
                 ("#", r"\#"), ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        text = text.replace(a, b)
    return text


class LatexRenderer(Renderer):
    """An ``align*`` environment per scope, with the scope as a comment line."""

    format = "latex"

    def _render_ModelSummary(self, s: ModelSummary) -> str:
        out = [f"% {s.reference} ({s.framework}, {s.param_count} parameters)"]
        for scope, lines in group_by_scope(list(s.equations)):
            out.append(f"% {_escape(scope or '<model>')}")
            out.append(r"\begin{align*}")
            body = [e.latex.replace(" = ", " &= ", 1) for e in lines]
            out.append(" \\\\\n".join(body))
            out.append(r"\end{align*}")
        return "\n".join(out) + "\n"
