"""Unpacking a stacked tensor has one form: ``split`` into pieces of one along the stacked
axis, each piece reshaped to drop that axis (``q, k, v = qkv``, ``unbind``, ``split`` +
``squeeze``), with the reshapes and transposes every piece shares done once, before the split.

- Gathers of the constant scalar indices 0..n-1 along an axis of size n (``qkv[0]``,
  ``qkv[1]``, ``qkv[2]``; ONNX's Gather, TF's strided slice with shrink) are that split:
  each index's gather is its piece reshaped.
- A split into n equal pieces of size s, each read only by a reshape to the same shape R
  that keeps the axes before the split (GPT-2's ``split(C, dim=2)`` then ``view`` per part)
  is ``reshape(x, [*pre, n, *R[len(pre):]])`` split into pieces of one along that axis, each
  reshaped to R: piece i of x is the i-th slice of the reshaped x (row-major order keeps
  every element's offset within its piece).
- A split into n equal pieces of size s of a reshaped value, whatever reads the pieces
  (BLOOM's fused projection viewed as [B, T, H, 3·D] and ``jnp.split`` in three, where
  PyTorch views it as [B, T, H, 3, D] and indexes the 3), is the same: the reshape to
  [*pre, n, s, *post] split into pieces of one, each reshaped to [*pre, s, *post].
- Pieces of one, each reshaped to drop the axis and then transposed by the same permutation
  p (Flax's split of the stacked axis before the heads transpose), are the split of one
  transpose of x that moves the stacked axis first and permutes the others by p: slice i of
  that transpose is the transpose of slice i. Where the pieces' permutations differ (the
  key's head dimension moved last), p is the first piece's, and a piece transposed
  otherwise keeps the rest of its permutation after its reshape.

Requires: a verified graph. Ensures: none of the four patterns above remains; each rewrite
is exact (the same elements, moved).
"""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["NormalizeUnpackingPass"]


def _split(rw: Rewriter, x: Value, axis: int, count: int, like: Node) -> tuple[Value, ...]:
    """A new ``split`` of ``x`` into ``count`` pieces of one along ``axis``, placed here."""
    shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    outs = tuple(Value(shape, x.dtype) for _ in range(count))
    attrs = get_spec("split").normalize_attrs({"axis": axis, "sizes": (1,) * count})
    rw.keep(Node("split", (x,), outs, MappingProxyType(attrs), like.scope, like.source,
                 like.origin))
    rw.modified = True
    return outs


def _scalar_index(graph: Graph, node: Node) -> tuple[Value, int, int] | None:
    """(x, axis, index) of a gather of one constant index, the index made non-negative."""
    x, ids = node.inputs
    data = graph.constants.get(ids)
    if data is None or np.ndim(data) != 0 or np.asarray(data).dtype.kind not in "iu":
        return None
    axis = node.attrs["axis"] % x.rank
    n = x.shape[axis]
    index = int(data) + (n if int(data) < 0 else 0)
    return (x, axis, index) if 0 <= index < n else None


def _gather_groups(graph: Graph) -> dict[Node, tuple[Value, int, int]]:
    """Each gather of a group that reads every index of its axis once or more, keyed by the
    node, with (x, axis, index)."""
    groups: dict[tuple[Value, int], list[tuple[Node, int]]] = defaultdict(list)
    for node in graph.nodes:
        if node.op == "gather" and (found := _scalar_index(graph, node)) is not None:
            x, axis, index = found
            groups[(x, axis)].append((node, index))
    plan = {}
    for (x, axis), members in groups.items():
        n = x.shape[axis]
        if n >= 2 and {i for _, i in members} == set(range(n)):
            plan.update({node: (x, axis, i) for node, i in members})
    return plan


def _gathers_as_split(graph: Graph) -> PassResult:
    plan = _gather_groups(graph)
    if not plan:
        return PassResult(graph, False)
    rw = Rewriter(graph)
    pieces: dict[tuple[Value, int], tuple[Value, ...]] = {}
    for node in graph.nodes:
        original, inputs = node, tuple(rw.resolve(v) for v in node.inputs)
        if inputs != node.inputs:
            node = node.replace(inputs=inputs)
        if original not in plan:
            rw.keep(node)
            continue
        x, axis, index = plan[original]
        if (x, axis) not in pieces:
            pieces[(x, axis)] = _split(rw, node.inputs[0], axis, x.shape[axis], node)
        out = node.outputs[0]
        rw.replace(out, rw.emit("reshape", [pieces[(x, axis)][index]], {"shape": out.shape},
                                like=node, shape=out.shape))
    return PassResult(rw.finish(), True)


def _only_reader(rw: Rewriter, value: Value, op: str) -> Node | None:
    """The one node reading ``value`` if it is an ``op`` (and ``value`` no graph output)."""
    users = rw.graph.consumers(value)
    if len(users) != 1 or users[0].op != op or rw.uses(value) != 1:
        return None
    return users[0]


