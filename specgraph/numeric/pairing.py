"""``Pairing``: what a numeric comparison knows of the two graphs before running anything,
computed once per comparison: the alignment's node maps, which rhs parameter plays each lhs
parameter's role, and which rhs value is which lhs value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from specgraph.align import Alignment
from specgraph.folds import Fold, Folded, numeric_alignment
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
        own: rhs parameters that keep rhs's own values when weights move: what one side
            computes from its weights alone and the other holds folded into a constant
            (``specgraph.folds.Folded``), the two already the same numbers, and ``unpaired``.
        unpaired: rhs parameters no lhs parameter plays the role of (a constant an exporter
            folded from several of lhs's weights): they keep rhs's own values, and the
            numbers say whether rhs computes the same with them.
    """

    alignment: Alignment
    params: tuple[ParamPair, ...]
    values: Mapping[Value, Value]
    folds: Mapping[int, Fold] = field(default_factory=dict)
    own: Mapping[str, np.ndarray] = field(default_factory=dict)
    unpaired: frozenset[str] = frozenset()

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


def pair(alignment: Alignment, folds: Sequence[Fold] = (), folded: Sequence[Folded] = (),
         rhs_weights: Mapping[str, np.ndarray] | None = None, *,
         keep_unpaired: bool = False) -> Pairing:
    """The pairing of ``alignment``'s two graphs (parameters paired once, here), each of
    ``folds`` comparing the folded layer with the BatchNorm, each of ``folded`` pairing the
    value one side computes with the constant the other holds (rhs's parameters there keep
    rhs's own ``rhs_weights``). ``keep_unpaired``: rhs's parameters no lhs parameter plays
    the role of keep their own values too (an export's constants folded from several of
    lhs's weights), instead of leaving the weights unmovable."""
    lhs, rhs = alignment.lhs, alignment.rhs
    layers = {f.aligned for f in folds}  # their weights are not each other's
    params = pair_parameters(Alignment(lhs, rhs, tuple(p for p in alignment.pairs
                                                       if p not in layers),
                                       alignment.lhs_only, alignment.rhs_only),
                             strict=False)
    alignment = numeric_alignment(alignment, folds, folded)
    values: dict[Value, Value] = dict(zip(rhs.inputs, lhs.inputs))
    for i, j in alignment.pairs:
        a, b = lhs.nodes[i], rhs.nodes[j]
        if len(a.outputs) == len(b.outputs):
            values.update(zip(b.outputs, a.outputs))
    for p in params:
        values[rhs.params[p.rhs]] = lhs.params[p.lhs]
    own: dict[str, np.ndarray] = {}
    paired = {p.rhs for p in params}
    for f in folded:
        held, computed = (f.held, f.value) if f.side == "lhs" else (f.value, f.held)
        if held.shape == computed.shape and not f.inner:
            values.setdefault(held, computed)
        if f.side == "lhs":
            names = [rhs.param_name(f.held)]
        else:  # the parameters rhs computes it from
            names = [rhs.param_name(v) for k in f.cone for v in rhs.nodes[k].inputs]
        for name in names:
            if name is not None and name not in paired and rhs_weights is not None and \
                    name in rhs_weights:
                own[name] = rhs_weights[name]
    unpaired: list[str] = []
    if keep_unpaired and rhs_weights is not None:  # no lhs parameter plays their role
        unpaired = [name for name in _roleless(alignment, paired)
                    if name in rhs_weights and name not in own]
        own.update((name, rhs_weights[name]) for name in unpaired)
    return Pairing(alignment, params, MappingProxyType(values),
                   MappingProxyType({f.pair[1]: f for f in folds}), MappingProxyType(own),
                   frozenset(unpaired))


def _roleless(alignment: Alignment, paired: set[str]) -> list[str]:
    """rhs parameters left unpaired that no lhs parameter could play the role of: every
    aligned reader's counterpart reads something other than a parameter in that slot (a
    constant an exporter folded from lhs's weights), or the reader has no counterpart. A
    parameter whose counterpart slot holds an lhs parameter of another shape is not one
    (the layers differ where weights go)."""
    lhs, rhs = alignment.lhs, alignment.rhs
    out = []
    for name, v in rhs.params.items():
        if name in paired:
            continue
        roleless = True
        for node in rhs.consumers(v):
            i = alignment.rhs_to_lhs.get(rhs.index(node))
            if i is None:
                continue
            a = lhs.nodes[i]
            for slot, u in enumerate(node.inputs):
                if u is v and slot < len(a.inputs) and lhs.param_name(a.inputs[slot]):
                    roleless = False
        if roleless:
            out.append(name)
    return out
