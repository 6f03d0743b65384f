"""``compare_structure``: trace two models, canonicalize them, and explain how they differ."""

from __future__ import annotations

from collections.abc import Callable

from specgraph.canonical import canonicalize_model
from specgraph.diff import diff
from specgraph.errors import SpecgraphError
from specgraph.loading import trace
from specgraph.model import TracedModel
from specgraph.report import DiffReport

__all__ = ["compare_structure", "InputMismatchError"]


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


def compare_structure(lhs: str | TracedModel, rhs: str | TracedModel, *, raw: bool = False,
                      progress: Callable[[str], None] | None = None) -> DiffReport:
    """Trace (if given references), canonicalize and diff two models.

    Args:
        lhs: a model reference or a TracedModel.
        rhs: the other.
        raw: compare the graphs as traced, without canonicalization.
        progress: called with a line of text at each step (for a terminal).

    Raises:
        SpecgraphError: a side failed to trace, or the models take different inputs.
    """
    say = progress or (lambda _: None)
    sides = []
    for name, model in (("lhs", lhs), ("rhs", rhs)):
        if isinstance(model, str):
            say(f"tracing {name} {model}")
            model = trace(model)
        if not raw:
            say(f"canonicalizing {name} ({len(model.graph)} nodes)")
            model = canonicalize_model(model)
        sides.append(model)
    left, right = sides
    _check_inputs(left, right)
    say("aligning and comparing")
    findings, rows = diff(left.graph, right.graph)
    return DiffReport(left.reference, right.reference, left.framework, right.framework,
                      tuple(findings), tuple(rows))
