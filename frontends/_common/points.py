"""A gather of points, ``x[i₀, …, i_{k-1}]`` with the k indices stacked on the last axis of
one index tensor (TF's ``gather_nd``, JAX's ``x[jnp.arange(B), ids]``), as canonical ops:
the indexed leading axes of x flattened into one, each point's flat position summed from
its k indices times their strides, one ``gather`` along the flat axis. PyTorch's
``x[torch.arange(B), ids]`` exports as that flat gather already (CLIP's pooled token), so
the ports compare node for node; no canonical ``gather_nd`` op. A one-hot, TF's ``one_hot``
and PyTorch's scatter of ones at one index per row, compares the index with the positions
laid along its axis (``positions``), as ``jax.nn.one_hot`` writes it. A gather of one entry
per output position along one axis (PyTorch's ``torch.gather``, ONNX's ``GatherElements``,
TF's ``gather`` with ``batch_dims``, as DeBERTa's attention reads its relative positions) is
the same flat gather, each position's flat index summed from its own coordinates
(``emit_along_gather``); no canonical ``take_along_axis`` op. A top-k is the canonical
``argsort`` cut to k, its values such a gather at the indices (``emit_top_k``)."""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

__all__ = ["emit_along_gather", "emit_point_gather", "positions"]


def positions(n: int, axis: int, rank: int, dtype: Any) -> np.ndarray:
    """0, 1, … n - 1 laid along ``axis`` of a rank-``rank`` array, size one elsewhere."""
    return np.arange(n, dtype=dtype).reshape(tuple(n if k == axis else 1
                                                   for k in range(rank)))


def emit_point_gather(cx: Any, x: Any, indices: Any, constant: Callable[[np.ndarray], Any]
                      ) -> Any:
    """``x`` gathered at the points ``indices`` (``[..., k]``, k at most ``x``'s rank) with
    ``cx.emit``; ``constant`` makes an operand of an array. The result is shaped
    ``indices.shape[:-1] + x.shape[k:]``."""
    k = int(indices.shape[-1])
    lead, rest = tuple(x.shape[:k]), tuple(x.shape[k:])
    batch = tuple(indices.shape[:-1])
    last = len(indices.shape) - 1
    flat = cx.emit("reshape", [x], {"shape": (prod(lead),) + rest},
                   out=((prod(lead),) + rest, x.dtype))
    total = None
    for j in range(k):
        col = cx.emit("slice", [indices], {"axes": (last,), "starts": (j,), "ends": (j + 1,),
                                           "steps": (1,)}, out=(batch + (1,), indices.dtype))
        col = cx.emit("reshape", [col], {"shape": batch}, out=(batch, indices.dtype))
        stride = prod(lead[j + 1:])
        if stride != 1:
            col = cx.emit("mul", [col, constant(np.asarray(stride, np.dtype(indices.dtype)))],
                          out=(batch, indices.dtype))
        total = col if total is None else cx.emit("add", [total, col],
                                                  out=(batch, indices.dtype))
    return cx.emit("gather", [flat, total], {"axis": 0}, out=(batch + rest, x.dtype))


def emit_along_gather(cx: Any, x: Any, indices: Any, axis: int, shape: tuple[int, ...],
                      constant: Callable[[np.ndarray], Any]) -> Any:
    """``out[p] = x[p with its coordinate on axis replaced by indices[p]]`` for every
    position ``p`` of ``shape`` (``indices`` of ``x``'s rank, each axis of ``shape``'s size
    or 1, broadcast): ``x`` flattened, the flat position of each entry summed from the index
    times the axis's stride and each other coordinate times its own, one ``gather``. Extents
    of ``shape`` below ``x``'s read its leading block (as ``torch.gather`` does)."""
    dims = tuple(int(n) for n in x.shape)
    rank, dtype = len(dims), np.dtype(indices.dtype)
    strides = [prod(dims[d + 1:]) for d in range(rank)]
    ishape = tuple(int(n) for n in indices.shape)
    total = indices
    if strides[axis] != 1:
        total = cx.emit("mul", [total, constant(np.asarray(strides[axis], dtype))],
                        out=(ishape, indices.dtype))
    for d in range(rank):
        if d == axis or shape[d] == 1:
            continue
        ishape = tuple(shape[k] if k == d else n for k, n in enumerate(ishape))
        total = cx.emit("add", [total, constant(positions(shape[d], d, rank, dtype)
                                                 * dtype.type(strides[d]))],
                        out=(ishape, indices.dtype))
    flat = cx.emit("reshape", [x], {"shape": (prod(dims),)}, out=((prod(dims),), x.dtype))
    return cx.emit("gather", [flat, total], {"axis": 0}, out=(tuple(shape), x.dtype))


def emit_top_k(cx: Any, x: Any, axis: int, k: int, descending: bool,
               constant: Callable[[np.ndarray], Any], index_dtype: str = "int64"
               ) -> tuple[Any, Any]:
    """The k first of ``x`` along ``axis``, sorted (every framework's top-k: equal values in
    index order): the canonical stable ``argsort`` cut to k, the values gathered at those
    indices (``emit_along_gather``); the indices cast to ``index_dtype`` (TF's and JAX's
    int32) after the gather reads them. Returns (values, indices)."""
    shape = tuple(x.shape)
    index = cx.emit("argsort", [x], {"axis": axis, "descending": descending},
                    out=(shape, "int64"))
    cut = shape[:axis] + (k,) + shape[axis + 1:]
    if k != shape[axis]:
        index = cx.emit("slice", [index], {"axes": (axis,), "starts": (0,), "ends": (k,),
                                           "steps": (1,)}, out=(cut, "int64"))
    values = emit_along_gather(cx, x, index, axis, cut, constant)
    if index_dtype != "int64":
        index = cx.emit("cast", [index], {"dtype": index_dtype}, out=(cut, index_dtype))
    return values, index
