"""A write of values into some elements of a tensor (PyTorch's ``h[:, 0] = 0`` or
``h[:, 1:3] = y`` in place, JAX's ``h.at[:, 0].set(0)``, an XLA scatter whose indices are
known at trace time), as canonical ops: ``where(written, placed, h)``, ``written`` the
constant mask of the elements written and ``placed`` what is written there, in ``h``'s
shape: the number a fill writes, the values of a box of elements padded into place (the
values reshaped to the box first), or a gather of the values at each element's source. No
canonical scatter op: every framework's write of a known region is one form."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["emit_write", "fill_of"]


def emit_write(cx: Any, before: Any, source: np.ndarray, values: Any,
               fill: Any = None) -> Any:
    """``before`` with ``values`` written: ``source`` (``before``'s shape) holds, for each
    element, the flat index into ``values`` written there, or -1 where nothing is;
    ``fill``, a 0-d value, where every written element gets that one number."""
    shape, dtype = tuple(before.shape), before.dtype
    written = source >= 0
    if fill is not None:
        placed = fill
        if placed.dtype != dtype:
            placed = cx.emit("cast", [placed], {"dtype": dtype}, out=((), dtype))
    else:
        placed = values
        if placed.dtype != dtype:
            placed = cx.emit("cast", [placed], {"dtype": dtype}, out=(tuple(placed.shape), dtype))
        placed = _boxed(cx, placed, source, written) or _gathered(cx, placed, source)
    return cx.emit("where", [cx.b.constant(written, "bool"), placed, before],
                   out=(shape, dtype))


def fill_of(cx: Any, known: np.ndarray | None) -> Any:
    """The 0-d constant that every written value is, where the values are known at trace
    time and are all one number (``x.at[:, 0].set(False)``); None otherwise."""
    if known is None or not known.size or not np.all(known == known.reshape(-1)[0]):
        return None
    number = np.asarray(known.reshape(-1)[0])
    return cx.b.constant(number, str(number.dtype))


def _boxed(cx: Any, values: Any, source: np.ndarray, written: np.ndarray) -> Any:
    """``values`` padded into place where the written elements are a box that they fill
    in order (a write through selects and slices); None otherwise."""
    if not written.any():
        return None
    where = np.nonzero(written)
    lo = [int(a.min()) for a in where]
    hi = [int(a.max()) + 1 for a in where]
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    size = int(np.prod([b - a for a, b in zip(lo, hi)]))
    if size != int(np.prod(values.shape)) or not np.array_equal(
            source[box].reshape(-1), np.arange(size)):
        return None
    box_shape = tuple(b - a for a, b in zip(lo, hi))
    if tuple(values.shape) != box_shape:
        values = cx.emit("reshape", [values], {"shape": box_shape},
                         out=(box_shape, values.dtype))
    if box_shape == tuple(source.shape):
        return values
    pads = tuple(lo) + tuple(n - b for n, b in zip(source.shape, hi))
    return cx.emit("pad", [values], {"pads": pads}, out=(tuple(source.shape), values.dtype))


def _gathered(cx: Any, values: Any, source: np.ndarray) -> Any:
    """The value written at each element, gathered from ``values`` flattened (0 where
    nothing is written: ``where`` keeps the element there)."""
    size = int(np.prod(values.shape))
    flat = cx.emit("reshape", [values], {"shape": (size,)}, out=((size,), values.dtype))
    at = cx.b.constant(np.maximum(source, 0).astype(np.int64), "int64")
    return cx.emit("gather", [flat, at], {"axis": 0}, out=(tuple(source.shape), values.dtype))
