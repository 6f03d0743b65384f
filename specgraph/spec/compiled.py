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

__all__ = ["CompiledSpec", "Unchecked", "Statement", "Tolerance"]


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
    """

    scope: str
    source: str
    op: str
    equation: Any = None
    equation_text: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    param_count: int | None = None


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

    def checks(self, scope: str, op: str | None = None, attr: str | None = None) -> bool:
        """Whether the spec states ``op`` at ``scope`` (its attribute ``attr``): False where
        an ``unchecked`` entry covers it.

        Example:
            >>> entry = Unchecked("layer.0.intermediate", "gelu", ("approximate",))
            >>> entry.covers("layer.0.intermediate", "gelu", "approximate")
            True
        """
        return not any(u.covers(scope, op, attr) for u in self.unchecked)
