"""``compare``: trace two models, canonicalize them, explain how their structure differs, and
check layer by layer, forward and backward, that they compute the same numbers.

A front door: it looks the runners, the arithmetic and the repro writers up in the
frontends' registry and hands them down to ``specgraph.numeric``, which never looks a
framework up itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.align import Alignment, align
from specgraph.arbitrate import Region, arbitrate, confirm, inside
from specgraph.diff import diff, side_index
from specgraph.errors import SpecgraphError
from specgraph.folds import (Fold, Folded, find_folded, find_folds, fold_notes,
                             folded_notes)
from specgraph.grouping import group_repeated
from specgraph.loading import check_shapes, trace
from specgraph.model import INFERENCE_ONLY, TracedModel
from specgraph.numeric.compare import compare_numeric
from specgraph.numeric.feeds import transfer_weights
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.pairing import Pairing, pair
from specgraph.numeric.result import NumericResult
from specgraph.numeric.sides import Backends
from specgraph.passes import canonicalize_model
from specgraph.passes.boundary import (BATCH_FIRST, channels_first, take_channels_first,
                                       take_layouts)
from specgraph.report import DIFF, DiffReport, Finding, Row, Voice
from specgraph.transfer import TransferError, pair_parameters

__all__ = ["compare", "compare_structure", "backends", "InputMismatchError", "MODES"]

# structure: the structural diff alone; numbers: the numeric check alone, along the
# alignment whatever it leaves unmatched; both: the structural diff, then the numbers
# wherever weights can be moved (a note says why not otherwise), which arbitrate
MODES = ("structure", "numbers", "both")


class InputMismatchError(SpecgraphError):
    """The two models do not take the same inputs, so they cannot be compared."""


def _check_inputs(lhs: TracedModel, rhs: TracedModel) -> None:
    def say(t: TracedModel) -> str:
        return ", ".join(f"{n}: {list(v.shape)}" for n, v in
                         zip(t.graph.input_names, t.graph.inputs))

    a, b = lhs.graph.inputs, rhs.graph.inputs
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        raise InputMismatchError(
            f"the models take different inputs: {lhs.reference} takes ({say(lhs)}) and "
            f"{rhs.reference} takes ({say(rhs)}); make both factories return example inputs "
            "of the same shapes (channels-last inputs are compared as channels-first, "
            "sequence-first ones as batch-first)"
        )


def _traced(model: str | TracedModel, name: str, say: Callable[[str], None],
            batch: int | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None) -> TracedModel:
    if isinstance(model, str):
        say(f"tracing {name} {model}")
        model = trace(model, batch=batch, shapes=shapes, shared_shapes=True)
    return model


def _native_shape(model: TracedModel, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """An input's shape as the model's own program takes it (before its layout moved)."""
    perm = model.input_layouts.get(name)
    return shape if perm is None else tuple(shape[i] for i in np.argsort(perm))


def _reads_transposed(model: TracedModel, names: Collection[str]) -> bool:
    """Whether a transpose reads one of the inputs ``names`` of the canonical ``model``:
    the layout it was given did not carry through."""
    graph = model.graph
    return any(u.op == "transpose" for n, v in zip(graph.input_names, graph.inputs)
               if n in names for u in graph.consumers(v))


def _canonical_pair(lhs: TracedModel, rhs: TracedModel, say: Callable[[str], None]
                    ) -> tuple[TracedModel, TracedModel]:
    """Both models canonical. An input that both programs take alike but that one side's
    canonical form moved into another layout where the other's did not (an einsum that
    contracts over an input's time axis reads it transposed on one side only) keeps its own
    layout on both, so the two take the same inputs."""
    say(f"canonicalizing lhs ({len(lhs.graph)} nodes)")
    left = canonicalize_model(lhs)
    say(f"canonicalizing rhs ({len(rhs.graph)} nodes)")
    right = canonicalize_model(rhs)
    a, b = left.graph, right.graph
    if len(a.inputs) != len(b.inputs):
        return left, right
    # a channels-last input the canonical form left channels-last (the model's first layer
    # is elementwise or a normalization, no conv to move it) where the other side takes it
    # channels-first: taken channels-first, as the error for other inputs says it would be
    last_l, last_r, seq_r = set(), set(), set()
    for (ln, lv), (rn, rv) in zip(zip(a.input_names, a.inputs), zip(b.input_names, b.inputs)):
        if lv.shape == rv.shape or lv.rank != rv.rank or lv.rank < 3:
            continue
        perm = channels_first(lv.rank)
        if tuple(rv.shape[p] for p in perm) == lv.shape and rn not in right.input_layouts:
            last_r.add(rn)
        elif tuple(lv.shape[p] for p in perm) == rv.shape and ln not in left.input_layouts:
            last_l.add(ln)
        elif lv.rank == 3 and tuple(lv.shape[p] for p in BATCH_FIRST) == rv.shape and \
                ln not in left.input_layouts and rn not in right.input_layouts:
            # one side takes its sequence first ([T, B, D]: nn.Transformer's default), the
            # other batch first: rhs takes lhs's layout, moved back inside (below: the
            # other way where that layout does not carry through rhs)
            seq_r.add(rn)
    lhs_given, rhs_given, right_given = lhs, rhs, right
    if last_l or last_r or seq_r:
        say("canonicalizing again, channels-last inputs taken channels-first"
            if not seq_r else "canonicalizing again, the inputs taken in one layout")
        lhs = take_channels_first(lhs, last_l)
        rhs = take_layouts(rhs, {**{n: channels_first(v.rank) for n, v in
                                    zip(rhs.graph.input_names, rhs.graph.inputs)
                                    if n in last_r}, **{n: BATCH_FIRST for n in seq_r}})
        last_r |= seq_r
        left = canonicalize_model(lhs, keep_layout=last_l) if last_l else left
        right = canonicalize_model(rhs, keep_layout=last_r) if last_r else right
        if seq_r and _reads_transposed(right, seq_r) and not last_l:
            # rhs was the sequence-first side: lhs takes rhs's layout instead
            moved = {ln for ln, rn in zip(a.input_names, b.input_names) if rn in seq_r}
            other = canonicalize_model(take_layouts(lhs_given, dict.fromkeys(moved,
                                                                             BATCH_FIRST)),
                                       keep_layout=moved)
            if not _reads_transposed(other, moved):
                last = last_r - seq_r  # rhs's channels-last inputs alone, moved as before
                left, right = other, right_given if not last else canonicalize_model(
                    take_channels_first(rhs_given, last), keep_layout=last)
        a, b = left.graph, right.graph
    keep_l, keep_r = set(), set()
    for (ln, lv), (rn, rv) in zip(zip(a.input_names, a.inputs), zip(b.input_names, b.inputs)):
        if lv.shape == rv.shape or \
                _native_shape(left, ln, lv.shape) != _native_shape(right, rn, rv.shape):
            continue
        if ln in left.input_layouts and ln not in lhs.input_layouts:
            keep_l.add(ln)
        if rn in right.input_layouts and rn not in rhs.input_layouts:
            keep_r.add(rn)
    if not keep_l and not keep_r:
        return left, right
    # the outputs both programs give alike keep their own layout too: each side's form
    # inside then starts and ends where the other's does
    alike = [(ln, rn) for ln, lv, rn, rv in zip(lhs.graph.output_names, lhs.graph.outputs,
                                                rhs.graph.output_names, rhs.graph.outputs)
             if lv.shape == rv.shape]
    say("canonicalizing both again, inputs they read alike kept in their own layout")
    left = canonicalize_model(lhs, keep_layout=keep_l, keep_outputs={n for n, _ in alike})
    right = canonicalize_model(rhs, keep_layout=keep_r, keep_outputs={n for _, n in alike})
    return left, right


def _summed_parameters(alignment: Alignment, left: TracedModel, right: TracedModel,
                       voice: Voice) -> list[str]:
    """A note on the parameters that one side holds as a sum of several (PyTorch's input
    and hidden biases of a recurrent cell) where the other holds one: the forward pass and
    every gradient are the same, but an optimizer steps each term. One note per side and
    count of terms, naming the first pair and how many more."""
    try:
        pairs = pair_parameters(alignment, strict=False)
    except TransferError:
        return []
    found: dict[tuple[str, str, int], list[tuple[str, str]]] = {}
    for pair in pairs:
        ours, theirs = left.param_sums.get(pair.lhs, ()), right.param_sums.get(pair.rhs, ())
        if len(ours) == len(theirs):
            continue
        if len(ours) > len(theirs):
            found.setdefault((voice.lhs, voice.rhs, len(ours)), []).append((pair.lhs, pair.rhs))
        else:
            found.setdefault((voice.rhs, voice.lhs, len(theirs)), []).append((pair.rhs, pair.lhs))
    notes = []
    for (side, other, count), held in found.items():
        (many, one), more = sorted(held)[0], len(held) - 1
        also = f" (and {more} more such)" if more else ""
        notes.append(f"{side} holds {many} as {count} parameters added together where "
                     f"{other} holds one ({one}){also}: the same forward pass and gradients, "
                     f"but an optimizer steps each of the {count}, so their sum moves "
                     f"{'twice' if count == 2 else f'{count} times'} as far under plain SGD")
    return notes


def backends(lhs: TracedModel, rhs: TracedModel, options: NumericOptions) -> Backends:
    """Each side's runner in its context, the arithmetic (a device's where either side runs
    on a GPU) and each side's repro writer, from the frontends' registry."""
    from specgraph import frontends

    lrun = frontends.runner(lhs.framework, options.lhs_context)
    rrun = frontends.runner(rhs.framework, options.rhs_context)
    if "cuda" in (lrun.device_kind(), rrun.device_kind()):
        arrays = frontends.device_arrays()
    else:
        from specgraph.numeric.arrays import HostArrays

        arrays = HostArrays()
    return Backends(lrun, rrun, arrays, frontends.repro_writer(lhs.framework),
                    frontends.repro_writer(rhs.framework))


def compare_structure(lhs: str | TracedModel, rhs: str | TracedModel, *, raw: bool = False,
                      progress: Callable[[str], None] | None = None) -> DiffReport:
    """Trace (if given references), canonicalize and diff two models (no numbers): the same
    as ``compare(lhs, rhs, mode="structure")``."""
    return compare(lhs, rhs, raw=raw, mode="structure", progress=progress)


def compare(lhs: str | TracedModel, rhs: str | TracedModel, *, mode: str = "both",
            raw: bool = False, options: NumericOptions | None = None,
            batch: int | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
            progress: Callable[[str], None] | None = None, voice: Voice = DIFF,
            keep: Callable[[Finding], bool] | None = None,
            alignment: Alignment | None = None) -> DiffReport:
    """Compare two implementations of a model: structure, then numbers.

    Args:
        lhs: the reference model: a model reference (``file.py:factory``, ``.onnx``) or a
            TracedModel.
        rhs: the model checked against it.
        mode: ``both`` (default): the structural diff, then the numbers wherever weights can
            be moved, which arbitrate: a structural finding over a region that computes the
            same (``specgraph.arbitrate``) becomes a note; ``structure``: the structural diff
            alone; ``numbers``: the numbers alone, along the alignment whatever it leaves
            unmatched.
        raw: compare the graphs as traced, without canonicalization.
        options: how to compare numbers (seeds, contexts, tolerances, a repro folder...).
        batch: trace model references with their example inputs resized to this batch.
        shapes: sizes of inputs by name for the ``.onnx`` references (``--input-shape``),
            each for whichever side has an input of that name.
        progress: called with a line of text at each step (for a terminal).
        voice: how findings name the two sides (a check against a spec names them the
            implementation and the spec).
        keep: which findings count, structural and numeric (a check drops those on what
            its spec leaves open); None keeps all.
        alignment: the two prepared graphs' alignment, when the caller has it.

    Returns:
        The report; ``bool(report)`` is True when the models are equivalent.

    Raises:
        SpecgraphError: a side failed to trace or run, the models take different inputs,
            ``shapes`` name no input of an ``.onnx`` side, or (in ``numbers`` mode) weights
            cannot be moved.

    Example:
        >>> report = compare("examples/xor/model_torch.py:correct",
        ...                  "examples/xor/model_jax.py:correct")  # doctest: +SKIP
        >>> report.equivalent  # doctest: +SKIP
        True
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is none of {', '.join(MODES)}")
    say = progress or (lambda _: None)
    references = [m for m in (lhs, rhs) if isinstance(m, str)]
    shapes = dict(shapes or {})
    check_shapes(shapes, references)
    left = _traced(lhs, "lhs", say, batch, shapes)
    right = _traced(rhs, "rhs", say, batch, shapes)
    if not raw:
        left, right = _canonical_pair(left, right, say)
    check_shapes(shapes, references, (left, right))
    _check_inputs(left, right)
    say("aligning and comparing structure")
    if alignment is None:
        alignment = align(left.graph, right.graph)
    folds, unlike = find_folds(alignment, left.weights, right.weights)
    folded = find_folded(alignment, left.weights, right.weights)
    found, rows = diff(left.graph, right.graph, alignment=alignment, group=False, voice=voice,
                       folds=folds, folded=folded)
    found, moot = _training_only_against_inference(found, left, right, voice)
    kept = keep or (lambda _: True)
    findings: list[Finding] = [f for f in found if kept(f)] if mode != "numbers" else []
    notes: list[str] = [f"{side}: {note}" for side, model in ((voice.lhs, left),
                                                              (voice.rhs, right))
                        for note in model.notes]
    notes += _summed_parameters(alignment, left, right, voice)
    notes += fold_notes(alignment, folds, unlike, voice, numbers=mode != "structure") + \
        moot + folded_notes(alignment, folded, voice,
                            exported={"lhs": left.framework in INFERENCE_ONLY,
                                      "rhs": right.framework in INFERENCE_ONLY})
    result = None
    if mode != "structure":
        opts = options or NumericOptions()
        pairing = numeric_pairing(left, right, alignment, folds, folded)
        numeric, result, why = _numeric(left, right, pairing, opts, say,
                                        forced=mode == "numbers")
        numeric = [f for f in numeric if kept(f)]
        if result is None:
            notes.append(f"numbers not compared: {why}" if why else
                         f"numbers not compared: weights cannot be moved from {voice.lhs} "
                         f"to {voice.rhs} (their layers differ where weights go); if both "
                         "already hold the same weights (a model and its export), pass "
                         "--no-transfer")
        elif findings:
            say("holding the structural findings against the numbers")
            # a region is proved the same on three inputs at least: the example alone may
            # not reach the difference (ESM's token dropout holds no masked token there)
            findings, settled, same = arbitrate(findings, pairing, left, right,
                                                _rhs_weights(pairing, left, right, opts),
                                                sorted({*result.seeds, *ARBITRATION_SEEDS}))
            notes.extend(settled)
            rows = _settled_rows(rows, same)
            findings, same_ops = _opaque_by_numbers(findings, result, voice)
            notes.extend(same_ops)
            numeric, quiet = inside(numeric, same, not any(
                st.diverges for st in result.outputs.values()))
            notes.extend(quiet)
            findings, numeric = confirm(findings, numeric, pairing)
        findings = [*group_repeated(findings, alignment, voice), *numeric]
    else:
        findings = group_repeated(findings, alignment, voice)
    if not findings and keep is None:
        rows = _unexplained_rows(rows, settled=result is not None)
    return DiffReport(left.reference, right.reference, left.framework, right.framework,
                      tuple(findings), tuple(rows), numeric=result, notes=tuple(notes),
                      alignment=alignment)



