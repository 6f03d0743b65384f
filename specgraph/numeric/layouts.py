"""Where rhs's values will lie in memory, so that lhs's wait for them laid out alike.

A channels-last program's values (Flax, TensorFlow) are transposed views of its own arrays,
and its kernel gradients lie (in, out) where PyTorch's lie (out, in): a pair in two memory
orders is read in blocks, copied into buffers, at a third of the speed of a pair in one. lhs
runs first and its values wait in the store while rhs's program runs, which in eager mode
leaves a core to spare: there lhs's values are copied into the order rhs's will have
(``Store.put``'s ``order``), and each pair is then read once, in one order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from specgraph.ir import Graph, Value

__all__ = ["RhsOrders", "memory_order"]

Order = tuple[int, ...]  # axes from the slowest in memory to the fastest


def _c_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step
        step *= max(1, int(shape[i]))
    return strides


def _order(shape: Sequence[int], strides: Sequence[int]) -> Order:
    """The axes from the longest stride to the shortest; axes of one element, whose place
    moves no byte, kept where C order has them."""
    real = sorted((i for i in range(len(shape)) if shape[i] != 1), key=lambda i: -abs(strides[i]))
    slots = iter(real)
    return tuple(i if shape[i] == 1 else next(slots) for i in range(len(shape)))


def memory_order(shape: Sequence[int], steps: Sequence[tuple[str, Any]] = ()) -> Order:
    """The memory order (see ``_order``) of a C-contiguous array of ``shape`` after
    ``steps``: ``("transpose", perm)`` views, ``("reshape", shape)`` (a view of a
    C-contiguous array; a copy, in C order, of any other)."""
    shape, strides = list(shape), _c_strides(shape)
    for kind, arg in steps:
        if kind == "transpose":
            shape, strides = [shape[p] for p in arg], [strides[p] for p in arg]
        else:
            shape = list(arg)
            strides = _c_strides(shape)
    return _order(shape, strides)


def array_order(a: np.ndarray) -> Order:
    """``memory_order`` of an array as it lies."""
    return _order(a.shape, a.strides)


class RhsOrders:
    """The memory order each of lhs's kept values will meet on rhs's side: rhs's program's
    value is its native array (C order) seen through the graph's layout (``Native.perm``,
    a parameter's ``param_layouts``); a value rhs's replay computes is in C order.

    Args:
        lhs / rhs: the two graphs; ``values``: rhs value -> its lhs counterpart.
        rhs_model: rhs's TracedModel where its own program gives the numbers, else None.
    """

    def __init__(self, lhs: Graph, rhs: Graph, values: Any, rhs_model: Any) -> None:
        self.lhs, self.rhs, self.model = lhs, rhs, rhs_model
        self.counterpart: dict[Value, Value] = {}
        for v, u in values.items():
            self.counterpart.setdefault(u, v)

    def __call__(self, key: Hashable) -> Order | None:
        """The order for a kept value's key (``LhsValues``); None where rhs has no
        counterpart of it."""
        if not isinstance(key, tuple) or not key:
            return None
        g = self.lhs
        if key[0] == "f":
            u = key[1]
        elif key[0] == "oct":
            u = g.nodes[key[1]].outputs[key[2]]
        elif key[0] == "ct":
            u = g.nodes[key[1]].inputs[key[2]]
        elif key[0] == "grad":
            u = g.params.get(key[1])
        else:
            return None
        v = self.counterpart.get(u) if u is not None else None
        return None if v is None else self._of(v)

    def _of(self, v: Value) -> Order:
        c_order = tuple(range(len(v.shape)))
        if self.model is None:
            return c_order
        name = self.rhs.param_name(v)
        if name is not None:  # the program's gradient, laid out as the canonical parameter
            steps = tuple(self.model.param_layouts.get(name, ()))
            native = self.model.param_shapes.get(name)
            return memory_order(native, steps) if steps and native is not None else c_order
        native_value = self.rhs.natives.get(v)
        if native_value is None or native_value.perm is None:
            return c_order
        perm = native_value.perm
        return memory_order([v.shape[i] for i in np.argsort(perm)], (("transpose", perm),))
