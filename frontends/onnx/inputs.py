"""Example inputs of an ONNX model: sized from its declared inputs and the sizes the user
gives (``--input-shape``), bounded, and filled with seeded values."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from specgraph.errors import FactoryError, TraceError
from specgraph.frontends.onnx.convert import ELEM_TYPES, NUMPY_TYPES
from specgraph.limits import MAX_RANK, MAX_TENSOR_BYTES

__all__ = ["make_inputs", "user_inputs", "unsized"]

# A declared input's dimensions: a fixed size, or the name of a symbolic one ("?" unnamed);
# None where the input declares no shape at all.
Declared = list[int | str] | None


def user_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs the caller feeds (those without an initializer)."""
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def make_inputs(model: onnx.ModelProto, given: Mapping[str, Any] | None = None, *,
                shapes: Mapping[str, Sequence[int]] | None = None,
                shared_shapes: bool = False, reference: str = "<model>", seed: int = 0
                ) -> dict[str, np.ndarray]:
    """Inputs for ``model``: ``given`` ones by name, seeded random ones for the rest.

    The inputs made here take their sizes from ``shapes`` where it names them, else from
    the model, whose symbolic or unknown dimensions (``batch``, ``sequence``) become 1.
    Floating inputs are standard normal; booleans and integer inputs whose name contains
    ``mask`` are all ones; an integer input that indexes an initializer table (``Gather``,
    e.g. token ids) lies in ``[0, rows)`` of the smallest such table; other integers lie in
    ``[0, 8)``.

    Args:
        model: the model, its tensors loaded.
        given: inputs by name, used as they are.
        shapes: sizes by input name (``--input-shape``): one per declared dimension, equal
            to every fixed one.
        shared_shapes: ``shapes`` are shared with another model (the two sides of a diff),
            so a name this model has no input of is left for the caller to check.
        reference: the model reference, for messages.
        seed: the seed of the random values.

    Raises:
        TraceError: an input is no numeric tensor, a shape does not fit its input, or an
            input would be larger than MAX_TENSOR_BYTES (one sentence).
        FactoryError: ``given`` names an input the model does not have.
    """
    given, shapes = dict(given or {}), dict(shapes or {})
    names = user_inputs(model)
    inputs = ", ".join(names) or "none"
    stray = sorted(set(given) - set(names))
    if stray:
        raise FactoryError(f"{reference}: the model has no input {stray[0]!r}; its inputs "
                           f"are {inputs}")
    stray = [] if shared_shapes else sorted(set(shapes) - set(names))
    if stray:
        raise TraceError(f"{reference}: --input-shape names {stray[0]!r}, which is no input "
                         f"of the model; its inputs are {inputs}")
    rng = np.random.default_rng(seed)
    graph = model.graph
    by_name = {i.name: i for i in graph.input}
    out: dict[str, np.ndarray] = {}
    for name in names:
        dtype, declared = _declared(by_name[name], reference)
        if name in given:
            out[name] = np.asarray(given[name]).astype(NUMPY_TYPES[dtype], copy=False)
            continue
        dims = _sized(name, dtype, declared, shapes.get(name), reference)
        if dtype.startswith("float"):
            out[name] = rng.standard_normal(dims).astype(NUMPY_TYPES[dtype])
        elif dtype == "bool" or "mask" in name.lower():
            out[name] = np.ones(dims, dtype=NUMPY_TYPES[dtype])
        else:
            high = _table_rows(graph, name) or 8
            out[name] = rng.integers(0, high, size=dims).astype(NUMPY_TYPES[dtype])
    return out


