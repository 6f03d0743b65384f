"""``LhsValues``: lhs's values as rhs's comparison needs them, kept or remade.

lhs runs first; what rhs will be compared with waits in a store (``Store`` on the host,
spilling to disk; a device store on a GPU), under these keys:
``("f", value)`` a layer's output, ``("out", name)`` a graph output, ``("oct", i, k)`` the
gradient that reached node ``i``'s output ``k`` (isolated mode), ``("ct", i, slot)`` node
``i``'s pullback share for its input ``slot``, ``("grad", name)`` a parameter's gradient.
What a reshape or transpose makes is not kept but remade from its input, and the gradient
that reached a node is summed from its readers' shares.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from specgraph.ir import Graph, Value
from specgraph.numeric.arrays import Arrays, KeptStore
from specgraph.ops import get_spec

__all__ = ["LhsValues", "LAYOUT_OPS"]

# ops that only move data: their outputs are remade from their inputs rather than kept
LAYOUT_OPS = frozenset({"reshape", "transpose", "squeeze", "unsqueeze", "identity"})


class LhsValues:
    """lhs's kept values, and those remade on demand.

    Args:
        lhs: lhs's graph.
        rhs: rhs's graph (a parameter read once on both sides has its share kept whole).
        store: where lhs's values wait.
        arrays: the comparison's arithmetic (how kept values come back to the host).
        weights: lhs's parameters by name; ``inputs`` its inputs; ``loss`` the projection
            of each output the backward pass starts from.
        orders: the memory order rhs's counterpart of a key's value will lie in
            (``layouts.RhsOrders``): the store keeps the value so, and each pair is read in
            one order.
    """

    def __init__(self, lhs: Graph, rhs: Graph, store: KeptStore, arrays: Arrays,
                 weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                 loss: Mapping[str, np.ndarray],
                 orders: Callable[[Hashable], tuple[int, ...] | None] | None = None) -> None:
        self.lhs, self.rhs = lhs, rhs
        self.store, self.arrays = store, arrays
        self.weights, self.inputs, self.loss = weights, inputs, loss
        self.orders = orders

    def __contains__(self, key: Hashable) -> bool:
        return key in self.store

    def get(self, key: Hashable) -> Any:
        return self.store.get(key)

    def put(self, key: Hashable, kept: Any) -> None:
        """Keep ``kept``, in the memory order rhs's counterpart will lie in (``orders``)."""
        self.store.put(key, kept, self.orders(key) if self.orders is not None else None)

    def host(self, key: Hashable) -> np.ndarray:
        return self.arrays.host(self.store.get(key))

    def kept_needed(self, l2r: Mapping[int, int]) -> set[Value]:
        """The values of lhs that the comparison reads: aligned layers' outputs and the
        computed values they read, except what a layout op makes (remade instead)."""
        g = self.lhs
        need: set[Value] = set()
        for i in l2r:
            need.update(g.nodes[i].outputs)
            need.update(v for v in g.nodes[i].inputs if g.producer(v) is not None)
        return {v for v in need if g.producer(v).op not in LAYOUT_OPS}  # type: ignore

    def value(self, u: Value) -> np.ndarray | None:
        """lhs's value ``u`` on the host: kept, remade through layout ops, or a leaf (None
        when it was neither kept nor can be remade)."""
        g = self.lhs
        p = g.producer(u)
        if p is not None:
            if ("f", u) in self.store:
                return self.host(("f", u))
            if p.op not in LAYOUT_OPS:
                return None
            ins = [self.value(x) for x in p.inputs]
            if any(x is None for x in ins):
                return None
            out = get_spec(p.op).reference(*ins, **p.attrs)
            return np.asarray(out[p.outputs.index(u)] if isinstance(out, tuple) else out)
        if u in g.constants:
            return np.asarray(g.constants[u])
        name = g.param_name(u)
        if name is not None:
            return np.asarray(self.weights[name])
        return np.asarray(self.inputs[g.input_names[g.inputs.index(u)]])

    def kept(self, u: Value) -> Any:
        """lhs's computed value ``u`` as kept for comparison (remade if it was not kept)."""
        if ("f", u) in self.store:
            return self.store.get(("f", u))
        return self.value(u) if self.lhs.producer(u) is not None else None

    def node_inputs(self, i: int) -> list[np.ndarray] | None:
        """The values lhs node ``i`` read (None if one of them is unknown)."""
        values = [self.value(u) for u in self.lhs.nodes[i].inputs]
        return None if any(v is None for v in values) else values  # type: ignore[misc]

    def share_key(self, i: int, slot: int, rhs_input: Value | None = None) -> Any:
        """Where lhs's share of node ``i``'s input ``slot`` is kept: a parameter read once
        is its whole gradient (``None`` for parameters read several times, compared
        whole)."""
        u = self.lhs.nodes[i].inputs[slot]
        name = self.lhs.param_name(u)
        if name is None:
            return ("ct", i, slot)
        single = len(self.lhs.consumers(u)) == 1 and (
            rhs_input is None or len(self.rhs.consumers(rhs_input)) == 1)
        return ("grad", name) if single else None

    def kept_output_gradient(self, i: int, k: int) -> Any:
        """``output_gradient`` in the form it is kept in where it is kept (on the device, for
        a GPU run: measured there, not fetched), else summed on the host."""
        if ("oct", i, k) in self.store:
            return self.store.get(("oct", i, k))
        return self.output_gradient(i, k)

    def output_gradient(self, i: int, k: int) -> np.ndarray | None:
        """The gradient that reached lhs node ``i``'s output ``k``: kept (isolated mode), or
        summed from its readers' shares and the loss (None if a reader's share is
        unknown)."""
        if ("oct", i, k) in self.store:
            return self.host(("oct", i, k))
        g = self.lhs
        v = g.nodes[i].outputs[k]
        total: np.ndarray | None = None
        if v in g.outputs:
            name = g.output_names[g.outputs.index(v)]
            if name in self.loss:
                total = np.asarray(self.loss[name], dtype=np.float64)
        for reader in g.consumers(v):
            r = g.index(reader)
            for slot, x in enumerate(reader.inputs):
                if x is not v:
                    continue
                key = self.share_key(r, slot)
                if key is None or key not in self.store:
                    return None
                share = self.host(key).astype(np.float64)
                total = share if total is None else total + share
        return None if total is None else total.astype(np.float32)
