"""Graphs as networkx digraphs, and structural equality of two graphs up to naming."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from specgraph.ir import Graph, Value
from specgraph.ops import get_spec, is_registered
from specgraph.ops.values import same_attrs, same_numbers

__all__ = ["to_networkx", "isomorphic"]



def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """One vertex per op node, graph input, parameter and constant; one edge per read.

    Vertices carry ``kind`` (op, input, param, const), ``op``, ``attrs``, ``shape``, and for
    constants their ``value`` if scalar, their ``data`` otherwise; edges carry ``slot``, the
    input position (0 for commutative ops, whose operand order means nothing).
    """
    g = nx.MultiDiGraph()
    ids: dict[Value, Any] = {}
    for i, v in enumerate(graph.inputs):
        ids[v] = ("input", i)
        g.add_node(ids[v], kind="input", op="input", attrs={}, shape=v.shape)
    for name, v in graph.params.items():
        ids[v] = ("param", name)
        g.add_node(ids[v], kind="param", op="param", attrs={}, shape=v.shape)
    for i, (v, data) in enumerate(graph.constants.items()):
        ids[v] = ("const", i)
        value = float(np.asarray(data).reshape(())) if np.size(data) == 1 else None
        g.add_node(ids[v], kind="const", op="const", attrs={"value": value}, shape=v.shape,
                   data=None if value is not None else data)
    for i, node in enumerate(graph.nodes):
        key = ("node", i)
        g.add_node(key, kind="op", op=node.op, attrs=dict(node.attrs),
                   shape=tuple(v.shape for v in node.outputs))
        for slot, v in enumerate(node.inputs):
            g.add_edge(ids[v], key, slot=0 if get_spec(node.op).commutative else slot)
        for j, v in enumerate(node.outputs):
            ids[v] = key if len(node.outputs) == 1 else ("out", i, j)
            if len(node.outputs) > 1:
                g.add_node(ids[v], kind="output-slot", op=f"out{j}", attrs={}, shape=v.shape)
                g.add_edge(key, ids[v], slot=j)
    for j, v in enumerate(graph.outputs):
        g.add_node(("output", j), kind="output", op="output", attrs={}, shape=v.shape)
        g.add_edge(ids[v], ("output", j), slot=j)
    return g


def _node_match(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("data") is not None and b.get("data") is not None and \
            not same_numbers(a["data"], b["data"]):
        return False  # constant tensors holding other numbers (ids from another offset)
    return (a["op"] == b["op"] and a["shape"] == b["shape"]
            and same_attrs(a["attrs"], b["attrs"]))


def _edge_match(a: dict[Any, dict[str, Any]], b: dict[Any, dict[str, Any]]) -> bool:
    return sorted(e["slot"] for e in a.values()) == sorted(e["slot"] for e in b.values())


def isomorphic(lhs: Graph, rhs: Graph) -> bool:
    """Whether the two graphs compute the same thing structurally: same ops, attributes,
    shapes, constants and wiring, whatever the names of values, parameters and scopes."""
    return nx.is_isomorphic(to_networkx(lhs), to_networkx(rhs), node_match=_node_match,
                            edge_match=_edge_match)


def describe(graph: Graph) -> list[str]:
    """One line per node (op and key attributes), for test failure messages."""
    out = []
    for node in graph.nodes:
        spec = get_spec(node.op) if is_registered(node.op) else None
        shown = {k: v for k, v in node.attrs.items()
                 if spec is None or node.op == "opaque" or v != spec.attrs[k].default}
        out.append(f"{node.op} {shown} {[v.shape for v in node.outputs]}")
    return out
