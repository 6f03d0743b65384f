"""Fold explicit zero padding into the convolution that reads it: ``pad`` then ``conv``
(TF's ZeroPadding2D + "valid", ONNX Pad + Conv) is one ``conv`` with per-side padding.

Requires: a verified graph. Ensures: exact rewrites only (zero padding of the spatial axes,
seen directly or through a layout transpose; reflect/edge padding and padding of the batch
or channel axes stay as they are).
"""

from __future__ import annotations

from specgraph.ir import Graph, Node, Value
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["FoldPaddingPass"]


def _zero_pad(rw: Rewriter, value: Value) -> tuple[Node, tuple[int, ...] | None] | None:
    """The pad node behind ``value`` and, if a transpose sits between, its permutation."""
    node = rw.producer(value)
    perm = None
    if node is not None and node.op == "transpose" and rw.uses(value) == 1:
        perm = node.attrs["perm"]
        value = node.inputs[0]
        node = rw.producer(value)
    if node is None or node.op != "pad" or rw.uses(value) != 1:
        return None
    if node.attrs["mode"] != "constant" or node.attrs["value"] != 0.0:
        return None
    if any(p < 0 for p in node.attrs["pads"]):
        return None
    return node, perm


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op != "conv":
        return False
    found = _zero_pad(rw, node.inputs[0])
    if found is None:
        return False
    pad, perm = found
    rank = pad.inputs[0].rank
    pads = pad.attrs["pads"]
    begins, ends = pads[:rank], pads[rank:]
    if perm is not None:  # axis i of the conv input is axis perm[i] of the padded tensor
        begins = tuple(begins[p] for p in perm)
        ends = tuple(ends[p] for p in perm)
    if begins[0] or begins[1] or ends[0] or ends[1]:
        return False
    spatial = rank - 2
    old = node.attrs["padding"]
    padding = tuple(old[i] + begins[2 + i] for i in range(spatial)) + tuple(
        old[spatial + i] + ends[2 + i] for i in range(spatial))
    source = pad.inputs[0]
    if perm is not None:
        source = rw.emit("transpose", [source], {"perm": perm}, like=node,
                         shape=tuple(source.shape[p] for p in perm))
    attrs = {**node.attrs, "padding": padding}
    rw.replace(node.outputs[0], rw.emit("conv", [source, *node.inputs[1:]], attrs, like=node,
                                        shape=node.outputs[0].shape))
    return True


class FoldPaddingPass:
    """See the module docstring."""

    name = "fold-padding"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
