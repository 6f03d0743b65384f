"""``compare_numeric``: run both sides layer by layer, forward and backward, and compare.

For each seed, lhs runs first, forward then backward, and its aligned layers' outputs,
output cotangents and pullback results go to a store (spilled to disk past a budget). lhs's
run is then dropped and rhs runs with lhs's weights and inputs; each aligned layer is
compared the moment rhs produces it (``specgraph.numeric.paired``). The first layer whose
outputs part is a ``numeric-divergence``; the first whose backward parts while its inputs
and output gradients still agree is a ``gradient-divergence``; the first to turn finite
inputs into NaN/Inf is ``nan-introduced``. At each, the layer is re-run on one set of inputs
on both sides and held against the fp64 reference of what each side's graph says it
computes (``specgraph.numeric.localize``). Seeds stop at the first that differs.

The runners, the arithmetic and the repro writers come in ``Backends``: the front door
(``specgraph.check``) resolves them from the frontends' registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from specgraph.ir import Value
from specgraph.model import TracedModel
from specgraph.numeric.feeds import example_inputs, loss_weights, rhs_inputs, transfer_weights
from specgraph.numeric.findings import Passed, passed_notes, vanished
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.paired import PairedRun
from specgraph.numeric.pairing import Pairing
from specgraph.numeric.result import LayerResult, NumericResult
from specgraph.numeric.runner import Runner
from specgraph.numeric.sides import Backends, Sides
from specgraph.numeric.stats import Stats
from specgraph.numeric.store import return_freed_memory
from specgraph.report import Finding

__all__ = ["NumericOptions", "compare_numeric"]


def _describe(runner: Runner) -> str:
    ctx = runner.context
    return f"{runner.framework} {runner.device_kind()},{ctx.mode},{ctx.dtype}"


def _param_agreement(pairing: Pairing, lweights: Mapping[str, np.ndarray],
                     rweights: Mapping[str, np.ndarray], transferred: bool
                     ) -> dict[Value, bool]:
    """For each rhs parameter, whether it holds its lhs counterpart's values."""
    out = {}
    for name, v in pairing.rhs.params.items():
        u = pairing.values.get(v)
        if transferred or u is None:
            out[v] = transferred
            continue
        lname = pairing.lhs.param_name(u)
        if lname is None and u not in pairing.lhs.constants:  # a value lhs computes
            out[v] = False
            continue
        a = np.asarray(lweights[lname] if lname is not None else pairing.lhs.constants[u])
        b = np.asarray(rweights[name])
        out[v] = a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-7))
    return out


def compare_numeric(lhs: TracedModel, rhs: TracedModel, pairing: Pairing,
                    backends: Backends, options: NumericOptions | None = None, *,
                    progress: Callable[[str], None] | None = None
                    ) -> tuple[list[Finding], NumericResult]:
    """Compare two canonical models numerically along ``pairing``.

    What one seed's programs freed goes back to the system (``malloc_trim``) before the
    next seed runs, not after the last: a caller that runs something large next, in the
    same process, may call ``specgraph.numeric.store.return_freed_memory`` itself.

    Args:
        lhs: the reference side (canonical TracedModel).
        rhs: the side checked against it.
        pairing: ``pair(align(lhs.graph, rhs.graph))``.
        backends: each side's runner (set to its context), the arithmetic, the repro
            writers.
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
    lrun, rrun = backends.lhs, backends.rhs
    notes: list[str] = []
    backward = opts.backward and lrun.differentiable and rrun.differentiable
    if opts.backward and not backward:
        side = lrun if not lrun.differentiable else rrun
        notes.append(f"gradients not compared: the {side.framework} runner computes none")
    rweights = transfer_weights(pairing, lhs.weights) if opts.transfer else dict(rhs.weights)
    agreement = _param_agreement(pairing, lhs.weights, rweights, opts.transfer)
    if opts.transfer and pairing.unpaired:
        names = sorted(pairing.unpaired)
        agreement.update((pairing.rhs.params[n], False) for n in names)
        many = len(names) > 1
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        notes.append(f"rhs parameter{'s' if many else ''} with no lhs counterpart "
                     f"keep{'' if many else 's'} rhs's own values ({', '.join(names[:5])}"
                     f"{more}): the numbers say whether rhs computes the same with them")
    sides = Sides(pairing, backends, lhs.weights, rweights, agreement, opts, backward,
                  lhs, rhs)
    if opts.native and not opts.isolated:
        for side, model in (("lhs", lhs), ("rhs", rhs)):
            if model.program is None:
                notes.append(f"{side}'s numbers replay its canonical graph on "
                             f"{model.framework}'s kernels: its frontend keeps no program "
                             "to run as written yet")
            else:
                notes.extend(f"{side}'s program: {note}" for note in model.program.notes)
    findings: list[Finding] = []
    layers: tuple[LayerResult, ...] = ()
    outputs: dict[str, Stats] = {}
    gradients: dict[str, Stats] = {}
    repro: tuple[str, ...] = ()
    done: list[int] = []
    passed: list[Passed] = []
    for seed in opts.seeds:
        if done:  # what the last seed's programs freed serves this one's (not only rhs's)
            return_freed_memory()
        linputs = example_inputs(lhs, seed)
        run = PairedRun(sides, seed, linputs, rhs_inputs(lhs.graph, rhs.graph, linputs),
                        loss_weights(lhs.graph, seed), say)
        seed_findings = run.execute()
        done.append(seed)
        layers = run.record.layers(pairing)
        outputs, gradients = run.record.outputs, run.record.gradients
        notes.extend(n for n in run.localizer.notes if n not in notes)
        passed.extend(run.localizer.passed.values())
        if seed_findings:
            findings, repro = seed_findings, run.localizer.repro
            break
    notes.extend(passed_notes(passed))  # one note per kind, for every seed together
    left = [seed for seed in opts.seeds if seed not in done]
    if findings and left:
        notes.append(f"seed{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} not "
                     f"run: the check stops at the first seed that differs (seed {done[-1]})")
    gone = vanished(outputs) if not findings else None
    if gone is not None:
        notes.append(gone)
    return findings, NumericResult(
        lhs_context=_describe(lrun), rhs_context=_describe(rrun),
        seeds=tuple(done), transferred=opts.transfer, isolated=opts.isolated,
        layers=layers, outputs=outputs, gradients=gradients, notes=tuple(notes),
        repro=repro)
