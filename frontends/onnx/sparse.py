"""Sparse tensors of an ONNX model made dense, so that every value is one onnxruntime computes.

A ``Constant`` with a ``sparse_value`` is a sparse initializer to onnxruntime, whose
unoptimized run then has no value for it ("Missing Input"), and the walk reads only dense
initializers. ``densify`` rewrites both forms, in every graph and function of the model,
once their data is loaded: a sparse ``Constant`` becomes a ``Constant`` with a dense
``value``, a sparse initializer a dense one of the same name.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from specgraph.errors import TraceError, first_line
from specgraph.frontends.onnx.external import Owner, owners
from specgraph.limits import MAX_TENSOR_BYTES

__all__ = ["densify", "dense"]

_MAIN_DOMAINS = ("", "ai.onnx")


def densify(model: onnx.ModelProto, reference: str) -> onnx.ModelProto:
    """``model`` with every sparse ``Constant`` and sparse initializer made dense: a copy
    where there are any, else ``model`` itself (it is never changed).

    Raises:
        TraceError: a sparse tensor is malformed (indices out of range, of the wrong shape)
            or would be larger dense than MAX_TENSOR_BYTES (one sentence naming it).
    """
    if not any(True for _ in _sparse(model)):
        return model
    model = _copy(model)
    for label, owner, item in list(_sparse(model)):
        if isinstance(item, onnx.SparseTensorProto):
            owner.initializer.append(dense(item, label, reference))
        else:
            tensor = dense(item.sparse_tensor, label, reference)
            item.CopyFrom(onnx.helper.make_attribute("value", tensor))
    for _, owner in owners(model):
        if isinstance(owner, onnx.GraphProto):
            del owner.sparse_initializer[:]
    return model


def _sparse(model: onnx.ModelProto) -> Iterator[tuple[str, Owner, Any]]:
    """Each sparse initializer and sparse ``Constant`` attribute, with its graph and label."""
    for where, owner in owners(model):
        if isinstance(owner, onnx.GraphProto):
            for sparse in owner.sparse_initializer:
                yield f"sparse initializer {sparse.values.name!r}{where}", owner, sparse
        for node in owner.node:
            if node.op_type != "Constant" or node.domain not in _MAIN_DOMAINS:
                continue
            for attr in node.attribute:
                if attr.name == "sparse_value" and attr.HasField("sparse_tensor"):
                    label = f"attribute 'sparse_value' of node {node.name!r} (Constant){where}"
                    yield label, owner, attr


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def dense(sparse: onnx.SparseTensorProto, label: str, reference: str) -> onnx.TensorProto:
    """The dense tensor ``sparse`` stands for, named as its values are.

    Indices are either ``[NNZ]`` positions in the flattened tensor or ``[NNZ, rank]``
    coordinates, as the ONNX spec allows.
    """
    def refuse(what: str) -> TraceError:
        return TraceError(f"{reference}: the sparse tensor of {label} {what}; export the "
                          "model again with the tensor stored dense")

    shape = tuple(sparse.dims)
    if any(d < 0 for d in shape):
        raise refuse(f"has a negative dimension in {list(shape)}")
    try:
        values = numpy_helper.to_array(sparse.values)
        indices = numpy_helper.to_array(sparse.indices)
    except Exception as err:  # onnx raises what it meets in a malformed tensor
        raise refuse(f"cannot be read: {first_line(err)}") from err
    size = math.prod(shape)
    nbytes = size * values.dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise refuse(f"would take {nbytes:,} bytes dense (shape {list(shape)}), over "
                     f"specgraph's bound of {MAX_TENSOR_BYTES:,} bytes for a tensor it makes")
    nnz = values.size
    if values.ndim != 1 or indices.dtype.kind not in "iu":
        raise refuse(f"has values of shape {list(values.shape)} and indices of dtype "
                     f"{indices.dtype}, not one row of values and integer indices")
    if indices.shape not in ((nnz,), (nnz, len(shape))):
        raise refuse(f"has indices of shape {list(indices.shape)} for {nnz} values in "
                     f"{len(shape)} dimensions; expected [{nnz}] or [{nnz}, {len(shape)}]")
    bound = size if indices.ndim == 1 else np.asarray(shape, np.int64)
    if nnz and (np.any(indices < 0) or np.any(indices >= bound)):
        raise refuse(f"has an index outside its shape {list(shape)}")
    indices = indices.astype(np.int64)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), shape)
    out = np.zeros(size, values.dtype) if values.dtype != object else np.full(size, b"", object)
    out[flat] = values
    return numpy_helper.from_array(out.reshape(shape), sparse.values.name)
