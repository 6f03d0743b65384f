"""Raise matmul by a weight matrix to ``linear``, and fold a following bias add into
``linear``, ``conv`` or ``conv_transpose`` (TF's MatMul + BiasAdd, JAX's dot_general + add,
ONNX's MatMul + Add all become one linear).

Requires: a verified graph. Ensures: exact rewrites only (the same products and sums);
a bias that broadcasts over any axis other than the layer's output features stays an add.
"""

from __future__ import annotations

from specgraph.ir import Graph, Node, Value
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseLinearPass"]

_WITH_BIAS = {"linear": -1, "conv": 1, "conv_transpose": 1}


def _param_behind(rw: Rewriter, value: Value) -> Value | None:
    """The rank-1 parameter that ``value`` is (or is a broadcasting reshape/expand of)."""
    while not rw.is_param(value):
        node = rw.producer(value)
        if node is None or node.op not in ("reshape", "expand"):
            return None
        value = node.inputs[0]
    return value if value.rank == 1 else None


def _bias_axis(value: Value, out_rank: int) -> int | None:
    full = (1,) * (out_rank - value.rank) + value.shape
    non_unit = [i for i, s in enumerate(full) if s != 1]
    return non_unit[0] if len(non_unit) == 1 else None


def _matmul(rw: Rewriter, node: Node) -> bool:
    x, w = node.inputs
    if not rw.is_param(w) or w.rank != 2 or x.rank < 2 or rw.is_param(x):
        return False
    out = rw.emit("linear", [x, w], {"bias": False}, like=node, shape=node.outputs[0].shape)
    rw.replace(node.outputs[0], out)
    return True


def _bias_add(rw: Rewriter, node: Node) -> bool:
    for layer_value, other in (node.inputs, node.inputs[::-1]):
        layer = rw.producer(layer_value)
        if layer is None or layer.op not in _WITH_BIAS or layer.attrs["bias"]:
            continue
        if rw.uses(layer_value) != 1 or layer_value.shape != node.outputs[0].shape:
            continue
        bias = _param_behind(rw, other)
        rank = layer_value.rank
        axis = _WITH_BIAS[layer.op] % rank
        if bias is None or _bias_axis(other, rank) != axis or bias.shape[0] != \
                layer_value.shape[axis]:
            continue
        attrs = {**layer.attrs, "bias": True}
        out = rw.emit(layer.op, [*layer.inputs, bias], attrs, like=layer,
                      shape=layer_value.shape)
        rw.replace(node.outputs[0], out)
        return True
    return False


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "matmul":
        return _matmul(rw, node)
    if node.op == "add":
        return _bias_add(rw, node)
    return False


class RaiseLinearPass:
    """See the module docstring."""

    name = "raise-linear"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
