"""ONNX frontend: an ``.onnx`` file (or a ``ModelProto``) onto the shared IR, run in onnxruntime.

A file carries no example inputs, so ``trace_file`` makes seeded ones from the graph's input
types (see ``make_inputs``). Sparse constants are made dense first (``sparse``), so that
onnxruntime computes them. The model runs twice in onnxruntime on CPU: once as is, for the
outputs users get, and once with optimizations off and every intermediate value as an extra
output; that second run gives each value's exact static shape (ONNX shape inference
mis-sizes some ceil-mode pools) and the values of shape computations, which are folded into
constants. Initializers become graph parameters under their own names, in canonical layout
(a Gemm weight with ``transB=1`` is stored ``[in, out]``). ``scope`` comes from the PyTorch
exporter's ``pkg.torch.onnx.name_scopes`` metadata, else from node names such as
``/encoder/layer.0/MatMul``; ``source`` from ``pkg.torch.onnx.stack_trace``. Each ONNX
operator has a small converter in ``specgraph.frontends.onnx.ops`` or ``shape_ops``; one
none knows becomes ``opaque``. The walk itself is in ``specgraph.frontends.onnx.convert``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort

from specgraph.errors import FactoryError, TraceError, first_line
from specgraph.frontends._common.table import join
from specgraph.frontends.onnx import external, ops, shape_ops, sparse
from specgraph.frontends.onnx.convert import ELEM_TYPES, NUMPY_TYPES, Converter
from specgraph.model import TracedModel

__all__ = ["trace_file", "trace_model", "make_inputs", "accepts", "FRAMEWORK"]

FRAMEWORK = "onnx"

_ORT_QUIET = 3
_CONVERTERS = join(ops.CONVERTERS, shape_ops.CONVERTERS)


def accepts(model: Any) -> bool:
    return isinstance(model, onnx.ModelProto)


# --- loading -----------------------------------------------------------------------------
def trace_file(path: Path, *, reference: str, inputs: Mapping[str, Any] | None = None
               ) -> TracedModel:
    """Trace the ONNX model in ``path`` into a TracedModel.

    External data, wherever it is referenced in the model, is read by ``external.load`` and
    only from files inside the model's own folder. Example inputs are
    made by ``make_inputs`` unless ``inputs`` gives some of them by input name.

    Raises:
        TraceError: the file is no valid ONNX model, its external data lies outside its
            folder, or onnxruntime cannot run it (one sentence).
    """
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf raises its own DecodeError, files raise OSError
        raise TraceError(f"{reference} is not a valid ONNX model: {first_line(err)}; "
                         "export it again or pass the right file") from err
    if not model.HasField("graph") or model.ir_version == 0 or not model.graph.output:
        raise TraceError(f"{reference} is not a valid ONNX model: it has no graph with "
                         "outputs; export it again or pass the right file")
    external.load(model, path.parent, reference)
    return _trace(model, dict(inputs or {}), reference)


def trace_model(model: Any, example_inputs: Any = None, *, reference: str = "<model>"
                ) -> TracedModel:
    """Trace an in-memory ``onnx.ModelProto`` (what a factory returns) into a TracedModel.

    Args:
        model: the model, with its tensors inline.
        example_inputs: a tuple of arrays in graph-input order, a dict by input name, one
            array, or None for seeded random inputs.
        reference: the model reference, for messages.
    """
    if not accepts(model):
        raise FactoryError(f"{reference}: expected an onnx.ModelProto, got "
                           f"{type(model).__name__}")
    refs = external.external(model)
    if refs:
        raise TraceError(f"{reference}: the model keeps tensors in external files ({refs[0][0]} "
                         "first); load it with onnx.load(path) or pass the .onnx path instead")
    return _trace(model, _named_inputs(model, example_inputs, reference), reference)


def _named_inputs(model: onnx.ModelProto, given: Any, reference: str) -> dict[str, Any]:
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    items = list(given) if isinstance(given, (tuple, list)) else [given]
    names = _user_inputs(model)
    if len(items) > len(names):
        raise FactoryError(f"{reference}: {len(items)} example inputs for a model with "
                           f"{len(names)} inputs ({', '.join(names)}); pass one per input")
    return dict(zip(names, items))


# --- example inputs and onnxruntime ------------------------------------------------------
def _user_inputs(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def make_inputs(model: onnx.ModelProto, given: Mapping[str, Any] | None = None, *,
                   reference: str = "<model>", seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``model``: ``given`` ones by name, seeded random ones for the rest.

    Symbolic or unknown dimensions (``batch``, ``sequence``) become 1. Floating inputs are
    standard normal; booleans and integer inputs whose name contains ``mask`` are all ones;
    an integer input that indexes an initializer table (``Gather``, e.g. token ids) lies in
    ``[0, rows)`` of the smallest such table; other integers lie in ``[0, 8)``.
    """
    given = dict(given or {})
    rng = np.random.default_rng(seed)
    graph = model.graph
    out: dict[str, np.ndarray] = {}
    by_name = {i.name: i for i in graph.input}
    for name in _user_inputs(model):
        dtype, dims = _input_type(by_name[name], reference)
        if name in given:
            out[name] = np.asarray(given.pop(name)).astype(NUMPY_TYPES[dtype], copy=False)
        elif dtype.startswith("float"):
            out[name] = rng.standard_normal(dims).astype(NUMPY_TYPES[dtype])
        elif dtype == "bool" or "mask" in name.lower():
            out[name] = np.ones(dims, dtype=NUMPY_TYPES[dtype])
        else:
            high = _table_rows(graph, name) or 8
            out[name] = rng.integers(0, high, size=dims).astype(NUMPY_TYPES[dtype])
    if given:
        raise FactoryError(f"{reference}: the model has no input {sorted(given)[0]!r}; its "
                           f"inputs are {', '.join(_user_inputs(model)) or 'none'}")
    return out


