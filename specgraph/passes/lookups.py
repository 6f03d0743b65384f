"""Rows of a table read by constant indices are an embedding lookup, however written:
``table[start:stop]`` (Whisper's and OPT's position tables as PyTorch slices them),
``table[ids]`` with constant ids (a gather along the rows), or ``embedding(ids, table)``
(Flax's and TF's lookups) become ``embedding(ids, table)``; a lookup of every row in
order is the table itself (TF's CLIP adds its position table whole, PyTorch and Flax look
up ``arange(n)`` in it); constant ids with leading axes of one lose them (the lookup's
result reshaped).

Requires: a verified graph. Ensures: no ``slice`` or axis-0 ``gather`` reads the rows of a
two-dimensional parameter at constant positions; exact (the same rows, copied).
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseLookupsPass"]


def _rows(rw: Rewriter, node: Node) -> np.ndarray | None:
    """The row indices a slice or gather of a 2-D parameter reads, when constant."""
    table = node.inputs[0]
    if table.rank != 2 or not rw.is_param(table):
        return None
    if node.op == "gather" and node.attrs["axis"] in (0, -2):
        ids = rw.constant_value(node.inputs[1])
        if ids is None or np.asarray(ids).dtype.kind not in "iu":
            return None
        ids = np.asarray(ids, dtype=np.int64)
        return np.where(ids < 0, ids + table.shape[0], ids)
    if node.op == "slice" and tuple(node.attrs["axes"]) in ((0,), (-2,)):
        (start,), (end,), (step,) = (node.attrs[k] for k in ("starts", "ends", "steps"))
        return np.arange(table.shape[0])[slice(start, end, step)]
    return None


def _whole_table(rw: Rewriter, node: Node) -> bool:
    """An embedding that reads every row of its table in order (CLIP's position table, one
    row per patch) is the table itself, as TF's CLIP adds it: reshaped to the lookup's
    shape (leading axes of one)."""
    ids, table = node.inputs
    data = rw.constant_value(ids)
    if data is None or not rw.is_param(table) or table.rank != 2:
        return False
    data = np.asarray(data)
    if data.size != table.shape[0] or \
            not np.array_equal(data.reshape(-1), np.arange(table.shape[0])):
        return False
    out = node.outputs[0]
    rw.replace(out, table if out.shape == table.shape else rw.emit(
        "reshape", [table], {"shape": out.shape}, like=node, shape=out.shape))
    return True


def _unit_ids(rw: Rewriter, node: Node) -> bool:
    """An embedding at constant ids with leading axes of one (PyTorch XLM's
    ``position_ids[:, :T]``, ``[1, T]``) is the lookup at the ids without them, reshaped
    (TF's port looks up ``range(T)``): one lookup for both, the reshape then a broadcast's
    rank promotion."""
    ids, table = node.inputs
    data = rw.constant_value(ids)
    if data is None or ids.rank < 2 or ids.shape[0] != 1:
        return False
    kept = tuple(ids.shape)
    while len(kept) > 1 and kept[0] == 1:
        kept = kept[1:]
    squeezed = rw.constant(np.asarray(data).reshape(kept), ids.dtype)
    out = node.outputs[0]
    looked = rw.emit("embedding", [squeezed, table], dict(node.attrs), like=node,
                     shape=kept + out.shape[ids.rank:])
    rw.replace(out, rw.emit("reshape", [looked], {"shape": out.shape}, like=node,
                            shape=out.shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "embedding":
        return _whole_table(rw, node) or _unit_ids(rw, node)
    if node.op not in ("gather", "slice"):
        return False
    ids = _rows(rw, node)
    if ids is None or ids.size == 0:
        return False
    out = node.outputs[0]
    index = rw.constant(ids.astype(np.int64), "int64")
    rw.replace(out, rw.emit("embedding", [index, node.inputs[0]], {}, like=node,
                            shape=out.shape))
    return True


class RaiseLookupsPass:
    """See the module docstring."""

    name = "raise-lookups"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
