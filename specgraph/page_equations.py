"""The HTML report's equations: both graphs printed with the same lines, paired by aligned
defining node, the differing terms marked.

Each side merges a value into its reader by its own rules (a scope boundary on one side, not
on the other, names a value one side inlines), so the two sides are printed again with every
value named on either side named on both: a row then compares the same computation, and says
"differs" only where the math differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgraph.align import Alignment
from specgraph.mathml import differing_terms, to_mathml
from specgraph.symbolic import Equation, equations

__all__ = ["paired_equations"]


def _common_lines(al: Alignment) -> tuple[list[Equation], list[Equation]]:
    """Both sides' equations, every value that defines a line on one side defining the line
    of its counterpart on the other."""
    left, right = equations(al.lhs), equations(al.rhs)
    lhs_named = {e.nodes[-1] for e in left}
    rhs_named = {e.nodes[-1] for e in right}
    lhs_more = {al.rhs_to_lhs[j] for j in rhs_named if j in al.rhs_to_lhs} - lhs_named
    rhs_more = {al.lhs_to_rhs[i] for i in lhs_named if i in al.lhs_to_rhs} - rhs_named
    if lhs_more:
        left = equations(al.lhs, named=lhs_named | lhs_more)
    if rhs_more:
        right = equations(al.rhs, named=rhs_named | rhs_more)
    return left, right


def paired_equations(al: Alignment, folded: Mapping[str, set[int]]) -> list[dict[str, Any]]:
    """Sections of rows, each row an lhs line beside the rhs line defined by its aligned
    node (or beside nothing), in lhs order with rhs's unpaired lines where they fall; rows
    whose lines lie only in folded blocks are left out (a block folded on one side only is
    shown)."""
    left, right = _common_lines(al)
    rhs_line = {e.nodes[-1]: k for k, e in enumerate(right)}
    pairs: list[tuple[Equation | None, Equation | None]] = []
    done = 0  # rhs lines before this one are placed
    for e in left:
        k = rhs_line.get(al.lhs_to_rhs.get(e.nodes[-1], -1))
        if k is not None and k >= done:
            pairs.extend((None, b) for b in right[done:k])
            pairs.append((e, right[k]))
            done = k + 1
        elif k is not None:  # paired out of order: beside its partner all the same
            pairs.append((e, right[k]))
        else:
            pairs.append((e, None))
    paired_rhs = {id(b) for a, b in pairs if a is not None and b is not None}
    pairs.extend((None, b) for b in right[done:] if id(b) not in paired_rhs)
    sections: list[dict[str, Any]] = []
    for a, b in pairs:
        if _hidden(a, folded["lhs"]) and _hidden(b, folded["rhs"]):
            continue
        _add_line(sections, a, b)
    return sections


def _hidden(e: Equation | None, folded: set[int]) -> bool:
    return e is None or set(e.nodes) <= folded


def _add_line(sections: list[dict[str, Any]], a: Equation | None, b: Equation | None
              ) -> None:
    marks_a: set[Any] = set()
    marks_b: set[Any] = set()
    if a is not None and b is not None:
        marks_a, marks_b = differing_terms(a.expr, b.expr)
    line = {
        "lhs": to_mathml(a.lhs, a.expr, marks_a) if a else "",
        "rhs": to_mathml(b.lhs, b.expr, marks_b) if b else "",
        "lhs_text": a.text if a else "", "rhs_text": b.text if b else "",
        "differs": bool(marks_a or marks_b or a is None or b is None),
        "lnode": f"n{a.nodes[-1]}" if a else "", "rnode": f"n{b.nodes[-1]}" if b else "",
    }
    lscope = (a.scope or "<model>") if a else ""
    rscope = (b.scope or "<model>") if b else ""
    last = sections[-1] if sections else None
    if last is None or (lscope and last["scope"] and last["scope"] != lscope) or \
            (rscope and last["rscope"] and last["rscope"] != rscope):
        last = {"scope": "", "rscope": "", "lines": []}
        sections.append(last)
    last["scope"] = last["scope"] or lscope
    last["rscope"] = last["rscope"] or rscope
    last["lines"].append(line)
    if line["differs"]:
        last["differs"] = True
