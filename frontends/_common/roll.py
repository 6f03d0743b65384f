"""``roll`` as canonical ops: along each axis, two slices and a concat, as JAX's ``jnp.roll``
and the ONNX exporter write it (Swin's shifted windows). No canonical ``roll`` op: a model
that rolls and its port or export that slices then compare node for node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["emit_roll"]


def emit_roll(cx: Any, x: Any, shape: Sequence[int], dtype: str, shifts: Sequence[int],
              axes: Sequence[int]) -> Any:
    """``x`` (of ``shape``) rolled by ``shifts[i]`` along ``axes[i]`` (non-negative), in
    order, with ``cx.emit``; an axis rolled by a multiple of its size is left as it is. Along
    an axis of size n, a roll by s is concat(x[n-s:], x[:n-s]) with s taken modulo n."""
    shape = tuple(int(s) for s in shape)
    for shift, axis in zip(shifts, axes):
        n = shape[axis]
        cut = n - int(shift) % n if n else 0
        if cut in (0, n):
            continue
        parts = []
        for start, end in ((cut, n), (0, cut)):
            part = shape[:axis] + (end - start,) + shape[axis + 1:]
            parts.append(cx.emit("slice", [x], {"axes": (axis,), "starts": (start,),
                                                "ends": (end,), "steps": (1,)},
                                 out=(part, dtype)))
        x = cx.emit("concat", parts, {"axis": axis}, out=(shape, dtype))
    return x
