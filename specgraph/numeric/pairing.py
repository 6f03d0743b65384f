"""``Pairing``: what a numeric comparison knows of the two graphs before running anything,
computed once per comparison: the alignment's node maps, which rhs parameter plays each lhs
parameter's role, and which rhs value is which lhs value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from specgraph.align import Alignment
from specgraph.ir import Graph, Value
from specgraph.transfer import ParamPair, pair_parameters

__all__ = ["Pairing", "pair"]


@dataclass(frozen=True, eq=False)
class Pairing:
    """The two canonical graphs and their correspondence.

    Attributes:
        alignment: the aligned node pairs.
        params: the parameter pairs (rhs parameters without a counterpart are absent).
        values: rhs value -> the lhs value that plays its role: inputs by position, outputs
            of aligned nodes slot by slot, parameters by role.
    """

    alignment: Alignment
    params: tuple[ParamPair, ...]
    values: Mapping[Value, Value]

    @property
    def lhs(self) -> Graph:
        return self.alignment.lhs

    @property
    def rhs(self) -> Graph:
        return self.alignment.rhs

    @property
    def l2r(self) -> Mapping[int, int]:
        return self.alignment.lhs_to_rhs

    @property
    def r2l(self) -> Mapping[int, int]:
        return self.alignment.rhs_to_lhs


def pair(alignment: Alignment) -> Pairing:
    """The pairing of ``alignment``'s two graphs (parameters paired once, here)."""
    lhs, rhs = alignment.lhs, alignment.rhs
    params = pair_parameters(alignment, strict=False)
    values: dict[Value, Value] = dict(zip(rhs.inputs, lhs.inputs))
    for i, j in alignment.pairs:
        a, b = lhs.nodes[i], rhs.nodes[j]
        if len(a.outputs) == len(b.outputs):
            values.update(zip(b.outputs, a.outputs))
    for p in params:
        values[rhs.params[p.rhs]] = lhs.params[p.lhs]
    return Pairing(alignment, params, MappingProxyType(values))
