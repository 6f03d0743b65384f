"""Raise written-out activations to their ops: max(x, 0) -> relu, x·sigmoid(x) -> silu,
x·relu6(x + 3)/6 -> hardswish, clip(αx + 0.5, 0, 1) -> hardsigmoid,
erf/tanh GELU formulas -> gelu with the approximation they compute, exp/sum -> softmax or
log_softmax with its axis, a written-out parametric ReLU -> prelu with its slope.
softmax(x + c), c a constant along the softmax axis (HF's TF stable_softmax adds 1e-9), is
softmax(x): the shift cancels.

Requires: a verified graph. Ensures: each rewrite is proved by running the replaced region
and the op on random inputs in float64 (``regions.agrees``); formulas that differ (another
constant, another approximation) do not match and stay as arithmetic.
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import is_float
from specgraph.passes.cones import arithmetic_cone, inputs_to_try
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseActivationsPass"]

_ANCHORS = {
    "erf": [("gelu", {"approximate": "none"})],
    "erfc": [("gelu", {"approximate": "none"})],
    "tanh": [("gelu", {"approximate": "tanh"})],
    "sigmoid": [("silu", {})],
    "maximum": [("relu", {})],
    # relu6(x + 3)·x / 6 and relu6(x + 3) / 6 (Keras 3's hard_swish and hard_sigmoid;
    # Keras 2's hard sigmoid clips 0.2·x + 0.5)
    "clip": [("relu", {}), ("hardswish", {}), ("hardsigmoid", {"alpha": 1.0 / 6.0}),
             ("hardsigmoid", {"alpha": 0.2})],
    "exp": [],  # softmax / log_softmax: axis from the region's reductions
}


def _candidates(nodes: list[Node]) -> list[tuple[str, dict]]:
    ops = {n.op for n in nodes}
    out: list[tuple[str, dict]] = []
    for anchor, cands in _ANCHORS.items():
        if anchor in ops:
            out.extend(cands)
    if "exp" in ops:
        axes = {n.attrs["axes"] for n in nodes if n.op == "reduce_sum" and n.attrs["axes"]}
        for a in sorted(axes):
            if len(a) == 1:
                out += [("softmax", {"axis": a[0]}), ("log_softmax", {"axis": a[0]})]
    return out


def _rule(rw: Rewriter, node: Node) -> bool:
    if len(node.outputs) != 1 or not is_float(node.outputs[0].dtype):
        return False
    if node.op in ("softmax", "log_softmax"):
        rw.keep(node)  # the region's root must be visible to the region walk
        _drop_shift(rw, node)
        return True
    if get_spec(node.op).category not in ("elementwise", "activation"):
        return False
    rw.keep(node)
    if node.op == "mul" and _hard_swish(rw, node):
        return True
    if not (node.op in ("add", "where") and _raise_prelu(rw, node)):
        _raise(rw, node)
    return True


def _hard_swish(rw: Rewriter, node: Node) -> bool:
    """x·hardsigmoid(x) of PyTorch's slope 1/6 is hardswish(x) (Keras 3's ``hard_swish``
    multiplies x by its ``hard_sigmoid``, raised first)."""
    for x, gate in (node.inputs, node.inputs[::-1]):
        g = rw.producer(gate)
        if g is not None and g.op == "hardsigmoid" and g.inputs[0] is x and \
                abs(g.attrs["alpha"] - 1.0 / 6.0) < 1e-9 and g.attrs["beta"] == 0.5 and \
                x.shape == node.outputs[0].shape:
            rw.replace(node.outputs[0], rw.emit("hardswish", [x], {}, like=node,
                                                shape=x.shape))
            return True
    return False


def _raise_prelu(rw: Rewriter, node: Node) -> bool:
    """A parametric ReLU written out (Keras's ``relu(x) - alpha·relu(-x)``, Flax's
    ``where(x >= 0, x, slope·x)``): ``prelu(x, slope)``, the one parameter the cone reads
    laid out as its product reads it, proved on random x and random slopes."""
    y = node.outputs[0]
    cone = arithmetic_cone(rw, y)
    if cone is None or len(cone[0]) != 1 or len(cone[1]) > 8:
        return False
    (x,), nodes = cone
    params = list(dict.fromkeys(v for n in nodes for v in n.inputs if rw.is_param(v)))
    if len(params) != 1 or x.shape != y.shape:
        return False
    slope = params[0]
    shape = next((v.shape for n in nodes if n.op == "mul" for v in n.inputs
                  if rw.is_fixed(v) and v.size == slope.size), None)
    if shape is None or len(shape) > y.rank:
        return False
    inner = region(rw, y, [x, slope])
    spec = get_spec("prelu")
    if inner is None or not agrees(
            rw, inner, y, [x, slope],
            lambda env: spec.reference(env[x], np.reshape(env[slope], shape)),
            claim=("prelu", shape)):
        return False
    if slope.shape != shape:
        slope = rw.emit("reshape", [slope], {"shape": shape}, like=node, shape=shape)
    rw.replace(y, rw.emit("prelu", [x, slope], like=node, shape=y.shape))
    return True


def _drop_shift(rw: Rewriter, node: Node) -> None:
    """softmax(x ± c) with c constant along the axis: softmax(x), proved on random x."""
    y, axis = node.outputs[0], node.attrs["axis"]
    add = rw.producer(node.inputs[0])
    if add is None or add.op not in ("add", "sub"):
        return
    for x, c in (add.inputs, add.inputs[::-1]) if add.op == "add" else (add.inputs,):
        data = rw.constant_value(c)
        if data is None or x.shape != y.shape or x.dtype != y.dtype:
            continue
        full = (1,) * (y.rank - c.rank) + c.shape
        if full[axis] != 1:
            continue
        nodes = region(rw, y, [x])
        spec = get_spec(node.op)
        attrs = dict(node.attrs)
        if nodes is not None and agrees(
                rw, nodes, y, [x], lambda env, x=x: spec.reference(env[x], **attrs),
                claim=("shifted", node.op, spec.normalize_attrs(attrs)),
                batch=_slicewise(node.op, attrs, x, y)):
            rw.replace(y, rw.emit(node.op, [x], attrs, like=node, shape=y.shape))
            return


def _raise(rw: Rewriter, node: Node) -> None:
    y = node.outputs[0]
    cone = arithmetic_cone(rw, y)
    if cone is None:
        return
    free, nodes = cone
    if len(nodes) == 1 and node.op in _TARGETS:
        return
    for x in inputs_to_try(free, nodes, y):
        inner = region(rw, y, [x])
        if inner is None:
            continue
        for op, attrs in _candidates(inner):
            spec = get_spec(op)
            attrs = spec.normalize_attrs(attrs)

            def candidate(env, spec=spec, attrs=attrs, x=x):
                return spec.reference(env[x], **attrs)

            if agrees(rw, inner, y, [x], candidate, claim=("activation", op, attrs),
                      batch=_slicewise(op, attrs, x, y)):
                rw.replace(y, rw.emit(op, [x], attrs, like=node, shape=y.shape))
                return


def _slicewise(op: str, attrs: dict, x: Value, y: Value) -> dict[Value, tuple[int, ...]]:
    """The axes the op computes slice by slice: all of them, but softmax's own axis."""
    axes = tuple(a for a in range(y.rank) if a != attrs.get("axis"))
    return {y: axes, x: axes}  # x.shape == y.shape (inputs_to_try)


_TARGETS = frozenset({"relu", "gelu", "silu", "softmax", "log_softmax", "hardswish",
                      "hardsigmoid"})


class RaiseActivationsPass:
    """See the module docstring."""

    name = "raise-activations"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
