"""``compare_numeric``: run both sides layer by layer, forward and backward, and compare.

lhs runs first, forward then backward, and its aligned layers' outputs, output cotangents
and pullback results go to a ``Store`` (spilled to disk past a budget). lhs's run is then
dropped and rhs runs with lhs's weights and inputs; each aligned layer is compared the
moment rhs produces it. The first layer whose outputs part is a ``numeric-divergence``;
the first whose backward parts while its inputs and output gradients still agree is a
``gradient-divergence``; the first to turn finite inputs into NaN/Inf is ``nan-introduced``.
At each, the layer is re-run on one set of inputs on both sides and held against the fp64
reference of what each side's graph says it computes (``specgraph.numeric.oracle``): a side
that leaves its own definition is blamed; two sides that each keep theirs differ in
definition (the structural findings say how); a layer that agrees when fed the same inputs
inherited the difference from upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specgraph.align import Alignment
from specgraph.model import TracedModel
from specgraph.numeric.feeds import (example_inputs, loss_weights, rhs_inputs,
                                     transfer_weights, value_map)
from specgraph.numeric.result import LayerResult, NumericResult
from specgraph.numeric.runner import Context, Runner
from specgraph.numeric.seed import SeedRun, Sides
from specgraph.numeric.stats import Stats
from specgraph.report import Finding

__all__ = ["NumericOptions", "compare_numeric"]


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


def _runner(model: TracedModel, context: Context) -> Runner:
    from specgraph.frontends import runner_class

    return runner_class(model.framework)(context)


def _describe(runner: Runner) -> str:
    ctx = runner.context
    return f"{runner.framework} {runner.device_kind()},{ctx.mode},{ctx.dtype}"


def compare_numeric(lhs: TracedModel, rhs: TracedModel, alignment: Alignment,
                    options: NumericOptions | None = None, *,
                    progress: Callable[[str], None] | None = None
                    ) -> tuple[list[Finding], NumericResult]:
    """Compare two canonical models numerically along ``alignment``.

    Args:
        lhs: the reference side (canonical TracedModel).
        rhs: the side checked against it.
        alignment: ``align(lhs.graph, rhs.graph)``.
        options: see NumericOptions.
        progress: called with a line of text at each step.

    Returns:
        The numeric findings (empty when equivalent) and the measurements.

    Raises:
        TransferError: weights cannot be moved (some rhs parameter has no counterpart).
        RunnerError: a side cannot run (a missing device, an op its framework lacks).
    """
    opts = options or NumericOptions()
    say = progress or (lambda _: None)
    notes: list[str] = []
    lrun, rrun = _runner(lhs, opts.lhs_context), _runner(rhs, opts.rhs_context)
    backward = opts.backward and lrun.differentiable and rrun.differentiable
    if opts.backward and not backward:
        side = lrun if not lrun.differentiable else rrun
        notes.append(f"gradients not compared: the {side.framework} runner computes none")
    rweights = (transfer_weights(alignment, lhs.weights) if opts.transfer
                else dict(rhs.weights))
    sides = Sides(alignment, lrun, rrun, lhs.weights, rweights,
                  value_map(alignment, params=True), transferred=opts.transfer)
    findings: list[Finding] = []
    result_layers: tuple[LayerResult, ...] = ()
    outputs: dict[str, Stats] = {}
    gradients: dict[str, Stats] = {}
    done: list[int] = []
    case = None
    for seed in opts.seeds:
        linputs = example_inputs(lhs, seed)
        run = SeedRun(sides, seed, linputs, rhs_inputs(lhs.graph, rhs.graph, linputs),
                      loss_weights(lhs.graph, seed), opts, backward=backward, say=say)
        seed_findings = run.execute()
        done.append(seed)
        result_layers, outputs, gradients = run.layers, run.outputs, run.gradients
        if seed_findings:
            findings, case = seed_findings, run.case
            break
    notes.extend(sides.notes)
    return findings, NumericResult(
        lhs_context=_describe(lrun), rhs_context=_describe(rrun),
        seeds=tuple(done), transferred=opts.transfer, isolated=opts.isolated,
        layers=result_layers, outputs=outputs, gradients=gradients, notes=tuple(notes),
        case=case)

