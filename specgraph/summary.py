"""``summarize``: a traced model as plain data (layer table and equations) for ``show``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgraph.ir import Graph
from specgraph.model import TracedModel
from specgraph.ops import REQUIRED, get_spec
from specgraph.symbolic import Equation, equations

__all__ = ["TensorInfo", "LayerRow", "ModelSummary", "summarize", "key_attrs"]


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor: graph input, output or parameter."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class LayerRow:
    """One node of the graph as a row of the layer table."""

    index: int
    scope: str
    op: str
    attrs: dict[str, Any]
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    params: tuple[TensorInfo, ...]
    param_count: int
    source: str
    origin: str


@dataclass(frozen=True)
class ModelSummary:
    """Everything ``specgraph show`` prints about one model."""

    reference: str
    framework: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    layers: tuple[LayerRow, ...]
    param_count: int
    equations: tuple[Equation, ...]


def key_attrs(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes worth showing: required ones and those that differ from the default."""
    if op == "opaque":
        return dict(attrs)
    spec = get_spec(op)
    return {k: v for k, v in attrs.items()
            if spec.attrs[k].default is REQUIRED or v != spec.attrs[k].default}


def _rows(graph: Graph) -> tuple[LayerRow, ...]:
    rows = []
    for i, node in enumerate(graph.nodes):
        params = tuple(TensorInfo(name, v.shape, v.dtype) for v in node.inputs
                       if (name := graph.param_name(v)) is not None)
        rows.append(LayerRow(
            index=i, scope=node.scope, op=node.op, attrs=key_attrs(node.op, dict(node.attrs)),
            inputs=tuple(v.shape for v in node.inputs if graph.param_name(v) is None),
            outputs=tuple(v.shape for v in node.outputs), params=params,
            param_count=sum(int(_size(p.shape)) for p in params), source=node.source,
            origin=node.origin,
        ))
    return tuple(rows)


def _size(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def summarize(traced: TracedModel) -> ModelSummary:
    """The layer table and equations of a traced model."""
    g = traced.graph
    return ModelSummary(
        reference=traced.reference,
        framework=traced.framework,
        inputs=tuple(TensorInfo(n, v.shape, v.dtype) for n, v in zip(g.input_names, g.inputs)),
        outputs=tuple(TensorInfo(n, v.shape, v.dtype) for n, v in zip(g.output_names, g.outputs)),
        layers=_rows(g),
        param_count=g.param_count(),
        equations=tuple(equations(g)),
    )
