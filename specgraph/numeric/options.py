"""``NumericOptions``: how two models are compared in numbers (seeds, contexts, tolerances)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specgraph.numeric.runner import Context
from specgraph.report import DIFF, Voice

__all__ = ["NumericOptions"]


@dataclass(frozen=True)
class NumericOptions:
    """How to compare numerically.

    Attributes:
        seeds: input seeds (0 is the example inputs); stops at the first seed that differs.
        transfer: move lhs's weights into rhs (False: both already hold the same weights).
        isolated: feed each rhs layer lhs's inputs (and lhs's output gradients), so that
            each layer is measured alone instead of end to end.
        backward: compare gradients too.
        lhs_context / rhs_context: device, mode, precision and repeats of each side.
        rtol / atol: override the dtype-aware tolerances (atol then absolute).
        store_budget: bytes of lhs values kept in memory before spilling to disk.
        repro: a folder to write the first divergence into, as standalone scripts, when
            one is found (``specgraph.numeric.repro``).
        native: take each side's numbers from its own program (``TracedModel.program``,
            run once forward and backward and observed at the aligned values) where its
            frontend keeps one (the default); False replays the canonical graph layer by
            layer on the framework's kernels.
        voice: how findings name the two sides (``lhs`` and ``rhs`` unless told).
        tolerances: per rhs scope, a (rtol, atol) that replaces the default tolerance of
            that scope's layers (a spec's stated tolerances, when rhs is the spec); either
            may be None for the default; ``rtol`` and ``atol`` above still win.
    """

    seeds: tuple[int, ...] = (0,)
    transfer: bool = True
    isolated: bool = False
    backward: bool = True
    lhs_context: Context = field(default_factory=Context)
    rhs_context: Context = field(default_factory=Context)
    rtol: float | None = None
    atol: float | None = None
    store_budget: int = 64 << 20
    repro: Path | None = None
    native: bool = True
    voice: Voice = DIFF
    tolerances: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
