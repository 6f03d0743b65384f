"""The onnxruntime runner: canonical nodes exported with ``to_onnx`` and run in sessions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnxruntime as ort

from specgraph.errors import SpecgraphError, first_line
from specgraph.frontends.onnx.export import EXPORTERS, UNSUPPORTED, to_onnx
from specgraph.ir import Graph, GraphBuilder, Node, Value
from specgraph.numeric.runner import Context, Pullback, Runner, RunnerError
from specgraph.ops.dtypes import FLOAT_DTYPES

__all__ = ["OnnxRunner", "OPSET", "IR_VERSION"]

# onnxruntime 1.31 reads IR versions up to 11 and opsets up to 23; these are what
# specgraph.frontends.onnx.export writes by default and what every export rule is tested at.
OPSET = 17
IR_VERSION = 8

_CPU, _CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
_LEVELS = {"eager": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
           "compiled": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
_STORAGES = ("float32", "float16")
_DTYPE_ATTR_OPS = ("cast", "full", "arange")  # ops whose ``dtype`` attribute names a dtype


def _providers(device: str) -> list[str]:
    """The execution providers for ``device`` (``auto`` picks CUDA where onnxruntime has it)."""
    cuda = _CUDA in ort.get_available_providers()
    if device == "cpu" or (device == "auto" and not cuda):
        return [_CPU]
    if device in ("cuda", "auto") and cuda:
        return [_CUDA, _CPU]
    if device == "cuda":
        raise RunnerError(
            f"onnxruntime {ort.__version__} has no CUDA execution provider here (it has "
            f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or pass "
            "--device cpu")
    raise RunnerError(f"the onnx runner knows no device {device!r}; pass --device cpu or cuda")


class OnnxRunner(Runner):
    """Runs canonical nodes in onnxruntime, one exported one-node model per distinct node.

    ``run`` exports the node alone (its inputs as graph inputs) with ``to_onnx`` and runs it
    in an ``InferenceSession``; sessions are cached by op, attributes and input and output
    shapes and dtypes, so a model's repeated layers build each session once. ``run_graph``
    runs a whole graph in one session, exposing chosen intermediate values as outputs.

    The context's mode picks the session's graph optimizations: ``compiled`` applies all of
    onnxruntime's (ORT_ENABLE_ALL: constant folding, operator fusions, layout changes),
    ``eager`` none (ORT_DISABLE_ALL: the exported operators run as written). Tensors are
    NumPy arrays on the host; onnxruntime copies them to the device per run. Floating values
    are stored in float32 or float16; onnxruntime computes no gradients.
    """

    framework = "onnx"
    differentiable = False

    def __init__(self, context: Context) -> None:
        if context.storage == "bfloat16":
            raise RunnerError("onnxruntime's CPU execution provider has no bfloat16 kernels "
                              "for most operators, so the onnx runner cannot run bfloat16; "
                              "pass --dtype float32")
        if context.storage not in _STORAGES:
            raise RunnerError(f"the onnx runner stores floats as {' or '.join(_STORAGES)}, "
                              f"not {context.storage}; pass --dtype float32")
        self.providers = _providers(context.device)
        device = "cuda" if self.providers[0] == _CUDA else "cpu"
        super().__init__(replace(context, device=device))
        self.sessions_built = 0
        self._sessions: dict[Any, tuple[Any, list[str], list[str]]] = {}

    # --- tensors -------------------------------------------------------------------------
    def put(self, array: np.ndarray, dtype: str) -> np.ndarray:
        return np.asarray(array).astype(self._dtype(dtype), copy=False)

    def fetch(self, tensor: Any) -> np.ndarray:
        data = np.asarray(tensor)
        return data.astype(np.float32) if data.dtype == np.float16 else data

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def _dtype(self, dtype: str) -> str:
        """The dtype a graph dtype is stored in: floats in the storage dtype, others as is."""
        return self.context.storage if dtype in FLOAT_DTYPES else dtype

    # --- ops -----------------------------------------------------------------------------
    def supports(self, op: str) -> bool:
        return op in EXPORTERS and op not in UNSUPPORTED

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
        """Execute ``node`` on ``inputs`` (NumPy arrays) in its cached one-node session."""
        if not self.supports(node.op):
            raise RunnerError(
                f"the onnx runner cannot execute {node.describe()}: specgraph.frontends.onnx.export "
                f"has no ONNX form for op {node.op!r}; compare with --no-numeric")
        if len(inputs) != len(node.inputs):
            raise RunnerError(f"{node.describe()} takes {len(node.inputs)} inputs, the onnx "
                              f"runner was given {len(inputs)}")
        key = (node.op, tuple(sorted(node.attrs.items())),
               tuple((v.shape, v.dtype) for v in node.inputs),
               tuple((v.shape, v.dtype) for v in node.outputs))
        entry = self._sessions.get(key)
        if entry is None:
            graph = self._node_graph(node)
            entry = (self._session(graph, {}, node.describe()), list(graph.input_names),
                     list(graph.output_names))
            self._sessions[key] = entry
        session, in_names, out_names = entry
        feed = {name: self._feed(a, v, f"input {i} of {node.describe()}")
                for i, (name, a, v) in enumerate(zip(in_names, inputs, node.inputs))}
        outs = self._execute(session, out_names, feed, node.describe())
        return tuple(o.astype(self._dtype(v.dtype), copy=False)
                     for o, v in zip(outs, node.outputs))

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        raise RunnerError(f"onnxruntime computes no gradients, so the onnx runner cannot pull "
                          f"gradients back through {node.describe()}; compare the ONNX side "
                          "forward only")

    def run_graph(self, graph: Graph, weights: Mapping[str, Any],
                  inputs: Mapping[str, Any] | Sequence[Any],
                  keep: Sequence[Value] = ()) -> dict[Value, np.ndarray]:
        """Run all of ``graph`` in one session (each call builds it anew).

        Args:
            graph: the canonical graph.
            weights: parameter arrays by name, in canonical layout (they become initializers).
            inputs: the graph's inputs, by name or in order.
            keep: values of ``graph`` to return besides its outputs (layer outputs to compare).

        Returns:
            The arrays (this runner's tensors) of the graph's outputs and of ``keep``, keyed
            by the values of ``graph``.

        Raises:
            RunnerError: an op has no ONNX form, an input is missing or misshapen, or
                onnxruntime rejects the model.
        """
        if not isinstance(inputs, Mapping):
            inputs = dict(zip(graph.input_names, inputs))
        wanted = list(dict.fromkeys([*graph.outputs, *keep]))
        typed, mapping = self._retyped(graph, wanted)
        where = f"graph {graph.name or '<model>'}"
        session = self._session(typed, weights, where)
        feed = {}
        for name, value in zip(graph.input_names, graph.inputs):
            if name not in inputs:
                raise RunnerError(f"input {name!r} of {where} is not given; pass every input")
            feed[name] = self._feed(inputs[name], value, f"input {name!r} of {where}")
        outs = self._execute(session, list(typed.output_names), feed, where)
        return {v: o.astype(self._dtype(v.dtype), copy=False) for v, o in zip(wanted, outs)}

    # --- graphs and sessions -------------------------------------------------------------
    def _attrs(self, node: Node) -> dict[str, Any]:
        attrs = dict(node.attrs)
        if node.op in _DTYPE_ATTR_OPS:
            attrs["dtype"] = self._dtype(attrs["dtype"])
        return attrs

    def _node_graph(self, node: Node) -> Graph:
        """``node`` alone, its inputs as graph inputs ``x0...``, its outputs ``y0...``."""
        b = GraphBuilder(node.op)
        xs = [b.input(f"x{i}", v.shape, self._dtype(v.dtype)) for i, v in enumerate(node.inputs)]
        ys = b.add_multi(node.op, xs, self._attrs(node),
                         outputs=[(v.shape, self._dtype(v.dtype)) for v in node.outputs],
                         scope=node.scope)
        for i, y in enumerate(ys):
            b.output(f"y{i}", y)
        return b.build()

    def _retyped(self, graph: Graph, wanted: Sequence[Value]) -> tuple[Graph, dict]:
        """``graph`` with floats in the storage dtype and ``wanted`` as its outputs."""
        b = GraphBuilder(graph.name)
        new: dict[Value, Value] = {}
        for name, v in zip(graph.input_names, graph.inputs):
            new[v] = b.input(name, v.shape, self._dtype(v.dtype))
        for name, v in graph.params.items():
            new[v] = b.param(name, v.shape, self._dtype(v.dtype))
        for v, data in graph.constants.items():
            new[v] = b.constant(data, self._dtype(v.dtype))
        for node in graph.nodes:
            outs = b.add_multi(node.op, [new[v] for v in node.inputs], self._attrs(node),
                               outputs=[(v.shape, self._dtype(v.dtype)) for v in node.outputs],
                               scope=node.scope, source=node.source, origin=node.origin)
            new.update(zip(node.outputs, outs))
        taken = {*graph.input_names, *graph.params}  # ONNX names are one namespace
        names = dict(zip(graph.outputs, graph.output_names))
        for i, v in enumerate(wanted):  # the graph's outputs first, then the kept values
            name = names.get(v) or f"keep.{i}"
            while name in taken:
                name = f"_{name}"
            taken.add(name)
            b.output(name, new[v])
        return b.build(), new

    def _session(self, graph: Graph, weights: Mapping[str, Any], where: str) -> Any:
        try:
            model = to_onnx(graph, weights, opset=OPSET, ir_version=IR_VERSION)
        except SpecgraphError as err:
            raise RunnerError(f"the onnx runner cannot export {where}: {err}") from err
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = _LEVELS[self.context.mode]
        # many small sessions run one after another: idle pools must not spin on the cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=self.providers)
        except Exception as err:  # onnxruntime raises its own exception types
            raise RunnerError(
                f"onnxruntime {ort.__version__} cannot load {where} in "
                f"{self.context.storage} on {self.providers[0]}: {first_line(err)}; pass "
                "--dtype float32 or compare with --no-numeric") from err
        self.sessions_built += 1
        return session

    def _feed(self, array: Any, value: Value, what: str) -> np.ndarray:
        data = np.asarray(array, dtype=self._dtype(value.dtype), order="C")
        if data.shape != value.shape:
            raise RunnerError(f"{what} has shape {data.shape}, the graph declares "
                              f"{value.shape}; pass arrays shaped like the traced inputs")
        return data

    @staticmethod
    def _execute(session: Any, names: list[str], feed: dict[str, np.ndarray],
                 where: str) -> list[np.ndarray]:
        try:
            return [np.asarray(o) for o in session.run(names, feed)]
        except Exception as err:  # onnxruntime raises its own exception types
            raise RunnerError(f"onnxruntime failed while running {where}: "
                              f"{first_line(err)}") from err
