"""``Measurements``: what one paired run measured, layer by layer, as plain data.

Keys are rhs node indices (per layer) or rhs values (per tensor): rhs is the side compared
as it runs, and each aligned rhs node has one lhs counterpart (``Pairing.r2l``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgraph.diff import describe_node
from specgraph.ir import Value
from specgraph.numeric.pairing import Pairing
from specgraph.numeric.result import LayerResult
from specgraph.numeric.stats import Stats

__all__ = ["Measurements"]


@dataclass
class Measurements:
    """Per-layer statistics and the agreement flags the localization reads.

    Attributes:
        forward: the worst output of each aligned layer, both sides run end to end.
        isolated: rhs's layer fed lhs's inputs, against lhs's outputs.
        backward: the worst pullback share of each aligned layer.
        inputs_agree: whether a layer read the counterparts of lhs's inputs, all agreeing.
        agrees: whether an rhs value agrees with its lhs counterpart.
        shares_agree: whether every gradient share that reached an rhs value agrees.
        octs_agree: for an rhs node whose own program gave the gradients reaching its
            outputs, whether they agree with lhs's.
        lhs_finite / rhs_finite: whether each side's value is all finite.
        lhs_introduces: the lhs nodes that turn finite inputs into NaN or Inf.
        floors: for an rhs parameter, the size of the gradient that reached its reader (the
            least scale its own gradient is judged against).
        outputs: the final outputs' statistics by lhs output name.
        gradients: parameter gradients' statistics by lhs parameter name.
    """

    forward: dict[int, Stats] = field(default_factory=dict)
    isolated: dict[int, Stats] = field(default_factory=dict)
    backward: dict[int, Stats] = field(default_factory=dict)
    inputs_agree: dict[int, bool] = field(default_factory=dict)
    agrees: dict[Value, bool] = field(default_factory=dict)
    shares_agree: dict[Value, bool] = field(default_factory=dict)
    octs_agree: dict[int, bool] = field(default_factory=dict)
    lhs_finite: dict[Value, bool] = field(default_factory=dict)
    rhs_finite: dict[Value, bool] = field(default_factory=dict)
    lhs_introduces: set[int] = field(default_factory=set)
    floors: dict[Value, float] = field(default_factory=dict)
    outputs: dict[str, Stats] = field(default_factory=dict)
    gradients: dict[str, Stats] = field(default_factory=dict)

    def layers(self, pairing: Pairing) -> tuple[LayerResult, ...]:
        """One result per aligned layer measured, in rhs order."""
        return tuple(
            LayerResult(describe_node(pairing.lhs.nodes[pairing.r2l[j]]),
                        describe_node(pairing.rhs.nodes[j]), self.forward.get(j),
                        self.isolated.get(j), self.backward.get(j),
                        lhs_node=pairing.r2l[j], rhs_node=j)
            for j in sorted(pairing.r2l) if j in self.forward or j in self.backward)


def worst(stats: list[Stats]) -> Stats | None:
    """The statistics that part most (None for none)."""
    if not stats:
        return None
    return max(stats, key=lambda s: (s.diverges, s.mismatch, s.max_rel))
