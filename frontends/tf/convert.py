"""The walk over a TensorFlow graph for the TF frontend: converter state and its helpers.

Each graph tensor maps to an IR ``Value``, to a NumPy array (a constant, or a small
computation on constants folded with the ops' references: shape arithmetic), to a variable
read (turned into a parameter in the layout its consumer asks for: ``native``, ``oihw`` or
``depthwise``), to a TensorList's items (``loops``), or to ``None`` (a tensor the IR
cannot hold, such as a string or an unknown shape). Each IR value records the graph tensor
it equals (``_native_key``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from specgraph.errors import TraceError
from specgraph.frontends._common.converter import NATIVE, BaseConverter, Step, no_steps
from specgraph.frontends.tf import native
from specgraph.frontends.tf.origins import made_at, traceback_source
from specgraph.ir import DTYPES, Graph, Value, prune
from specgraph.ops import get_spec

__all__ = ["Converter", "Unsupported", "NotUnrolled", "TensorList", "flatten_named",
           "dtype_name", "dtype_of"]

Operand = Any  # Value | np.ndarray
FOLD_LIMIT = 1 << 16  # largest constant (elements) computed at trace time


class Unsupported(Exception):
    """A tensor the IR cannot hold, or an op form no converter handles: becomes opaque."""


class NotUnrolled(Exception):
    """An op in the body of a loop being unrolled that would be opaque: the whole loop
    stays one opaque op (``loops``)."""


@dataclass(frozen=True)
class VarHandle:
    key: int  # id of the variable's resource handle


@dataclass(frozen=True)
class VarRead:
    key: int
    expand: int | None = None  # read through ExpandDims at this axis (TF's 1-D convs)


@dataclass(frozen=True)
class TensorList:
    """A TensorList (a ``tf.TensorArray``) known at trace time: its items, each an operand,
    or None where no item has been set yet."""

    items: tuple[Any, ...]


def _key(t: Any) -> tuple[int, str]:
    return (id(t.graph), t.name)


def _native_key(calls: Sequence[str], t: Any) -> Hashable:
    """The native key of tensor ``t``: its name (``model/dense/MatMul:0``) in the concrete
    function's own graph; inside a called function's body, the names of the call ops that
    lead there and the tensor's name in the body (``("model/StatefulPartitionedCall",
    "dense/MatMul:0")``)."""
    return (*calls, t.name) if calls else t.name


def flatten_named(tree: Any, root: str) -> list[tuple[str, Any]]:
    """Leaves of a nest in ``tf.nest`` order (dict keys sorted), named by their path."""
    out: list[tuple[str, Any]] = []

    def visit(node: Any, parts: list[str]) -> None:
        if isinstance(node, dict):
            for k in sorted(node):
                visit(node[k], parts + [str(k)])
        elif isinstance(node, tuple) and hasattr(node, "_fields"):
            for f in node._fields:
                visit(getattr(node, f), parts + [f])
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                visit(item, parts + [str(i)])
        else:
            out.append((".".join(parts) or "output", node))

    visit(tree, [root] if root else [])
    return out


def dtype_name(dtype: Any) -> str | None:
    name = tf.as_dtype(dtype).name
    return name if name in DTYPES else None


def numpy_of(dtype: str) -> np.dtype:
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


# --- parameter layouts: native TF layout -> canonical ----------------------------------
def _oihw(shape: tuple[int, ...]) -> tuple[Step, ...]:
    """A conv kernel [*K, I, O] as [O, I, *K] (a transposed conv's [*K, O, I] as [I, O, *K])."""
    rank = len(shape)
    return (("transpose", (rank - 1, rank - 2) + tuple(range(rank - 2))),)


def _depthwise(shape: tuple[int, ...]) -> tuple[Step, ...]:
    """A depthwise kernel [*K, C, M] as a grouped conv's [C*M, 1, *K]."""
    rank = len(shape)
    moved = (rank - 2, rank - 1) + tuple(range(rank - 2))
    return (("transpose", moved), ("reshape", (shape[-2] * shape[-1], 1) + tuple(shape[:-2])))


def _source(op: Any) -> str:
    """The innermost frame of the user's model code that created ``op``, or ""."""
    try:
        frames = op.traceback
        len(frames)
    except Exception:  # noqa: BLE001  (tracebacks are a courtesy)
        return ""
    return traceback_source(frames)


class Converter(BaseConverter):
    """Walks a concrete function's graph and builds the IR, one converter call per op.

    Variables become parameters keyed by the id of their handle (``variables``). Each IR
    value an op's output converts to is recorded as that tensor's native value
    (``_native_key``) where their shapes agree; values inside called bodies are recorded
    after the walk, so that a call's outputs keep the names the outer graph gives them.
    Values made in the body of a loop being unrolled (``steps``) are recorded as none,
    there or after the loop: one op there runs at every step, and the loop's outputs that
    are such values (the last state) carry natively only the gradients that reach them
    through those outputs, not through the list of states a step also wrote.
    """

    LAYOUTS = {NATIVE: no_steps, "oihw": _oihw, "depthwise": _depthwise}

    def __init__(self, concrete: Any, reference: str, variables: dict[int, tuple[str, Any]],
                 scopes: Any, converters: dict[str, Any]) -> None:
        super().__init__(reference)
        self.cf = concrete
        self.variables = variables
        self.scopes = scopes
        self.converters = converters
        self.env: dict[tuple[int, str], Any] = {}
        self.constants: dict[int, tuple[np.ndarray, Value]] = {}
        self.expanded: dict[tuple[int, str], Value] = {}  # variable read through ExpandDims
        self.origins: dict[Value, Value] = {}  # reshape-like result -> value before them
        # outputs of dilated convolutions already in their input's space, for the
        # BatchToSpaceND (and a Conv1D's Squeeze) after them (``ops._atrous``)
        self.atrous: set[str] = set()
        self.op: Any = None
        self.prefix: list[str] = []
        self.calls: tuple[str, ...] = ()  # the call ops whose bodies the walk is in
        self._inner_natives: list[tuple[Value, Hashable]] = []
        self.unrolled = 0  # depth of loops being unrolled around the current op
        self.steps: set[Value] = set()  # values made in the bodies of unrolled loops
        self._inferred: tuple[Any, list[tuple[int, ...] | None]] = (None, [])

    # --- the walk ------------------------------------------------------------------------
    def convert(self, input_names: list[str]) -> tuple[Graph, dict[str, np.ndarray]]:
        """The graph (pruned, constants only where used) and its weights by param name."""
        graph = self.cf.graph
        captured = {}
        for external, internal in graph.captures:
            captured[_key(internal)] = self._capture(external)
        user = [t for t in graph.inputs if _key(t) not in captured]
        if len(user) != len(input_names):
            raise TraceError(f"{self.reference}: the traced function takes {len(user)} inputs "
                             f"but the example inputs have {len(input_names)} arrays; pass "
                             "arrays (or nests of arrays) only")
        for name, t in zip(input_names, user):
            dtype = dtype_name(t.dtype)
            if dtype is None:
                raise TraceError(f"{self.reference}: input {name!r} has dtype {t.dtype.name}, "
                                 "which specgraph does not support; pass numeric arrays")
            self.env[_key(t)] = self.b.input(name, tuple(t.shape.as_list()), dtype)
        self.env.update(captured)
        self.walk(graph)
        for value, key in self._inner_natives:
            self.b.native(value, key)
        for name, t in flatten_named(self.cf.structured_outputs, ""):
            if isinstance(t, tf.Tensor):
                self.b.output(name, self._graph_output(name, t))
        built = prune(self.b.build())
        used = {v for n in built.nodes for v in n.inputs} | set(built.outputs)
        built = built.replace(constants={v: d for v, d in built.constants.items() if v in used})
        return built, self.weights(built)

    def _capture(self, external: Any) -> Any:
        if external.dtype == tf.resource:
            return VarHandle(id(external)) if id(external) in self.variables else None
        array = np.asarray(external.numpy())
        return array if dtype_name(external.dtype) and array.dtype.name in DTYPES else None

    def _graph_output(self, name: str, t: Any) -> Value:
        try:
            return self.materialize(self.value(t))
        except Unsupported:
            raise TraceError(f"{self.reference}: output {name!r} ({t.dtype.name}, shape "
                             f"{t.shape}) cannot be represented; return numeric tensors with "
                             "static shapes") from None

    def walk(self, graph: Any) -> None:
        for op in graph.get_operations():
            if op.type != "Placeholder" and op.outputs:
                self.convert_op(op)

    def convert_op(self, op: Any) -> None:
        self.op, self._where, self._inferred = op, None, (None, [])
        converter = self.converters.get(op.type)
        try:
            result = converter(self, op) if converter is not None else self.unknown(op)
        except Unsupported:
            self.op, self._where = op, None
            result = self.unknown(op)
        if not isinstance(result, tuple):
            result = (result,)
        for t, r in zip(op.outputs, result):
            self.env[_key(t)] = r
            self._record_native(t, r)

    def _record_native(self, t: Any, result: Any) -> None:
        """``result`` equals tensor ``t`` where it is an IR value of ``t``'s static shape
        (an axis TF leaves unknown, a resize to a size it computes, is the IR's: the program's
        observation is checked against it when it runs)."""
        if not isinstance(result, Value) or t.shape.rank is None or self.unrolled or \
                result in self.steps:
            return
        known = t.shape.as_list()
        if len(known) != len(result.shape) or any(
                d is not None and d != r for d, r in zip(known, result.shape)):
            return
        if self.calls:
            self._inner_natives.append((result, _native_key(self.calls, t)))
        else:
            self.b.native(result, _native_key(self.calls, t))

    def unknown(self, op: Any) -> tuple:
        """An op no converter takes: its value where TensorFlow computes it from inputs
        known at trace time (``native.evaluate``), an ``opaque`` node otherwise."""
        arrays = [self.const(t) for t in op.inputs]
        if all(a is not None and a.size <= FOLD_LIMIT for a in arrays):
            values = native.evaluate(op, arrays)
            if values is not None and all(v.size <= FOLD_LIMIT and v.dtype.name in DTYPES
                                          for v in values):
                return tuple(values)
        return self.opaque(op)

    def inline(self, op: Any, attr: str = "f", args: Sequence[Any] | None = None) -> tuple:
        """A call of another traced function (the function in ``op``'s attribute ``attr``,
        called on ``args``, all of ``op``'s inputs unless given): its body converted in
        place."""
        body = self.function(op, attr)
        if body is None:
            return self.opaque(op)
        return self.call(op, body, [self.env.get(_key(t))
                                    for t in (op.inputs if args is None else args)])

    @staticmethod
    def function(op: Any, attr: str) -> Any:
        """The graph of the function in ``op``'s attribute ``attr``, or None."""
        try:
            return op.graph._get_function(op.get_attr(attr).name).graph
        except Exception:  # noqa: BLE001  (no body to read: the caller keeps the op opaque)
            return None

    def call(self, op: Any, body: Any, entries: Sequence[Any]) -> tuple:
        """The entries of ``body``'s outputs, its inputs bound to ``entries``, its ops
        converted in place as called by ``op``."""
        for inner, entry in zip(body.inputs, entries):
            self.env[_key(inner)] = entry
        saved, calls = self.prefix, self.calls
        self.prefix = saved + op.name.split("/")[:-1]
        self.calls = calls + (op.name,)
        try:
            self.walk(body)
        finally:
            self.prefix, self.calls = saved, calls
            self.op, self._where = op, None
        return tuple(self.env.get(_key(t)) for t in body.outputs)

    # --- reading tensors -----------------------------------------------------------------
    def entry(self, t: Any) -> Any:
        return self.env.get(_key(t))

    def value(self, t: Any) -> Operand:
        """The IR operand of tensor ``t`` (variables as parameters in their native layout)."""
        entry = self.env.get(_key(t))
        if isinstance(entry, VarRead):
            return self._read(entry, NATIVE)
        if entry is None or isinstance(entry, (VarHandle, TensorList)):
            raise Unsupported(t.name)
        return entry

    def const(self, t: Any) -> np.ndarray | None:
        """The value of ``t`` if it is known at trace time (constants, shape arithmetic)."""
        entry = self.env.get(_key(t))
        return entry if isinstance(entry, np.ndarray) else None

    def const_ints(self, t: Any) -> list[int]:
        array = self.const(t)
        if array is None:
            raise Unsupported(f"{t.name} is not a constant")
        return [int(v) for v in np.ravel(array)]

    def weight(self, t: Any, layout: str) -> Value:
        """Tensor ``t`` in ``layout``: a parameter stored so, or a value re-laid out."""
        entry = self.env.get(_key(t))
        if isinstance(entry, VarRead) and entry.expand in (None, 0):
            return self._read(entry, layout)
        value = self.materialize(self.value(t))
        return self.relayout(value, layout, id(value))

    def _read(self, entry: VarRead, layout: str) -> Value:
        """A variable in ``layout``; read through ExpandDims(axis 0), the new axis goes
        where the canonical layout keeps it (before the kernel: [O, I, 1, K])."""
        value = self.param(entry.key, layout)
        if entry.expand is None:
            return value
        memo = (entry.key, f"{layout}+{entry.expand}")
        if memo not in self.expanded:
            axis = entry.expand if layout == NATIVE else 2
            shape = value.shape[:axis] + (1,) + value.shape[axis:]
            self.expanded[memo] = self.emit("unsqueeze", [value], {"axes": (axis,)},
                                            out=(shape, value.dtype))
        return self.expanded[memo]

    def reshape(self, x: Operand, op: str, attrs: dict[str, Any]) -> Operand:
        """A reshape-like node (reshape, squeeze, unsqueeze); a chain of them that comes
        back to the shape it started from is the value it started from."""
        shape = self.out()[0]
        origin = self.origins.get(x, x) if isinstance(x, Value) else x
        if isinstance(origin, Value) and origin.shape == shape:
            return origin
        y = self.emit(op, [x], attrs)
        if isinstance(y, Value):
            self.origins[y] = origin
        return y

    def shape(self, t: Any) -> tuple[int, ...]:
        """The static shape of ``t``: TensorFlow's, else that of what ``t`` converted to
        (AutoGraph's ``tf.cond`` leaves the sizes after it unknown to TensorFlow)."""
        dims = t.shape.as_list() if t.shape.rank is not None else None
        if dims is not None and None not in dims:
            return tuple(int(d) for d in dims)
        known = self._known(t)
        if known is None:
            raise Unsupported(f"{t.name} has no static shape")
        return known if isinstance(known, tuple) else tuple(known.shape)

    def _known(self, t: Any) -> Any:
        """What is known of ``t`` at trace time: its value, or its shape, or None."""
        entry = self.env.get(_key(t))
        if isinstance(entry, np.ndarray):
            return entry
        if isinstance(entry, Value):
            return entry.shape
        if isinstance(entry, VarRead):
            shape = self.param_spec(entry.key)[1]
            return shape if entry.expand is None else \
                shape[:entry.expand] + (1,) + shape[entry.expand:]
        dims = t.shape.as_list() if t.shape.rank is not None else None
        return None if dims is None or None in dims else tuple(int(d) for d in dims)

    def _output_shape(self, index: int) -> tuple[int, ...]:
        """Output ``index`` of the current op, inferred by TensorFlow from what is known of
        its inputs where the traced graph does not say (``native.infer_shapes``)."""
        op = self.op
        if self._inferred[0] is not op:
            known = [self._known(t) for t in op.inputs]
            shapes = [None] * len(op.outputs) if any(k is None for k in known) else \
                native.infer_shapes(op, known)
            self._inferred = (op, shapes)
        shape = self._inferred[1][index]
        if shape is None:
            raise Unsupported(f"{op.outputs[index].name} has no static shape")
        return shape

    # --- the current op and the variables, for the shared converter base ---------------
    def locate(self) -> dict[str, str]:
        scope, layer = self.scopes.resolve("/".join(self.prefix + [self.op.name]))
        source = _source(self.op) or made_at(self.scopes.root.obj if layer is None else layer)
        return {"scope": scope, "source": source, "origin": self.op.type}

    def out(self, index: int = 0) -> tuple[tuple[int, ...], str]:
        t = self.op.outputs[index]
        dtype = dtype_name(t.dtype)
        if dtype is None:
            raise Unsupported(f"{t.name} has dtype {t.dtype.name}")
        dims = t.shape.as_list() if t.shape.rank is not None else None
        if dims is not None and None not in dims:
            return tuple(int(d) for d in dims), dtype
        return self._output_shape(index), dtype

    def outs(self) -> list[tuple[tuple[int, ...], str]]:
        return [self.out(i) for i in range(len(self.op.outputs))]

    def param_spec(self, key: int) -> tuple[str, tuple[int, ...], str]:
        name, variable = self.variables[key]
        dtype = dtype_name(variable.dtype)
        if dtype is None:
            raise Unsupported(f"variable {name} of dtype {variable.dtype}")
        return name, tuple(int(s) for s in variable.shape), dtype

    def native_array(self, key: int) -> np.ndarray:
        array = np.asarray(self.variables[key][1].numpy())
        return array.astype(np.float32) if array.dtype.name == "bfloat16" else array

    # --- helpers for converters ----------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        try:
            value = self.op.get_attr(name)
        except ValueError:
            return default
        if isinstance(value, bytes):
            return value.decode()
        return value

    def layer(self) -> Any:
        return self.scopes.resolve("/".join(self.prefix + [self.op.name]))[1]

    # --- writing nodes -------------------------------------------------------------------
    def materialize(self, operand: Operand) -> Value:
        if isinstance(operand, Value):
            return operand
        array = np.asarray(operand)
        if id(array) not in self.constants:
            if array.dtype.name not in DTYPES:
                raise Unsupported(f"constant of dtype {array.dtype}")
            self.constants[id(array)] = (array, self.b.constant(array))
        return self.constants[id(array)][1]

    def emit(self, op: str, inputs: Sequence[Operand], attrs: dict[str, Any] | None = None, *,
             out: tuple[tuple[int, ...], str] | None = None) -> Operand:
        """One IR node for the current op (shape and dtype of its first output unless
        given); computed right away when every input is a small constant."""
        shape, dtype = out if out is not None else self.out(0)
        if (all(isinstance(i, np.ndarray) for i in inputs)
                and int(np.prod(shape, dtype=np.int64)) <= FOLD_LIMIT
                and all(i.size <= FOLD_LIMIT for i in inputs)):
            spec = get_spec(op)
            result = np.asarray(spec.reference(*inputs, **spec.normalize_attrs(attrs)))
            if result.shape == tuple(shape):
                return result.astype(numpy_of(dtype))
        values = [self.materialize(i) for i in inputs]
        return self._stepped(super().emit(op, values, attrs, out=(shape, dtype)))

    def emit_multi(self, op: str, inputs: Sequence[Operand], attrs: dict[str, Any],
                   outs: Sequence[tuple[tuple[int, ...], str]] | None = None) -> tuple:
        values = [self.materialize(i) for i in inputs]
        return self._stepped(super().emit_multi(op, values, attrs, outs))

    def _stepped(self, made: Any) -> Any:
        """``made`` (a value or a tuple of them), kept among the values of a loop's steps
        when emitted in a body being unrolled."""
        if self.unrolled:
            self.steps.update(made if isinstance(made, tuple) else (made,))
        return made

    def opaque(self, op: Any) -> tuple:
        """An op no converter handles, kept with its native name; outputs the IR cannot
        hold are left undefined (their consumers become opaque in turn). In the body of a
        loop being unrolled, the loop is given up instead (``NotUnrolled``)."""
        if self.unrolled:
            raise NotUnrolled(f"{op.type} {op.name!r} in a loop's body")
        inputs = []
        for t in op.inputs:
            try:
                inputs.append(self.materialize(self.value(t)))
            except Unsupported:
                continue
        outs, keep = [], []
        for i in range(len(op.outputs)):
            try:
                outs.append(self.out(i))
                keep.append(i)
            except Unsupported:
                continue
        result: list[Any] = [None] * len(op.outputs)
        if outs:
            values = self.emit_opaque(inputs, outs, op.type)
            for i, v in zip(keep, values):
                result[i] = v
        return tuple(result)

    def transpose(self, x: Operand, perm: Sequence[int]) -> Operand:
        shape = tuple(_shape_of(x)[p] for p in perm)
        return self.emit("transpose", [x], {"perm": tuple(perm)}, out=(shape, dtype_of(x)))

    def channels_first(self, x: Operand) -> Operand:
        r = len(_shape_of(x))
        return self.transpose(x, (0, r - 1) + tuple(range(1, r - 1)))

    def channels_last(self, x: Operand) -> Operand:
        r = len(_shape_of(x))
        return self.transpose(x, (0,) + tuple(range(2, r)) + (1,))


def _shape_of(x: Operand) -> tuple[int, ...]:
    return tuple(x.shape)


def dtype_of(x: Operand) -> str:
    return x.dtype if isinstance(x, Value) else np.asarray(x).dtype.name
