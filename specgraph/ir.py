"""The shared graph IR: immutable ``Value``, ``Node`` and ``Graph``, built with ``GraphBuilder``.

A Graph is a pure dataflow program over tensors. Values have no names: identity is object
identity, and printers assign names when they print. Inputs, parameters and outputs carry
the names users know (``x``, ``fc1.weight``, ``logits``).

Example:
    >>> from specgraph.ir import GraphBuilder
    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (2, 3), "float32")
    >>> w = b.param("fc.weight", (3, 4), "float32")
    >>> h = b.add("linear", [x, w], {"bias": False}, shape=(2, 4), dtype="float32", scope="fc")
    >>> y = b.add("relu", [h], shape=(2, 4), dtype="float32")
    >>> b.output("y", y)
    >>> g = b.build()
    >>> [n.op for n in g.nodes]
    ['linear', 'relu']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from specgraph.errors import GraphError
from specgraph.ops import OPAQUE, get_spec, is_registered
from specgraph.ops.dtypes import DTYPES

__all__ = ["Value", "Node", "Graph", "GraphBuilder", "Native", "DTYPES", "prune",
           "complete_natives", "same_elements"]



@dataclass(frozen=True, eq=False)
class Value:
    """A tensor flowing through the graph: its static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python's ints (np.prod costs 10 µs a call)

    def __repr__(self) -> str:
        return f"Value({self.dtype}{list(self.shape)})"


@dataclass(frozen=True)
class Native:
    """The value of the model's own program that a graph value equals.

    Attributes:
        key: how the frontend names the native value (an FX node and output index, a path
            of jaxpr equations, a tensor name): only that frontend's program reads it.
        perm: the graph value is the native array transposed by ``perm`` (None: as is).
        shape: the native array is first reshaped to ``shape`` (its elements in row-major
            order; None: as is): a head split or merge between the native value and the
            graph's (a Flax ``DenseGeneral``, attention heads merged by a reshape).
    """

    key: Hashable
    perm: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None

    def canonical(self, array: Any) -> Any:
        """The native ``array`` as the graph value (a NumPy array, or a framework's tensor
        where the program left it on its device: reshaped and transposed there, as a view
        where one can be)."""
        if self.shape is not None and tuple(array.shape) != self.shape:
            array = array.reshape(self.shape)
        return array if self.perm is None else permuted(array, self.perm)

    def through(self, perm: Sequence[int]) -> Native:
        """The native of ``transpose(value, perm)`` where this is the native of ``value``."""
        base = self.perm or tuple(range(len(perm)))
        composed = tuple(base[p] for p in perm)
        return Native(self.key, None if composed == tuple(range(len(perm))) else composed,
                      self.shape)

    def reshaped(self, shape: Sequence[int]) -> Native | None:
        """The native of ``reshape(value, shape)`` where this is the native of ``value``;
        None where the value is the native transposed (a reshape of a transposed array is
        no reshape of the native)."""
        return None if self.perm is not None else Native(self.key, None, tuple(shape))


