"""A paper spec traced: its compiled graph, seeded weights and inputs, and fp64 outputs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from specgraph.frontends._common.sources import display_path
from specgraph.interpreter import run
from specgraph.ir import Graph
from specgraph.model import LazyOutputs, TracedModel
from specgraph.ops.dtypes import is_float
from specgraph.spec import CompiledSpec, Fill, load

__all__ = ["trace_file", "make_inputs", "make_weights", "FRAMEWORK"]

FRAMEWORK = "spec"
SEED = 0


def trace_file(path: Path, *, reference: str, dims: Mapping[str, int] | None = None,
               fills: Mapping[tuple[str, str], Fill] | None = None) -> TracedModel:
    """The spec at ``path`` as a TracedModel (``native`` is the CompiledSpec, with the side
    table of what the spec leaves open).

    Args:
        path: the spec file; reference: how messages name it.
        dims: sizes for its dims instead of its example sizes.
        fills: what to run where it leaves something open (``specgraph.spec.resolve``).

    Raises:
        SpecError: the spec is malformed (``file:line:col:`` and the fix).
    """
    spec = load(path, name=reference, source=display_path(str(path)), dims=dims, fills=fills)
    # made when first read: a check moves the implementation's weights in instead
    weights = LazyOutputs(lambda: make_weights(spec.graph, SEED), list(spec.graph.params))
    inputs = make_inputs(spec, SEED)
    outputs = LazyOutputs(lambda: run(spec.graph, inputs, weights), spec.graph.output_names)
    return TracedModel(spec.graph, weights, inputs, outputs, FRAMEWORK, reference,
                       native=spec)


def make_weights(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded random weights for every parameter, by its role: ``weight`` of a linear or conv
    scaled by 1/sqrt(fan-in), a norm's scale near 1, a running variance positive."""
    rng = np.random.default_rng(seed)
    norms = {"layer_norm", "group_norm", "rms_norm", "batch_norm"}
    kinds = {}
    for node in graph.nodes:
        for v in node.inputs:
            name = graph.param_name(v)
            if name is not None:
                kinds[name] = node.op
    out = {}
    for name, value in graph.params.items():
        role, shape = name.rpartition(".")[2], value.shape
        if role == "var":
            data = rng.uniform(0.5, 1.5, shape)
        elif role == "weight" and kinds.get(name) in norms:
            data = 1.0 + 0.1 * rng.standard_normal(shape)
        elif role == "weight" and kinds.get(name) != "embedding" and len(shape) >= 2:
            fan_in = math.prod(shape[1:]) if kinds.get(name) in ("conv",) else shape[0]
            data = rng.standard_normal(shape) / math.sqrt(max(fan_in, 1))
        else:
            data = 0.1 * rng.standard_normal(shape)
        out[name] = data.astype(np.float32)
    return out


def make_inputs(spec: CompiledSpec, seed: int) -> dict[str, np.ndarray]:
    """Seeded example inputs: floats standard normal, integers in the spec's range."""
    rng = np.random.default_rng(seed + 1)
    out = {}
    for name, value in zip(spec.graph.input_names, spec.graph.inputs):
        if is_float(value.dtype):
            dtype = np.float32 if value.dtype == "bfloat16" else np.dtype(value.dtype)
            out[name] = rng.standard_normal(value.shape).astype(dtype)
        elif value.dtype == "bool":
            out[name] = rng.random(value.shape) < 0.5
        else:
            low, high = spec.input_ranges.get(name, (0, 2))
            out[name] = rng.integers(low, high, value.shape).astype(value.dtype)
    return out
