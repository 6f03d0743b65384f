"""Backward cones of elementwise arithmetic: where raising rules look for decompositions."""

from __future__ import annotations

from specgraph.ir import Node, Value
from specgraph.ops import get_spec
from specgraph.passes.rewrite import Rewriter

__all__ = ["arithmetic_cone", "inputs_to_try"]

_ARITHMETIC = frozenset({"elementwise", "activation", "reduction"})


def arithmetic_cone(rw: Rewriter, output: Value, *, limit: int = 16, stop_at_shared: bool = False,
                    nearest: bool = False) -> tuple[list[Value], list[Node]] | None:
    """The free tensors and the nodes of the elementwise/reduction cone that computes ``output``.

    The walk goes back through elementwise ops, activations and reductions and stops at any
    other producer, graph input, parameter or constant. Free tensors are the stopping values
    that are neither parameters nor constants, in first-seen order. Returns None past
    ``limit`` nodes. With ``stop_at_shared`` the walk also stops at a value some other
    kind of layer reads too (a residual stream that convolutions read between its adds).
    With ``nearest`` the walk goes breadth first and, past ``limit`` nodes, stops: what it
    has not walked back from is free (a norm whose input is the end of a long arithmetic
    chain, ESM's embeddings rescaled by the share of masked tokens).
    """
    free: list[Value] = []
    nodes: dict[int, Node] = {}
    stack = [output]
    seen: set[Value] = set()
    while stack:
        v = stack.pop(0) if nearest else stack.pop()
        if v in seen:
            continue
        seen.add(v)
        node = rw.producer(v)
        if rw.is_param(v) or rw.constant_value(v) is not None:
            continue
        if node is not None and node.op in ("reshape", "expand", "transpose") and rw.is_fixed(
                node.inputs[0]):
            nodes[id(node)] = node  # parameters laid out for broadcasting: part of the region
            stack.extend(node.inputs)
            continue
        if node is not None and node.op == "reshape" and _unit_reshape(node):
            nodes[id(node)] = node  # adds or drops size-1 axes only: a broadcasting view
            stack.extend(node.inputs)
            continue
        if node is None or get_spec(node.op).category not in _ARITHMETIC or (
                node.op in ("cast",)) or (stop_at_shared and v is not output
                                          and _read_elsewhere(rw, v)):
            if v not in free:
                free.append(v)
            continue
        if id(node) not in nodes:
            if nearest and len(nodes) >= limit:
                if v not in free:
                    free.append(v)
                continue
            nodes[id(node)] = node
            if len(nodes) > limit:
                return None
            stack.extend(node.inputs if nearest else reversed(node.inputs))
    return free, rw.in_order(nodes.values())


def _read_elsewhere(rw: Rewriter, value: Value) -> bool:
    """Whether a layer other than elementwise arithmetic reads ``value`` in the graph (a
    reshape that only adds or drops size-1 axes is a view: its own readers count)."""
    for n in rw.graph.consumers(value):
        if n.op == "reshape" and _unit_reshape(n):
            if _read_elsewhere(rw, n.outputs[0]):
                return True
        elif get_spec(n.op).category not in _ARITHMETIC:
            return True
    return False


def _unit_reshape(node: Node) -> bool:
    before = [s for s in node.inputs[0].shape if s != 1]
    after = [s for s in node.outputs[0].shape if s != 1]
    return before == after


def inputs_to_try(free: list[Value], nodes: list[Node], y: Value) -> list[Value]:
    """The cone's only free tensor, then values read twice inside it (x in x·sigmoid(x)),
    earliest first so that the largest region wins."""
    readers: dict[Value, int] = {}
    for n in nodes:
        for v in set(n.inputs):
            readers[v] = readers.get(v, 0) + 1
    out = [free[0]] if len(free) == 1 else []
    out += [v for n in nodes for v in n.outputs if readers.get(v, 0) >= 2 and v not in out]
    # an activation inside the cone may end the previous layer (batch norm after a relu)
    out += [n.outputs[0] for n in nodes if get_spec(n.op).category == "activation"
            and n.outputs[0] is not y and n.outputs[0] not in out]
    # two branches joined first, then normalized (Keras ResNetV2's pre-activation batch
    # norm of the residual sum: the cone walks through the add to both branches)
    given = set(free)
    out += [n.outputs[0] for n in nodes if len(set(n.inputs)) >= 2 and
            all(v in given for v in n.inputs) and n.outputs[0] is not y and
            n.outputs[0] not in out]
    return [v for v in out if v.shape == y.shape]