def same_elements(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two shapes hold the same elements in the same order, differing only in axes
    of size one (a scalar gain ``[]`` and TF's ``[1]``): one is a reshape of the other."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def permuted(array: Any, perm: Sequence[int]) -> Any:
    """``array`` transposed by ``perm``: NumPy's, or the framework's own op for a PyTorch
    or JAX tensor (which stays on its device)."""
    if isinstance(array, np.ndarray):
        return np.transpose(array, perm)
    if hasattr(array, "permute"):  # PyTorch
        return array.permute(*perm)
    return array.transpose(tuple(perm))  # JAX


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True, eq=False)
class Node:
    """One op application.

    Attributes:
        op: canonical op name (see ``specgraph.ops``).
        inputs: the values it reads, in the op's input order.
        outputs: the values it produces.
        attrs: typed attributes, complete (defaults filled in), keys sorted.
        scope: module path, e.g. ``encoder.layer.0.attention`` ("" for the model itself).
        source: ``file:line`` of the user code that created it, if known.
        origin: the native op it came from, e.g. ``aten.linear.default``.
    """

    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    scope: str = ""
    source: str = ""
    origin: str = ""

    @property
    def output(self) -> Value:
        """The single output (raises if the node has several)."""
        if len(self.outputs) != 1:
            raise GraphError(f"node {self.op} at {self.scope or '<model>'} has "
                             f"{len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def replace(self, **changes: Any) -> Node:
        """A copy with ``changes`` applied (attrs are re-frozen)."""
        if "attrs" in changes:
            changes["attrs"] = MappingProxyType(dict(changes["attrs"]))
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """``op at scope (source)``, for error messages."""
        where = self.scope or "<model>"
        src = f" ({self.source})" if self.source else ""
        origin = f" from {self.origin}" if self.origin else ""
        return f"{self.op} at {where}{origin}{src}"

    def __repr__(self) -> str:
        return f"Node({self.describe()})"


@dataclass(frozen=True, eq=False)
class Graph:
    """A whole model: named inputs, named parameters, constants, nodes in order, named outputs.

    Build with ``GraphBuilder``; derive variants with ``replace``. ``verify()`` checks every
    invariant and is run by the builder.
    """

    inputs: tuple[Value, ...]
    input_names: tuple[str, ...]
    params: Mapping[str, Value]
    constants: Mapping[Value, np.ndarray]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    output_names: tuple[str, ...]
    name: str = ""
    natives: Mapping[Value, Native] = field(default_factory=lambda: MappingProxyType({}))

    def replace(self, **changes: Any) -> Graph:
        """A copy with ``changes`` applied (mappings are re-frozen), verified."""
        for key in ("params", "constants", "natives"):
            if key in changes:
                changes[key] = MappingProxyType(dict(changes[key]))
        for key in ("inputs", "input_names", "nodes", "outputs", "output_names"):
            if key in changes:
                changes[key] = tuple(changes[key])
        graph = dataclasses.replace(self, **changes)
        graph.verify()
        return graph

    # --- lookups -------------------------------------------------------------------------
    @cached_property
    def _producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    @cached_property
    def _consumers(self) -> dict[Value, list[Node]]:
        users: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                lst = users.setdefault(v, [])
                if not lst or lst[-1] is not n:
                    lst.append(n)
        return users

    @cached_property
    def _param_names(self) -> dict[Value, str]:
        return {v: k for k, v in self.params.items()}

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {id(n): i for i, n in enumerate(self.nodes)}

    def index(self, node: Node) -> int:
        """The position of ``node`` in ``nodes`` (a KeyError if it is not one of them)."""
        return self._positions[id(node)]

    def producer(self, value: Value) -> Node | None:
        """The node that computes ``value`` (None for inputs, params and constants)."""
        return self._producers.get(value)

    def consumers(self, value: Value) -> list[Node]:
        """The nodes that read ``value``, in graph order."""
        return list(self._consumers.get(value, ()))

    def param_name(self, value: Value) -> str | None:
        """The parameter name of ``value``, or None if it is not a parameter."""
        return self._param_names.get(value)

    def input_name(self, value: Value) -> str | None:
        for v, name in zip(self.inputs, self.input_names):
            if v is value:
                return name
        return None

    def param_count(self) -> int:
        return sum(v.size for v in self.params.values())

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # --- invariants ----------------------------------------------------------------------
    def verify(self) -> Graph:
        """Check the IR invariants; raise GraphError naming the node and the broken rule.

        Every value is defined once before it is used (inputs, params, constants, earlier
        node outputs); every op is registered and its attributes and arity match its schema;
        names are unique; constants match their values' shapes. Returns the graph.
        """
        defined: set[Value] = set()

        def define(value: Value, what: str) -> None:
            if not isinstance(value, Value):
                raise GraphError(f"{what} is {value!r}, not a Value")
            if value in defined:
                raise GraphError(f"{what} defines a value that is already defined")
            if value.dtype not in DTYPES:
                raise GraphError(f"{what} has unknown dtype {value.dtype!r}")
            defined.add(value)

        _unique(self.input_names, "input")
        _unique(self.output_names, "output")
        if len(self.inputs) != len(self.input_names) or len(self.outputs) != len(self.output_names):
            raise GraphError("graph inputs/outputs and their names differ in length")
        for v, name in zip(self.inputs, self.input_names):
            define(v, f"input {name!r}")
        for name, v in self.params.items():
            define(v, f"parameter {name!r}")
        for v, data in self.constants.items():
            define(v, "a constant")
            if tuple(np.shape(data)) != v.shape:
                raise GraphError(f"constant of shape {np.shape(data)} is declared {v.shape}")
        for i, node in enumerate(self.nodes):
            _verify_node(node, i, defined)
            for j, v in enumerate(node.outputs):
                define(v, f"output {j} of node {i} ({node.describe()})")
        for name, v in zip(self.output_names, self.outputs):
            if v not in defined:
                raise GraphError(f"graph output {name!r} is not computed by the graph")
        return self


def prune(graph: Graph) -> Graph:
    """``graph`` without nodes whose outputs nothing reads, nor parameters and constants
    only they read (dead code does not change what a model computes)."""
    live: set[Value] = set(graph.outputs)
    keep: list[Node] = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            keep.append(node)
            live.update(node.inputs)
    keep.reverse()
    if len(keep) == len(graph.nodes) and all(v in live for v in graph.params.values()) and \
            all(v in live for v in graph.constants):
        return graph
    return graph.replace(
        nodes=keep,
        params={k: v for k, v in graph.params.items() if v in live},
        constants={v: d for v, d in graph.constants.items() if v in live},
        natives={v: n for v, n in graph.natives.items() if v in live},
    )


def complete_natives(nodes: Sequence[Node], natives: Mapping[Value, Native]
                     ) -> dict[Value, Native]:
    """``natives`` extended through transposes and reshapes: a transpose of a value with a
    native has that native transposed, and the input of a transpose whose output has one
    has it transposed back (a channels-first value between a channels-last program's layout
    transposes is the native value permuted); likewise a reshape's output or input, where
    the native is not transposed (attention heads split from, or merged into, a native
    projection)."""
    out = dict(natives)
    for _ in range(2):
        for node in (*nodes, *reversed(nodes)):
            if node.op not in _NATIVE_THROUGH or len(node.outputs) != 1 or not node.inputs:
                continue
            x, (y,) = node.inputs[0], node.outputs
            if (x in out) == (y in out):
                continue
            if node.op == "transpose":
                perm = tuple(node.attrs["perm"])
                if x in out:
                    out[y] = out[x].through(perm)
                else:
                    inverse = [0] * len(perm)
                    for i, p in enumerate(perm):
                        inverse[p] = i
                    out[x] = out[y].through(inverse)
                continue
            if x.size != y.size:
                continue
            known, other = (x, y) if x in out else (y, x)
            native = out[known] if known.shape == other.shape else \
                out[known].reshaped(other.shape)
            if native is not None:
                out[other] = native
    return out


# ops whose output is their first input's elements, transposed or in a new shape
_NATIVE_THROUGH = frozenset({"transpose", "reshape", "squeeze", "unsqueeze", "identity"})


def _unique(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise GraphError(f"{what} name {name!r} is used twice")
        seen.add(name)


def _verify_node(node: Node, index: int, defined: set[Value]) -> None:
    where = f"node {index} ({node.describe()})"
    if not is_registered(node.op):
        raise GraphError(f"{where}: unknown op {node.op!r}")
    spec = get_spec(node.op)
    for j, v in enumerate(node.inputs):
        if v not in defined:
            raise GraphError(f"{where}: input {j} is used before it is defined")
    if node.op != OPAQUE:
        normalized = spec.normalize_attrs(node.attrs)
        if normalized != dict(node.attrs):
            raise GraphError(f"{where}: attributes are not normalized (build with GraphBuilder)")
        spec.input_names(node.attrs, len(node.inputs))
        if spec.outputs >= 0 and len(node.outputs) != spec.outputs:
            raise GraphError(f"{where}: has {len(node.outputs)} outputs, op has {spec.outputs}")
        if spec.category in ("elementwise", "activation") and len(node.outputs) == 1 and \
                node.inputs:
            # an elementwise op's output is its inputs broadcast (a rewrite that replaced a
            # value by one of another layout shows here, not as wrong numbers later)
            try:
                broadcast = tuple(np.broadcast_shapes(*(v.shape for v in node.inputs)))
            except ValueError:
                broadcast = None
            if broadcast != node.outputs[0].shape:
                made = "no broadcast" if broadcast is None else list(broadcast)
                raise GraphError(f"{where}: inputs of shapes "
                                 f"{[list(v.shape) for v in node.inputs]} make {made}, not "
                                 f"its output's {list(node.outputs[0].shape)}")


class GraphBuilder:
    """Builds a Graph step by step; ``build()`` freezes and verifies it."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._inputs: list[tuple[str, Value]] = []
        self._params: dict[str, Value] = {}
        self._constants: dict[Value, np.ndarray] = {}
        self._nodes: list[Node] = []
        self._outputs: list[tuple[str, Value]] = []
        self._producers: dict[Value, Node] = {}
        self._known: dict[Value, np.ndarray | None] = {}
        self._natives: dict[Value, Native] = {}

    def native(self, value: Value, key: Hashable, perm: Sequence[int] | None = None) -> None:
        """Record that ``value`` equals the native value ``key`` of the model's own program
        (transposed by ``perm``); the first record of a value holds."""
        self._natives.setdefault(value, Native(key, None if perm is None else tuple(perm)))

    def input(self, name: str, shape: Iterable[int], dtype: str) -> Value:
        value = Value(tuple(int(s) for s in shape), dtype)
        self._inputs.append((name, value))
        return value

    def param(self, name: str, shape: Iterable[int], dtype: str) -> Value:
        if name in self._params:
            raise GraphError(f"parameter {name!r} is added twice")
        value = Value(tuple(int(s) for s in shape), dtype)
        self._params[name] = value
        return value

    def constant(self, data: Any, dtype: str | None = None) -> Value:
        array = np.array(data)
        array.setflags(write=False)
        value = Value(tuple(array.shape), dtype or _dtype_name(array.dtype))
        self._constants[value] = array
        return value

    def add(self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None, *,
            shape: Iterable[int], dtype: str, **where: str) -> Value:
        """Append a single-output node; returns its output value.

        ``where`` takes ``scope``, ``source`` and ``origin``.
        """
        return self.add_multi(op, inputs, attrs, outputs=[(shape, dtype)], **where)[0]

    def add_multi(self, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None,
                  *, outputs: Sequence[tuple[Iterable[int], str]], scope: str = "",
                  source: str = "", origin: str = "") -> tuple[Value, ...]:
        """Append a node with any number of outputs, each given as ``(shape, dtype)``."""
        spec = get_spec(op)
        attrs = {k: _freeze(v) for k, v in (attrs or {}).items()}
        normalized = spec.normalize_attrs(attrs)
        spec.input_names(normalized, len(inputs))
        outs = tuple(Value(tuple(int(s) for s in shp), dt) for shp, dt in outputs)
        node = Node(op, tuple(inputs), outs, MappingProxyType(normalized), scope, source, origin)
        return self.append(node).outputs

    def append(self, node: Node) -> Node:
        """Append an existing node as is (passes that copy graphs use this)."""
        self._nodes.append(node)
        self._producers.update((v, node) for v in node.outputs)
        return node

    def constant_of(self, value: Value, *, limit: int = 1 << 16) -> np.ndarray | None:
        """The data of ``value`` if the nodes so far compute it from constants alone (with
        the ops' references, at most ``limit`` elements per value), else None."""
        if value in self._constants:
            return self._constants[value]
        if value in self._known:
            return self._known[value]
        self._known[value] = None  # until computed (and for what cannot be)
        node = self._producers.get(value)
        if node is None or node.op == OPAQUE or value.size > limit:
            return None
        args = [self.constant_of(v, limit=limit) for v in node.inputs]
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            result = get_spec(node.op).reference(*args, **node.attrs)
        outs = result if isinstance(result, tuple) else (result,)
        for v, data in zip(node.outputs, outs):
            self._known[v] = np.asarray(data).astype(
                np.float32 if v.dtype == "bfloat16" else np.dtype(v.dtype))
        return self._known[value]

    def output(self, name: str, value: Value) -> None:
        self._outputs.append((name, value))

    def build(self) -> Graph:
        graph = Graph(
            inputs=tuple(v for _, v in self._inputs),
            input_names=tuple(n for n, _ in self._inputs),
            params=MappingProxyType(dict(self._params)),
            constants=MappingProxyType(dict(self._constants)),
            nodes=tuple(self._nodes),
            outputs=tuple(v for _, v in self._outputs),
            output_names=tuple(n for n, _ in self._outputs),
            name=self.name,
            natives=MappingProxyType(complete_natives(self._nodes, self._natives)),
        )
        return graph.verify()


def _dtype_name(dtype: np.dtype) -> str:
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise GraphError(f"dtype {name!r} is not supported in the IR")
    return name
