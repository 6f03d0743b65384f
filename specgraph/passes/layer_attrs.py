"""Attributes a traced program cannot show, set on the layers canonicalization raised.

A batch norm's momentum acts only while training, so an inference program (a Keras 3
``BatchNormalization`` written out as arithmetic, a Flax ``BatchNorm`` with running
averages) never mentions it. A frontend reads it off the framework's layer object and
records it by the layer's scope; once the layer is raised, its node takes the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgraph.ir import Graph
from specgraph.ops import get_spec

__all__ = ["with_layer_attrs"]


def _owner(scope: str, keys: list[str], layer_attrs: Mapping[str, Mapping[str, Any]]
           ) -> Mapping[str, Any]:
    """The attributes recorded for ``scope``, or for the longest scope it ends with (a Flax
    root module's name prefixes the scopes of an HF model, not the module paths; ``keys``
    longest first, so ``block.bn`` wins over a root-level ``bn``)."""
    if scope in layer_attrs:
        return layer_attrs[scope]
    for key in keys:
        if key and scope.endswith("." + key):
            return layer_attrs[key]
    return {}


def with_layer_attrs(graph: Graph, layer_attrs: Mapping[str, Mapping[str, Any]]) -> Graph:
    """``graph`` with every node whose scope has recorded attributes given those its op
    declares (an attribute the op does not take is left out, never guessed)."""
    if not layer_attrs:
        return graph
    keys = sorted(layer_attrs, key=len, reverse=True)
    nodes, changed = [], False
    for node in graph.nodes:
        attrs = _owner(node.scope or "", keys, layer_attrs)
        declared = get_spec(node.op).attrs if attrs else {}
        update = {k: v for k, v in attrs.items() if k in declared and node.attrs.get(k) != v}
        if update:
            node = node.replace(attrs={**node.attrs, **update})
            changed = True
        nodes.append(node)
    return graph.replace(nodes=nodes) if changed else graph