def _input_type(info: onnx.ValueInfoProto, reference: str) -> tuple[str, list[int]]:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or tensor.elem_type not in ELEM_TYPES:
        raise TraceError(f"{reference}: input {info.name!r} is not a tensor of a supported "
                         "dtype; specgraph traces models whose inputs are numeric tensors")
    dtype = ELEM_TYPES[tensor.elem_type]
    if dtype == "bfloat16":
        raise TraceError(f"{reference}: input {info.name!r} is bfloat16, which NumPy cannot "
                         "feed to onnxruntime; export the model with float32 inputs")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
            for d in tensor.shape.dim]
    return dtype, dims


def _table_rows(graph: onnx.GraphProto, name: str) -> int | None:
    tables = {t.name: t.dims[0] for t in graph.initializer if len(t.dims) >= 1}
    rows = [tables[n.input[0]] for n in graph.node if n.op_type == "Gather"
            and len(n.input) > 1 and n.input[1] == name and n.input[0] in tables]
    return min(rows) if rows else None


def _session(model: onnx.ModelProto, optimize: bool, reference: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = _ORT_QUIET
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:
        raise TraceError(f"{reference}: onnxruntime cannot load the model: "
                         f"{first_line(err)}; check it with onnx.checker.check_model") from err


def _run(session: ort.InferenceSession, inputs: dict[str, np.ndarray], reference: str
         ) -> dict[str, Any]:
    try:
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs)))
    except Exception as err:
        raise TraceError(f"{reference}: onnxruntime failed to run the model on its example "
                         f"inputs: {first_line(err)}; pass inputs that fit the model") from err


def _probe(model: onnx.ModelProto, inputs: dict[str, np.ndarray], reference: str
           ) -> dict[str, Any]:
    """Every value the top-level graph computes, from one unoptimized onnxruntime run."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in known:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    return _run(_session(probe, False, reference), inputs, reference)


def _trace(model: onnx.ModelProto, given: dict[str, Any], reference: str) -> TracedModel:
    """Trace a model whose tensors are all loaded.

    Sparse constants are made dense and local functions inlined first, so that onnxruntime
    computes every value the walk reads.
    """
    model = sparse.densify(model, reference)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    inputs = make_inputs(model, given, reference=reference)
    outputs = _run(_session(model, True, reference), inputs, reference)
    values = _probe(model, inputs, reference)
    converter = Converter(model, values, reference, _CONVERTERS)
    graph, weights = converter.convert(inputs)
    outs = {name: np.asarray(outputs[name]) for name in graph.output_names}
    return TracedModel(graph, weights, inputs, outs, FRAMEWORK, reference, native=model)
