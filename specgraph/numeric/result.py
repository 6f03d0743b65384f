"""Plain-data results of a numeric comparison: per-layer statistics and the run's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specgraph.numeric.stats import Stats

__all__ = ["LayerResult", "NumericResult"]


@dataclass(frozen=True)
class LayerResult:
    """One aligned pair of nodes, compared.

    Attributes:
        lhs: ``op at scope`` of the lhs node; ``rhs`` the same for rhs.
        forward: its outputs, both sides run end to end (the worst output).
        isolated: rhs's node fed lhs's inputs, against lhs's outputs (measured in isolated
            mode and at divergences).
        backward: its pullback's gradients for each input, worst input (None when either
            side computes no gradients).
        lhs_node / rhs_node: the two nodes' indices in the canonical graphs compared (None
            where not known); not in the JSON report, whose ``lhs``/``rhs`` name them.
    """

    lhs: str
    rhs: str
    forward: Stats | None
    isolated: Stats | None = None
    backward: Stats | None = None
    lhs_node: int | None = None
    rhs_node: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lhs": self.lhs, "rhs": self.rhs}
        for key in ("forward", "isolated", "backward"):
            stats = getattr(self, key)
            out[key] = stats.to_dict() if stats is not None else None
        return out


@dataclass(frozen=True)
class NumericResult:
    """Everything the numeric check measured, for renderers.

    Attributes:
        lhs_context / rhs_context: ``device,mode,dtype`` each side ran in.
        seeds: the input seeds compared.
        transferred: whether lhs's weights were moved into rhs.
        isolated: whether each rhs layer was fed lhs's inputs.
        layers: per aligned node (last seed), in rhs order.
        outputs: the final outputs' statistics by lhs output name.
        gradients: parameter gradients' statistics by lhs parameter name.
        notes: what was not compared, and why.
        repro: the files ``--repro`` wrote, one ``path: what it holds`` line each.
    """

    lhs_context: str
    rhs_context: str
    seeds: tuple[int, ...]
    transferred: bool
    isolated: bool
    layers: tuple[LayerResult, ...] = ()
    outputs: dict[str, Stats] = field(default_factory=dict)
    gradients: dict[str, Stats] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    repro: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "lhs_context": self.lhs_context, "rhs_context": self.rhs_context,
            "seeds": list(self.seeds), "transferred": self.transferred,
            "isolated": self.isolated,
            "outputs": {k: v.to_dict() for k, v in sorted(self.outputs.items())},
            "gradients": {k: v.to_dict() for k, v in sorted(self.gradients.items())},
            "layers": [layer.to_dict() for layer in self.layers],
            "notes": list(self.notes),
            **({"repro": list(self.repro)} if self.repro else {}),
        }
