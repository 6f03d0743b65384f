"""Grouped-query attention reads its key/value heads once: ``attention(q, repeat(k),
repeat(v))`` becomes ``attention(q, k, v)`` with fewer key/value heads, which ``attention``
repeats itself (head h of q reads key/value head h // (H / H_kv)).

Models repeat the heads in several ways: PyTorch's ``repeat_kv`` as ``x[:, :, None]
.expand(...).reshape(...)``, Flax's ``jnp.repeat(x, n, axis=2)`` before the heads move to
axis 1, TF's ``tf.repeat``; each is a chain of reshapes and transposes around one
``expand``. The rule runs the chain on the positions of its source's elements and keeps it
only if each key/value head is repeated ``n`` times in a row (``np.repeat``, the order
``attention`` repeats in; heads tiled in the other order are another model and stay as
written); the heads taken once are then the source itself in some layout, which becomes
one reshape and one transpose of it.

Requires: attention raised. Ensures: the rewrite is proved on random q, k, v in float64
(``regions.agrees``), on top of the exact index check.
"""

from __future__ import annotations

import itertools

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["FoldRepeatedHeadsPass"]

_LAYOUT = frozenset({"reshape", "transpose", "expand"})


def _chain(rw: Rewriter, value: Value) -> tuple[Value, list[Node]] | None:
    """``value`` as layout ops over a source, each read only by the next, with exactly one
    ``expand``: (source, the ops first to last)."""
    chain: list[Node] = []
    node = rw.producer(value)
    while node is not None and node.op in _LAYOUT and rw.uses(value) == 1:
        chain.insert(0, node)
        value = node.inputs[0]
        node = rw.producer(value)
    if sum(n.op == "expand" for n in chain) != 1:
        return None
    return value, chain


def _once(source: Value, chain: list[Node], heads: int) -> tuple[np.ndarray, int] | None:
    """Where each element of the chain's output comes from, taken once per repeated head:
    (the positions in ``source``, [..., H_kv, S, E]; the repeat n), or None."""
    index = np.arange(source.size, dtype=np.float64).reshape(source.shape)
    for node in chain:
        index = np.asarray(get_spec(node.op).reference(index, **node.attrs))
    if index.ndim < 3 or index.shape[-3] != heads:
        return None
    for rep in range(heads, 1, -1):
        if heads % rep:
            continue
        once = index[..., ::rep, :, :]
        if np.array_equal(np.repeat(once, rep, axis=-3), index) and np.array_equal(
                np.sort(once, axis=None), np.arange(source.size)):
            return once, rep
    return None


def _layout(source: Value, once: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape, perm) with ``transpose(reshape(source, shape), perm)`` taking the elements
    ``once`` names, identity first."""
    index = np.arange(source.size, dtype=np.float64)
    for perm in itertools.permutations(range(once.ndim)):
        inverse = np.argsort(perm)
        shape = tuple(once.shape[i] for i in inverse)
        if np.array_equal(np.transpose(index.reshape(shape), perm), once):
            return shape, perm
    return None


def _view(rw: Rewriter, source: Value, shape: tuple[int, ...], perm: tuple[int, ...],
          like: Node) -> Value:
    if shape != source.shape:
        source = rw.emit("reshape", [source], {"shape": shape}, like=like, shape=shape)
    if perm != tuple(range(len(perm))):
        source = rw.emit("transpose", [source], {"perm": perm}, like=like,
                         shape=tuple(shape[i] for i in perm))
    return source


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op != "attention" or node.inputs[0].rank < 3:
        return False
    q, k, v = node.inputs[:3]
    heads = q.shape[-3]
    if k.shape[-3] != heads or v.shape[-3] != heads or len({k, v}) != 2:
        return False
    found = []
    for t in (k, v):
        chain = _chain(rw, t)
        once = None if chain is None else _once(chain[0], chain[1], heads)
        layout = None if once is None else _layout(chain[0], once[0])
        if layout is None:
            return False
        found.append((chain[0], once[1], layout))
    (kb, krep, klay), (vb, vrep, vlay) = found
    if krep != vrep or len({q, kb, vb}) != 3:
        return False
    y, rest = node.outputs[0], list(node.inputs[3:])
    rw.keep(node)  # the root must be visible to the region walk
    nodes = region(rw, y, [q, kb, vb, *rest])
    spec = get_spec("attention")
    attrs = dict(node.attrs)

    def candidate(env):
        keys, values = (np.transpose(env[b].reshape(lay[0]), lay[1])
                        for b, lay in ((kb, klay), (vb, vlay)))
        return spec.reference(env[q], keys, values, *(env[m] for m in rest), **attrs)

    if nodes is None or not agrees(rw, nodes, y, [q, kb, vb, *rest], candidate,
                                   claim=("repeated-heads", attrs, klay, vlay)):
        return True
    keys, values = (_view(rw, b, *lay, like=node) for b, lay in ((kb, klay), (vb, vlay)))
    rw.replace(y, rw.emit("attention", [q, keys, values, *rest], attrs, like=node,
                          shape=y.shape))
    return True


class FoldRepeatedHeadsPass:
    """See the module docstring."""

    name = "fold-repeated-heads"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