ARBITRATION_SEEDS = (0, 1, 2)  # inputs every region is proved on, besides the numbers' own


def _unexplained_rows(rows: Sequence[Row], settled: bool) -> list[Row]:
    """With no finding left, no row differs: rows written differently that the diff or the
    numbers showed to be the same (a layout the other side absorbs, VisionEncoderDecoder's
    cross-attention keys transposed) were marked as differing in an EQUIVALENT report.
    Where the numbers ran and agree, they are settled (``~``)."""
    return [dataclasses.replace(r, differs=False, settled=settled) if r.differs else r
            for r in rows]


def _settled_rows(rows: Sequence[Row], same: Sequence[Region]) -> list[Row]:
    """The side-by-side rows, those of a region that computes the same marked settled: no
    longer a difference, still shown (``~`` in the terminal)."""
    lhs = {i for region in same for i in region.lhs}
    rhs = {j for region in same for j in region.rhs}
    return [dataclasses.replace(r, differs=False, settled=True)
            if r.differs and (r.lhs_node in lhs or r.rhs_node in rhs) else r for r in rows]


def _opaque_by_numbers(findings: list[Finding], result: Any, voice: Voice
                       ) -> tuple[list[Finding], list[str]]:
    """Ops neither side's frontend knows, of other names on each side (PyTorch's
    ``upsample_bilinear2d`` against TF's ``ResizeBilinear``), that each side's own program
    ran to the same values, and gradients, at that layer: a note, not a difference. No
    reference can run them, so the numbers of the programs are all there is."""
    layers = {(layer.lhs_node, layer.rhs_node): layer for layer in result.layers}
    kept, notes = [], []
    for f in findings:
        layer = layers.get((side_index(f.lhs), side_index(f.rhs))) \
            if f.code == "attr-mismatch" and f.op == "opaque" and f.attr == "target" else None
        if layer is None or layer.forward is None or layer.forward.diverges or (
                layer.backward is not None and layer.backward.diverges):
            kept.append(f)
            continue
        what = "values and gradients" if layer.backward is not None else "values"
        notes.append(f"ops of other names compute the same here: {voice.lhs}'s "
                     f"{f.lhs.value} and {voice.rhs}'s {f.rhs.value} at "
                     f"{f.lhs.scope or '<model>'} give the same {what} on the seeds compared "
                     "(each side's own program ran them; no reference can)")
    return kept, notes


