"""The fp64 oracle: what one node truly computes, forward and backward, in float64.

Forward truth is the op's NumPy reference run in float64. Backward truth needs no autodiff:
a pullback's result is checked along a direction ``u`` by central differences of the
reference, ``<∂L/∂x, u> ≈ (L(x + h·u) − L(x − h·u)) / 2h`` with ``L = Σ <ct_out, f(x)>``, which
float64 gets right to about 1e-9 relative. The side whose value lands far from the truth
while the other's does not is the one to blame.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

import numpy as np

from specgraph.ir import Node
from specgraph.ops import get_spec

__all__ = ["reference_outputs", "directional_derivative", "conditioning_error"]


def _f64(array: np.ndarray) -> np.ndarray:
    a = np.asarray(array)
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a


def reference_outputs(node: Node, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """``node``'s outputs computed by its NumPy reference in float64."""
    with np.errstate(all="ignore"):
        out = get_spec(node.op).reference(*(_f64(a) for a in inputs), **node.attrs)
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(np.asarray(o) for o in outs)


def _objective(node: Node, inputs: list[np.ndarray], cts: Sequence[np.ndarray | None]) -> float:
    total = 0.0
    for out, ct in zip(reference_outputs(node, inputs), cts):
        if ct is not None and out.dtype.kind == "f":
            total += float(np.sum(out * _f64(ct)))
    return total


def directional_derivative(node: Node, inputs: Sequence[np.ndarray],
                           cts: Sequence[np.ndarray | None],
                           direction: Sequence[np.ndarray | None]) -> float:
    """``Σ_i <∂L/∂input_i, direction_i>`` for ``L = Σ_k <cts_k, output_k>``, in float64.

    Args:
        node: the node whose backward is checked.
        inputs: its inputs (any float dtype; computed in float64).
        cts: the cotangent of each output (None where none flows back).
        direction: a direction per input (None to hold that input fixed).
    """
    base = [_f64(a) for a in inputs]
    scale = max((float(np.sqrt(np.mean(np.square(x)))) for x, d in zip(base, direction)
                 if d is not None and x.size), default=1.0)
    norm = max((float(np.sqrt(np.mean(np.square(_f64(d))))) for d in direction
                if d is not None and np.size(d)), default=1.0)
    h = 1e-5 * max(scale, 1e-3) / max(norm, 1e-30)
    if not (math.isfinite(h) and h > 0):  # Inf or NaN in the inputs or the direction
        return math.nan

    def shifted(sign: float) -> list[np.ndarray]:
        return [x if d is None else x + sign * h * _f64(d) for x, d in zip(base, direction)]

    return (_objective(node, shifted(1.0), cts) - _objective(node, shifted(-1.0), cts)) / (2 * h)


def conditioning_error(node: Node, inputs: Sequence[np.ndarray],
                       truth: Sequence[np.ndarray] | None = None, *, trials: int = 2) -> float:
    """How far ``node``'s fp64 outputs move, relative to their scale, when its floating
    inputs are perturbed by float32 rounding (each element by a random fraction of up to one
    float32 ulp): the error any float32 implementation may show on these inputs. Large for a
    layer the inputs make ill-conditioned (a LayerNorm over values whose mean is thousands
    of times their spread)."""
    base = reference_outputs(node, inputs) if truth is None else tuple(truth)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(trials):
        moved = []
        for a in inputs:
            x = _f64(a)
            if np.asarray(x).dtype.kind == "f":
                ulp = np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)
                x = x + ulp * rng.uniform(-1.0, 1.0, np.shape(x))
            moved.append(x)
        for t, m in zip(base, reference_outputs(node, moved)):
            t, m = np.asarray(t, np.float64), np.asarray(m, np.float64)
            if t.dtype.kind != "f" or t.size == 0:
                continue
            scale = float(np.sqrt(np.mean(np.square(t[np.isfinite(t)])))) if \
                np.isfinite(t).any() else 0.0
            with np.errstate(invalid="ignore"):
                diff = np.abs(m - t)
            if scale > 0 and np.isfinite(diff).any():
                worst = max(worst, float(np.max(diff[np.isfinite(diff)])) / scale)
    return worst
