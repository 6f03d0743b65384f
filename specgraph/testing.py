"""pytest helpers: assert that two implementations of a model are equivalent, or that an
implementation satisfies a paper spec.

Example:
    >>> from specgraph.testing import assert_equivalent, assert_matches_spec
    >>> assert_equivalent("model_torch.py:build", "model_jax.py:build")  # doctest: +SKIP
    >>> assert_matches_spec("model_torch.py:build", "bert.spec.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgraph.check import compare
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.runner import Context
from specgraph.report import DiffReport, SpecReport

__all__ = ["assert_equivalent", "assert_matches_spec"]


def assert_equivalent(lhs: str | TracedModel, rhs: str | TracedModel, *,
                      seeds: int | tuple[int, ...] = (0,), mode: str = "both",
                      backward: bool = True, transfer: bool = True,
                      lhs_context: str = "", rhs_context: str = "",
                      rtol: float | None = None, atol: float | None = None,
                      **options: Any) -> DiffReport:
    """Fail the test, with every finding in words, unless ``lhs`` and ``rhs`` agree.

    Args:
        lhs: the reference model (``file.py:factory``, ``.onnx`` or a TracedModel).
        rhs: the model under test.
        seeds: input seeds, or a count (``20`` means seeds 0-19).
        mode: ``both`` (structure, then numbers, forward and backward unless ``backward``
            is False), ``structure`` or ``numbers`` (see ``specgraph.compare``); a mode with
            numbers fails when the numbers could not be compared.
        backward: compare gradients.
        transfer: move lhs's weights into rhs.
        lhs_context / rhs_context: ``device,mode,dtype`` words, e.g. ``"cpu,compiled"``.
        rtol / atol: tolerances instead of the dtype-aware defaults.
        options: further NumericOptions fields (``isolated=True``...).

    Returns:
        The report, for further assertions.
    """
    seed_list = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)
    opts = NumericOptions(seeds=seed_list, transfer=transfer, backward=backward,
                          lhs_context=Context.parse(lhs_context, Context(device="auto")),
                          rhs_context=Context.parse(rhs_context, Context(device="auto")),
                          rtol=rtol, atol=atol, **options)
    report = compare(lhs, rhs, mode=mode, options=opts)
    if report.equivalent and mode != "structure" and report.numeric is None:
        raise AssertionError(f"{report.lhs} and {report.rhs} were not compared in numbers: "
                             + "; ".join(report.notes))
    if not report.equivalent:
        from specgraph.renderers.text import TextRenderer

        lines = [f"{f.code}: {f.message}" + (f" [blame: {f.blame}]" if f.blame != "unknown"
                                              else "") for f in report.findings]
        raise AssertionError(
            f"{report.lhs} and {report.rhs} are not equivalent:\n  " + "\n  ".join(lines)
            + "\n\n" + TextRenderer().render(report))
    return report


def assert_matches_spec(model: str | TracedModel, spec: str, *,
                        seeds: int | tuple[int, ...] = (0,), mode: str = "both",
                        context: str = "", rtol: float | None = None,
                        atol: float | None = None, accept: Sequence[str] | str = (),
                        **options: Any) -> SpecReport:
    """Fail the test, with every finding at the spec's line and the model's source line,
    unless ``model`` satisfies the paper spec ``spec`` (known differences ``accept``
    covers aside).

    Args:
        model: the implementation (``file.py:factory``, ``.onnx`` or a TracedModel).
        spec: the spec ``.yaml`` file.
        seeds: input seeds, or a count (``20`` means seeds 0-19).
        mode: ``both`` (structure, then numbers), ``structure`` or ``numbers``.
        context: the implementation's ``device,mode,dtype`` words, e.g. ``"cpu,compiled"``.
        rtol / atol: tolerances instead of the spec's and the dtype-aware defaults.
        accept: ``CODE:WHERE`` rules, as ``specgraph check --accept`` takes them (WHERE a
            spec statement or a scope of the model, shell wildcards): the findings they
            cover do not fail the test and are in the report's ``accepted``.
        options: further NumericOptions fields.

    Returns:
        The report, for further assertions.

    Raises:
        AcceptError: a rule in ``accept`` is not ``CODE:WHERE`` with a finding code.
    """
    __tracebackhide__ = True
    from specgraph.accept import accept as accept_findings
    from specgraph.accept import parse_rules
    from specgraph.spec_check import check_spec

    rules = parse_rules(accept, "assert_matches_spec(accept=...)")

    seed_list = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)
    opts = NumericOptions(seeds=seed_list, lhs_context=Context.parse(context, Context(
        device="auto")), rtol=rtol, atol=atol, **options)
    report = accept_findings(check_spec(model, spec, mode=mode, options=opts), rules)
    if not report.satisfied:
        lines = [f"{f.finding.code}: {f.finding.message}"
                 + (f"\n      spec: {f.spec_at}" if f.spec_at else "")
                 + (f"\n      implementation: {f.model_at}" if f.model_at else "")
                 for f in report.findings]
        raise AssertionError(f"{report.model} does not satisfy {report.spec}:\n  "
                             + "\n  ".join(lines))
    return report
