"""Scalar factors meet where they can cancel: a multiplication (or division) by a constant
scalar moves below the reshapes, transposes and products of two activations that read it,
and scalar factors that meet combine, one that comes to one going away. Flax's GPT-Neo
multiplies q by sqrt(d) before an attention that divides the scores by sqrt(d); PyTorch's
scales nothing: both become the plain product.

Requires: a verified graph. Ensures: no reshape (but one merging leading axes, which the
batch reshapes pass moves below the scaling) or matmul of two non-parameters reads a
single-use scalar multiplication, nor a transpose whose one reader moves data, is such a
product or scales (elsewhere the transpose sinks below the scaling instead: the transposes
pass moves it through elementwise ops); no scalar multiplication reads another;
exact in real arithmetic (the scalar commutes with the data movement and is bilinear in a
product); a product with a parameter, or with a value made of parameters and constants
alone (a tied embedding's transpose: T5's output head), keeps its scaled input (a linear
layer reads it).
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops.values import same_value
from specgraph.passes.batch_reshapes import batch_merge, batch_promotion
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SinkScalarsPass"]

_MOVES = ("reshape", "transpose", "squeeze", "unsqueeze", "expand")


def _factor(rw: Rewriter, node: Node) -> tuple[Value, float] | None:
    """``node`` as x·c: a multiplication or division (not a rounding one) by a constant
    scalar."""
    if node.op not in ("mul", "div") or node.attrs.get("rounding"):
        return None
    a, b = node.inputs
    ca, cb = rw.scalar(a), rw.scalar(b)
    if node.op == "div":
        return (a, 1.0 / cb) if cb not in (None, 0.0) and ca is None else None
    if cb is not None and ca is None:
        return a, cb
    if ca is not None and cb is None:
        return b, ca
    return None


def _scaled(rw: Rewriter, value: Value) -> tuple[Value, float] | None:
    """``value`` as x·c where the scaling is read only there."""
    node = rw.producer(value)
    if node is None or rw.uses(value) != 1:
        return None
    return _factor(rw, node)


def _scale(rw: Rewriter, value: Value, c: float, like: Node) -> Value:
    factor = rw.constant(np.asarray(c, dtype=np.float32 if value.dtype == "bfloat16"
                                    else value.dtype), value.dtype)
    return rw.emit("mul", [value, factor], like=like, shape=value.shape)


def _onward(rw: Rewriter, moved: Value) -> bool:
    """Whether a scaling moved below the transpose that makes ``moved`` goes on from there:
    its one reader moves data too, is a product of two activations, or scales again.
    Elsewhere it stays above: a transpose sinks through an elementwise op (the scaling),
    and the two passes would move them past each other forever (Keras' Rescaling before a
    channels-first conv's transpose)."""
    if moved in rw.graph.outputs:
        return False
    readers = rw.graph.consumers(moved)
    if len(readers) != 1:
        return False
    (reader,) = readers
    if reader.op in _MOVES:
        return True
    if reader.op == "matmul":
        return not any(rw.is_fixed(v) for v in reader.inputs)
    return _factor(rw, reader) is not None


def _rule(rw: Rewriter, node: Node) -> bool:
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is None or out.dtype not in ("float32", "float64", "float16", "bfloat16"):
        return False
    if node.op in ("mul", "div"):
        return _combine(rw, node)
    if node.op in _MOVES:
        found = _scaled(rw, node.inputs[0])
        if found is None or node.op == "transpose" and not _onward(rw, out):
            return False
        if batch_merge(node) or batch_promotion(node):
            return False  # the merge moves below the scaling instead (batch reshapes
            # pass), on its way to the split it meets: DeBERTa's scaled scores; so does
            # a promotion, on its way to the reshape that drops its axes again
        x, c = found
        moved = rw.emit(node.op, [x, *node.inputs[1:]], dict(node.attrs), like=node,
                        shape=out.shape)
        # the scaling keeps its own layer (Keras' Rescaling, not the conv after it)
        rw.replace(out, _scale(rw, moved, c, rw.producer(node.inputs[0]) or node))
        return True
    if node.op == "matmul" and not any(rw.is_fixed(v) for v in node.inputs):
        total, inputs = 1.0, list(node.inputs)
        for slot, v in enumerate(inputs):
            found = _scaled(rw, v)
            if found is not None:
                inputs[slot], c = found
                total *= c
        if inputs == list(node.inputs):
            return False
        product = rw.emit("matmul", inputs, like=node, shape=out.shape)
        rw.replace(out, _scale(rw, product, total, node))
        return True
    return False


def _combine(rw: Rewriter, node: Node) -> bool:
    """(x·c1)·c2 = x·(c1·c2), and x·1 = x."""
    outer = _factor(rw, node)
    if outer is None:
        return False
    x, c2 = outer
    inner = _scaled(rw, x)
    if inner is None:
        return False
    y, c1 = inner
    c = c1 * c2
    rw.replace(node.outputs[0], y if same_value(c, 1.0) else _scale(rw, y, c, node))
    return True


class SinkScalarsPass:
    """See the module docstring."""

    name = "sink-scalars"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