def unsized(model: onnx.ModelProto, given: Mapping[str, Any],
            shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """The inputs ``make_inputs`` sized with a guess, each as ``input 'x' [batch, 3]``: those
    neither given nor in ``shapes`` that declare a symbolic dimension or no shape."""
    by_name = {i.name: i for i in model.graph.input}
    out = []
    for name in user_inputs(model):
        declared = _dims(by_name[name])
        if name not in given and name not in shapes and (
                declared is None or any(isinstance(d, str) for d in declared)):
            out.append(f"input {name!r} {_text(declared)}")
    return out


def _declared(info: onnx.ValueInfoProto, reference: str) -> tuple[str, Declared]:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or tensor.elem_type not in ELEM_TYPES:
        raise TraceError(f"{reference}: input {info.name!r} is not a tensor of a supported "
                         "dtype; specgraph traces models whose inputs are numeric tensors")
    dtype = ELEM_TYPES[tensor.elem_type]
    if dtype == "bfloat16":
        raise TraceError(f"{reference}: input {info.name!r} is bfloat16, which NumPy cannot "
                         "feed to onnxruntime; export the model with float32 inputs")
    return dtype, _dims(info)


def _dims(info: onnx.ValueInfoProto) -> Declared:
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else d.dim_param or "?"
            for d in tensor.shape.dim]


def _text(declared: Declared) -> str:
    return "of undeclared shape" if declared is None else f"[{', '.join(map(str, declared))}]"


def _sized(name: str, dtype: str, declared: Declared, shape: Sequence[int] | None,
           reference: str) -> list[int]:
    """The dimensions of input ``name``: ``shape`` checked against what the model declares,
    or the declared ones with each symbolic one 1; either within MAX_TENSOR_BYTES."""
    itemsize = np.dtype(NUMPY_TYPES[dtype]).itemsize
    bound = f"over specgraph's bound of {MAX_TENSOR_BYTES:,} bytes per input"
    if shape is None:
        dims = [d if isinstance(d, int) else 1 for d in declared or []]
        nbytes = math.prod(dims) * itemsize
        if len(dims) > MAX_RANK:
            raise TraceError(f"{reference}: input {name!r} is declared with {len(dims)} "
                             f"dimensions, more than the {MAX_RANK} specgraph makes an input "
                             "with; export the model with inputs of fewer dimensions")
        if nbytes > MAX_TENSOR_BYTES:
            sizes = ",".join(f"D{i + 1}" for i in range(len(dims)))
            raise TraceError(
                f"{reference}: input {name!r} is declared {dtype}{_text(declared)}, "
                f"{nbytes:,} bytes, {bound}; export the model with symbolic dimensions "
                f"there and pass --input-shape {name}={sizes} with sizes that fit")
        return dims
    given = f"--input-shape {name}={','.join(map(str, shape))}"
    if declared is not None and len(shape) != len(declared):
        raise TraceError(f"{reference}: {given} gives {len(shape)} size(s) for input "
                         f"{name!r}, declared {dtype}{_text(declared)} with {len(declared)} "
                         "dimension(s); pass one size per dimension")
    fixed = [(i, d) for i, d in enumerate(declared or []) if isinstance(d, int)]
    wrong = next(((i, d) for i, d in fixed if shape[i] != d), None)
    if wrong is not None:
        fitting = [declared[i] if isinstance(declared[i], int) else s
                   for i, s in enumerate(shape)]
        raise TraceError(f"{reference}: {given} sets dimension {wrong[0]} to "
                         f"{shape[wrong[0]]}, but input {name!r} is declared "
                         f"{dtype}{_text(declared)}, that dimension fixed at {wrong[1]}; pass "
                         f"--input-shape {name}={','.join(map(str, fitting))}")
    nbytes = math.prod(shape) * itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise TraceError(f"{reference}: {given} makes input {name!r} {dtype}{list(shape)}, "
                         f"{nbytes:,} bytes, {bound}; pass smaller sizes")
    return list(shape)


def _table_rows(graph: onnx.GraphProto, name: str) -> int | None:
    tables = {t.name: t.dims[0] for t in graph.initializer if len(t.dims) >= 1
              and t.dims[0] > 0}
    rows = [tables[n.input[0]] for n in graph.node if n.op_type == "Gather"
            and len(n.input) > 1 and n.input[1] == name and n.input[0] in tables]
    return min(rows) if rows else None
