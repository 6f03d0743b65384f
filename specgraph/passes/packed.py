"""A projection packed into one linear layer and unpacked after it is the separate
projections: ``nn.MultiheadAttention``'s ``in_proj_weight``, GPT-2's ``c_attn`` and timm's
``qkv`` compute q, k and v with one ``[E, 3E]`` weight, split after reshapes and
transposes, where HF's BERT and ViT, Flax and Keras write three ``[E, E]`` projections. A
linear layer whose output reaches, through reshapes and transposes alone, a split into
pieces of one along the first axis, each piece read by one reshape, where each piece is a
contiguous block of the output features laid out by a reshape, a transpose and a reshape,
becomes one linear layer per piece, its weight and bias the block's columns (a split of
the parameter, stored as its pieces by ``canonicalize_model``), each laid out as the piece
is. Pieces that interleave the features (BLOOM's heads, each with its own q, k and v) are
no blocks and stay packed.

Requires: a verified graph; unpacking normalized (``unpacking``, ``batch_reshapes``: each
piece dropped of its stacked axis where it is unpacked). Ensures: exact (each piece reads
the same output features of the same products); the index maps are proved element by
element.
"""

from __future__ import annotations

from math import prod
from types import MappingProxyType

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.batch_reshapes import unit_split
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SeparatePackedProjectionsPass"]

_LIMIT = 1 << 24  # elements of a projection's output whose index map is worked out


def _chain(rw: Rewriter, node: Node) -> tuple[list[Node], Node, list[Node]] | None:
    """From a linear layer: the reshapes and transposes its output alone goes through, the
    split they end in, and each piece's one reader, a reshape."""
    chain: list[Node] = []
    value = node.outputs[0]
    while True:
        readers = rw.graph.consumers(value)
        if len(readers) != 1 or rw.uses(value) != 1:
            return None
        (reader,) = readers
        if reader.op == "split":
            break
        if reader.op not in ("reshape", "transpose") or len(chain) >= 8:
            return None
        chain.append(reader)
        value = reader.outputs[0]
    if not unit_split(reader):
        return None
    ends = []
    for piece in reader.outputs:
        users = rw.graph.consumers(piece)
        if len(users) != 1 or users[0].op != "reshape" or rw.uses(piece) != 1:
            return None
        ends.append(users[0])
    return chain, reader, ends


def _through(index: np.ndarray, chain: list[Node]) -> np.ndarray:
    for node in chain:
        index = index.reshape(node.attrs["shape"]) if node.op == "reshape" else \
            index.transpose(node.attrs["perm"])
    return index


def _layout(pos: np.ndarray, width: int, lead: tuple[int, ...]
            ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The reshape F and transpose p that lay a block ``[*lead, width]`` out as ``pos``
    (each element's position in the block, in the piece's shape): ``reshape(F)`` then
    ``transpose(p)`` then a reshape to the piece's shape; None where no such pair does."""
    axes = [k for k, n in enumerate(pos.shape) if n > 1]
    if pos.size != prod(lead) * width or pos.reshape(-1)[0] != 0:
        return None
    strides = {}
    for k in axes:
        step = [0] * pos.ndim
        step[k] = 1
        strides[k] = int(pos[tuple(step)])
    order = sorted(axes, key=lambda k: -strides[k])
    sizes = [pos.shape[k] for k in order]
    expected = 1
    for k, n in zip(reversed(order), reversed(sizes)):
        if strides[k] != expected:
            return None
        expected *= n
    grid = np.indices(pos.shape).reshape(pos.ndim, -1)
    if not np.array_equal(sum(strides[k] * grid[k] for k in axes).reshape(pos.shape)
                          if axes else np.zeros(pos.shape, np.int64), pos):
        return None
    perm = tuple(sorted(range(len(order)), key=lambda i: axes.index(order[i])))
    return tuple(sizes), perm


def _blocks(node: Node, chain: list[Node], split: Node, ends: list[Node]
            ) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]] | None:
    """For each piece: the first output feature of its block and the block's layout."""
    y = node.outputs[0]
    if y.rank < 1 or y.size > _LIMIT:
        return None
    width, count = y.shape[-1], len(split.outputs)
    if width % count:
        return None
    s = width // count
    index = _through(np.arange(y.size, dtype=np.int64).reshape(y.shape), chain)
    found, starts = [], set()
    for i, end in enumerate(ends):
        piece = index[i].reshape(end.outputs[0].shape)
        column = piece % width
        start = int(column.min())
        if start % s or start in starts or int(column.max()) != start + s - 1:
            return None
        starts.add(start)
        pos = (piece // width) * s + (column - start)  # where each lies in the block
        laid = _layout(pos, s, y.shape[:-1])
        if laid is None:
            return None
        found.append((start, *laid))
    return found


def _param_split(rw: Rewriter, value: Value, axis: int, count: int, like: Node
                 ) -> tuple[Value, ...]:
    size = value.shape[axis] // count
    shape = value.shape[:axis] + (size,) + value.shape[axis + 1:]
    outs = tuple(Value(shape, value.dtype) for _ in range(count))
    attrs = get_spec("split").normalize_attrs({"axis": axis, "sizes": (size,) * count})
    rw.keep(Node("split", (value,), outs, MappingProxyType(attrs), like.scope, like.source,
                 like.origin))
    return outs


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op != "linear" or not all(rw.is_param(v) and len(rw.graph.consumers(v)) == 1
                                      for v in node.inputs[1:]):
        return False
    found = _chain(rw, node)
    if found is None:
        return False
    chain, split, ends = found
    blocks = _blocks(node, chain, split, ends)
    if blocks is None:
        return False
    rw.keep(node)  # the packed layer and its chain stay until pruned
    count, y = len(ends), node.outputs[0]
    s = y.shape[-1] // count
    weights = _param_split(rw, node.inputs[1], node.inputs[1].rank - 1, count, node)
    biases = _param_split(rw, node.inputs[2], 0, count, node) if len(node.inputs) > 2 else None
    for end, (start, shape, perm) in zip(ends, blocks):
        k = start // s
        inputs = [node.inputs[0], weights[k], *([biases[k]] if biases else [])]
        out = rw.emit("linear", inputs, dict(node.attrs), like=node,
                      shape=y.shape[:-1] + (s,))
        if tuple(shape) != out.shape:
            out = rw.emit("reshape", [out], {"shape": shape}, like=end, shape=shape)
        if perm != tuple(range(len(perm))):
            shape = tuple(shape[p] for p in perm)
            out = rw.emit("transpose", [out], {"perm": perm}, like=end, shape=shape)
        target = end.outputs[0].shape
        if shape != target:
            out = rw.emit("reshape", [out], {"shape": target}, like=end, shape=target)
        rw.replace(end.outputs[0], out)
    rw.modified = True
    return True


class SeparatePackedProjectionsPass:
    """See the module docstring."""

    name = "separate-packed-projections"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