def _readers(rw: Rewriter, node: Node, op: str) -> list[Node] | None:
    """The reader of each piece of a split, if each piece has one, an ``op``, and all have
    the same attributes and output shape."""
    readers = [r for v in node.outputs if (r := _only_reader(rw, v, op)) is not None]
    if len(readers) != len(node.outputs) or any(
            dict(r.attrs) != dict(readers[0].attrs) or
            r.outputs[0].shape != readers[0].outputs[0].shape for r in readers):
        return None
    return readers


def _reshape_before_split(rw: Rewriter, node: Node) -> bool:
    x, axis, sizes = node.inputs[0], node.attrs["axis"] % node.inputs[0].rank, node.attrs["sizes"]
    if len(sizes) < 2 or len(set(sizes)) != 1:
        return False
    readers = _readers(rw, node, "reshape")
    if readers is None:
        return False
    target = readers[0].outputs[0].shape
    pre = x.shape[:axis]
    stacked = pre + (len(sizes),) + target[axis:]
    if target[:axis] != pre or stacked == x.shape:
        return False
    rw.keep(node)  # its pieces' old readers stay until pruned
    y = rw.emit("reshape", [x], {"shape": stacked}, like=node, shape=stacked)
    for piece, reader in zip(_split(rw, y, axis, len(sizes), node), readers):
        rw.replace(reader.outputs[0], rw.emit("reshape", [piece], {"shape": target},
                                              like=reader, shape=target))
    return True


def _stack_reshaped_split(rw: Rewriter, node: Node) -> bool:
    """A split of a reshape into n >= 2 equal pieces, read by anything: the stacked form."""
    x, axis, sizes = node.inputs[0], node.attrs["axis"] % node.inputs[0].rank, node.attrs["sizes"]
    source = rw.producer(x)
    if source is None or source.op != "reshape" or len(sizes) < 2 or \
            len(set(sizes)) != 1 or sizes[0] == 1:
        return False
    stacked = x.shape[:axis] + (len(sizes), sizes[0]) + x.shape[axis + 1:]
    piece = x.shape[:axis] + (sizes[0],) + x.shape[axis + 1:]
    rw.keep(node)  # its pieces' old readers stay until pruned
    y = rw.emit("reshape", [x], {"shape": stacked}, like=node, shape=stacked)
    for old, new in zip(node.outputs, _split(rw, y, axis, len(sizes), node)):
        rw.replace(old, rw.emit("reshape", [new], {"shape": piece}, like=node, shape=piece))
    return True


def _transpose_before_split(rw: Rewriter, node: Node) -> bool:
    x, axis, sizes = node.inputs[0], node.attrs["axis"] % node.inputs[0].rank, node.attrs["sizes"]
    dropped = x.shape[:axis] + x.shape[axis + 1:]
    if set(sizes) != {1}:
        return False
    squeezes = _readers(rw, node, "reshape")
    if squeezes is None or squeezes[0].outputs[0].shape != dropped:
        return False
    transposes = [t for s in squeezes if (t := _only_reader(rw, s.outputs[0], "transpose"))]
    if len(transposes) != len(squeezes):
        return False
    # the first piece's permutation goes above the split (the query's: Flax's BLOOM moves
    # its key's head dimension last where PyTorch's transposes the unpacked key)
    perm = transposes[0].attrs["perm"]
    full = (axis,) + tuple(p + (p >= axis) for p in perm)
    if full == tuple(range(x.rank)):
        return False
    moved = tuple(x.shape[p] for p in full)
    rw.keep(node)
    t = rw.emit("transpose", [x], {"perm": full}, like=transposes[0], shape=moved)
    target = moved[1:]
    inverse = np.argsort(perm)
    for piece, old in zip(_split(rw, t, 0, len(sizes), node), transposes):
        out = rw.emit("reshape", [piece], {"shape": target}, like=node, shape=target)
        if old.attrs["perm"] != perm:  # the rest of this piece's own permutation
            rest = tuple(int(inverse[p]) for p in old.attrs["perm"])
            out = rw.emit("transpose", [out], {"perm": rest}, like=old,
                          shape=old.outputs[0].shape)
        rw.replace(old.outputs[0], out)
    return True



def _rule(rw: Rewriter, node: Node) -> bool:
    return node.op == "split" and (_reshape_before_split(rw, node) or
                                   _transpose_before_split(rw, node) or
                                   _stack_reshaped_split(rw, node))


class NormalizeUnpackingPass:
    """See the module docstring."""

    name = "normalize-unpacking"

    def __call__(self, graph: Graph) -> PassResult:
        result = _gathers_as_split(graph)
        graph, modified = result.graph, result.modified
        for _ in range(4):  # a reshape moved above a split lets its transposes follow
            result = rewrite(graph, _rule)
            if not result.modified:
                break
            graph, modified = result.graph, True
        return PassResult(graph, modified)
