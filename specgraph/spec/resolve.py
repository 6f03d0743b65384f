"""What an implementation chose where a spec leaves something open, read along an
alignment of the two graphs, to run the spec as the implementation does.

A spec is partial: an attribute left out, a stand-in activation, a block marked
``unspecified`` run on defaults so that the spec is executable. Held against an
implementation, those parts take the implementation's choices (``Fill``), so that the
numbers and the structure compare only what the spec states: a GELU whose approximation the
spec leaves open runs as the implementation's, a linear whose bias it does not state has a
bias exactly when the implementation's has one.
"""

from __future__ import annotations

from collections.abc import Mapping

from specgraph.align import Alignment
from specgraph.ir import Graph, Node
from specgraph.spec.compiled import CompiledSpec, Fill, Unchecked

__all__ = ["fills"]


def fills(spec: CompiledSpec, alignment: Alignment, side: str = "rhs"
          ) -> dict[tuple[str, str], Fill]:
    """Per (scope, op) of the spec's nodes that leave something open, what the aligned
    node of the other graph has there.

    Args:
        spec: the compiled spec (its side table says what is open).
        alignment: the spec's canonical graph aligned with the implementation's.
        side: which side of ``alignment`` is the spec's graph.
    """
    graph, other = (alignment.rhs, alignment.lhs) if side == "rhs" else (alignment.lhs,
                                                                          alignment.rhs)
    matched = alignment.rhs_to_lhs if side == "rhs" else alignment.lhs_to_rhs
    out: dict[tuple[str, str], Fill] = {}
    for entry in spec.unchecked:
        for index, node in _covered(graph, entry):
            if index not in matched:
                continue
            found = _fill(entry, node, other.nodes[matched[index]])
            if found is not None:
                out.setdefault((node.scope, node.op), found)
    return out


def _covered(graph: Graph, entry: Unchecked) -> list[tuple[int, Node]]:
    return [(i, n) for i, n in enumerate(graph.nodes)
            if entry.covers(n.scope, n.op) and (entry.op is None or n.op == entry.op)]


def _fill(entry: Unchecked, node: Node, theirs: Node) -> Fill | None:
    if entry.stand_in:
        if len(theirs.inputs) == 1 and len(theirs.outputs) == 1 and \
                theirs.outputs[0].shape == node.outputs[0].shape:
            return Fill(dict(theirs.attrs), theirs.op)
        return None
    if theirs.op != node.op:
        return None
    if entry.op is None:  # an unspecified block: every attribute is the implementation's
        return Fill(dict(theirs.attrs))
    return Fill(_pick(theirs.attrs, entry.attrs))


def _pick(attrs: Mapping[str, object], keys: tuple[str, ...]) -> dict[str, object]:
    return {k: attrs[k] for k in keys if k in attrs}
