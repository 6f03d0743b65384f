"""Fold computations on constants: a node whose inputs are all constants (not parameters)
becomes a constant computed by the op's reference (``sqrt(64)`` in a hand-written attention
scale, shape arithmetic left by an exporter, a causal mask or position ids built from
``arange`` and ``full``, which read no input at all, a table split in two, as Flax's
``jnp.split(sincos, 2)``, each piece).

Requires: a verified graph. Ensures: no node reads only constants, except sources of large
tensors (``full``, ``arange`` above a million elements) that stay as ops; constant
embedding indices repeated along an axis (position ids expanded over the batch) are kept
once along it when only broadcasting elementwise ops read the rows, which repeat them anyway,
and so is a constant an elementwise op reads repeated along its leading axes.
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import numpy_dtype
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["FoldConstantsPass"]

_LIMIT = 1 << 20


def _repeated_axes(data: np.ndarray) -> list[int]:
    """Axes of size > 1 along which every slice of ``data`` is the same."""
    return [a for a in range(data.ndim) if data.shape[a] > 1 and
            bool(np.all(data == np.take(data, [0], axis=a)))]


def _broadcast_reader(rw: Rewriter, value: Value, shape: tuple[int, ...]) -> bool:
    """Whether only elementwise ops read ``value``, each with the same result shape if
    ``value`` had ``shape`` instead (NumPy broadcasting repeats it for them)."""
    users = rw.graph.consumers(value)
    if not users or rw.uses(value) != len(users):
        return False  # unread, or a graph output: its shape is visible
    for user in users:
        if get_spec(user.op).category not in ("elementwise", "activation"):
            return False
        shapes = [shape if v is value else v.shape for v in user.inputs]
        try:
            if np.broadcast_shapes(*shapes) != user.outputs[0].shape:
                return False
        except ValueError:
            return False
    return True


def _shrink_indices(rw: Rewriter, node: Node) -> bool:
    """embedding(i) with constant ``i`` repeated along some axes, read only by broadcasting
    elementwise ops: the rows once along those axes, and no leading axes of size one
    (``emb(arange)`` as PyTorch writes it, not ``emb(expand(arange))`` as Flax does nor
    ``emb(arange[None])``)."""
    indices = rw.constant_value(node.inputs[0])
    if indices is None:
        return False
    indices = np.asarray(indices)
    axes = _repeated_axes(indices)
    out = node.outputs[0]
    shape = tuple(1 if a in axes else s for a, s in enumerate(out.shape))
    lead = 0
    while lead < indices.ndim and shape[lead] == 1:
        lead += 1
    if not axes and not lead:
        return False
    if not _broadcast_reader(rw, out, shape[lead:]):
        if not axes or not _broadcast_reader(rw, out, shape):
            return False
        lead = 0
    kept = indices[tuple(slice(0, 1) if a in axes else slice(None)
                         for a in range(indices.ndim))].reshape(shape[lead:-1])
    shape = shape[lead:]
    small = rw.constant(kept, node.inputs[0].dtype)
    rw.replace(out, rw.emit("embedding", [small, *node.inputs[1:]], dict(node.attrs),
                            like=node, shape=shape))
    return True


def _shrink_repeats(rw: Rewriter, node: Node) -> bool:
    """An elementwise op reading a constant repeated along its leading axes (a table of
    positions looked up per batch row): the constant once along them, which broadcasting
    repeats (Flax's XGLM adds ``[B, T, D]`` sinusoidal positions, TF's ``[1, T, D]``)."""
    out = node.outputs[0]
    for slot, v in enumerate(node.inputs):
        data = rw.constant_value(v)
        if data is None or v.rank < 2 or v.size > _LIMIT or v.size <= 1:
            continue
        data = np.asarray(data)
        lead = 0
        while lead < data.ndim - 1 and (data.shape[lead] == 1 or bool(
                np.all(data == np.take(data, [0], axis=lead)))):
            lead += 1
        shape = tuple(1 if a < lead else n for a, n in enumerate(data.shape))
        if shape == data.shape:
            continue
        try:
            if np.broadcast_shapes(*[shape if k == slot else u.shape
                                     for k, u in enumerate(node.inputs)]) != out.shape:
                continue
        except ValueError:
            continue
        small = rw.constant(np.ascontiguousarray(data[tuple(
            slice(0, 1) if a < lead else slice(None) for a in range(data.ndim))]), v.dtype)
        inputs = [small if k == slot else u for k, u in enumerate(node.inputs)]
        rw.replace(out, rw.emit(node.op, inputs, dict(node.attrs), like=node,
                                shape=out.shape))
        return True
    return False


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "embedding":
        return _shrink_indices(rw, node)
    if len(node.outputs) == 1 and get_spec(node.op).category == "elementwise" and \
            any(rw.constant_value(v) is None for v in node.inputs) and \
            _shrink_repeats(rw, node):
        return True
    if node.op == "opaque" or not node.outputs:
        return False
    arrays = [rw.constant_value(v) for v in node.inputs]
    if any(a is None for a in arrays) or sum(v.size for v in node.outputs) > _LIMIT:
        return False
    spec = get_spec(node.op)
    with np.errstate(all="ignore"):
        result = spec.reference(*[np.asarray(a) for a in arrays], **node.attrs)
    results = result if len(node.outputs) > 1 else (result,)  # a split: each piece
    for out, piece in zip(node.outputs, results):
        data = np.asarray(piece).astype(numpy_dtype(out.dtype) if out.dtype != "bool"
                                        else bool)
        rw.replace(out, rw.constant(data.reshape(out.shape), out.dtype))
    return True


class FoldConstantsPass:
    """See the module docstring."""

    name = "fold-constants"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
