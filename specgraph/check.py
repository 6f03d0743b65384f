"""``compare``: trace two models, canonicalize them, explain how their structure differs, and
check layer by layer, forward and backward, that they compute the same numbers."""

from __future__ import annotations

from collections.abc import Callable

from specgraph.align import Alignment, align
from specgraph.canonical import canonicalize_model
from specgraph.diff import diff
from specgraph.errors import SpecgraphError
from specgraph.loading import trace
from specgraph.model import TracedModel
from specgraph.numeric.compare import NumericOptions, compare_numeric
from specgraph.numeric.result import NumericResult
from specgraph.report import DiffReport, Finding
from specgraph.transfer import TransferError

__all__ = ["compare", "compare_structure", "InputMismatchError"]


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
            "of the same shapes (channels-last inputs are compared as channels-first)"
        )


def _prepare(model: str | TracedModel, name: str, raw: bool,
             say: Callable[[str], None], batch: int | None = None) -> TracedModel:
    if isinstance(model, str):
        say(f"tracing {name} {model}")
        model = trace(model, batch=batch)
    if not raw:
        say(f"canonicalizing {name} ({len(model.graph)} nodes)")
        model = canonicalize_model(model)
    return model


def compare_structure(lhs: str | TracedModel, rhs: str | TracedModel, *, raw: bool = False,
                      progress: Callable[[str], None] | None = None) -> DiffReport:
    """Trace (if given references), canonicalize and diff two models (no numbers).

    Args:
        lhs: a model reference or a TracedModel.
        rhs: the other.
        raw: compare the graphs as traced, without canonicalization.
        progress: called with a line of text at each step (for a terminal).

    Raises:
        SpecgraphError: a side failed to trace, or the models take different inputs.
    """
    return compare(lhs, rhs, raw=raw, numeric=False, progress=progress)


def compare(lhs: str | TracedModel, rhs: str | TracedModel, *, raw: bool = False,
            structure: bool = True, numeric: bool | None = None,
            options: NumericOptions | None = None, batch: int | None = None,
            progress: Callable[[str], None] | None = None) -> DiffReport:
    """Compare two implementations of a model: structure, then numbers.

    Args:
        lhs: the reference model: a model reference (``file.py:factory``, ``.onnx``) or a
            TracedModel.
        rhs: the model checked against it.
        raw: compare the graphs as traced, without canonicalization.
        structure: report structural findings (False: numbers only, along the alignment).
        numeric: True to compare numbers, False not to, None (default) to compare them when
            the alignment covers both graphs or ``structure`` is False.
        options: how to compare numbers (seeds, contexts, tolerances...).
        batch: trace model references with their example inputs resized to this batch.
        progress: called with a line of text at each step (for a terminal).

    Returns:
        The report; ``bool(report)`` is True when the models are equivalent.

    Raises:
        SpecgraphError: a side failed to trace or run, the models take different inputs, or
            weights cannot be moved (when numbers were asked for).

    Example:
        >>> report = compare("examples/xor/model_torch.py:correct",
        ...                  "examples/xor/model_jax.py:correct")  # doctest: +SKIP
        >>> report.equivalent  # doctest: +SKIP
        True
    """
    say = progress or (lambda _: None)
    left = _prepare(lhs, "lhs", raw, say, batch)
    right = _prepare(rhs, "rhs", raw, say, batch)
    _check_inputs(left, right)
    say("aligning and comparing structure")
    alignment = align(left.graph, right.graph)
    findings, rows = diff(left.graph, right.graph, alignment=alignment)
    if not structure:
        findings = []
    notes: list[str] = []
    result = None
    covered = not alignment.lhs_only and not alignment.rhs_only
    run_numeric = numeric if numeric is not None else (covered or not structure)
    if run_numeric:
        numeric_findings, result = _numeric(left, right, alignment, options, say,
                                            forced=numeric is True or not structure)
        findings = [*findings, *numeric_findings]
        if result is None:
            notes.append(_SKIPPED_TRANSFER)
    elif numeric is None:
        notes.append(f"numbers not compared: the alignment leaves "
                     f"{len(alignment.lhs_only)} lhs and {len(alignment.rhs_only)} rhs nodes "
                     "unmatched; fix the structural findings, or compare numbers anyway "
                     "with --numeric-only")
    return DiffReport(left.reference, right.reference, left.framework, right.framework,
                      tuple(findings), tuple(rows), numeric=result,
                      notes=tuple(notes))


_SKIPPED_TRANSFER = "numbers not compared: weights cannot be moved from lhs to rhs"


def _numeric(left: TracedModel, right: TracedModel, alignment: Alignment,
             options: NumericOptions | None, say: Callable[[str], None], *, forced: bool
             ) -> tuple[list[Finding], NumericResult | None]:
    try:
        return compare_numeric(left, right, alignment, options, progress=say)
    except TransferError:
        if forced:
            raise
        return [], None
