"""Give each stretch of elementwise ops between layout-bound layers one layout, the cheapest.

A residual stream between convolutions and channels-last layers (ConvNeXt: a depthwise conv
in NCHW, then LayerNorm, Dense and a layer scale in NHWC) can live in either layout, and
models pick differently: Keras keeps the stream NHWC and transposes each conv's input,
PyTorch keeps it NCHW and transposes each branch back before the add. Local moves (sinking,
hoisting) stop at ties, so each model keeps its own. Here the elementwise ops connected
through their operands and through transposes form a component; its sources (values other
layers make) and its readers (other layers, the graph's outputs) fix the layouts they hold
and need, and every layout the component's values take is a candidate for all of its ops.
The cheapest candidate (fewest transposes: one per value and layout it is needed in but not
made in; a reduction reads any layout, the transposes sinking into it) is taken where it is
cheaper than the current layouts, or as cheap while they are not that one candidate's
everywhere. Ties go to fewer transposes read by the ops (transposes sink toward readers),
then to the layout of the component's first source. Each op computes the same elements in
another order, and broadcast constants are relaid out by a reshape.

Requires: a verified graph. Ensures: in every component the elementwise ops share one
layout, the cheapest, unless a constant operand cannot be relaid out in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.passes.rewrite import PassResult, Rewriter
from specgraph.passes.transposes import ELEMENTWISE, relayout_operand

__all__ = ["UnifyLayoutsPass"]

_FLEXIBLE = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                       "reduce_var"})
Perm = tuple[int, ...]


def _between(a: Perm, b: Perm) -> Perm:
    """The transpose that turns data laid out as ``a`` into data laid out as ``b``."""
    return tuple(a.index(x) for x in b)


@dataclass
class _Component:
    layout: dict[Value, Perm] = field(default_factory=dict)  # value -> layout of its data
    ops: list[Node] = field(default_factory=list)  # elementwise ops, graph order
    transposes: list[Node] = field(default_factory=list)
    root: dict[Value, Value] = field(default_factory=dict)  # transpose output -> its source


def _is_op(graph: Graph, fixed: set[Value], node: Node) -> bool:
    if len(node.outputs) != 1 or not node.inputs or node.outputs[0].rank < 2:
        return False
    if get_spec(node.op).category not in ELEMENTWISE or node.outputs[0] in fixed:
        return False
    rank = node.outputs[0].rank
    if _bias_add(graph, fixed, node):
        return False
    return all(v in fixed or v.rank == rank for v in node.inputs)


_WEIGHTED = ("conv", "conv_transpose", "linear")


def _bias_add(graph: Graph, fixed: set[Value], node: Node) -> bool:
    """A layer's bias added to its output (seen through a transpose, as Flax's and Keras'
    channels-last convolutions write it): the layer's own, which raising a linear layer
    folds into it, not a stretch's op to relay out (moving it would undo what sinking the
    transpose below it did, round after round)."""
    if node.op != "add" or len(node.inputs) != 2:
        return False
    for v, other in (node.inputs, node.inputs[::-1]):
        if other not in fixed or graph.param_name(other) is None and not any(
                graph.param_name(x) is not None for x in _above(graph, other)):
            continue
        p = graph.producer(v)
        if p is not None and p.op == "transpose":
            p = graph.producer(p.inputs[0])
        if p is not None and p.op in _WEIGHTED:
            return True
    return False


def _above(graph: Graph, v: Value) -> list[Value]:
    """The inputs of the views (reshapes, transposes) that make ``v``."""
    p = graph.producer(v)
    while p is not None and p.op in ("reshape", "transpose"):
        v = p.inputs[0]
        p = graph.producer(v)
    return [v]


def _fixed(graph: Graph) -> set[Value]:
    fixed = set(graph.params.values()) | set(graph.constants)
    for node in graph.nodes:
        if node.inputs and all(v in fixed for v in node.inputs):
            fixed.update(node.outputs)
    return fixed


def _components(graph: Graph, fixed: set[Value]) -> list[_Component]:
    ops = {n for n in graph.nodes if _is_op(graph, fixed, n)}
    seen: set[Value] = set()
    found = []
    for start in graph.nodes:
        if start not in ops or start.outputs[0] in seen:
            continue
        comp = _Component()
        rank = start.outputs[0].rank
        stack: list[tuple[Value, Perm]] = [(start.outputs[0], tuple(range(rank)))]
        members: set[Node] = set()
        while stack:
            v, lay = stack.pop()
            if v in comp.layout:
                if comp.layout[v] != lay:
                    return []  # inconsistent layouts (square axes swapped): leave it
                continue
            comp.layout[v] = lay
            node = graph.producer(v)
            near = list(graph.consumers(v)) + ([node] if node is not None else [])
            for n in near:
                if n in ops and n not in members:
                    members.add(n)
                    for u in (*n.inputs, n.outputs[0]):
                        if u not in fixed:
                            stack.append((u, lay))
                elif n.op == "transpose" and n not in members:
                    members.add(n)
                    perm = n.attrs["perm"]
                    if n.inputs[0] is v:
                        stack.append((n.outputs[0], tuple(lay[p] for p in perm)))
                    else:
                        inv = [0] * len(perm)
                        for i, p in enumerate(perm):
                            inv[p] = lay[i]
                        stack.append((n.inputs[0], tuple(inv)))
        seen.update(comp.layout)
        comp.ops = [n for n in graph.nodes if n in members and n in ops]
        comp.transposes = [n for n in graph.nodes if n in members and n.op == "transpose"]
        for t in comp.transposes:
            comp.root[t.outputs[0]] = t.inputs[0]
        found.append(comp)
    return found


def _root(comp: _Component, v: Value) -> Value:
    while v in comp.root:
        v = comp.root[v]
    return v


def _needs(graph: Graph, fixed: set[Value], comp: _Component, made: dict[Value, Perm]
           ) -> tuple[set[tuple[Value, Perm]], set[tuple[Value, Perm]]]:
    """The (data, layout) pairs the ops and the other readers read, given the layouts the
    ops compute in (``made``): (read by the ops, read by the others)."""
    by_ops, by_others = set(), set()
    members = set(comp.ops) | set(comp.transposes)
    for n in comp.ops:
        for u in n.inputs:
            if u not in fixed:
                by_ops.add((_root(comp, u), made[n.outputs[0]]))
    outputs = set(graph.outputs)
    for v, lay in comp.layout.items():
        readers = [n for n in graph.consumers(v) if n not in members]
        if v in outputs or any(n.op not in _FLEXIBLE for n in readers):
            by_others.add((_root(comp, v), lay))
    return by_ops, by_others


def _native(comp: _Component, made: dict[Value, Perm], v: Value) -> Perm:
    return made.get(v, comp.layout[v])


def _cost(graph, fixed, comp, made) -> tuple[int, int]:
    by_ops, by_others = _needs(graph, fixed, comp, made)
    ops_side = {p for p in by_ops if p[1] != _native(comp, made, p[0])}
    others = {p for p in by_others if p[1] != _native(comp, made, p[0])}
    return len(ops_side | others), len(ops_side)


def _relayable(comp: _Component, fixed: set[Value], lay: Perm) -> bool:
    for n in comp.ops:
        perm = _between(lay, comp.layout[n.outputs[0]])
        for v in n.inputs:
            if v in fixed and not (v.rank == 0 or all(s == 1 for s in v.shape)):
                full = (1,) * (len(perm) - v.rank) + v.shape
                inv = [0] * len(perm)
                for i, p in enumerate(perm):
                    inv[p] = i
                order = [i for i in inv if full[i] != 1]
                if order != sorted(order):
                    return False
    return True


def _choose(graph: Graph, fixed: set[Value], comp: _Component) -> Perm | None:
    current = {n.outputs[0]: comp.layout[n.outputs[0]] for n in comp.ops}
    now = _cost(graph, fixed, comp, current)
    sources = [v for v in comp.layout if v not in current and v not in comp.root]
    order = {v: i for i, v in enumerate(graph.inputs)}
    for i, n in enumerate(graph.nodes):
        for v in n.outputs:
            order[v] = len(graph.inputs) + i
    first = min(sources, key=lambda v: order.get(v, -1), default=None)
    best, best_key = None, None
    for lay in sorted(set(comp.layout.values())):
        if not _relayable(comp, fixed, lay):
            continue
        key = (*_cost(graph, fixed, comp, {v: lay for v in current}),
               0 if first is not None and comp.layout[first] == lay else 1)
        if best_key is None or key < best_key:
            best, best_key = lay, key
    if best is None or best_key[0] > now[0]:
        return None
    if all(lay == best for lay in current.values()):
        return None
    return best


def _apply(rw: Rewriter, fixed: set[Value], comp: _Component, lay: Perm) -> None:
    made: dict[Value, Value] = {}  # op output -> its data in ``lay``
    cache: dict[tuple[Value, Perm], Value] = {}
    members = {id(n) for n in comp.ops}

    def read(v: Value, want: Perm, like: Node) -> Value:
        src = _root(comp, v)
        data, has = (made[src], lay) if src in made else (src, comp.layout[src])
        if has == want:
            return data
        key = (src, want)
        if key not in cache:
            perm = _between(has, want)
            cache[key] = rw.emit("transpose", [data], {"perm": perm}, like=like,
                                 shape=tuple(data.shape[p] for p in perm), dtype=data.dtype)
        return cache[key]

    for node in rw.graph.nodes:
        if id(node) in members:
            out = node.outputs[0]
            to_old = _between(lay, comp.layout[out])
            inputs = [relayout_operand(rw, v, to_old, out.rank, node) if v in fixed
                      else read(v, lay, node) for v in node.inputs]
            shape = tuple(out.shape[i] for i in _between(comp.layout[out], lay))
            made[out] = rw.emit(node.op, inputs, dict(node.attrs), like=node, shape=shape,
                                dtype=out.dtype)
            rw.replace(out, read(out, comp.layout[out], node))
            continue
        if node.op == "transpose" and node.outputs[0] in comp.root:
            rw.replace(node.outputs[0], read(node.outputs[0],
                                             comp.layout[node.outputs[0]], node))
            continue
        inputs = tuple(rw.resolve(v) for v in node.inputs)
        rw.keep(node if inputs == node.inputs else node.replace(inputs=inputs))


class UnifyLayoutsPass:
    """See the module docstring."""

    name = "unify-layouts"

    def __call__(self, graph: Graph) -> PassResult:
        fixed = _fixed(graph)
        for comp in _components(graph, fixed):
            lay = _choose(graph, fixed, comp)
            if lay is not None:
                rw = Rewriter(graph)
                _apply(rw, fixed, comp, lay)
                return PassResult(rw.finish(), True)
        return PassResult(graph, False)
