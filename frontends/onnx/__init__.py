"""The ONNX frontend: an ONNX graph onto the shared IR (``tracer``, walked by ``convert``
with the operator converters in ``ops`` and ``shape_ops``), the runner that executes
canonical nodes in onnxruntime (``runner``), and the way back, a Graph as an ONNX model
(``export``)."""

from specgraph.frontends.onnx.tracer import (FRAMEWORK, accepts, make_inputs, trace_file,
                                             trace_model)

__all__ = ["trace_file", "trace_model", "make_inputs", "accepts", "FRAMEWORK"]
