"""ONNX frontend: an ``.onnx`` file (or a ``ModelProto``) onto the shared IR, run in onnxruntime.

A file carries no example inputs, so ``trace_file`` makes seeded ones from the graph's input
types and the sizes the user gives (``specgraph.frontends.onnx.inputs``). Sparse constants
are made dense first (``sparse``), so that onnxruntime computes them. The model runs twice
in onnxruntime on CPU: once as is, for the outputs users get, and once with optimizations
off and every intermediate value as an extra output; that second run gives each value's
exact static shape (ONNX shape inference mis-sizes some ceil-mode pools) and the values of
shape computations, which are folded into constants. Initializers become graph parameters
under their own names, in canonical layout (a Gemm weight with ``transB=1`` is stored
``[in, out]``). ``scope`` comes from the PyTorch exporter's ``pkg.torch.onnx.name_scopes``
metadata, else from node names such as ``/encoder/layer.0/MatMul``; ``source`` from
``pkg.torch.onnx.stack_trace``. Each ONNX operator has a small converter in
``specgraph.frontends.onnx.ops`` or ``shape_ops``; one none knows becomes ``opaque``. The
walk itself is in ``specgraph.frontends.onnx.convert``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort

from specgraph.errors import FactoryError, TraceError, first_line
from specgraph.frontends._common.table import join
from specgraph.frontends.onnx import external, ops, shape_ops, sparse
from specgraph.frontends.onnx.convert import Converter
from specgraph.frontends.onnx.inputs import make_inputs, unsized, user_inputs
from specgraph.frontends.onnx.program import OnnxProgram
from specgraph.model import TracedModel

__all__ = ["trace_file", "trace_model", "make_inputs", "accepts", "FRAMEWORK"]

FRAMEWORK = "onnx"

_ORT_QUIET = 3
_CONVERTERS = join(ops.CONVERTERS, shape_ops.CONVERTERS)


def accepts(model: Any) -> bool:
    return isinstance(model, onnx.ModelProto)


# --- loading -----------------------------------------------------------------------------
def trace_file(path: Path, *, reference: str, inputs: Mapping[str, Any] | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None,
               shared_shapes: bool = False) -> TracedModel:
    """Trace the ONNX model in ``path`` into a TracedModel.

    External data, wherever it is referenced in the model, is read by ``external.load`` and
    only from files inside the model's own folder. Example inputs are made by
    ``make_inputs`` unless ``inputs`` gives some of them by input name.

    Args:
        path: the ``.onnx`` file.
        reference: the model reference, for messages.
        inputs: example inputs by input name.
        shapes: sizes of the inputs made here by input name (``--input-shape``).
        shared_shapes: ``shapes`` also size another model, so names this one lacks are
            left for the caller to check (see ``make_inputs``).

    Raises:
        TraceError: the file is no valid ONNX model, its external data lies outside its
            folder, a shape does not fit its input, or onnxruntime cannot run it (one
            sentence).
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
    field = _not_text(model)
    if field is not None:
        raise TraceError(f"{reference} is not a valid ONNX model: {field} is not UTF-8 text; "
                         "export it again or pass the right file")
    external.load(model, path.parent, reference)
    return _trace(model, dict(inputs or {}), reference, shapes=dict(shapes or {}),
                  shared_shapes=shared_shapes, advice="pass the sizes the model expects with "
                  "--input-shape NAME=D1,D2,...")


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
    field = _not_text(model)
    if field is not None:
        raise FactoryError(f"{reference}: the model's {field} is not UTF-8 text; give every "
                           "name and string field of the ModelProto as text")
    refs = external.external(model)
    if refs:
        raise TraceError(f"{reference}: the model keeps tensors in external files ({refs[0][0]} "
                         "first); load it with onnx.load(path) or pass the .onnx path instead")
    return _trace(model, _named_inputs(model, example_inputs, reference), reference,
                  advice="return example inputs of the sizes it expects from the factory")


def _named_inputs(model: onnx.ModelProto, given: Any, reference: str) -> dict[str, Any]:
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    items = list(given) if isinstance(given, (tuple, list)) else [given]
    names = user_inputs(model)
    if len(items) > len(names):
        raise FactoryError(f"{reference}: {len(items)} example inputs for a model with "
                           f"{len(names)} inputs ({', '.join(names)}); pass one per input")
    return dict(zip(names, items))


def _not_text(model: onnx.ModelProto) -> str | None:
    """The first string field of ``model`` that holds no UTF-8 text, as a path such as
    ``graph.input[0].name``; None if every one does.

    The ONNX schema is proto2, which does not check UTF-8 when parsing: protobuf hands such
    a field over as ``bytes`` where every other one is a ``str``.
    """
    stack: list[tuple[str, Any]] = [("", model)]
    while stack:
        path, message = stack.pop()
        for field, value in message.ListFields():
            if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
                continue  # numbers and bytes (raw_data): nothing to decode
            name = f"{path}.{field.name}" if path else field.name
            items = list(enumerate(value)) if field.is_repeated else [(None, value)]
            for index, item in items:
                where = name if index is None else f"{name}[{index}]"
                if field.type == field.TYPE_STRING and not isinstance(item, str):
                    return where
                if field.type == field.TYPE_MESSAGE:
                    stack.append((where, item))
    return None


# --- onnxruntime -------------------------------------------------------------------------
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


def _run(session: ort.InferenceSession, inputs: dict[str, np.ndarray], reference: str,
         fix: str) -> dict[str, Any]:
    try:
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs)))
    except Exception as err:
        raise TraceError(f"{reference}: onnxruntime failed to run the model on its example "
                         f"inputs: {first_line(err)}; {fix}") from err


def _probe(model: onnx.ModelProto, inputs: dict[str, np.ndarray], reference: str, fix: str
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
    return _run(_session(probe, False, reference), inputs, reference, fix)


def _trace(model: onnx.ModelProto, given: dict[str, Any], reference: str, *,
           shapes: Mapping[str, Sequence[int]] | None = None, shared_shapes: bool = False,
           advice: str) -> TracedModel:
    """Trace a model whose tensors are all loaded.

    Sparse constants are made dense and local functions inlined first, so that onnxruntime
    computes every value the walk reads. ``advice`` says how to size the inputs, for an
    onnxruntime failure on inputs whose symbolic dimensions were guessed.
    """
    model = sparse.densify(model, reference)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as err:  # onnx's inliner refuses recursive or malformed functions
            raise TraceError(f"{reference}: onnx cannot inline the model's local functions: "
                             f"{first_line(err)}; check it with onnx.checker.check_model"
                             ) from err
    shapes = dict(shapes or {})
    inputs = make_inputs(model, given, shapes=shapes, shared_shapes=shared_shapes,
                         reference=reference)
    guessed = unsized(model, given, shapes)
    fix = (f"specgraph sized symbolic dimensions as 1 ({', '.join(guessed)}): {advice}"
           if guessed else "pass inputs that fit the model")
    outputs = _run(_session(model, True, reference), inputs, reference, fix)
    values = _probe(model, inputs, reference, fix)
    converter = Converter(model, values, reference, _CONVERTERS)
    graph, weights = converter.convert(inputs)
    outs = {name: np.asarray(outputs[name]) for name in graph.output_names}
    steps, shapes = converter.native_layouts()
    program = OnnxProgram(model, list(graph.params), list(graph.output_names))
    return TracedModel(graph, weights, inputs, outs, FRAMEWORK, reference, native=model,
                       program=program, param_layouts=steps, param_shapes=shapes)
