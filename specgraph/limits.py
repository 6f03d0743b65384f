"""Bounds on the tensors specgraph makes itself from what a model file or the command line
declares: a declared ``[1000000, 1000000]`` input is refused in one sentence instead of
asking the machine for terabytes."""

from __future__ import annotations

__all__ = ["MAX_TENSOR_BYTES", "MAX_RANK"]

MAX_TENSOR_BYTES = 2**30  # an example input of an ONNX model, a sparse tensor made dense
MAX_RANK = 32  # dimensions of an input specgraph makes (NumPy's own limit is 64)
