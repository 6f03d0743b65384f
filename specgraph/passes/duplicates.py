"""Merge duplicate nodes: two nodes computing the same op, with the same attributes, on the
same inputs are one (TF's Tensordot reshapes its input once per Dense layer, so Swin's
query, key and value each reshape the same windows, where PyTorch reshapes them once).

Requires: a verified graph. Ensures: no two nodes with equal op, attributes and inputs,
except ``opaque`` nodes (a native op may be random or stateful) and dropout; exact.
"""

from __future__ import annotations

from collections.abc import Hashable

from specgraph.ir import Graph, Node
from specgraph.ops import OPAQUE
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["MergeDuplicatesPass"]

_KEEP = frozenset({OPAQUE, "dropout"})


def _key(node: Node) -> Hashable | None:
    try:
        key = (node.op, node.inputs, tuple(sorted(node.attrs.items())),
               tuple((v.shape, v.dtype) for v in node.outputs))
        hash(key)
    except TypeError:  # an attribute without a hashable form: never merged
        return None
    return key


class MergeDuplicatesPass:
    """See the module docstring."""

    name = "merge-duplicates"

    def __call__(self, graph: Graph) -> PassResult:
        seen: dict[Hashable, Node] = {}

        def rule(rw: Rewriter, node: Node) -> bool:
            key = None if node.op in _KEEP else _key(node)
            if key is None:
                return False
            first = seen.setdefault(key, node)
            if first is node:
                return False
            for old, new in zip(node.outputs, first.outputs):
                rw.replace(old, new)
            return True

        return rewrite(graph, rule)
