"""The ONNX frontend.

- ``tracer``: an ONNX file or ModelProto loaded, run in onnxruntime for its values, and walked by ``convert`` onto the shared IR
  with the operator converters in ``ops`` and ``shape_ops``;
- ``external``: every external-data reference in a model (graphs, subgraphs, attributes,
  sparse tensors, local functions) read by specgraph, confined to the model's folder;
- ``sparse``: sparse constants and sparse initializers made dense before onnxruntime runs;
- ``inputs``: example inputs sized from the declared inputs and ``--input-shape``, bounded;
- ``runner``: ``OnnxRunner``, each canonical node exported alone and run in onnxruntime
  (forward only);
- ``export``: the way back, a Graph as an ONNX model (``to_onnx``), one rule per op;
- ``repro``: the onnxruntime script that reproduces one layer's forward divergence.
"""

from __future__ import annotations

from specgraph.frontends.onnx.tracer import (FRAMEWORK, accepts, make_inputs, trace_file,
                                             trace_model)

__all__ = ["trace_file", "trace_model", "make_inputs", "accepts", "FRAMEWORK"]
