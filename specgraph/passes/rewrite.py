"""``Rewriter``: rebuild a graph node by node, replacing matched patterns with new nodes.

A rule sees each node in order, with its inputs already rewritten, and either keeps it or
emits replacement nodes and redirects the node's outputs to theirs. Nodes left without
readers are pruned at the end, so a rule never deletes anything by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from specgraph.ir import Graph, Native, Node, Value, complete_natives, prune
from specgraph.ops import get_spec

__all__ = ["Rewriter", "PassResult", "rewrite"]


@dataclass(frozen=True)
class PassResult:
    """What a pass returns: the new graph and whether anything changed."""

    graph: Graph
    modified: bool


class Rewriter:
    """The mutable state of one rewrite: new nodes so far and value substitutions."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.subst: dict[Value, Value] = {}
        self.constants: dict[Value, np.ndarray] = dict(graph.constants)
        self.producers: dict[Value, Node] = {}
        self._position: dict[Node, int] = {}
        self.modified = False
        self._uses = {v: len(graph.consumers(v)) for n in graph.nodes for v in n.outputs}
        self._outputs = set(graph.outputs)
        self._fixed: dict[Value, bool] = {}
        self.memo: dict[str, Any] = {}  # what a rule finds once per rewrite, by its name
        self._unobserved: set[Value] = set()  # values whose natives go (``unobserve``)

    # --- reading ---------------------------------------------------------------------------
    def resolve(self, value: Value) -> Value:
        while value in self.subst:
            value = self.subst[value]
        return value

    def producer(self, value: Value) -> Node | None:
        """The (rewritten) node computing ``value``, or None for inputs, params, constants."""
        return self.producers.get(self.resolve(value))

    def uses(self, value: Value) -> int:
        """How many nodes of the original graph read ``value`` (graph outputs count once)."""
        return self._uses.get(value, 0) + (1 if value in self._outputs else 0)

    def constant_value(self, value: Value) -> np.ndarray | None:
        return self.constants.get(self.resolve(value))

    def is_param(self, value: Value) -> bool:
        return self.graph.param_name(self.resolve(value)) is not None

    def is_fixed(self, value: Value) -> bool:
        """Whether ``value`` depends on parameters and constants only, not on any input."""
        value = self.resolve(value)
        stack = [value]  # walked without recursion: a deep network's input is far above
        while stack:
            v = stack[-1]
            if v in self._fixed:
                stack.pop()
                continue
            if self.is_param(v) or v in self.constants:
                self._fixed[v] = True
                stack.pop()
                continue
            node = self.producers.get(v)
            if node is None or not node.inputs:
                self._fixed[v] = False
                stack.pop()
                continue
            inputs = [self.resolve(u) for u in node.inputs]
            pending = [u for u in inputs if u not in self._fixed]
            if pending:
                stack.extend(pending)
                continue
            self._fixed[v] = all(self._fixed[u] for u in inputs)
            stack.pop()
        return self._fixed[value]

    def in_order(self, nodes: Iterable[Node]) -> list[Node]:
        """``nodes``, all kept already, in the order they were kept (the new graph's order)."""
        return sorted(nodes, key=self._position.__getitem__)

    def scalar(self, value: Value) -> float | None:
        """The number a constant holds if it is a single element, else None."""
        data = self.constant_value(value)
        if data is None or data.size != 1:
            return None
        return float(data.reshape(()))

    def uniform(self, value: Value) -> float | None:
        """The number every element of a constant holds (a filled tensor), else None."""
        data = self.constant_value(value)
        if data is None or data.size == 0 or data.dtype.kind not in "biuf":
            return None
        first = data.reshape(-1)[0]
        return float(first) if np.all(data == first) else None

    # --- writing ---------------------------------------------------------------------------
    def keep(self, node: Node) -> Node:
        """Keep ``node`` (once: a rule that keeps the node it reads, to walk a region from
        it, and then declines leaves it to the sweep, which keeps it again)."""
        if node in self._position:
            return node
        self._position[node] = len(self.nodes)
        self.nodes.append(node)
        for v in node.outputs:
            self.producers[v] = node
        return node

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *,
             like: Node, shape: Sequence[int], dtype: str | None = None,
             scope: str | None = None) -> Value:
        """A new single-output node placed here; scope, source and origin copied from ``like``."""
        spec = get_spec(op)
        normalized = spec.normalize_attrs(attrs or {})
        out = Value(tuple(int(s) for s in shape), dtype or like.outputs[0].dtype)
        node = Node(op, tuple(inputs), (out,), MappingProxyType(normalized),
                    like.scope if scope is None else scope, like.source, like.origin)
        self.keep(node)
        self.modified = True
        return out

    def constant(self, data: Any, dtype: str) -> Value:
        array = np.array(data)
        array.setflags(write=False)
        value = Value(tuple(array.shape), dtype)
        self.constants[value] = array
        return value

    def replace(self, old: Value, new: Value) -> None:
        """Every later reader of ``old`` reads ``new`` instead."""
        if old is not new:
            self.subst[old] = new
            self.modified = True
            if old in self._uses:  # the new value is read where the old one was
                self._uses[new] = self._uses.get(new, 0) + self._uses[old]
            if old in self._outputs:
                self._outputs.add(new)

    def unobserve(self, value: Value) -> None:
        """``value`` stands for no native value of its own: the values merged into it stood
        for several (PyTorch's per-layer copies of one view, one graph value once merged,
        each copy's gradient a part of the whole). Only a native the graph's layouts and
        views give it from its neighbours' remains (``complete_natives``)."""
        self._unobserved.add(value)

    def finish(self) -> Graph:
        outputs = tuple(self.resolve(v) for v in self.graph.outputs)
        graph = Graph(
            inputs=self.graph.inputs, input_names=self.graph.input_names,
            params=self.graph.params, constants=MappingProxyType(self.constants),
            nodes=tuple(self.nodes),
            outputs=outputs, output_names=self.graph.output_names, name=self.graph.name,
            natives=MappingProxyType(self._natives()),
        )
        return prune(graph.verify())

    def _natives(self) -> dict[Value, Native]:
        """The graph's natives carried to the values that replaced theirs (a replacement
        of the same shape computes the same value: a raised layer stands for the region's
        output; one of another shape, a broadcast's source standing for it, does not), then
        through transposes; those of values the rewrite dropped go with them.

        A value dropped as a copy of its input (a pad of nothing, ``x + 0``) hands its
        native on last, to a value nothing else stands for: the program's gradient at the
        copy is its own readers' part of the gradient alone (Keras' ``ZeroPadding2D(0)``
        before a conv whose input a concat reads too), so the native of what made the
        input, carried through the layouts, comes first."""
        natives = dict(self.graph.natives)
        copies = {natives[old].key for old in self.subst
                  if old in natives and self._dropped_copy(old)}
        # the copy's native, wherever it is (carried through a layout below the copy too)
        later = [(v, n) for v, n in natives.items() if n.key in copies]
        natives = {v: n for v, n in natives.items()
                   if n.key not in copies and v not in self._unobserved}
        for old in self.subst:
            native = natives.get(old)
            new = self.resolve(old)
            if native is not None and new.shape == old.shape and new not in self._unobserved:
                natives.setdefault(new, native)
        later += [(new, n) for old, n in later
                  if (new := self.resolve(old)) is not old and new.shape == old.shape]
        g = self.graph
        present = {*g.inputs, *g.params.values(), *(v for n in self.nodes for v in n.outputs)}
        out = complete_natives(self.nodes, {v: n for v, n in natives.items() if v in present})
        if later:
            for v, native in later:
                if v in present:
                    out.setdefault(v, native)
            out = complete_natives(self.nodes, out)
        return out

    def _dropped_copy(self, old: Value) -> bool:
        """Whether ``old`` was replaced by its producer's first input: dropped as a copy."""
        producer = self.graph.producer(old)
        return producer is not None and bool(producer.inputs) and \
            self.resolve(producer.inputs[0]) is self.resolve(old)


Rule = Callable[[Rewriter, Node], bool]


def rewrite(graph: Graph, rule: Rule) -> PassResult:
    """Apply ``rule`` to every node in order; ``rule`` returns True when it replaced the node."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        inputs = tuple(rw.resolve(v) for v in node.inputs)
        if inputs != node.inputs:
            node = node.replace(inputs=inputs)
        if not rule(rw, node):
            rw.keep(node)
    if not rw.modified:
        return PassResult(graph, False)
    return PassResult(rw.finish(), True)
