"""Sums in one order: a chain of additions of three or more terms (word + position +
token-type embeddings, written in any order; scores + position bias + mask) becomes the same
left-to-right sum of the same terms sorted by what computes them, never by name, constants
(a mask) added last.

Requires: a verified graph. Ensures: every chain of ``add`` nodes whose inner sums are read
only by the next addition adds its terms in the canonical order (a structural signature of
each term: its shape, and the ops, attributes (those the forward pass reads), shapes and
leaves of the few nodes above it); terms that look alike keep their order; two or more
constants of one chain are added up into one (a bias and a mask added to the scores one
after the other, or summed first; index offsets), unless their sum is a large table.
Exact in real arithmetic (addition is associative and commutative); float rounding may
differ in the last bit.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import numpy_dtype
from specgraph.ops.values import value_key
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["SortSumsPass", "sum_terms"]

_DEPTH = 3


def sum_terms(rw: Rewriter, node: Node, made: Callable[[Value], Node | None] | None = None,
              adds: list[Node] | None = None) -> list[Value]:
    """The terms of the sum ``node`` ends, inner sums read only here opened up; ``made``
    finds what computes a value (``rw.producer`` unless given), and ``adds``, if given,
    receives the sum's additions."""
    made = made or rw.producer
    if adds is not None:
        adds.append(node)
    out: list[Value] = []
    for v in node.inputs:
        p = made(v)
        if p is not None and p.op == "add" and rw.uses(v) == 1 and \
                v.dtype == node.outputs[0].dtype:
            out.extend(sum_terms(rw, p, made, adds))
        else:
            out.append(v)
    return out


def _signature(rw: Rewriter, v: Value, depth: int) -> tuple[Any, ...]:
    """What computes ``v``, as data that does not depend on names or node order."""
    p = rw.producer(v)
    if p is None:
        if rw.is_param(v):
            return ("param", v.shape)
        data = rw.constant_value(v)
        if data is not None:
            return ("const", v.shape, rw.uniform(v))
        return ("input", v.shape, rw.graph.inputs.index(v) if v in rw.graph.inputs else -1)
    schema = get_spec(p.op).attrs
    attrs = tuple(sorted((k, value_key(x)) for k, x in p.attrs.items()
                         if k not in schema or not schema[k].affects))  # the forward's
    above = tuple(_signature(rw, x, depth - 1) for x in p.inputs) if depth > 0 else ()
    return ("node", p.op, attrs, v.shape, above)


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op != "add":
        return False
    users = rw.graph.consumers(node.outputs[0])
    if len(users) == 1 and users[0].op == "add" and rw.uses(node.outputs[0]) == 1:
        return False  # the chain is rewritten from its last addition
    terms = sum_terms(rw, node)
    if len(terms) < 3:
        return False
    keyed = sorted(enumerate(terms), key=lambda it: (
        rw.constant_value(it[1]) is not None,  # constants (a mask) added last
        repr(_signature(rw, it[1], _DEPTH)), it[0]))
    order = _constants_folded(rw, [v for _, v in keyed], node.outputs[0])
    if order == _left_fold_order(rw, node):
        return False
    total = order[0]
    out = node.outputs[0]
    for term in order[1:]:
        shape = _broadcast(total.shape, term.shape)
        total = rw.emit("add", [total, term], like=node, shape=shape, dtype=out.dtype)
    if total.shape != out.shape:
        return False
    rw.replace(out, total)
    return True


def _constants_folded(rw: Rewriter, order: list[Value], out: Value) -> list[Value]:
    """``order`` (constants last) with its constants added up into one, where there are
    two or more and their sum is not large: PyTorch's BLOOM adds ALiBi to the scores and
    then the mask, Flax's adds the two first and their sum to the scores; TF's gather
    offsets its indices by the batch and the feature apart, PyTorch's by their sum."""
    constants = [v for v in order if rw.constant_value(v) is not None]
    if len(constants) < 2:
        return order
    shape = constants[0].shape
    for v in constants[1:]:
        shape = _broadcast(shape, v.shape)
    if prod(shape) > _FOLDED:
        return order  # a large table (a bias by a mask, both broadcast) stays two
    dtype = numpy_dtype(out.dtype)
    total = np.asarray(rw.constant_value(constants[0]), dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for v in constants[1:]:
            total = total + np.asarray(rw.constant_value(v), dtype)
    return order[:len(order) - len(constants)] + [rw.constant(total, out.dtype)]


_FOLDED = 1 << 20  # elements a sum of constants may hold


def _left_fold_order(rw: Rewriter, node: Node) -> list[Value] | None:
    """The terms in the order the sum already adds them, if it is a left fold."""
    order: list[Value] = []
    while True:
        a, b = node.inputs
        order.insert(0, b)
        p = rw.producer(a)
        if p is not None and p.op == "add" and rw.uses(a) == 1:
            node = p
            continue
        order.insert(0, a)
        return order


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + a
    b = (1,) * (rank - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b))


class SortSumsPass:
    """See the module docstring."""

    name = "sort-sums"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
