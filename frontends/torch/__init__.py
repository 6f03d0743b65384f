"""The PyTorch frontend: ``torch.export`` onto the shared IR (``tracer``, with the ATen op
converters in ``ops`` and ``shape_ops``), and the runner that executes canonical nodes with
PyTorch's own functions (``runner``); ``arrays`` measures any framework's tensors on a GPU."""

from specgraph.frontends.torch.tracer import FRAMEWORK, accepts, trace

__all__ = ["trace", "accepts", "FRAMEWORK"]
