"""The idiom catalog's machinery: sides traced once, pairs of them, and the two assertions
every pair makes (one canonical graph; the same numbers, forward and backward).

A *side* is a no-argument function returning a TracedModel, decorated with ``@side`` so it
traces once per test session however many pairs use it. A ``Pair`` names two sides and,
where specgraph does not yet hold the pair equivalent, today's behaviour in one line: those
become ``xfail(strict=True)`` tests, so the day a change makes them pass they fail until the
reason is removed.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from specgraph.check import compare
from specgraph.graph_nx import describe, isomorphic
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.passes import canonicalize_model
from specgraph.report import DiffReport
from specgraph.testing import assert_equivalent

__all__ = ["Pair", "side", "rand", "torch_side", "onnx_side", "jax_side", "linen_side",
           "keras_side", "canonical", "assert_same_canonical", "assert_same_numbers",
           "assert_reported_different", "structure_cases", "numbers_cases", "pair_tests"]

Side = Callable[[], TracedModel]


@dataclass(frozen=True)
class Pair:
    """Two ways of writing one snippet that compute the same thing.

    Attributes:
        lhs / rhs: the two sides (``@side`` functions).
        structure: None if the two canonicalize to isomorphic graphs today; otherwise what
            specgraph does instead, in one line (the test is a strict xfail).
        numbers: None if ``compare(..., mode="numbers")`` finds them equivalent today;
            otherwise what it reports instead (a strict xfail).
        seeds: the input seeds the numbers are compared on.
    """

    lhs: Side
    rhs: Side
    structure: str | None = None
    numbers: str | None = None
    seeds: tuple[int, ...] = (0,)

    @property
    def id(self) -> str:
        return f"{self.lhs.__name__}~{self.rhs.__name__}"


def side(function: Side) -> Side:
    """Trace once: the decorated side returns the same TracedModel on every call."""
    return functools.wraps(function)(functools.cache(function))


def rand(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    """Seeded float32 normal noise."""
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


# --- tracing, one function per framework (each imports its framework when called) ---------
def torch_side(module: Any, *inputs: Any, name: str) -> TracedModel:
    """A torch.nn.Module traced with torch.export on ``inputs`` (NumPy arrays or tensors)."""
    import torch

    from specgraph.frontends import torch as frontend

    args = tuple(torch.from_numpy(np.asarray(x)) if not isinstance(x, torch.Tensor) else x
                 for x in inputs)
    return frontend.trace(module, args, reference=name)


def onnx_side(module: Any, *inputs: Any, name: str, optimize: bool = True) -> TracedModel:
    """A torch.nn.Module exported with ``torch.onnx.export(dynamo=True)`` (the exporter's
    optimizer on, its default, unless ``optimize`` is False) and traced from the ONNX
    model, on the same inputs."""
    import torch

    from specgraph.frontends import onnx as frontend

    args = tuple(torch.from_numpy(np.asarray(x)) for x in inputs)
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, dynamo=True, optimize=optimize,
                                    verbose=False)
    return frontend.trace_model(program.model_proto, tuple(np.asarray(x) for x in inputs),
                                reference=f"{name}.onnx")


def jax_side(apply_fn: Callable[..., Any], params: Any, *inputs: Any, name: str
             ) -> TracedModel:
    """A plain JAX function ``apply_fn(params, *inputs)`` traced with make_jaxpr."""
    from specgraph.frontends import jax as frontend

    return frontend.trace(apply_fn, params, inputs, reference=name)


def linen_side(module: Any, variables: Any, *inputs: Any, name: str) -> TracedModel:
    """A Flax linen module applied to ``variables``."""
    from specgraph.frontends import jax as frontend

    return frontend.trace_linen(module, variables, inputs, reference=name)


def keras_side(model: Any, *inputs: Any, name: str) -> TracedModel:
    """A Keras 3 model (or tf.Module), called once to build it, traced as a concrete
    function."""
    from specgraph.frontends import tf as frontend

    model(*inputs)
    return frontend.trace(model, inputs, reference=name)


# --- the assertions ------------------------------------------------------------------------
@functools.cache
def canonical(traced: TracedModel) -> TracedModel:
    """``canonicalize_model(traced)``, once per traced model."""
    return canonicalize_model(traced)


def _describe_both(lhs: TracedModel, rhs: TracedModel) -> str:
    return "\n".join([f"{lhs.reference}:", *describe(canonical(lhs).graph),
                      f"{rhs.reference}:", *describe(canonical(rhs).graph)])


def assert_same_canonical(lhs: TracedModel, rhs: TracedModel) -> None:
    """The two canonicalize to isomorphic graphs (ops, attributes, shapes, wiring), with no
    opaque node on either side."""
    for t in (lhs, rhs):
        opaque = [n.origin for n in canonical(t).graph.nodes if n.op == "opaque"]
        assert not opaque, f"{t.reference} keeps opaque nodes {opaque}"
    assert isomorphic(canonical(lhs).graph, canonical(rhs).graph), _describe_both(lhs, rhs)


def assert_same_numbers(lhs: TracedModel, rhs: TracedModel, seeds: Sequence[int] = (0,)
                        ) -> DiffReport:
    """The numbers alone (structure ignored) agree, forward and backward (ONNX computes no
    gradients), with lhs's weights moved into rhs and lhs's inputs fed to both."""
    report = assert_equivalent(lhs, rhs, seeds=tuple(seeds), mode="numbers")
    if "onnx" not in (lhs.framework, rhs.framework):
        assert report.numeric is not None
        assert any(layer.backward is not None for layer in report.numeric.layers), (
            f"no gradient compared: {report.numeric.notes}")
    return report


def assert_reported_different(lhs: TracedModel, rhs: TracedModel, *, mode: str = "both",
                              seeds: Sequence[int] = (0,), codes: Iterable[str] = ()
                              ) -> DiffReport:
    """specgraph reports the two as different (with a finding of each of ``codes``)."""
    report = compare(lhs, rhs, mode=mode, options=NumericOptions(seeds=tuple(seeds)))
    assert not report.equivalent, (
        f"{lhs.reference} and {rhs.reference} differ but were reported equivalent\n"
        + _describe_both(lhs, rhs))
    found = {f.code for f in report.findings}
    missing = set(codes) - found
    assert not missing, f"expected findings {sorted(missing)}, got " + "; ".join(
        f"{f.code}: {f.message}" for f in report.findings)
    return report


# --- parametrization -----------------------------------------------------------------------
def _cases(pairs: Iterable[Pair], reason: Callable[[Pair], str | None]) -> list[Any]:
    out = []
    for p in pairs:
        why = reason(p)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(p, id=p.id, marks=marks))
    return out


def structure_cases(pairs: Iterable[Pair]) -> list[Any]:
    """One pytest param per pair for the canonical-form test, xfail where it fails today."""
    return _cases(pairs, lambda p: p.structure)


def numbers_cases(pairs: Iterable[Pair]) -> list[Any]:
    """One pytest param per pair for the numbers test, xfail where it fails today."""
    return _cases(pairs, lambda p: p.numbers)


def pair_tests(pairs: Sequence[Pair]) -> tuple[Callable[..., None], Callable[..., None]]:
    """A family module's two tests over its ``pairs``: ``test_canonical_form`` and
    ``test_numbers`` (``test_canonical_form, test_numbers = pair_tests(PAIRS)``)."""
    import pytest

    @pytest.mark.parametrize("pair", structure_cases(pairs))
    def test_canonical_form(pair: Pair) -> None:
        assert_same_canonical(pair.lhs(), pair.rhs())

    @pytest.mark.parametrize("pair", numbers_cases(pairs))
    def test_numbers(pair: Pair) -> None:
        assert_same_numbers(pair.lhs(), pair.rhs(), pair.seeds)

    return test_canonical_form, test_numbers
