"""Values that only ever drown keys: additive masks on their way into a softmax.

A key-padding mask is added to attention scores with a fill that drowns the keys it masks:
PyTorch's HF ports add ``finfo.min``, TensorFlow's -1e4 or -1e9, DistilBERT subtracts
``1e30·(1 - m)``. T5 adds its mask to the relative position bias first, so the mask and the
bias plus the mask are layers of their own that both sides compute. Two ports then hold
-3.4e38 and -1e9 at the same masked places: a difference of 3.4e38, which the softmax
reading them never sees (both exponentials are 0). ``drowning`` finds the values whose
every reader adds them (or lays them out) on the way into the scores of a softmax over its
last axis, or the mask of an attention. There the numbers take an element at or below
``DROWN`` on both sides for the same masked key (``Tolerance.drowned`` in
``specgraph.numeric.stats``), while a key masked on one side only still counts as a
difference; canonicalization writes such a mask built from an input with one fill
(``raise_attention``).
"""

from __future__ import annotations

from specgraph.ir import Graph, Value

__all__ = ["DROWN", "drowning"]

DROWN = -1e4  # an additive mask value at or below this drowns its key next to kept ones

_LAID_OUT = frozenset({"reshape", "transpose", "squeeze", "unsqueeze", "expand", "identity"})
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def drowning(graph: Graph) -> frozenset[Value]:
    """The floating values of ``graph`` that reach nothing but the scores of a softmax over
    its last axis (or an attention's mask), added, laid out or subtracted from: never an
    output, never scaled, never read otherwise."""
    outputs = set(graph.outputs)
    found: dict[Value, bool] = {}
    for node in reversed(graph.nodes):  # readers before producers
        for v in node.outputs:
            found[v] = v.dtype in _FLOATS and v not in outputs and _drowns(graph, v, found)
    return frozenset(v for v, yes in found.items() if yes)


def _drowns(graph: Graph, v: Value, found: dict[Value, bool]) -> bool:
    readers = graph.consumers(v)
    if not readers:
        return False
    for reader in readers:
        slots = [k for k, u in enumerate(reader.inputs) if u is v]
        op = reader.op
        if op == "softmax":
            if reader.attrs.get("axis") not in (-1, v.rank - 1):
                return False
            continue
        if op == "attention":
            if slots != [3]:
                return False
            continue
        if op == "add" and len(slots) == 1:
            pass
        elif op == "sub" and slots == [0]:
            pass
        elif op in _LAID_OUT or (op == "cast" and reader.outputs[0].dtype in _FLOATS):
            pass
        else:
            return False
        if not all(found.get(out, False) for out in reader.outputs):
            return False
    return True
