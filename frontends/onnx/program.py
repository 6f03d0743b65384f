"""The ONNX model's own program: the model itself, run again in onnxruntime and observed.

``OnnxProgram.observe`` runs the traced model (external data already loaded into it, so
onnxruntime resolves no path) with the given weights written into its initializers (so
onnxruntime folds and fuses them as it does the model's own) and the observed values as
extra outputs; a session is built once per set of weights. ``eager`` runs the operators as written (ORT_DISABLE_ALL), ``compiled`` with all of
onnxruntime's graph optimizations (fusions). onnxruntime computes no gradients: an
observation has values only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Hashable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort

from specgraph.errors import first_line
from specgraph.frontends.onnx.runner import _LEVELS, _providers
from specgraph.numeric.program import NativeProgram, Observation
from specgraph.numeric.runner import Context, RunnerError

__all__ = ["OnnxProgram"]

_QUIET = 3


class OnnxProgram(NativeProgram):
    """An ONNX model with the names the traced graph uses.

    Args:
        model: the model as traced (tensors inline, local functions inlined).
        weights: the initializer names that are graph parameters (fed per run).
        output_names: the graph's output names.
    """

    framework = "onnx"

    def __init__(self, model: onnx.ModelProto, weights: Collection[str],
                 output_names: list[str]) -> None:
        self.model = model
        self.weights = set(weights)
        self.output_names = output_names
        self._sessions: dict[tuple[Any, ...], tuple[Any, list[str]]] = {}

    def _session(self, weights: Mapping[str, np.ndarray], keys: Collection[Hashable],
                 context: Context) -> tuple[ort.InferenceSession, list[str]]:
        wanted = tuple(sorted(k for k in keys if isinstance(k, str)))
        digest = hashlib.sha256()
        for name in sorted(weights):
            if name in self.weights:
                array = np.ascontiguousarray(weights[name])
                digest.update(name.encode() + str(array.dtype).encode() + array.tobytes())
        cache = (wanted, context.mode, context.device, digest.hexdigest())
        if cache in self._sessions:
            return self._sessions[cache]
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        graph = model.graph
        for tensor in graph.initializer:
            if tensor.name in self.weights and tensor.name in weights:
                array = np.asarray(weights[tensor.name])
                data = numpy_helper.from_array(
                    array.astype(numpy_helper.to_array(tensor).dtype, copy=False), tensor.name)
                tensor.CopyFrom(data)
        produced = {name for node in graph.node for name in node.output if name}
        outputs = {o.name for o in graph.output}
        observed = [k for k in wanted if k in produced]
        for name in observed:
            if name not in outputs:
                graph.output.append(onnx.ValueInfoProto(name=name))
        options = ort.SessionOptions()
        options.log_severity_level = _QUIET
        options.graph_optimization_level = _LEVELS[context.mode]
        try:
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=_providers(context.device))
        except Exception as err:
            raise RunnerError(f"onnxruntime cannot load the model to observe it: "
                              f"{first_line(err)}") from err
        if len(self._sessions) >= 4:  # one per side's weights and contexts, not per seed
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[cache] = (session, observed)
        return session, observed

    def observe(self, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                keys: Collection[Hashable], cotangents: Mapping[str, np.ndarray] | None,
                context: Context) -> Observation:
        self.require_float32(context)
        session, observed = self._session(weights, keys, context)
        feeds = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
        names = [o.name for o in session.get_outputs()]
        try:
            results = dict(zip(names, session.run(names, feeds)))
        except Exception as err:
            raise RunnerError(f"onnxruntime failed to run the model: {first_line(err)}") from err
        return Observation(
            outputs={n: np.asarray(results[n]) for n in self.output_names if n in results},
            values={k: np.asarray(results[k]) for k in observed if k in results})
