"""The PyTorch frontend: ``torch.export`` onto the shared IR (``tracer``, with the ATen op
converters in ``ops`` and ``shape_ops``), and the runner that executes canonical nodes with
PyTorch's own functions (``runner``); ``arrays`` measures any framework's tensors on a GPU."""

from typing import Any

from specgraph.frontends.torch.tracer import FRAMEWORK, accepts, trace

__all__ = ["from_numpy", "trace", "accepts", "FRAMEWORK"]


def from_numpy(data: Any) -> Any:
    """A NumPy array as this framework's tensor."""
    import torch

    return torch.from_numpy(data)
