"""``Sides``: what stays fixed over a numeric comparison's seeds, and ``Backends``, what the
front door resolves from the frontends' registry and hands down (the numeric package never
looks a framework up itself)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.ir import Node, Value
from specgraph.numeric.arrays import Arrays
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.pairing import Pairing
from specgraph.numeric.repro import ReproWriter
from specgraph.numeric.runner import Runner
from specgraph.numeric.stats import Tolerance, tolerance
from specgraph.passes.drowned import drowning

__all__ = ["Backends", "Sides"]


@dataclass(frozen=True, eq=False)
class Backends:
    """Each side's runner, the comparison's arithmetic, and each side's repro writer.

    Attributes:
        lhs / rhs: the runners, already set to each side's context.
        arrays: where values are kept and measured (the host's, or a device's).
        lhs_repro / rhs_repro: what writes each side's repro script (None: nothing).
    """

    lhs: Runner
    rhs: Runner
    arrays: Arrays
    lhs_repro: ReproWriter | None = None
    rhs_repro: ReproWriter | None = None


@dataclass(frozen=True, eq=False)
class Sides:
    """The pairing of the two graphs, how each side runs, and each side's weights.

    Attributes:
        pairing: the two graphs and which rhs value is which lhs value.
        backends: runners, arithmetic and repro writers.
        lweights / rweights: each side's parameters (rhs's moved from lhs, or its own).
        param_agree: for each rhs parameter, whether it holds its lhs counterpart's values.
        options: the comparison's options.
        backward: whether gradients are compared (both runners compute them).
        lhs_model / rhs_model: the canonical models, whose programs run in native mode.
    """

    pairing: Pairing
    backends: Backends
    lweights: Mapping[str, np.ndarray]
    rweights: Mapping[str, np.ndarray]
    param_agree: Mapping[Value, bool]
    options: NumericOptions
    backward: bool
    lhs_model: Any = None
    rhs_model: Any = None
    # each side's weights in its program's layouts, made on first use (``program_weights``)
    _program_weights: dict[str, dict[str, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False)

    def program_weights(self, side: str) -> dict[str, np.ndarray]:
        """The side's weights in its program's layouts, made once for all seeds (the same
        arrays each time: a program may remember what it found out about them)."""
        cache = self._program_weights
        if side not in cache:
            from specgraph.numeric.program import native_weights

            model = self.native(side)
            weights = self.lweights if side == "lhs" else self.rweights
            cache[side] = native_weights(model, weights, model.param_shapes)
        return cache[side]

    def native(self, side: str) -> Any:
        """The side's model when its own program gives the numbers, else None."""
        model = self.lhs_model if side == "lhs" else self.rhs_model
        context = self.options.lhs_context if side == "lhs" else self.options.rhs_context
        if not self.options.native or self.options.isolated or model is None or \
                context.dtype != "float32":  # programs run in float32 only, for now
            return None
        return model if model.program is not None else None

    @functools.cached_property
    def drowning_values(self) -> tuple[frozenset[Value], frozenset[Value]]:
        """Each side's values that are additive masks on their way into a softmax."""
        return drowning(self.pairing.lhs), drowning(self.pairing.rhs)

    def drowned(self, lhs_value: Value, rhs_value: Value) -> bool:
        """Whether both values are additive masks on their way into a softmax
        (``specgraph.passes.drowned``): the keys both sides drown are one there."""
        lhs, rhs = self.drowning_values
        return lhs_value in lhs and rhs_value in rhs

    @property
    def lrun(self) -> Runner:
        return self.backends.lhs

    @property
    def rrun(self) -> Runner:
        return self.backends.rhs

    def tol(self, node: Node, backward: bool = False) -> Tolerance:
        """The tolerance for ``node``'s outputs (or its pullback's shares)."""
        opts = self.options
        rtol, atol = opts.tolerances.get(node.scope, (None, None))
        return tolerance(node, (opts.lhs_context.dtype, opts.rhs_context.dtype),
                         rtol=opts.rtol if opts.rtol is not None else rtol,
                         atol=opts.atol if opts.atol is not None else atol,
                         backward=backward)