def numeric_pairing(left: TracedModel, right: TracedModel, alignment: Alignment,
                    folds: Sequence[Fold] | None = None,
                    folded: Sequence[Folded] | None = None) -> Pairing:
    """The pairing the numbers run along: BatchNorms folded (``specgraph.folds``), what an
    exporter folded into constants, and, where rhs is an inference export, its constants
    folded from several of lhs's weights keeping their own values (the numbers then say
    whether the two compute the same)."""
    if folds is None:
        folds = find_folds(alignment, left.weights, right.weights)[0]
    if folded is None:
        folded = find_folded(alignment, left.weights, right.weights)
    return pair(alignment, folds, folded, right.weights,
                keep_unpaired=right.framework in INFERENCE_ONLY)


def _training_only_against_inference(findings: list[Finding], left: TracedModel,
                                     right: TracedModel, voice: Voice
                                     ) -> tuple[list[Finding], list[str]]:
    """A difference only training sees (an embedding's padding row, BatchNorm's momentum)
    against an inference program (an ONNX file, which has no word for a padding row) is no
    difference the program can have: each is a note instead, one for all."""
    inference = [side for side, model in (("lhs", left), ("rhs", right))
                 if model.framework in INFERENCE_ONLY]
    if not inference:
        return findings, []
    side = inference[0]
    framework = (left if side == "lhs" else right).framework
    notes = []
    moot = [f for f in findings if f.affects and f.affects.startswith("training")]
    if moot:
        said = "; ".join(dict.fromkeys(f.message.split("; the forward pass")[0] for f in moot))
        notes.append(f"{voice.name(side)} is an inference program ({framework}), which holds "
                     f"nothing only training reads; not held against it: {said}")
    zeros = [f for f in findings if _zero_bias_dropped(f, left, right)]
    if zeros:
        places = ", ".join(dict.fromkeys((f.lhs.scope if f.lhs else "") for f in zeros))
        notes.append(f"{voice.name(side)} is an inference program ({framework}) whose "
                     f"exporter dropped biases of zeros ({len(zeros)} "
                     f"layer{'s' if len(zeros) > 1 else ''}: {places}): a bias of zeros adds "
                     "nothing, so they are no difference")
    return [f for f in findings if f not in moot and f not in zeros], notes


