"""A division by a constant is a multiplication by its reciprocal: ``x / sqrt(d)`` and
``x * d**-0.5`` (an attention scale), ``x / 255`` and ``x * (1/255)`` (Keras' Rescaling),
``(x - mean) / std`` and ``(x - mean) * (1/std)`` with per-channel constants, are one form.

The reciprocal is computed in float64 from the constant as stored and kept, as folded
constants are, in the float64 the reference interpreter reads for the constant's dtype (a
runner stores it in that dtype): the reference evaluation of ``x·(1/c)`` is that of ``x/c``.

Requires: a verified graph. Ensures: no floating ``div`` (without a rounding mode) reads a
constant divisor free of zeros; exact in real arithmetic (x/c = x·(1/c)); in floating point
the product may differ from the quotient in the last bit, as the other spelling would.
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops.dtypes import is_float, numpy_dtype
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["DivisionsAsProductsPass"]


def _rule(rw: Rewriter, node: Node, reciprocals: dict[Value, Value]) -> bool:
    if node.op != "div" or node.attrs.get("rounding") or not is_float(node.outputs[0].dtype):
        return False
    x, divisor = node.inputs
    data = rw.constant_value(divisor)
    if data is None or rw.constant_value(x) is not None or not is_float(divisor.dtype):
        return False
    reciprocal = reciprocals.get(divisor)
    if reciprocal is None:
        data = np.asarray(data)
        wide = data.astype(np.float64)
        if wide.size == 0 or not np.all(np.isfinite(wide)) or np.any(wide == 0):
            return False
        reciprocal = reciprocals[divisor] = rw.constant(
            (1.0 / wide).astype(numpy_dtype(divisor.dtype)), divisor.dtype)
    out = node.outputs[0]
    rw.replace(out, rw.emit("mul", [x, reciprocal], like=node, shape=out.shape))
    return True


class DivisionsAsProductsPass:
    """See the module docstring."""

    name = "divisions-as-products"

    def __call__(self, graph: Graph) -> PassResult:
        reciprocals: dict[Value, Value] = {}  # a divisor shared stays shared
        return rewrite(graph, lambda rw, node: _rule(rw, node, reciprocals))
