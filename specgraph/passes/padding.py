"""Fold explicit padding into the convolution or max-pool that reads it: ``pad`` then
``conv`` (TF's ZeroPadding2D + "valid", ONNX Pad + Conv) is one ``conv`` with per-side
padding; ``pad`` then ``max_pool`` (HF TF ResNet's zero pad of a ReLU's output) is one
``max_pool``, whose padding counts as -inf, where the padded value is never above what
the pad's producer can output.

Requires: a verified graph. Ensures: exact rewrites only (zero padding of the spatial axes,
seen directly or through a layout transpose; reflect/edge padding and padding of the batch
or channel axes stay as they are). The max-pool fold holds only on its producer's range,
and is proved there: the producer, the pad and the pool run on random inputs of the
producer against the producer and the pool with the padding folded in (a ReLU's output is
never negative, so a zero pad never wins a window's maximum; a pad before a linear layer's
output does, and stays).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.regions import agrees, run_region
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


def _max_pool(rw: Rewriter, node: Node) -> bool:
    """max_pool(pad(producer(...))) as max_pool(producer(...)) with the pad folded in,
    proved on the producer's range."""
    pad = rw.producer(node.inputs[0])
    if pad is None or pad.op != "pad" or rw.uses(node.inputs[0]) != 1:
        return False
    if pad.attrs["mode"] != "constant" or any(p < 0 for p in pad.attrs["pads"]):
        return False
    source = pad.inputs[0]
    rank = source.rank
    begins, ends = pad.attrs["pads"][:rank], pad.attrs["pads"][rank:]
    if begins[0] or begins[1] or ends[0] or ends[1]:
        return False
    producer = rw.producer(source)
    if producer is None:  # a model input can hold any value
        return False
    spatial = rank - 2
    old = node.attrs["padding"]
    attrs = {**node.attrs, "padding": tuple(old[i] + begins[2 + i] for i in range(spatial))
             + tuple(old[spatial + i] + ends[2 + i] for i in range(spatial))}
    free = list(dict.fromkeys(v for v in producer.inputs if rw.constant_value(v) is None))
    reference = get_spec("max_pool").reference

    def folded(env: Mapping[Value, np.ndarray]) -> np.ndarray:
        return reference(run_region(rw, [producer], env, source), **attrs)

    out = node.outputs[0]
    if not agrees(rw, [producer, pad, node], out, free, folded,
                  claim=("max-pool-absorbs-pad", tuple(sorted(attrs.items())))):
        return False
    rw.replace(out, rw.emit("max_pool", [source], attrs, like=node, shape=out.shape))
    return True


def _fold(rw: Rewriter, node: Node) -> bool:
    return _rule(rw, node) if node.op == "conv" else node.op == "max_pool" and _max_pool(
        rw, node)


class FoldPaddingPass:
    """See the module docstring."""

    name = "fold-padding"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _fold)
