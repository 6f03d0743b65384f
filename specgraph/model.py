"""``TracedModel``: what every frontend returns (graph, weights, example inputs, outputs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.ir import Graph

__all__ = ["TracedModel", "LazyOutputs", "INFERENCE_ONLY"]

# frontends whose models are inference programs: they hold nothing only training reads, and
# no gradients
INFERENCE_ONLY = frozenset({"onnx"})


@dataclass(frozen=True, eq=False)
class TracedModel:
    """A model traced into the shared IR, with everything needed to run it again.

    Attributes:
        graph: the traced Graph (canonical ops, canonical layouts).
        weights: parameter arrays by graph parameter name, in canonical layout.
        inputs: the example inputs by graph input name.
        outputs: the framework's own outputs on those inputs, by graph output name.
        framework: ``torch``, ``jax``, ``flax``, ``tf``, ``onnx`` or ``spec``.
        reference: the model reference it came from (``file.py:factory``, a path).
        native: the framework's model object, for frontends that run it again.
        input_layouts: for inputs whose canonical layout differs from the framework's, the
            permutation that takes the native array to the canonical one (NHWC -> NCHW is
            (0, 3, 1, 2)).
        output_layouts: for outputs, the permutation that takes the canonical array back to
            the framework's (native = canonical.transpose(perm)).
        param_layouts: for parameters whose canonical layout differs from the framework's,
            the steps from the framework's array to the canonical one, in order (the
            frontend's, then those canonicalization found): ``("reshape", shape)`` or
            ``("transpose", perm)``.
        param_pieces: parameters that are a block of one of the framework's parameters
            (a packed projection's weight, separated by canonicalization): each piece's
            name -> (the whole's name, axis, start, stop), the block taken along the axis
            of the whole in its canonical layout (after the whole's ``param_layouts``);
            the piece's own ``param_layouts`` steps, if any, follow.
        param_sums: parameters that are the sum of two or more of the framework's (the
            input and hidden biases of a PyTorch recurrent cell, which other frameworks
            hold as one): each sum's name -> its terms, each a name and the model's own
            array of it (in canonical layout, after its own ``param_layouts``: a vector of
            the sum's length, or a shape of as many elements).
        program: the program the frontend traced, to run again as written and observe at
            the values ``graph.natives`` names (``specgraph.numeric.program``); None where
            the frontend keeps none.
        param_shapes: each parameter's shape in the framework's own layout.
        layer_attrs: attributes the traced program cannot show, read off the framework's
            layer objects, by the layer's scope (a batch norm's momentum, which acts only
            in training, in PyTorch's convention); canonicalization sets them on the layer
            it raises there (``specgraph.passes.layer_attrs``).
        notes: what tracing did that the user should know, one sentence each (a
            model handed over in training mode, traced in eval mode).
    """

    graph: Graph
    weights: Mapping[str, np.ndarray]
    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    framework: str
    reference: str
    native: Any = field(default=None, repr=False)
    input_layouts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    output_layouts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    param_layouts: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]] = field(
        default_factory=dict)
    param_pieces: Mapping[str, tuple[str, int, int, int]] = field(default_factory=dict)
    param_sums: Mapping[str, tuple[tuple[str, np.ndarray], ...]] = field(
        default_factory=dict)
    program: Any = field(default=None, repr=False)
    param_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    layer_attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


class LazyOutputs(Mapping[str, np.ndarray]):
    """A model's own outputs by name, computed on first read (one run of the framework),
    so that tracing costs no more than the framework's tracer; ``compute`` raises a
    SpecgraphError if the run fails. (A spec's seeded weights are made the same way.)"""

    def __init__(self, compute: Callable[[], Mapping[str, np.ndarray]],
                 names: Sequence[str]) -> None:
        self._compute = compute
        self._names = list(names)
        self._values: Mapping[str, np.ndarray] | None = None

    def _load(self) -> Mapping[str, np.ndarray]:
        if self._values is None:
            self._values = dict(self._compute())
        return self._values

    def __getitem__(self, key: str) -> np.ndarray:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        state = "computed" if self._values is not None else "computed on first read"
        return f"<outputs {self._names} ({state})>"