def _zero_bias_dropped(f: Finding, left: TracedModel, right: TracedModel) -> bool:
    """Whether ``f`` says a layer has a bias on one side only, where that side's own bias
    is all zeros (an exporter drops such an input: HF initializes biases to zero)."""
    if f.code != "attr-mismatch" or f.attr != "bias" or f.lhs is None or f.rhs is None:
        return False
    for side, model in ((f.lhs, left), (f.rhs, right)):
        if side.value is not True:
            continue
        index = side_index(side)
        if index is None:
            return False
        node = model.graph.nodes[index]
        if len(node.inputs) < 3:
            return False
        name = model.graph.param_name(node.inputs[-1])
        data = model.weights.get(name) if name is not None else \
            model.graph.constants.get(node.inputs[-1])
        return data is not None and not np.any(np.asarray(data))
    return False


def _rhs_weights(pairing: Pairing, left: TracedModel, right: TracedModel,
                 options: NumericOptions) -> Mapping[str, Any]:
    return transfer_weights(pairing, left.weights) if options.transfer else right.weights


def _numeric(left: TracedModel, right: TracedModel, pairing: Pairing,
             options: NumericOptions, say: Callable[[str], None], *, forced: bool
             ) -> tuple[list[Finding], NumericResult | None, str]:
    """The numeric findings and result, or (where weights cannot be moved and the numbers
    were not asked for alone) none, and why."""
    try:
        found, result = compare_numeric(left, right, pairing, backends(left, right, options),
                                        options, progress=say)
        return found, result, ""
    except TransferError as err:
        if forced:
            raise
        return [], None, str(err)
