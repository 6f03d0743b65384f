"""Fold explicit padding into the convolution or max-pool that reads it: ``pad`` then
``conv`` (TF's ZeroPadding2D + "valid", ONNX Pad + Conv) is one ``conv`` with per-side
padding; ``pad`` then ``max_pool`` (HF TF ResNet's zero pad of a ReLU's output) is one
``max_pool``, whose padding counts as -inf, where the padded value is never above what the
pad's producer can output; a crop after a transposed conv (Keras' ``Cropping2D``) is that
conv's padding, which crops its full output.

Requires: a verified graph. Ensures: exact rewrites only (zero padding of the spatial axes,
seen directly or through a layout transpose; reflect/edge padding and padding of the batch
or channel axes stay as they are). The max-pool fold holds only on its producer's range, so
it takes two proofs: the producer's least output, from the definition of its op (a ReLU,
sigmoid, softmax, exp... never goes below 0, a clip below its minimum; views and max-pools
keep their input's bound), is at least the padded value; and the producer, the pad and the
pool, run on random inputs of the producer, agree with the producer and the pool with the
padding folded in (every window keeps a real element, ceil mode and strides unchanged). A
pad of -inf is the pool's own padding before any value (timm's ``MaxPool2dSame``: TF's
"same" pooling ported to PyTorch), proved on random inputs alike. A zero pad before a
value that can be negative (a conv's output, a tanh's) stays.
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
    """The pad node behind ``value`` and, if a transpose sits between, its permutation. The
    pad may have other readers (TF's CvT pads once for its key and value convolutions, and
    the two pads are one): each conv folds it in, and it goes with the last."""
    node = rw.producer(value)
    perm = None
    if node is not None and node.op == "transpose" and rw.uses(value) == 1:
        perm = node.attrs["perm"]
        value = node.inputs[0]
        node = rw.producer(value)
    if node is None or node.op != "pad":
        return None
    if node.attrs["mode"] != "constant" or node.attrs["value"] != 0.0:
        return None
    if any(p < 0 for p in node.attrs["pads"]):
        return None
    return node, perm


def _cropped_conv(rw: Rewriter, node: Node) -> bool:
    """slice(conv_transpose(x)) cropping spatial axes with step 1 (Keras'
    ``Conv2DTranspose(padding="valid")`` then ``Cropping2D``): the transposed conv with that
    much more padding, which is what its padding does (crops its full output).
    slice(conv(x)) so, of a conv of stride 1 along the cropped axes that pads them at least
    as much as is cropped (TF's dilated SAME conv of an odd length pads to a multiple of
    the dilation, then crops): the conv with that much less padding (each output cropped
    is one window of padding fewer)."""
    y = node.inputs[0]
    conv = rw.producer(y)
    if conv is None or conv.op not in ("conv_transpose", "conv") or rw.uses(y) != 1 or \
            y in rw.graph.outputs:
        return False
    rank, spatial = y.rank, y.rank - 2
    begins, ends = [0] * spatial, [0] * spatial
    for axis, start, end, step in zip(node.attrs["axes"], node.attrs["starts"],
                                      node.attrs["ends"], node.attrs["steps"]):
        axis = axis + rank if axis < 0 else axis
        size = y.shape[axis]
        start, end = (start + size if start < 0 else start), (end + size if end < 0 else end)
        start, end = max(0, min(start, size)), max(0, min(end, size))
        if step != 1 or axis < 2 or end <= start:
            return False
        begins[axis - 2] += start
        ends[axis - 2] += size - end
    old = conv.attrs["padding"]
    sign = 1 if conv.op == "conv_transpose" else -1
    padding = tuple(old[i] + sign * begins[i] for i in range(spatial)) + tuple(
        old[spatial + i] + sign * ends[i] for i in range(spatial))
    if conv.op == "conv" and (min(padding) < 0 or any(
            begins[i] + ends[i] and conv.attrs["stride"][i] != 1 for i in range(spatial))):
        return False
    attrs = {**conv.attrs, "padding": padding}
    rw.replace(node.outputs[0], rw.emit(conv.op, list(conv.inputs), attrs, like=conv,
                                        shape=node.outputs[0].shape))
    return True


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


# The least value an op can output whatever its input, from its definition.
_NON_NEGATIVE = frozenset({"relu", "sigmoid", "softmax", "exp", "abs", "sqrt", "softplus",
                           "hardsigmoid"})
_VIEWS = frozenset({"reshape", "transpose", "squeeze", "unsqueeze", "expand", "slice",
                    "max_pool"})


def _lower_bound(rw: Rewriter, value: Value, depth: int = 8) -> float | None:
    """A value ``value`` never goes below, proved by the ops computing it; None if none is
    known."""
    node = rw.producer(value)
    if node is None or depth == 0:
        return None
    if node.op in _NON_NEGATIVE:
        return 0.0
    if node.op == "clip":
        return node.attrs["min"]
    if node.op in _VIEWS:
        return _lower_bound(rw, node.inputs[0], depth - 1)
    if node.op == "maximum":
        bounds = [rw.scalar(v) if rw.scalar(v) is not None else _lower_bound(rw, v, depth - 1)
                  for v in node.inputs]
        known = [b for b in bounds if b is not None]
        return max(known) if known else None
    return None


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
    spatial = rank - 2
    old = node.attrs["padding"]
    attrs = {**node.attrs, "padding": tuple(old[i] + begins[2 + i] for i in range(spatial))
             + tuple(old[spatial + i] + ends[2 + i] for i in range(spatial))}
    reference = get_spec("max_pool").reference
    out = node.outputs[0]
    claim = ("max-pool-absorbs-pad", tuple(sorted(attrs.items())))
    if pad.attrs["value"] == -np.inf:  # the pool's own padding, whatever pads (timm's
        # MaxPool2dSame, TF's "same" pooling ported to PyTorch): proved on any input
        return _folded_pool(rw, node, pad, source, attrs, claim)
    bound = _lower_bound(rw, source)
    producer = rw.producer(source)
    if bound is None or bound < pad.attrs["value"] or producer is None:
        return False
    free = list(dict.fromkeys(v for v in producer.inputs if rw.constant_value(v) is None))

    def folded(env: Mapping[Value, np.ndarray]) -> np.ndarray:
        return reference(run_region(rw, [producer], env, source), **attrs)

    if not agrees(rw, [producer, pad, node], out, free, folded, claim=claim):
        return False
    rw.replace(out, rw.emit("max_pool", [source], attrs, like=node, shape=out.shape))
    return True


def _folded_pool(rw: Rewriter, node: Node, pad: Node, source: Value, attrs: dict,
                 claim: tuple) -> bool:
    """max_pool(pad(x, -inf)) as max_pool(x) with the padding: proved on random x (every
    window keeps a real element, ceil mode and strides unchanged)."""
    reference = get_spec("max_pool").reference
    out = node.outputs[0]
    if not agrees(rw, [pad, node], out, [source],
                  lambda env: reference(env[source], **attrs), claim=claim):
        return False
    rw.replace(out, rw.emit("max_pool", [source], attrs, like=node, shape=out.shape))
    return True


def _fold(rw: Rewriter, node: Node) -> bool:
    if node.op == "slice":
        return _cropped_conv(rw, node)
    return _rule(rw, node) if node.op == "conv" else node.op == "max_pool" and _max_pool(
        rw, node)


class FoldPaddingPass:
    """See the module docstring."""

    name = "fold-padding"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _fold)
