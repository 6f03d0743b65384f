"""The PyTorch frontend.

- ``tracer``: ``torch.export`` onto the shared IR, with the ATen op converters in ``ops`` and
  ``shape_ops`` (native op -> canonical op);
- ``kernels`` and ``kernels_spatial``: canonical op -> PyTorch's own function, the inverse
  of the converter tables; ``runner``: ``TorchRunner``, which executes canonical nodes with
  them (eager or torch.compile, CPU or CUDA, each precision);
- ``repro``: the PyTorch script that reproduces one layer's divergence;
- ``arrays``: comparison arithmetic on a GPU, any framework's tensors seen through DLPack.
"""

from __future__ import annotations

from typing import Any

import torch

from specgraph.frontends.torch.tracer import FRAMEWORK, accepts, trace

__all__ = ["from_numpy", "trace", "accepts", "FRAMEWORK"]


def from_numpy(data: Any) -> torch.Tensor:
    """A NumPy array as a PyTorch tensor (sharing its memory)."""
    return torch.from_numpy(data)
