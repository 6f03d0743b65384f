"""Raise matmul by a weight matrix (a parameter, or a transposed one: a tied lm_head) to
``linear``, and fold a following bias add into
``linear``, ``conv`` or ``conv_transpose`` (TF's MatMul + BiasAdd, JAX's dot_general + add,
ONNX's MatMul + Add all become one linear), also where the bias is added after reshapes and
transposes that keep the layer's feature axis whole (TF's DeBERTa writes its 1-D conv as a
2-D one and adds the bias before squeezing the height of one away).

Requires: a verified graph. Ensures: exact rewrites only (the same products and sums);
a bias that broadcasts over any axis other than the layer's output features stays an add.
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.passes.linear_sums import biases_beside
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseLinearPass"]

_WITH_BIAS = {"linear": -1, "conv": 1, "conv_transpose": 1}


def _param_behind(rw: Rewriter, value: Value) -> Value | None:
    """The parameter that ``value`` is (or is a broadcasting reshape/expand of), holding one
    axis of size > 1 (a [n] bias, or TF's [1, n])."""
    while not rw.is_param(value):
        node = rw.producer(value)
        if node is None or node.op not in ("reshape", "expand"):
            return None
        value = node.inputs[0]
    return value if sum(s != 1 for s in value.shape) <= 1 else None


def _bias_axis(value: Value, out_rank: int, features: int | None = None) -> int | None:
    """The one axis of an output of ``out_rank`` axes that ``value`` holds a bias along; a
    single number is a bias along the ``features`` axis where that axis is of size one too
    (Keras' ``Dense(1)``: a regression or single-logit head)."""
    full = (1,) * (out_rank - value.rank) + value.shape
    non_unit = [i for i, s in enumerate(full) if s != 1]
    if not non_unit and value.rank <= out_rank:
        return features
    return non_unit[0] if len(non_unit) == 1 else None


def _weight(rw: Rewriter, w: Value) -> bool:
    """A parameter, or a transpose or reshape of one (a tied embedding read as [d, vocab])."""
    node = rw.producer(w)
    while node is not None and node.op in ("transpose", "reshape"):
        w = node.inputs[0]
        node = rw.producer(w)
    return rw.is_param(w)


def _normed(rw: Rewriter, x: Value) -> bool:
    """Whether weights-only ``x`` is a table a layer projects as it would activations: a
    normalized table, or one read through slices and reshapes (DeBERTa's relative-position
    embeddings through the attention's projections: ``nn.Linear`` on one side, ``Dense``'s
    matmul on the other); a product of weights read whole (a low-rank factorization) stays
    a matmul."""
    node = rw.producer(x)
    if node is not None and node.op in ("layer_norm", "rms_norm"):
        return True
    # a table read through views (DeBERTa's rel_embeddings[a:b], unsqueezed): projected
    # as a layer projects activations; a weight read whole stays a factor of a product
    views = 0
    while node is not None and (node.op in ("slice", "reshape", "expand") or (
            node.op == "embedding" and rw.constant_value(node.inputs[0]) is not None)):
        views += 1
        x = node.inputs[1] if node.op == "embedding" else node.inputs[0]
        node = rw.producer(x)
    return views > 0 and rw.is_param(x)


def _matmul(rw: Rewriter, node: Node) -> bool:
    x, w = node.inputs
    if not _weight(rw, w) or w.rank != 2 or x.rank < 2 or (rw.is_fixed(x)
                                                             and not _normed(rw, x)):
        return False
    out = rw.emit("linear", [x, w], {"bias": False}, like=node, shape=node.outputs[0].shape)
    rw.replace(node.outputs[0], out)
    return True


def _biased_product(rw: Rewriter, node: Node) -> bool:
    """add(R(matmul(T, W)), b), T weights only (read whole), W a weight matrix, b a bias
    along W's output features and R reshapes that only add leading axes of one: a layer
    (TF's ``Dense`` of DeBERTa-v2's whole position table, where PyTorch's ``nn.Linear`` of
    it is one): ``linear(R(T), W, b)``. Without a bias, a product of two weights stays a
    matmul (a low-rank factorization)."""
    for moved, other in (node.inputs, node.inputs[::-1]):
        chain: list[Node] = []
        value = moved
        step = rw.producer(value)
        while step is not None and step.op == "reshape" and rw.uses(value) == 1 and \
                step.outputs[0].shape[-step.inputs[0].rank:] == step.inputs[0].shape and \
                prod(step.outputs[0].shape) == prod(step.inputs[0].shape):
            chain.insert(0, step)
            value = step.inputs[0]
            step = rw.producer(value)
        if step is None or step.op != "matmul" or rw.uses(value) != 1:
            continue
        x, w = step.inputs
        if not (rw.is_fixed(x) and _weight(rw, w) and w.rank == 2 and x.rank >= 2):
            continue
        bias = _param_behind(rw, other)
        features = w.shape[-1]
        if bias is None or bias.size != features or other.rank > moved.rank or \
                _bias_axis(other, moved.rank, moved.rank - 1) != moved.rank - 1 or \
                moved.shape != node.outputs[0].shape:
            continue
        flat = rw.emit("reshape", [other], {"shape": (features,)}, like=node,
                       shape=(features,))
        if moved.rank > x.rank:  # the leading ones on the table, as nn.Linear of it reads
            grown = (1,) * (moved.rank - x.rank) + x.shape
            x = rw.emit("reshape", [x], {"shape": grown}, like=chain[0], shape=grown)
        rw.replace(node.outputs[0], rw.emit("linear", [x, w, flat], {"bias": True},
                                            like=step, shape=moved.shape))
        return True
    return False


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
        if bias is None or _bias_axis(other, rank, axis) != axis or bias.size != \
                layer_value.shape[axis]:
            continue
        if bias.rank != 1:  # [1, n]: read as [n] (canonicalize_model stores it so)
            bias = rw.emit("reshape", [bias], {"shape": (bias.size,)}, like=node,
                           shape=(bias.size,))
        attrs = {**layer.attrs, "bias": True}
        out = rw.emit(layer.op, [*layer.inputs, bias], attrs, like=layer,
                      shape=layer_value.shape)
        rw.replace(node.outputs[0], out)
        return True
    return False


def _linear_through_reshape(rw: Rewriter, node: Node) -> bool:
    """reshape(linear(reshape(x, [N, d])), S): a linear acts on the last axis, so flattening
    the leading axes around it (TF's Tensordot, Flax's DenseGeneral) changes nothing; where
    S regroups the leading axes, the linear reads x regrouped as S."""
    lin_value = node.inputs[0]
    lin = rw.producer(lin_value)
    if lin is None or lin.op != "linear" or rw.uses(lin_value) != 1:
        return False
    target = node.outputs[0].shape
    lead, features = lin_value.shape[:-1], lin_value.shape[-1]
    ones = next((k for k in range(1, len(target) - len(lead))
                 if target[:k] == (1,) * k and target[k:k + len(lead)] == lead
                 and prod(target[k + len(lead):]) == features), 0)
    if ones:
        # leading axes of one added after the linear (TF's Dense of a 2-D table, read back
        # as [1, P, H], or split into heads at once: [1, P, h, d]): the linear of the table
        # so laid out, as nn.Linear of its unsqueeze, then the split
        x = lin.inputs[0]
        grown = (1,) * ones + x.shape
        x = rw.emit("reshape", [x], {"shape": grown}, like=node, shape=grown)
        shape = (1,) * ones + lin_value.shape
        out = rw.emit("linear", [x, *lin.inputs[1:]], dict(lin.attrs), like=lin, shape=shape)
        if shape != target:
            out = rw.emit("reshape", [out], {"shape": target}, like=node, shape=target)
        rw.replace(node.outputs[0], out)
        return True
    flat = rw.producer(lin.inputs[0])
    if flat is None or flat.op != "reshape":  # read by several linears: each is rewritten
        return False
    x = flat.inputs[0]
    d = lin.inputs[0].shape[-1]
    k = next((k for k in range(x.rank, -1, -1) if prod(x.shape[k:]) == d), None)
    if k is None:
        return False
    lead = x.shape[:k]
    out_features = lin_value.shape[-1]
    if prod(lead) != prod(lin_value.shape[:-1]):
        return False
    if target[: len(lead)] != lead and target[-1] == out_features:
        # the leading axes regrouped (TF's Tensordot of Swin's windows, flattened with the
        # batch): the linear on x regrouped so, as PyTorch writes it
        regrouped = target[:-1] + (d,)
        x = rw.emit("reshape", [x], {"shape": regrouped}, like=flat, shape=regrouped)
        rw.replace(node.outputs[0], rw.emit("linear", [x, *lin.inputs[1:]], dict(lin.attrs),
                                            like=lin, shape=target))
        return True
    if target[: len(lead)] != lead or prod(target[len(lead):]) != out_features:
        return False
    if x.shape != lead + (d,):  # trailing axes merged into the features: keep that merge
        x = rw.emit("reshape", [x], {"shape": lead + (d,)}, like=flat, shape=lead + (d,))
    out = rw.emit("linear", [x, *lin.inputs[1:]], dict(lin.attrs), like=lin,
                  shape=lead + (out_features,))
    if target != out.shape:
        out = rw.emit("reshape", [out], {"shape": target}, like=node, shape=target)
    rw.replace(node.outputs[0], out)
    return True


def _bias_through_split(rw: Rewriter, node: Node) -> bool:
    """add(reshape(linear(x), [..., h, d]), b[h, d]): the bias of the linear, before the
    reshape that splits its output features or adds leading axes of one (TF's ``Dense`` of
    DeBERTa's 2-D position table, read back as ``[1, P, H]``)."""
    for split_value, other in (node.inputs, node.inputs[::-1]):
        split = rw.producer(split_value)
        if split is None or split.op != "reshape" or rw.uses(split_value) != 1:
            continue
        lin_value = split.inputs[0]
        lin = rw.producer(lin_value)
        if lin is None or lin.op != "linear" or lin.attrs["bias"] or rw.uses(lin_value) != 1:
            continue
        lead = lin_value.shape[:-1]
        shape = split_value.shape
        ones = next((k for k, n in enumerate(shape) if n != 1), len(shape))
        k = next((k for k in range(ones + 1) if shape[k:k + len(lead)] == lead), None)
        if k is None or not rw.is_fixed(other) or other.rank > split_value.rank:
            continue
        tail = shape[k + len(lead):]
        full = (1,) * (split_value.rank - other.rank) + other.shape
        if any(s != 1 for s in full[: k + len(lead)]) or full[k + len(lead):] != tail or \
                prod(tail) != lin_value.shape[-1]:
            continue
        out_features = lin_value.shape[-1]
        bias = rw.emit("reshape", [other], {"shape": (out_features,)}, like=node,
                       shape=(out_features,))
        new = rw.emit("linear", [*lin.inputs, bias], {**lin.attrs, "bias": True}, like=lin,
                      shape=lin_value.shape)
        rw.replace(node.outputs[0], rw.emit("reshape", [new], {"shape": split_value.shape},
                                            like=split, shape=split_value.shape))
        return True
    return False


def _axis_through(node: Node, axis: int) -> int | None:
    """Where a reshape or transpose ``node`` puts its input's ``axis``, kept whole (the
    same size after the same number of elements); None where it splits or merges it."""
    if node.op == "transpose":
        return tuple(node.attrs["perm"]).index(axis)
    before, size = node.inputs[0].shape[:axis], node.inputs[0].shape[axis]
    shape = node.outputs[0].shape
    return next((k for k in range(len(shape))
                 if shape[k] == size and prod(shape[:k]) == prod(before)), None)


def _bias_through_layout(rw: Rewriter, node: Node) -> bool:
    """add(L(layer(x)), b), L reshapes and transposes that keep the layer's feature axis
    whole and b a bias along that axis: the layer's own bias, L after it (exact: L moves
    each sum without changing it)."""
    for moved, other in (node.inputs, node.inputs[::-1]):
        chain: list[Node] = []
        value = moved
        while (step := rw.producer(value)) is not None and \
                step.op in ("reshape", "transpose") and rw.uses(value) == 1:
            chain.insert(0, step)
            value = step.inputs[0]
        layer = rw.producer(value)
        if not chain or layer is None or layer.op not in _WITH_BIAS or \
                layer.attrs["bias"] or rw.uses(value) != 1:
            continue
        axis: int | None = _WITH_BIAS[layer.op] % value.rank
        for step in chain:
            axis = _axis_through(step, axis) if axis is not None else None
        bias = _param_behind(rw, other)
        if axis is None or bias is None or other.rank > moved.rank or \
                _bias_axis(other, moved.rank, axis) != axis or \
                moved.shape != node.outputs[0].shape:
            continue
        features = value.shape[_WITH_BIAS[layer.op] % value.rank]
        if bias.size != features:
            continue
        flat = rw.emit("reshape", [other], {"shape": (features,)}, like=node,
                       shape=(features,))
        out = rw.emit(layer.op, [*layer.inputs, flat], {**layer.attrs, "bias": True},
                      like=layer, shape=value.shape)
        for step in chain:
            out = rw.emit(step.op, [out], dict(step.attrs), like=step,
                          shape=step.outputs[0].shape)
        rw.replace(node.outputs[0], out)
        return True
    return False


def _zero_bias(rw: Rewriter, node: Node) -> bool:
    """A bias that is a constant of zeros (exporters write one for bias=False) is no bias."""
    data = rw.constant_value(node.inputs[-1])
    if not node.attrs["bias"] or data is None or np.any(data):
        return False
    attrs = {**node.attrs, "bias": False}
    rw.replace(node.outputs[0], rw.emit(node.op, list(node.inputs[:-1]), attrs, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _pooled(rw: Rewriter, value: Value) -> bool:
    """Whether ``value`` is a global pool's output (through layout ops): a classifier's
    input, not a map that a deep stage's strides brought down to one point (ResNet50's
    last stage at 32x32 stays convs)."""
    node = rw.producer(value)
    while node is not None and node.op in ("transpose", "reshape"):
        node = rw.producer(node.inputs[0])
    return node is not None and node.op in ("reduce_mean", "reduce_max", "avg_pool",
                                            "max_pool", "adaptive_avg_pool",
                                            "adaptive_max_pool")


def _conv_of_a_point(rw: Rewriter, node: Node) -> bool:
    """A 1x1 conv (no padding, one group) of a globally pooled map, ``[B, C, 1, 1]``: the
    linear layer of ``[B, C]``, reshaped back (Keras' MobileNet classifies with a 1x1
    Conv2D after a global pool that keeps its axes; PyTorch's flattens and applies a
    Linear)."""
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    spatial = x.shape[2:]
    if node.attrs["groups"] != 1 or any(node.attrs["padding"]) or not spatial or \
            any(n != 1 for n in (*spatial, *w.shape[2:], *out.shape[2:])) or \
            not rw.is_param(w) or not _pooled(rw, x):
        return False
    b, c, o = x.shape[0], x.shape[1], w.shape[0]
    flat = rw.emit("reshape", [x], {"shape": (b, c)}, like=node, shape=(b, c))
    matrix = rw.emit("reshape", [w], {"shape": (o, c)}, like=node, shape=(o, c))
    matrix = rw.emit("transpose", [matrix], {"perm": (1, 0)}, like=node, shape=(c, o))
    y = rw.emit("linear", [flat, matrix, *node.inputs[2:]], {"bias": node.attrs["bias"]},
                like=node, shape=(b, o))
    rw.replace(out, rw.emit("reshape", [y], {"shape": out.shape}, like=node,
                            shape=out.shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op in _WITH_BIAS and _zero_bias(rw, node):
        return True
    if node.op == "conv" and len(node.inputs) >= 2 and _conv_of_a_point(rw, node):
        return True
    if node.op == "matmul":
        return _matmul(rw, node)
    if node.op == "add":
        if biases_beside(rw, node) > 1:  # two biases of one sum: one parameter first
            return False  # (``canonicalize_model`` stores them as their sum)
        return _bias_add(rw, node) or _bias_through_split(rw, node) or \
            _bias_through_layout(rw, node) or _biased_product(rw, node)
    if node.op == "reshape":
        return _linear_through_reshape(rw, node)
    return False


class RaiseLinearPass:
    """See the module docstring."""

    name = "raise-linear"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
