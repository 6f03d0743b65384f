"""``CompiledSpec``: a spec as the shared Graph, with the side table of what it leaves open.

A spec is partial by design: only what it states is checked. The graph must still run, so
whatever the spec leaves open is filled in (an attribute's default, a stand-in activation)
and recorded here, in ``unchecked``, never on the graph's nodes (their attributes are the
canonical op's and nothing else). ``statements`` keeps what a statement states beyond the
graph: its equation, its tolerance, its parameter count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specgraph.ir import Graph
from specgraph.report import AcceptRule

__all__ = ["CompiledSpec", "Unchecked", "Statement", "Tolerance", "Count", "Fill",
           "Implementation"]


@dataclass(frozen=True)
class Tolerance:
    """How far numbers may part from the spec's, relative and absolute (None: the check's
    default)."""

    rtol: float | None = None
    atol: float | None = None


@dataclass(frozen=True)
class Unchecked:
    """A part of the compiled graph that the spec leaves open.

    Attributes:
        scope: the scope of the statement or block (``layer.0.intermediate``).
        op: the canonical op of the node it concerns; None for every node at ``scope`` and
            below (a block or statement marked ``unspecified: true``).
        attrs: the node's attributes the spec does not state (they hold a default or a
            stand-in); empty when ``op`` is None or the op itself is a stand-in.
        stand_in: the node's op is itself a stand-in (``activation: unspecified`` runs as
            ``relu``): which op the model uses there is not checked.
        source: ``file:line`` of the statement that leaves it open.
    """

    scope: str
    op: str | None
    attrs: tuple[str, ...] = ()
    stand_in: bool = False
    source: str = ""

    def covers(self, scope: str, op: str | None = None, attr: str | None = None) -> bool:
        """Whether this entry leaves ``op`` at ``scope`` (its attribute ``attr``) open."""
        if self.op is None:
            return scope == self.scope or scope.startswith(self.scope + ".")
        if scope != self.scope or (op is not None and op != self.op):
            return False
        return self.stand_in or attr is None or attr in self.attrs


@dataclass(frozen=True)
class Statement:
    """What one statement states beyond its nodes.

    Attributes:
        scope: its scope; source: its ``file:line``; op: the op it names.
        equation: its equation as a sympy expression (None: none given), and as written.
        tolerance: its tolerance, or the enclosing block's, or the spec's.
        param_count: the parameter count it states (verified against its shapes).
        line / column: where the statement starts in the file (1-based).
        keys: where each key of the statement stands, (line, column): its op, attributes,
            ``params``, ``activation``...
        unspecified: the statement, or a block around it, is marked ``unspecified: true``.
    """

    scope: str
    source: str
    op: str
    equation: Any = None
    equation_text: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    param_count: int | None = None
    line: int = 1
    column: int = 1
    keys: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    unspecified: bool = False

    def position(self, key: str | None = None) -> tuple[int, int]:
        """(line, column) of ``key`` where the statement writes it, else of the statement."""
        return self.keys.get(key, (self.line, self.column)) if key else (self.line,
                                                                          self.column)


@dataclass(frozen=True)
class Count:
    """A parameter count the spec states: for the whole spec (``scope`` empty), one
    iteration of a block, or a statement.

    Attributes:
        scope: the scope it counts (every parameter under it).
        stated: the count as stated; actual: what the spec's own shapes hold.
        line / column: where ``param_count`` stands in the file.
    """

    scope: str
    stated: int
    actual: int
    line: int
    column: int


@dataclass(frozen=True)
class Implementation:
    """An implementation the spec lists as checked against it (``implementations:``).

    Attributes:
        model: its reference as written (``file.py:factory``, relative to the spec's folder).
        expect: ``satisfied`` or ``differs`` (a known port that leaves the spec).
        codes: the finding codes it is expected to have; says: text a finding must say.
        line / column: where it is listed.
        accept: known differences its check accepts (``accept: [CODE:WHERE, ...]``), each
            with the spec's line and column as its origin.
    """

    model: str
    expect: str = "satisfied"
    codes: tuple[str, ...] = ()
    says: str = ""
    line: int = 1
    column: int = 1
    accept: tuple[AcceptRule, ...] = ()


@dataclass(frozen=True)
class Fill:
    """What an implementation has where a spec leaves something open, to run the spec as
    the implementation chose: values for open attributes, and the op of a stand-in
    activation (None: keep it)."""

    attrs: Mapping[str, Any] = field(default_factory=dict)
    op: str | None = None


@dataclass(frozen=True, eq=False)
class CompiledSpec:
    """A spec compiled: the graph, its sizes, and what it leaves open.

    Attributes:
        graph: the Graph (canonical ops, parameters named ``scope.role``, every node's
            ``source`` the ``file:line`` of its statement, ``origin`` the op it names).
        name: the spec file as messages name it.
        paper: title, url, section, as the spec gives them.
        sizes: every dim and hyperparameter, evaluated.
        dims: which of ``sizes`` are dims (free sizes with example values).
        input_ranges: [low, high) of each integer input.
        unchecked: the side table of what the spec leaves open.
        statements: each statement's equation, tolerance and parameter count, in order.
        tolerance: the spec's own tolerance.
        input_shapes: each input's shape as written, one text per axis (``B``, ``T``,
            ``d_model``), so that its dims can be bound to another model's input sizes.
        counts: the parameter counts the spec states, whole spec, blocks and statements.
        input_positions: where each input is declared, (line, column).
        implementations: the implementations the spec lists as checked against it.
    """

    graph: Graph
    name: str
    paper: Mapping[str, Any]
    sizes: Mapping[str, int | float]
    dims: tuple[str, ...]
    input_ranges: Mapping[str, tuple[int, int]]
    unchecked: tuple[Unchecked, ...]
    statements: tuple[Statement, ...]
    tolerance: Tolerance = field(default_factory=Tolerance)
    input_shapes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    counts: tuple[Count, ...] = ()
    input_positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    implementations: tuple[Implementation, ...] = ()

    def statement(self, scope: str) -> Statement | None:
        """The statement whose nodes carry ``scope``, or the nearest one above it."""
        table = self.__dict__.get("_by_scope")
        if table is None:
            table = {s.scope: s for s in self.statements}
            object.__setattr__(self, "_by_scope", table)
        while scope:
            if scope in table:
                return table[scope]
            scope = scope.rpartition(".")[0]
        return None

    def checks(self, scope: str, op: str | None = None, attr: str | None = None) -> bool:
        """Whether the spec states ``op`` at ``scope`` (its attribute ``attr``): False where
        an ``unchecked`` entry covers it. Without ``attr``, whether it states the op itself:
        a statement that leaves some attributes open still states its op.

        Example:
            >>> entry = Unchecked("layer.0.intermediate", "gelu", ("approximate",))
            >>> entry.covers("layer.0.intermediate", "gelu", "approximate")
            True
        """
        return not any(u.covers(scope, op, attr) and (attr is not None or u.op is None
                                                      or u.stand_in) for u in self.unchecked)
