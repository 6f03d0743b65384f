"""The side-by-side view of a diff, laid out for a person: runs of identical rows folded as
``diff -U`` folds them, rows grouped under the block (module path) they belong to.

Folding: every differing row keeps ``CONTEXT`` identical rows on each side; a run of
identical rows beyond that is one line, ``… 37 identical rows (first scope … last
scope)``, when it hides at least ``FOLD_AT`` rows (shorter runs are shown as they are, so a
small model's table is whole). Grouping: a row's block is its scope up to the first
component that ends in a digit (``encoder.layer.5``, ``h.3``, ``stages.0``), else its
first component (``embeddings``); where scopes nest below their blocks, each block gets a
heading row and its rows show their scopes relative to it. Where no scope is deeper than its
block (a small flat model) the table is left flat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specgraph.report import Row

__all__ = ["CONTEXT", "FOLD_AT", "Fold", "Line", "layout", "block"]

CONTEXT = 3  # identical rows kept around each differing row
FOLD_AT = 6  # the fewest rows a fold hides


@dataclass(frozen=True)
class Fold:
    """A run of identical rows shown as one line."""

    count: int
    first: str  # the run's first and last scopes
    last: str

    @property
    def text(self) -> str:
        where = self.first if self.first == self.last else f"{self.first} … {self.last}"
        noun = "row" if self.count == 1 else "rows"
        return f"… {self.count} identical {noun} ({where})"


@dataclass(frozen=True)
class Line:
    """A row of the table: its marker, the scope cells as shown, and the row (None for a
    block's heading)."""

    lhs_scope: str
    rhs_scope: str
    row: Row | None


def block(scope: str) -> str:
    """The block ``scope`` belongs to: up to its first component ending in a digit, else
    its first component ("" for the model itself)."""
    parts = scope.split(".") if scope else []
    for k, part in enumerate(parts):
        if part[-1:].isdigit():
            return ".".join(parts[: k + 1])
    return parts[0] if parts else ""


def _named(scope: str, row_side: str) -> str:
    return scope or ("<model>" if row_side != "—" else "")


def _folds(rows: Sequence[Row], full: bool) -> list[Row | Fold]:
    """The rows with long runs of identical rows folded."""
    if full:
        return list(rows)
    near = [False] * len(rows)
    for i, row in enumerate(rows):
        if row.differs or row.settled:
            for k in range(max(0, i - CONTEXT), min(len(rows), i + CONTEXT + 1)):
                near[k] = True
    out: list[Row | Fold] = []
    i = 0
    while i < len(rows):
        if near[i]:
            out.append(rows[i])
            i += 1
            continue
        j = i
        while j < len(rows) and not near[j]:
            j += 1
        if j - i >= FOLD_AT:
            out.append(Fold(j - i, _scope_of(rows[i]), _scope_of(rows[j - 1])))
        else:
            out.extend(rows[i:j])
        i = j
    return out


def _scope_of(row: Row) -> str:
    return row.lhs_scope or row.rhs_scope or "<model>"


def _deep(scope: str) -> bool:
    """Whether ``scope`` lies below its block (shown relative to a heading)."""
    return bool(scope) and block(scope) != scope


def layout(rows: Sequence[Row], *, full: bool = False) -> list[Line | Fold]:
    """The side-by-side view's lines: table lines (rows and block headings) and folds.

    Each side keeps its own current block: a heading line comes where a side's scope
    enters a block other than the one it is under, naming the block of each side whose
    scope is below one; a side's scope below its current block is shown relative to it,
    indented; other scopes (a flat name, the model itself) are shown whole.
    """
    items = _folds(rows, full)
    grouped = any(_deep(s) for r in rows for s in (r.lhs_scope, r.rhs_scope))
    out: list[Line | Fold] = []
    current: dict[str, str | None] = {"lhs": None, "rhs": None}
    for item in items:
        if isinstance(item, Fold):
            out.append(item)
            current = {"lhs": None, "rhs": None}
            continue
        scopes = {"lhs": item.lhs_scope if item.lhs != "—" else None,
                  "rhs": item.rhs_scope if item.rhs != "—" else None}
        shown = {"lhs": _named(item.lhs_scope, item.lhs),
                 "rhs": _named(item.rhs_scope, item.rhs)}
        if grouped:
            deep = {side: s is not None and _deep(s) for side, s in scopes.items()}
            if any(deep[side] and block(scopes[side]) != current[side] for side in deep):
                heading = {side: block(scopes[side]) if deep[side] else "" for side in deep}
                out.append(Line(heading["lhs"], heading["rhs"], None))
            for side, scope in scopes.items():
                if scope is None:
                    continue
                if deep[side]:
                    current[side] = block(scope)
                    shown[side] = "  " + scope[len(current[side]) + 1:]
                elif scope != current[side]:  # a flat name, the model: the heading is over
                    current[side] = None
        out.append(Line(shown["lhs"], shown["rhs"], item))
    return out
