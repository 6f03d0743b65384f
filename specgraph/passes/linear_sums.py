"""Biases of a sum of linear layers as terms of the sum, in one form whichever layer holds
them: PyTorch's recurrent cells add two layers that each hold a bias (``linear(x, W_ih,
b_ih) + linear(h, W_hh, b_hh)``), Keras adds one bias to the sum of two products (``x·K +
h·R + b``) and Flax lets the hidden layer hold it (``Dense(x, use_bias=False) +
Dense(h)``). Each is ``linear(x, W1) + linear(h, W2) + b…``: the layers without their
biases, the biases added last. ``canonicalize_model`` then stores two or more biases that
are only ever added together as one parameter, their sum (``TracedModel.param_sums``), so a
sum of two biases plays the role of the other side's one. A linear layer (or product) of a
constant of zeros, without a bias, is zeros (a recurrent cell's first step from a zero
state: PyTorch's ``linear(0, W_hh, b_hh)``, Keras' ``0·R``).

The biases come out of a sum's layers where the sum holds a layer with a bias and either
another layer or a bias of its own (a layer with its bias alone, ``linear(x, W, b)`` plus
anything else, stays as it is); the raising of bias adds (``specgraph.passes.raise_linear``)
leaves a bias in such a sum where the sum holds another (``biases_beside``).

Requires: a verified graph. Ensures: exact in real arithmetic (addition is associative and
commutative; 0·W is 0 for finite weights); float rounding may differ in the last bit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops.dtypes import numpy_dtype
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite
from specgraph.passes.sums import sum_terms

__all__ = ["BiasesOutOfSumsPass", "biases_beside", "bias_param", "fold_bias_sums"]


def bias_param(rw: Rewriter, value: Value, features: int,
               made: Callable[[Value], Node | None] | None = None) -> Value | None:
    """The parameter ``value`` is (or a reshape or expand of), where it is a bias along the
    last axis of a sum of ``features`` features: ``[features]``, or with axes of one before
    (``made`` finds what computes a value, ``rw.producer`` unless given)."""
    made = made or rw.producer
    while not rw.is_param(value):
        node = made(value)
        if node is None or node.op not in ("reshape", "expand"):
            return None
        value = node.inputs[0]
    shape = value.shape
    if not shape or shape[-1] != features or any(s != 1 for s in shape[:-1]):
        return None
    return value


def _layer(rw: Rewriter, value: Value) -> tuple[list[Node], Node] | None:
    """The linear layer whose output ``value`` is, through reshapes (read only there) that
    keep its last axis, with those reshapes, first to last."""
    chain: list[Node] = []
    node = rw.producer(value)
    while node is not None and node.op == "reshape" and rw.uses(value) == 1 and \
            node.inputs[0].shape[-1:] == node.outputs[0].shape[-1:]:
        chain.insert(0, node)
        value = node.inputs[0]
        node = rw.producer(value)
    if node is None or node.op != "linear" or rw.uses(value) != 1:
        return None
    return chain, node


def _top(rw: Rewriter, node: Node) -> Node:
    """The last addition of the sum ``node`` is part of (the sum read only by additions)."""
    while True:
        users = rw.graph.consumers(node.outputs[0])
        if len(users) != 1 or users[0].op != "add" or rw.uses(node.outputs[0]) != 1:
            return node
        node = users[0]


def biases_beside(rw: Rewriter, node: Node) -> int:
    """How many terms of the sum that the addition ``node`` is part of are biases along its
    last axis (parameters), where the sum holds a linear layer or a product too (a residual
    sum of two convolutions' bias adds is not such a sum): two or more are stored as one by
    ``canonicalize_model``. (Read in the graph being rewritten, where the sum's later
    additions are not reached yet: what the rewrite has not kept is the graph's.)"""
    def made(v: Value) -> Node | None:
        return rw.producer(v) or rw.graph.producer(v)

    top = _top(rw, node)
    features = top.outputs[0].shape[-1] if top.outputs[0].rank else 0
    count, layers = 0, 0
    for term in sum_terms(rw, top, made):
        p = made(term)
        while p is not None and p.op in ("reshape", "expand"):
            p = made(p.inputs[0])
        layers += p is not None and p.op in ("linear", "matmul")
        count += bias_param(rw, term, features, made) is not None
    return count if layers else 0


def _zero_product(rw: Rewriter, node: Node) -> bool:
    """A linear layer without a bias, or a matmul, of a constant of zeros: zeros."""
    if node.op == "linear" and node.attrs["bias"] or node.op not in ("linear", "matmul"):
        return False
    if not any(rw.uniform(v) == 0.0 for v in node.inputs):
        return False
    out = node.outputs[0]
    rw.replace(out, rw.constant(np.zeros(out.shape, numpy_dtype(out.dtype)), out.dtype))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op in ("linear", "matmul"):
        return _zero_product(rw, node)
    if node.op != "add" or _top(rw, node) is not node:
        return False  # a sum is rewritten from its last addition
    out = node.outputs[0]
    if not out.rank or out.dtype not in ("float16", "bfloat16", "float32", "float64"):
        return False
    features = out.shape[-1]
    terms = sum_terms(rw, node)
    layers = [_layer(rw, t) for t in terms]
    biased = [found for found in layers if found is not None and found[1].attrs["bias"]]
    free = [t for t in terms if bias_param(rw, t, features) is not None]
    if not biased or (sum(found is not None for found in layers) < 2 and not free):
        return False
    shape = out.shape[-1:]
    for term in terms:
        shape = tuple(np.broadcast_shapes(shape, term.shape))
    if shape != out.shape:
        return False  # (a term broadcast to the sum's shape only by another: left alone)
    kept: list[Value] = []
    biases: list[Value] = []
    for term, found in zip(terms, layers):
        if found is None or not found[1].attrs["bias"]:
            (biases if term in free else kept).append(term)
            continue
        chain, layer = found
        x, w, b = layer.inputs
        value = rw.emit("linear", [x, w], {"bias": False}, like=layer,
                        shape=layer.outputs[0].shape)
        for step in chain:
            value = rw.emit("reshape", [value], dict(step.attrs), like=step,
                            shape=step.outputs[0].shape)
        kept.append(value)
        biases.append(b)
    total = kept[0]
    for term in kept[1:] + biases:
        shape = tuple(np.broadcast_shapes(total.shape, term.shape))
        total = rw.emit("add", [total, term], like=node, shape=shape, dtype=out.dtype)
    rw.replace(out, total)
    return True


class BiasesOutOfSumsPass:
    """See the module docstring."""

    name = "biases-out-of-sums"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)


def _bias_groups(graph: Graph) -> dict[Value, tuple[str, ...]]:
    """The output of the last addition of each sum of linear layers that adds two or more
    biases (parameters along its last axis) to a term of the sum's shape, with their names,
    where those parameters are read nowhere but in such sums of the same biases (through
    reshapes and expands that only add axes of one)."""
    rw = Rewriter(graph)
    groups: dict[Value, tuple[str, ...]] = {}
    where: dict[str, set[tuple[str, ...]]] = {}
    adds: dict[tuple[str, ...], set[Node]] = {}
    for node in graph.nodes:
        rw.keep(node)  # (read, not rewritten: what each node reads is found through it)
        if node.op != "add" or not node.outputs[0].rank or _top(rw, node) is not node:
            continue
        features = node.outputs[0].shape[-1]
        names, whole, layer, additions = set(), False, False, []
        for t in sum_terms(rw, node, adds=additions):
            p = bias_param(rw, t, features)
            if p is not None:
                names.add(graph.param_name(p))
            whole = whole or (p is None and t.shape == node.outputs[0].shape)
            layer = layer or _layer(rw, t) is not None
        if len(names) < 2 or not whole or not layer:
            continue
        group = tuple(sorted(names))
        groups[node.outputs[0]] = group
        adds.setdefault(group, set()).update(additions)
        for name in group:
            where.setdefault(name, set()).add(group)

    def read_in(value: Value, allowed: set[Node]) -> bool:
        for user in graph.consumers(value):
            if user in allowed:
                continue
            if user.op not in ("reshape", "expand") or not read_in(user.outputs[0], allowed):
                return False
        return value not in graph.outputs

    valid = {g for g, nodes in adds.items()
             if all(where[n] == {g} and read_in(graph.params[n], nodes) for n in g)}
    return {out: g for out, g in groups.items() if g in valid}


def fold_bias_sums(graph: Graph, weights: dict[str, np.ndarray]
                   ) -> tuple[Graph, dict[str, tuple[tuple[str, np.ndarray], ...]]]:
    """Two or more biases only ever added together (``linear(x, W_ih) + linear(h, W_hh) +
    b_ih + b_hh``, the form ``BiasesOutOfSumsPass`` gives PyTorch's recurrent cells) stored
    as one parameter, their sum, named by theirs joined with ``+`` (``weights`` gets its
    array, each of theirs reshaped to ``[features]`` and added in the order of their
    names); returned with each such parameter's terms, by name with their arrays."""
    groups = _bias_groups(graph)
    if not groups:
        return graph, {}
    params = dict(graph.params)
    made: dict[tuple[str, ...], Value] = {}
    sums: dict[str, tuple[tuple[str, np.ndarray], ...]] = {}
    for group in sorted(set(groups.values())):
        name = "+".join(group)
        if name in params:
            continue
        first = graph.params[group[0]]
        features = first.shape[-1]
        total = np.zeros((features,), np.asarray(weights[group[0]]).dtype)
        for term in group:
            total = total + np.asarray(weights[term]).reshape(features)
        weights[name] = total
        params[name] = made[group] = Value((features,), first.dtype)
        sums[name] = tuple((term, np.asarray(weights[term])) for term in group)
    if not made:
        return graph, {}
    widened = graph.replace(params=params)

    def rule(rw: Rewriter, node: Node) -> bool:
        group = groups.get(node.outputs[0]) if node.outputs else None
        if group is None or group not in made:
            return False
        out = node.outputs[0]
        features = out.shape[-1]
        rest = [t for t in sum_terms(rw, node) if bias_param(rw, t, features) is None]
        total = rest[0]
        for term in rest[1:] + [made[group]]:
            shape = tuple(np.broadcast_shapes(total.shape, term.shape))
            total = rw.emit("add", [total, term], like=node, shape=shape, dtype=out.dtype)
        rw.replace(out, total)
        return True

    result = rewrite(widened, rule)
    return result.graph, sums
