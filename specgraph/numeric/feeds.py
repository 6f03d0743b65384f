"""What both sides of a numeric comparison are fed: inputs, weights, and the loss.

Seed 0 is the example inputs the factory returned; other seeds draw inputs like them
(floats with the example's mean and spread, on the side of zero the example keeps and in
[0, 1] where it lies there, so ``sqrt`` of a magnitude stays a number; integers in the
example's range, so token ids stay inside the vocabulary). The loss is a seeded random projection of the outputs,
``L = Σ_k <R_k, y_k>``: its gradient is nonzero wherever the outputs depend on the inputs
(a plain sum of softmax outputs has zero gradient and hides bugs).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from specgraph.folds import fold_weights
from specgraph.ir import Graph
from specgraph.model import TracedModel
from specgraph.ops.dtypes import FLOAT_DTYPES
from specgraph.numeric.pairing import Pairing
from specgraph.transfer import TransferError

__all__ = ["example_inputs", "rhs_inputs", "transfer_weights", "loss_weights"]


def example_inputs(model: TracedModel, seed: int) -> dict[str, np.ndarray]:
    """The model's example inputs (seed 0) or inputs drawn like them (canonical layout)."""
    g = model.graph
    out: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed)
    for name, v in zip(g.input_names, g.inputs):
        example = np.asarray(model.inputs[name])
        if seed == 0:
            out[name] = example
        elif v.dtype in FLOAT_DTYPES:
            out[name] = _floats_like(example, v.shape, rng)
        elif v.dtype == "bool":
            out[name] = _first_kept(rng.random(v.shape) < 0.5, example)
        else:
            low, high = int(np.min(example)), int(np.max(example))
            drawn = rng.integers(low, high + 1, v.shape).astype(example.dtype)
            out[name] = _first_kept(drawn, example) if (low, high) == (0, 1) else drawn
    return out


def _first_kept(drawn: np.ndarray, example: np.ndarray) -> np.ndarray:
    """Ones and zeros drawn for an input like an attention mask: where the example keeps
    the first position of every row, so do the draws (a padded batch starts each sequence
    there). A row kept nowhere up to a query (a causal model whose first keys are all
    masked) has no defined attention: frameworks fill it differently, and it would be told
    as a divergence of the model."""
    if drawn.ndim >= 2 and drawn.shape == example.shape and np.all(example[..., 0]):
        drawn[..., 0] = 1  # (drawn here: no one else holds it)
    return drawn


def _floats_like(example: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator
                 ) -> np.ndarray:
    """Normal draws with the example's mean and spread, kept in the domain the example
    keeps: no negative values where the example has none (``sqrt``, ``log`` of a magnitude),
    none above 1 where it lies in [0, 1] (probabilities), folded back at those bounds."""
    wide = example.astype(np.float64)
    finite = wide[np.isfinite(wide)]
    if finite.size == 0:
        return rng.standard_normal(shape).astype(example.dtype)
    mean, std = float(np.mean(finite)), float(np.std(finite)) or 1.0
    draw = mean + std * rng.standard_normal(shape)
    low, high = float(finite.min()), float(finite.max())
    if 0.0 <= low and high <= 1.0:
        draw = 1.0 - np.abs(1.0 - np.mod(np.abs(draw), 2.0))  # a fold into [0, 1]
    elif low >= 0.0:
        draw = np.abs(draw)
    elif high <= 0.0:
        draw = -np.abs(draw)
    return draw.astype(example.dtype)


def rhs_inputs(lhs: Graph, rhs: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """lhs's inputs for rhs, by position, cast to rhs's dtypes (int64 -> int32 and back)."""
    out = {}
    for lname, rname, v in zip(lhs.input_names, rhs.input_names, rhs.inputs):
        data = np.asarray(inputs[lname])
        out[rname] = data if v.dtype in FLOAT_DTYPES else data.astype(v.dtype)
    return out


def transfer_weights(pairing: Pairing, lhs_weights: Mapping[str, np.ndarray]
                     ) -> dict[str, np.ndarray]:
    """rhs's weights taken from lhs's along the pairing (both canonical, so the layouts
    already agree), folded where one side folds a BatchNorm into the layer before
    (``specgraph.folds.fold_weights``), rhs's own where the pairing keeps them
    (``Pairing.own``). Raises TransferError naming every rhs parameter left without a
    value."""
    # (a shape that differs only in axes of size one, a scalar against [1], is reshaped)
    out = {p.rhs: np.reshape(np.asarray(lhs_weights[p.lhs]),
                              pairing.rhs.params[p.rhs].shape)
           for p in pairing.params}
    out.update(fold_weights(pairing.lhs, pairing.rhs, list(pairing.folds.values()),
                            lhs_weights))
    for name, array in pairing.own.items():
        out.setdefault(name, np.asarray(array))
    missing = [n for n in pairing.rhs.params if n not in out]
    if missing:
        shapes = ", ".join(f"{n} {list(pairing.rhs.params[n].shape)}" for n in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise TransferError(
            f"cannot move weights from lhs to rhs: no lhs parameter plays the role of "
            f"{shapes}{more} (their layers differ in shape or have no counterpart); fix the "
            "structural differences first, or pass --no-transfer if both models already "
            "hold the same weights")
    return out


def loss_weights(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """The seeded projection ``R_k`` for every floating output of ``graph`` (lhs names)."""
    rng = np.random.default_rng(10_000 + seed)
    out = {}
    for name, v in zip(graph.output_names, graph.outputs):
        r = rng.standard_normal(v.shape)
        if v.dtype in FLOAT_DTYPES:
            out[name] = (r / np.sqrt(max(1, v.size))).astype(np.float32)
    return out
