"""``Pairing``: what a numeric comparison knows of the two graphs before running anything,
computed once per comparison: the alignment's node maps, which rhs parameter plays each lhs
parameter's role, and which rhs value is which lhs value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from specgraph.align import Alignment
from specgraph.folds import Fold, numeric_alignment
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
        folds: BatchNorms one side folded into the layer before (``specgraph.folds``), by
            the rhs node whose outputs are compared there (the alignment here pairs the
            folded layer with the BatchNorm); their weights are moved folded, not paired.
    """

    alignment: Alignment
    params: tuple[ParamPair, ...]
    values: Mapping[Value, Value]
    folds: Mapping[int, Fold] = field(default_factory=dict)

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


def pair(alignment: Alignment, folds: Sequence[Fold] = ()) -> Pairing:
    """The pairing of ``alignment``'s two graphs (parameters paired once, here), each of
    ``folds`` comparing the folded layer with the BatchNorm."""
    lhs, rhs = alignment.lhs, alignment.rhs
    layers = {f.aligned for f in folds}  # their weights are not each other's
    params = pair_parameters(Alignment(lhs, rhs, tuple(p for p in alignment.pairs
                                                       if p not in layers),
                                       alignment.lhs_only, alignment.rhs_only),
                             strict=False)
    alignment = numeric_alignment(alignment, folds)
    values: dict[Value, Value] = dict(zip(rhs.inputs, lhs.inputs))
    for i, j in alignment.pairs:
        a, b = lhs.nodes[i], rhs.nodes[j]
        if len(a.outputs) == len(b.outputs):
            values.update(zip(b.outputs, a.outputs))
    for p in params:
        values[rhs.params[p.rhs]] = lhs.params[p.lhs]
    return Pairing(alignment, params, MappingProxyType(values),
                   MappingProxyType({f.pair[1]: f for f in folds}))
