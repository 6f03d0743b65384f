"""Merge duplicate views: two shape ops (reshape, transpose, slice...) with the same
attributes on the same inputs are one (TF's Tensordot reshapes its input once per Dense
layer, so Swin's query, key and value each reshape the same windows, where PyTorch
reshapes them once).

Where the copies stood for values of their own in the model's program (PyTorch unsqueezes
DeBERTa's position table again in every layer), the merged view stands for none of them:
each copy's gradient there is one layer's part of the whole.

Arithmetic is left as written: two layer norms of one input share nothing once raised, but
merging their written-out means first would leave neither region closed.

Requires: a verified graph. Ensures: no two shape nodes with equal op, attributes and
inputs; exact.
"""

from __future__ import annotations

from collections.abc import Hashable

from specgraph.ir import Graph, Node
from specgraph.ops import get_spec
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["MergeDuplicatesPass"]


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
            key = _key(node) if get_spec(node.op).category == "shape" else None
            if key is None:
                return False
            first = seen.setdefault(key, node)
            if first is node:
                return False
            natives = rw.graph.natives
            for old, new in zip(node.outputs, first.outputs):
                if old in natives and new in natives and natives[old].key != natives[new].key:
                    rw.unobserve(new)  # copies of one view: each copy's gradient is a part
                rw.replace(old, new)
            return True

        return rewrite(graph, rule)
