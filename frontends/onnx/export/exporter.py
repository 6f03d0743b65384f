"""The exporter every ONNX export rule writes through, the rule table, and the rules for
ops that are one ONNX operator."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.errors import SpecgraphError
from specgraph.frontends._common.table import ConverterTable
from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec

__all__ = ["Exporter", "Rule", "DIRECT", "UNSUPPORTED", "MIN_OPSET"]

MIN_OPSET = 13
Rule = Callable[["Exporter", Node], None]
UNSUPPORTED = frozenset({"opaque"})  # ops with no ONNX form: a native op no rule knows

_ELEM = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16",
         "bfloat16": "BFLOAT16", "int64": "INT64", "int32": "INT32", "int16": "INT16",
         "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}
_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
          "bfloat16": np.float32, "int64": np.int64, "int32": np.int32, "int16": np.int16,
          "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


class Exporter:
    """Names values and collects ONNX nodes and initializers; export rules call it."""

    def __init__(self, graph: Graph, opset: int, rules: Mapping[str, Rule]) -> None:
        import onnx

        self.onnx = onnx
        self.graph = graph
        self.opset = opset
        self.rules = rules
        self.nodes: list[Any] = []
        self.extra: list[Any] = []  # initializers the rules add (shapes, axes, scalars)
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.node: Node | None = None
        self._count = 0
        for name, value in zip(graph.input_names, graph.inputs):
            self._bind(value, name)
        for name, value in graph.params.items():
            self._bind(value, name)
        self.used.update(graph.output_names)
        self._identity_outputs: list[tuple[str, Value]] = []
        for name, value in zip(graph.output_names, graph.outputs):
            if value in self.names:
                self._identity_outputs.append((name, value))
            else:
                self.names[value] = name

    def _bind(self, value: Value, name: str) -> None:
        self.names[value] = name
        self.used.add(name)

    def fresh(self, hint: str = "v") -> str:
        while True:
            self._count += 1
            name = f"{hint}_{self._count}"
            if name not in self.used:
                self.used.add(name)
                return name

    def name(self, value: Value) -> str:
        if value not in self.names:
            self._bind(value, self.fresh("const" if value in self.graph.constants else "v"))
        return self.names[value]

    def out(self, index: int = 0) -> str:
        return self.name(self.node.outputs[index])

    def elem(self, dtype: str) -> int:
        return getattr(self.onnx.TensorProto, _ELEM[dtype])

    def value_info(self, name: str, value: Value) -> Any:
        return self.onnx.helper.make_tensor_value_info(name, self.elem(value.dtype),
                                                       list(value.shape))

    def tensor(self, name: str, data: Any, dtype: str) -> Any:
        array = np.asarray(data).astype(_NUMPY[dtype])
        if dtype == "bfloat16":
            return self.onnx.helper.make_tensor(name, self.elem(dtype), array.shape,
                                                array.ravel().tolist())
        return self.onnx.numpy_helper.from_array(array, name)

    # --- for export rules ----------------------------------------------------------------
    def export(self, node: Node) -> None:
        self.node = node
        rule = self.rules.get(node.op)
        if rule is None:
            target = node.attrs.get("target", node.op)
            raise SpecgraphError(f"to_onnx has no export rule for op {node.op!r} "
                                 f"({target}) at {node.scope or '<model>'}; replace it in "
                                 "the graph or add a rule to specgraph.frontends.onnx.export")
        rule(self, node)

    def emit(self, op_type: str, inputs: Sequence[str], out: str | None = None,
             **attrs: Any) -> str:
        """Append one ONNX node; returns its output name (a fresh one unless ``out``)."""
        return self.emit_multi(op_type, inputs, [out or self.fresh()], **attrs)[0]

    def emit_multi(self, op_type: str, inputs: Sequence[str], outs: Sequence[str],
                   **attrs: Any) -> list[str]:
        scope = self.node.scope if self.node is not None else ""
        name = f"/{scope}/{op_type}_{len(self.nodes)}" if scope else f"/{op_type}_{len(self.nodes)}"
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), list(outs),
                                                     name=name, **attrs))
        return list(outs)

    def const(self, data: Any, dtype: str) -> str:
        """A new initializer holding ``data`` as ``dtype``; returns its name."""
        name = self.fresh("c")
        self.extra.append(self.tensor(name, data, dtype))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), "int64")

    def operand(self, value: Value, dtype: str) -> str:
        """``value``'s name, cast to ``dtype`` where it differs."""
        if value.dtype == dtype:
            return self.name(value)
        return self.emit("Cast", [self.name(value)], to=self.elem(dtype))

    def reduce(self, op_type: str, x: str, axes: Sequence[int] | None, keepdims: bool,
               out: str | None = None) -> str:
        """A Reduce* node with axes as an input or an attribute, as the opset wants."""
        keep = int(keepdims)
        if axes is None:
            return self.emit(op_type, [x], out, keepdims=keep)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.emit(op_type, [x, self.ints(axes)], out, keepdims=keep)
        return self.emit(op_type, [x], out, axes=list(axes), keepdims=keep)

    def fail(self, why: str) -> SpecgraphError:
        node = self.node
        return SpecgraphError(f"to_onnx cannot export {node.op} at {node.scope or '<model>'}: "
                              f"{why}")

    def finish_outputs(self) -> list[Any]:
        for name, value in self._identity_outputs:
            self.node = None
            self.emit("Identity", [self.name(value)], name)
        return [self.value_info(n, v) for n, v in zip(self.graph.output_names,
                                                      self.graph.outputs)]


# --- one-to-one ops ----------------------------------------------------------------------
_DIRECT = ("abs", "neg", "exp", "log", "sqrt", "erf", "sin", "cos", "floor", "ceil", "sign",
           "identity", "logical_not", "relu", "sigmoid", "tanh", "matmul", "equal", "less",
           "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "add", "sub",
           "mul", "maximum", "minimum")
_ARITHMETIC = {"add", "sub", "mul", "maximum", "minimum"}
_COMPARE = {"equal", "less", "less_equal", "greater", "greater_equal"}
_LOGICAL = {"logical_and", "logical_or", "logical_not"}


def _direct(ex: Exporter, node: Node) -> None:
    """The op's own ONNX operator (``OpSpec.onnx``), inputs cast to one dtype if needed."""
    if node.op in _ARITHMETIC:
        inputs = [ex.operand(v, node.output.dtype) for v in node.inputs]
    elif node.op in _COMPARE:
        common = _common_dtype([v.dtype for v in node.inputs])
        inputs = [ex.operand(v, common) for v in node.inputs]
    elif node.op in _LOGICAL:
        inputs = [ex.operand(v, "bool") for v in node.inputs]
    else:
        inputs = [ex.name(v) for v in node.inputs]
    ex.emit(get_spec(node.op).onnx, inputs, ex.out())


def _common_dtype(dtypes: Sequence[str]) -> str:
    floats = [d for d in dtypes if d.startswith(("float", "bfloat"))]
    return floats[0] if floats else dtypes[0]


DIRECT = ConverterTable({op: _direct for op in _DIRECT})  # the ops that are one ONNX operator
