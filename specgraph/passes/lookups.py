"""Rows of a table read by constant indices are an embedding lookup, however written:
``table[start:stop]`` (Whisper's and OPT's position tables as PyTorch slices them),
``table[ids]`` with constant ids (a gather along the rows), or ``embedding(ids, table)``
(Flax's and TF's lookups) become ``embedding(ids, table)``; a lookup of every row in
order is the table itself (TF's CLIP adds its position table whole, PyTorch and Flax look
up ``arange(n)`` in it); constant ids with leading axes of one lose them (the lookup's
result reshaped). The rows of a weight table at computed indices (``W.t()[ids]``) and a
one-hot of indices times a weight (``Dense(one_hot(ids))``, or a constant matrix of one-hot
rows where the buckets fold) are lookups too; a lookup at constant ids reshaped along its
leading axes is the lookup at the ids reshaped.

Requires: a verified graph. Ensures: no ``slice`` or axis-0 ``gather`` reads the rows of a
two-dimensional parameter at constant positions; exact (the same rows, copied).
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
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


def _stacked(rw: Rewriter, table: Value) -> bool:
    """Whether every row of ``table`` is read by a slice or gather of its own (each one row,
    each row once): per-layer parameters stacked along their first axis and read by layer (a
    ``lax.scan``-style ``b[i]`` unrolled, beside ``W[i]``), not a table of lookups."""
    readers = rw.graph.consumers(rw.resolve(table))
    if len(readers) < 2 or len(readers) != table.shape[0]:
        return False
    rows = []
    for reader in readers:
        if reader.op not in ("slice", "gather") or reader.inputs[0] is not table:
            return False
        picked = _rows(rw, reader)
        if picked is None or picked.size != 1:
            return False
        rows.append(int(np.ravel(picked)[0]))
    return sorted(rows) == list(range(table.shape[0]))


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


def _table(rw: Rewriter, v: Value) -> bool:
    """Whether ``v`` is a 2-D parameter, or one transposed (PyTorch's ``weight.t()``)."""
    made = rw.producer(v)
    if made is not None and made.op == "transpose":
        v = made.inputs[0]
    return v.rank == 2 and rw.is_param(v)


def _one_hot_product(rw: Rewriter, node: Node) -> bool:
    """``one_hot(i, n) · W`` with W an [n, h] weight, no bias, is the rows of W at i
    (LayoutLMv3's relative-position bias: TF's ``Dense(one_hot(bucket))`` against
    PyTorch's ``weight.t()[bucket]``); the one-hot as ``cast(i == arange(n))``."""
    if node.attrs.get("bias") or len(node.inputs) != 2 or not _table(rw, node.inputs[1]):
        return False
    cast = rw.producer(node.inputs[0])
    eq = rw.producer(cast.inputs[0]) if cast is not None and cast.op == "cast" else None
    if eq is None or eq.op != "equal":
        return False
    n = node.inputs[1].shape[0]
    for u, line in (eq.inputs, eq.inputs[::-1]):
        positions = rw.constant_value(line)
        if positions is None or line.shape != (1,) * (line.rank - 1) + (n,) or \
                not np.array_equal(np.ravel(positions), np.arange(n)) or \
                u.rank != line.rank or u.shape[-1] != 1 or u.dtype[:3] not in ("int", "uin"):
            continue
        ids = rw.emit("reshape", [u], {"shape": u.shape[:-1]}, like=node, shape=u.shape[:-1])
        out = node.outputs[0]
        rw.replace(out, rw.emit("embedding", [ids, node.inputs[1]], {}, like=node,
                                shape=out.shape))
        return True
    return False


def _one_hot_rows(rw: Rewriter, node: Node) -> bool:
    """A constant matrix of one-hot rows times a weight [n, h] is the weight's rows at the
    ones' positions (TF's one-hot buckets folded to a constant before its Dense)."""
    onehot, w = node.inputs
    data = rw.constant_value(onehot)
    if data is None or onehot.rank != 2 or not _table(rw, w) or \
            onehot.shape[1] != w.shape[0] or not np.all((data == 0) | (data == 1)) or \
            not np.all(np.sum(data, axis=1) == 1):
        return False
    ids = rw.constant(np.argmax(data, axis=1).astype(np.int64), "int64")
    out = node.outputs[0]
    rw.replace(out, rw.emit("embedding", [ids, w], {}, like=node, shape=out.shape))
    return True


def _constant_lookup(rw: Rewriter, v: Value) -> tuple[Node, np.ndarray] | None:
    """The lookup (no padding row) at constant ids that alone makes ``v``, and its ids."""
    look = rw.producer(v)
    if look is None or look.op != "embedding" or rw.uses(v) != 1 or \
            look.attrs.get("padding_idx") is not None:
        return None
    ids = rw.constant_value(look.inputs[0])
    return None if ids is None else (look, np.asarray(ids))


def _reshaped_lookup(rw: Rewriter, node: Node) -> bool:
    """A lookup at constant ids reshaped along its leading axes is the lookup at the ids
    reshaped."""
    found = _constant_lookup(rw, node.inputs[0])
    out = node.outputs[0]
    if found is None or out.rank < 1 or out.shape[-1] != found[0].outputs[0].shape[-1]:
        return False
    look, ids = found
    lead = out.shape[:-1]
    while lead and lead[0] == 1:
        lead = lead[1:]
    if lead == tuple(np.shape(ids)):
        return False  # only leading axes of one added: the form ``_unit_ids`` leaves
    index = rw.constant(np.reshape(ids, out.shape[:-1]).astype(ids.dtype), look.inputs[0].dtype)
    rw.replace(out, rw.emit("embedding", [index, look.inputs[1]], dict(look.attrs),
                            like=look, shape=out.shape))
    return True


def _joined_lookups(rw: Rewriter, node: Node) -> bool:
    """Lookups of one table at constant ids, concatenated along their rows, are the lookup
    at the ids concatenated (BEiT's relative-position table split and joined again)."""
    out = node.outputs[0]
    if node.attrs["axis"] % max(1, out.rank) != 0 or len(node.inputs) < 2:
        return False
    found = [_constant_lookup(rw, v) for v in node.inputs]
    if any(f is None or f[1].ndim != 1 for f in found):
        return False
    table = found[0][0].inputs[1]  # type: ignore[index]
    if any(f[0].inputs[1] is not table for f in found):  # type: ignore[index]
        return False
    ids = np.concatenate([f[1] for f in found])  # type: ignore[index]
    first = found[0][0]  # type: ignore[index]
    index = rw.constant(ids, first.inputs[0].dtype)
    rw.replace(out, rw.emit("embedding", [index, table], dict(first.attrs), like=first,
                            shape=out.shape))
    return True


def _lookup_of_lookup(rw: Rewriter, node: Node) -> bool:
    """Rows at constant indices of a lookup at constant ids are the lookup at those ids'
    entries (the table's rows read twice over: BEiT's joined table at its position
    index)."""
    found = _constant_lookup(rw, node.inputs[0])
    where = rw.constant_value(node.inputs[1])
    if found is None or where is None or found[1].ndim != 1:
        return False
    look, ids = found
    out = node.outputs[0]
    index = rw.constant(np.take(ids, np.asarray(where), axis=0), look.inputs[0].dtype)
    rw.replace(out, rw.emit("embedding", [index, look.inputs[1]], dict(look.attrs),
                            like=look, shape=out.shape))
    return True


def _flat_offsets_reshaped(rw: Rewriter, node: Node) -> bool:
    """reshape(gather(t, reshape(i) + c)) to ``i``'s shape, of a 1-D ``t`` at flat positions
    that ``i`` plus constant offsets ``c`` make: the gather at ``i + c`` in that shape, the
    offsets kept once along the axes they repeat on. JAX's ``take_along_axis`` flattens the
    indices before adding each position's offset; PyTorch's ``gather`` and TF's batched
    gather add offsets in the indices' own shape (``points.emit_along_gather``)."""
    gather = rw.producer(node.inputs[0])
    if gather is None or gather.op != "gather" or gather.attrs["axis"] != 0 or \
            gather.inputs[0].rank != 1 or gather.inputs[1].rank != 1 or \
            rw.uses(node.inputs[0]) != 1:
        return False
    offsets = rw.producer(gather.inputs[1])
    if offsets is None or offsets.op != "add" or rw.uses(gather.inputs[1]) != 1:
        return False
    shape = node.outputs[0].shape
    for k in (0, 1):
        flat, data = offsets.inputs[k], rw.constant_value(offsets.inputs[1 - k])
        made = rw.producer(flat)
        if data is None or made is None or made.op != "reshape" or \
                made.inputs[0].shape != shape or np.size(data) != flat.size:
            continue
        data = np.asarray(data).reshape(shape)
        for axis in range(len(shape)):
            if shape[axis] > 1 and bool(np.all(data == np.take(data, [0], axis=axis))):
                data = np.take(data, [0], axis=axis)
        i = made.inputs[0]
        at = rw.emit("add", [i, rw.constant(np.ascontiguousarray(data), flat.dtype)],
                     like=offsets, shape=shape, dtype=i.dtype)
        rw.replace(node.outputs[0], rw.emit("gather", [gather.inputs[0], at], {"axis": 0},
                                            like=gather, shape=shape))
        return True
    return False


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "reshape" and _flat_offsets_reshaped(rw, node):
        return True
    if node.op == "concat" and _joined_lookups(rw, node):
        return True
    if node.op == "gather" and node.attrs["axis"] == 0 and _lookup_of_lookup(rw, node):
        return True
    if node.op == "embedding":
        return _whole_table(rw, node) or _unit_ids(rw, node)
    if node.op == "linear":
        return _one_hot_product(rw, node)
    if node.op == "matmul" and len(node.inputs) == 2 and _one_hot_rows(rw, node):
        return True
    if node.op == "reshape" and _reshaped_lookup(rw, node):
        return True
    if node.op == "gather" and node.attrs["axis"] in (0, -2) and _table(rw, node.inputs[0]) \
            and node.inputs[1].dtype[:3] in ("int", "uin") and not _stacked(rw, node.inputs[0]):
        # the rows of a weight table at computed indices are a lookup (``W.t()[ids]``), as
        # JAX's ``jnp.take(table, ids)`` traces to one
        out = node.outputs[0]
        rw.replace(out, rw.emit("embedding", [node.inputs[1], node.inputs[0]], {}, like=node,
                                shape=out.shape))
        return True
    if node.op not in ("gather", "slice"):
        return False
    ids = _rows(rw, node)
    if ids is None or ids.size == 0 or _stacked(rw, node.inputs[0]):
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
