"""Fold computations on constants: a node whose inputs are all constants (not parameters)
becomes a constant computed by the op's reference (``sqrt(64)`` in a hand-written attention
scale, shape arithmetic left by an exporter).

Requires: a verified graph. Ensures: no node reads only constants, except sources of large
tensors (``full``, ``arange`` above a million elements) that stay as ops.
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node
from specgraph.ops import get_spec
from specgraph.ops.elementwise import numpy_dtype
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["FoldConstantsPass"]

_LIMIT = 1 << 20


def _rule(rw: Rewriter, node: Node) -> bool:
    if not node.inputs or node.op == "opaque" or len(node.outputs) != 1:
        return False
    arrays = [rw.constant_value(v) for v in node.inputs]
    if any(a is None for a in arrays) or node.outputs[0].size > _LIMIT:
        return False
    spec = get_spec(node.op)
    with np.errstate(all="ignore"):
        result = spec.reference(*[np.asarray(a) for a in arrays], **node.attrs)
    out = node.outputs[0]
    data = np.asarray(result).astype(numpy_dtype(out.dtype) if out.dtype != "bool" else bool)
    rw.replace(out, rw.constant(data.reshape(out.shape), out.dtype))
    return True


class FoldConstantsPass:
    """See the module docstring."""

    name = "fold-constants"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
