"""Nearest-neighbour resizes as what they compute: one ``gather`` per resized axis, at the
input positions each output position reads.

Frameworks describe the same nearest resize in different words: PyTorch's ``nearest``
(``floor(o · in/out)``), TF's ``ResizeNearestNeighbor`` with or without half-pixel centers,
ONNX's ``Resize`` with a coordinate transformation and a rounding mode, Keras's
``UpSampling2D`` as a repeat, JAX's ``jax.image.resize`` as gathers. Two of them are the same
resize exactly when they read the same input positions, so each frontend writes its resize
as gathers at the positions its own convention computes (in float32, as the kernels do),
and two ports that agree read alike while one that reads other pixels is a gather at other
indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specgraph.ir import Value
from specgraph.ops.layers import resize_attrs

__all__ = ["COORDINATES", "ROUNDINGS", "nearest_positions", "emit_gathers", "resize_attrs"]

COORDINATES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners",
               "tf_half_pixel_for_nn")
ROUNDINGS = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil", "round_half_away")


def nearest_positions(n_in: int, n_out: int, coordinates: str, rounding: str,
                      step: float | None = None) -> np.ndarray:
    """The input position each of ``n_out`` output positions reads along one axis.

    Args:
        n_in / n_out: the axis's size before and after.
        coordinates: how an output position maps to an input coordinate (ONNX's names):
            ``asymmetric`` ``o·s``, ``half_pixel`` ``(o + ½)·s − ½``, ``pytorch_half_pixel``
            (half_pixel, 0 where ``n_out`` is 1), ``tf_half_pixel_for_nn`` ``(o + ½)·s``,
            ``align_corners`` ``o·(n_in − 1)/(n_out − 1)``.
        rounding: how the coordinate becomes a position: ``floor``, ``ceil``,
            ``round_prefer_floor``, ``round_prefer_ceil``, ``round_half_away`` (C's
            ``round``, TF's for aligned corners).
        step: ``s``, the input distance between two output positions (``n_in / n_out``
            unless the op was given a scale, whose inverse it is).
    """
    o = np.arange(n_out, dtype=np.float32)
    s = np.float32(n_in / n_out if step is None else step)
    half = np.float32(0.5)
    if coordinates == "asymmetric":
        x = o * s
    elif coordinates in ("half_pixel", "pytorch_half_pixel"):
        x = (o + half) * s - half
        if coordinates == "pytorch_half_pixel" and n_out == 1:
            x = np.zeros_like(o)
    elif coordinates == "tf_half_pixel_for_nn":
        x = (o + half) * s
    elif coordinates == "align_corners":
        x = o * np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros_like(o)
    else:
        raise ValueError(f"unknown coordinate transformation {coordinates!r}")
    if rounding == "floor":
        at = np.floor(x)
    elif rounding == "ceil":
        at = np.ceil(x)
    elif rounding == "round_prefer_floor":
        at = np.ceil(x - half)
    elif rounding == "round_prefer_ceil":
        at = np.floor(x + half)
    elif rounding == "round_half_away":
        at = np.sign(x) * np.floor(np.abs(x) + half)
    else:
        raise ValueError(f"unknown rounding {rounding!r}")
    return np.clip(at, 0, n_in - 1).astype(np.int64)


def emit_gathers(cx: Any, value: Value, positions: Sequence[tuple[int, np.ndarray]]
                 ) -> Value:
    """``value`` read at ``positions`` (axis, the input position of each output position)
    along each axis, one ``gather`` per axis in the order given; an axis read whole and in
    order needs none. The last gather has the current node's shape (``cx.emit``)."""
    shape = list(value.shape)
    moves = [(axis, at) for axis, at in positions
             if not (at.size == shape[axis] and np.array_equal(at, np.arange(shape[axis])))]
    if not moves:
        return cx.emit("identity", [value])
    for k, (axis, at) in enumerate(moves):
        shape[axis] = int(at.size)
        index = cx.b.constant(np.ascontiguousarray(at, dtype=np.int64), "int64")
        last = k == len(moves) - 1
        value = cx.emit("gather", [value, index], {"axis": axis},
                        out=None if last else (tuple(shape), value.dtype))
    return value
