"""A repeat written as reshapes around an ``expand`` is a gather of repeated positions.

Keras's ``UpSampling2D`` and ``tf.repeat`` repeat each row and column of a map as
``reshape[N, H, 1, W, C]·expand[N, H, r, W, C]·reshape[N, H·r, W, C]`` per axis; PyTorch's
nearest ``interpolate``, TF's ``ResizeNearestNeighbor``, ONNX's ``Resize`` and JAX's
``jax.image.resize`` are gathers of input positions per axis (``frontends._common.resize``).
A chain of reshapes, expands and transposes, each read only by the next, whose output has
its source's rank and whose every axis holds one source axis with each position repeated
(the expanded axes sit right after the source's, in the merges) is ``gather(x,
repeat(arange(n), r), axis=k)`` on each such axis of the source, then the transpose of the
source's axes the chain ends in (none where it keeps their order), one form for all of them
(the layouts pass then moves that transpose like any other).

The chain is followed through its axes' sizes (the reshapes only merge axes or add and drop
ones of size 1; one that would cut an axis leaves the chain as it is), so a map of any size
costs the same. Chains that repeat a whole axis after itself (a tile), that only broadcast
new axes (an ``expand``), or that feed an attention (grouped-query heads, which
``FoldRepeatedHeadsPass`` folds into the attention) are left as they are: the pass runs
among the finishing passes, after the others are at their fixed point.

Requires: a verified graph. Ensures: no chain of reshapes and expands that repeats
positions along its source's axes.
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RepeatsAsGathersPass", "repeated_positions"]

_CHAIN = frozenset({"reshape", "expand", "transpose"})

# an atom is one factor of an axis: ("x", source axis, size) or ("b", -1, size), a
# broadcast one; each axis of a value in the chain is a list of atoms, most significant first
Atom = tuple[str, int, int]


def _chain(rw: Rewriter, last: Node) -> tuple[Value, list[Node]] | None:
    """``last``'s output as reshapes, expands and transposes over a source, each read only
    by the next (the source, the ops first to last), with at least one expand."""
    chain = [last]
    value = last.inputs[0]
    node = rw.producer(value)
    while node is not None and node.op in _CHAIN and rw.uses(value) == 1:
        chain.insert(0, node)
        value = node.inputs[0]
        node = rw.producer(value)
    if not any(n.op == "expand" for n in chain):
        return None
    return value, chain


def _reshaped(dims: list[list[Atom]], shape: tuple[int, ...]) -> list[list[Atom]] | None:
    """The atoms of ``dims`` regrouped into ``shape``: None where an atom would be cut."""
    atoms = [a for dim in dims for a in dim if a[2] > 1]
    out: list[list[Atom]] = []
    k = 0
    for size in shape:
        group: list[Atom] = []
        have = 1
        while have < size and k < len(atoms):
            group.append(atoms[k])
            have *= atoms[k][2]
            k += 1
        if have != size:
            return None
        out.append(group)
    return out if k == len(atoms) else None


def repeated_positions(source: tuple[int, ...], chain: list[tuple[str, tuple[int, ...]]]
                       ) -> tuple[list[tuple[int, np.ndarray]], tuple[int, ...]] | None:
    """For a chain of ``(op, arg)`` steps (``reshape`` / ``expand`` to the shape ``arg``,
    ``transpose`` by the permutation ``arg``) over a value of shape ``source``: the gathers
    it is, ``(source axis, input position of each output position)`` for each axis whose
    positions repeat, and the permutation of the source's axes after them; None where it is
    no repeat of positions along the source's own axes."""
    dims: list[list[Atom]] = [[("x", a, n)] if n > 1 else [] for a, n in enumerate(source)]
    shape = tuple(source)
    for op, target in chain:
        if op == "reshape":
            regrouped = _reshaped(dims, target)
            if regrouped is None:
                return None
            dims = regrouped
        elif op == "transpose":
            dims = [dims[p] for p in target]
            target = tuple(shape[p] for p in target)
        else:
            if len(target) != len(shape):
                return None
            dims = [dim if n == m else ([("b", -1, m)] if n == 1 else None)  # type: ignore
                    for dim, n, m in zip(dims, shape, target)]
            if any(d is None for d in dims):
                return None
        shape = tuple(target)
    found = []
    perm = [-1] * len(shape)
    for axis, dim in enumerate(dims):
        kinds = [a[0] for a in dim]
        if kinds.count("x") == 0:
            if dim:  # a broadcast of a new or size-1 axis: an expand, not a repeat
                return None
            continue
        if kinds.count("x") != 1 or kinds[0] != "x":  # kinds[0]: an axis after itself: a tile
            return None
        perm[axis] = dim[0][1]
        if len(dim) > 1:
            digits = np.unravel_index(np.arange(shape[axis]), [a[2] for a in dim])
            found.append((dim[0][1], np.asarray(digits[0], dtype=np.int64)))
    rest = [a for a in range(len(source)) if a not in perm]
    if len(shape) == len(source):  # the source's size-1 axes take the places left, in order
        perm = [p if p >= 0 else rest.pop(0) for p in perm]
    else:  # size-1 axes added or dropped too: its axes in the chain's order, a reshape after
        perm = [p for p in perm if p >= 0] + rest
    if not found or sorted(perm) != list(range(len(source))):
        return None
    return sorted(found, key=lambda f: f[0]), tuple(perm)


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op not in _CHAIN or any(
            (u.op in _CHAIN or u.op == "attention") for u in rw.graph.consumers(node.outputs[0])):
        return False
    found = _chain(rw, node)
    if found is None:
        return False
    source, chain = found
    positions = repeated_positions(tuple(source.shape), [
        (n.op, tuple(n.attrs["perm"]) if n.op == "transpose" else tuple(n.outputs[0].shape))
        for n in chain])
    if positions is None:
        return False
    gathers, perm = positions
    value = source
    shape = list(source.shape)
    if len(shape) != len(node.outputs[0].shape):  # size-1 axes dropped first, added last
        kept = [a for a in perm if shape[a] > 1]
        shape = [shape[a] for a in sorted(kept)]
        value = rw.emit("reshape", [value], {"shape": list(shape)}, like=node,
                        shape=tuple(shape))
        gathers = [(sorted(kept).index(a), at) for a, at in gathers]
        perm = tuple(sorted(kept).index(a) for a in kept)
    for axis, at in gathers:
        shape[axis] = int(at.size)
        value = rw.emit("gather", [value, rw.constant(at, "int64")], {"axis": axis},
                        like=node, shape=tuple(shape))
    if perm != tuple(range(len(perm))):
        value = rw.emit("transpose", [value], {"perm": perm}, like=node,
                        shape=tuple(shape[p] for p in perm))
    if tuple(value.shape) != tuple(node.outputs[0].shape):  # size-1 axes added or dropped
        value = rw.emit("reshape", [value], {"shape": list(node.outputs[0].shape)},
                        like=node, shape=tuple(node.outputs[0].shape))
    rw.replace(node.outputs[0], value)
    return True


class RepeatsAsGathersPass:
    """See the module docstring."""

    name = "repeats-as-gathers"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
