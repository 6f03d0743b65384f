"""The way back: a Graph as an ONNX model that onnxruntime runs (``to_onnx``).

Every canonical op has an export rule that writes one or a few ONNX nodes; layer ops whose
ONNX operator is newer than the target opset (LayerNormalization before 17, Gelu before 20,
GroupNormalization before 21, RMSNormalization before 23, attention always) are written as
their formulas. Node names carry the scope (``/encoder.layer.0/MatMul_7``), so the ONNX
frontend reads the same scopes back. ``onnx`` is imported inside the functions only: it is
not loaded by ``import specgraph``.

Example:
    >>> from specgraph.ir import GraphBuilder
    >>> b = GraphBuilder("tiny")
    >>> x = b.input("x", (2, 3), "float32")
    >>> b.output("y", b.add("relu", [x], shape=(2, 3), dtype="float32"))
    >>> [n.op_type for n in to_onnx(b.build()).graph.node]
    ['Relu']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgraph.errors import SpecgraphError
from specgraph.frontends._common.table import join
from specgraph.frontends.onnx.export import rules, shape_rules
from specgraph.frontends.onnx.export.exporter import DIRECT, MIN_OPSET, UNSUPPORTED, Exporter
from specgraph.ir import Graph

__all__ = ["to_onnx", "EXPORTERS", "UNSUPPORTED", "MIN_OPSET"]

# canonical op -> the rule that writes its ONNX nodes
EXPORTERS = join(DIRECT, rules.RULES, shape_rules.RULES)


def to_onnx(graph: Graph, weights: Mapping[str, Any] | None = None, *, opset: int = 17,
            ir_version: int = 8) -> Any:
    """``graph`` as an ``onnx.ModelProto`` that onnxruntime runs.

    Args:
        graph: the graph to export.
        weights: parameter arrays in canonical layout; they become initializers. Without
            them, parameters become graph inputs after the model's own inputs.
        opset: the default-domain opset (13 or newer).
        ir_version: the IR version written into the model (onnxruntime 1.31 reads up to 11).

    Raises:
        SpecgraphError: an op has no export rule (``opaque``), a weight is missing, or the
            opset is too old.
    """
    import onnx

    if opset < MIN_OPSET:
        raise SpecgraphError(f"to_onnx writes opset {MIN_OPSET} or newer, got opset {opset}; "
                             f"pass opset={MIN_OPSET} or more")
    exporter = Exporter(graph, opset, EXPORTERS)
    inputs = [exporter.value_info(n, v) for n, v in zip(graph.input_names, graph.inputs)]
    initializers = []
    for name, value in graph.params.items():
        if weights is None:
            inputs.append(exporter.value_info(name, value))
        elif name not in weights:
            raise SpecgraphError(f"to_onnx has no weight for parameter {name!r} of graph "
                                 f"{graph.name!r}; pass every parameter or weights=None")
        else:
            initializers.append(exporter.tensor(name, weights[name], value.dtype))
    for value, data in graph.constants.items():
        initializers.append(exporter.tensor(exporter.name(value), data, value.dtype))
    for node in graph.nodes:
        exporter.export(node)
    outputs = exporter.finish_outputs()
    onnx_graph = onnx.helper.make_graph(exporter.nodes, graph.name or "specgraph", inputs,
                                        outputs, initializer=initializers + exporter.extra)
    return onnx.helper.make_model(onnx_graph, producer_name="specgraph", ir_version=ir_version,
                                  opset_imports=[onnx.helper.make_opsetid("", opset)])
