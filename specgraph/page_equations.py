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


def _more_names(named: set[int], lines: list[Equation], other: set[int],
                counterpart: Mapping[int, int], aligned: Mapping[int, int]) -> set[int]:
    """Nodes of one side to name as well: the counterparts of the other side's defining
    nodes (``other``) merged here into a line whose own defining node has a counterpart
    too (the two sides group the same ops differently). A line defined by a node without
    counterpart (an activation only this side has) keeps its ops: it is shown beside the
    other side's line, the extra op marked."""
    owner = {i: e.nodes[-1] for e in lines for i in e.nodes}
    more = set()
    for j in other:
        i = counterpart.get(j)
        if i is not None and i not in named and owner.get(i) in aligned:
            more.add(i)
    return more


def _common_lines(al: Alignment) -> tuple[list[Equation], list[Equation]]:
    """Both sides' equations, printed with the same lines where the two group the same
    aligned ops differently."""
    left, right = equations(al.lhs), equations(al.rhs)
    lhs_named = {e.nodes[-1] for e in left}
    rhs_named = {e.nodes[-1] for e in right}
    lhs_more = _more_names(lhs_named, left, rhs_named, al.rhs_to_lhs, al.lhs_to_rhs)
    rhs_more = _more_names(rhs_named, right, lhs_named, al.lhs_to_rhs, al.rhs_to_lhs)
    if lhs_more:
        left = equations(al.lhs, named=lhs_named | lhs_more)
    if rhs_more:
        right = equations(al.rhs, named=rhs_named | rhs_more)
    return left, right


def _matches(left: list[Equation], right: list[Equation], al: Alignment) -> dict[int, int]:
    """lhs line -> rhs line: lines whose defining nodes are aligned, then a line defined by
    a node without counterpart beside the line of its last aligned op."""
    lhs_def = {e.nodes[-1]: k for k, e in enumerate(left)}
    rhs_def = {e.nodes[-1]: k for k, e in enumerate(right)}
    match = {k: rhs_def[al.lhs_to_rhs[e.nodes[-1]]] for k, e in enumerate(left)
             if al.lhs_to_rhs.get(e.nodes[-1]) in rhs_def}
    taken = set(match.values())
    for k, e in enumerate(left):
        if k in match or e.nodes[-1] in al.lhs_to_rhs:
            continue
        hit = next((rhs_def[al.lhs_to_rhs[i]] for i in reversed(e.nodes)
                    if al.lhs_to_rhs.get(i) in rhs_def), None)
        if hit is not None and hit not in taken:
            match[k] = hit
            taken.add(hit)
    for k, e in enumerate(right):
        if k in taken or e.nodes[-1] in al.rhs_to_lhs:
            continue
        hit = next((lhs_def[al.rhs_to_lhs[j]] for j in reversed(e.nodes)
                    if al.rhs_to_lhs.get(j) in lhs_def), None)
        if hit is not None and hit not in match:
            match[hit] = k
    return match


def paired_equations(al: Alignment, folded: Mapping[str, set[int]]) -> list[dict[str, Any]]:
    """Sections of rows, each row an lhs line beside its rhs line (see ``_matches``) or
    beside nothing, in lhs order with rhs's unpaired lines where they fall; rows whose
    lines lie only in folded blocks are left out (a block folded on one side only is
    shown)."""
    left, right = _common_lines(al)
    match = _matches(left, right, al)
    paired = set(match.values())
    pairs: list[tuple[Equation | None, Equation | None]] = []
    done = 0  # rhs lines before this one are placed
    for k, e in enumerate(left):
        m = match.get(k)
        if m is not None and m >= done:
            pairs.extend((None, right[j]) for j in range(done, m) if j not in paired)
            done = m + 1
        pairs.append((e, right[m] if m is not None else None))
    pairs.extend((None, right[j]) for j in range(done, len(right)) if j not in paired)
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
