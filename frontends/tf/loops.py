"""TF's ``While`` loops of a trip count known at trace time, unrolled, and the TensorLists
(``tf.TensorArray``) Keras' recurrent layers read and write around them.

A Keras ``LSTM``, ``GRU`` or ``SimpleRNN`` (``unroll=False``) is a ``While`` whose loop
variables are two counters (constants: 0, then +1 per step), the list of outputs and the
state, and whose captured inputs are the list of time steps and the variables. Its ``cond``
is evaluated on the loop variables and must fold to a constant; while it holds, its
``body`` is converted once more on them, its outputs the next loop variables. A list is a
tuple of operands at trace time: made from a tensor, its rows are the pieces of a split
(``tf.unstack``'s form), stacked they are unsqueezes and one concat (``tf.stack``'s), so a
loop written out by ``unroll=True`` is the same graph.

The body's values are recorded as no native value (one op there runs at every step); the
loop's outputs are. A loop whose condition is known only when the model runs, one of more
than ``UNROLL_LIMIT`` steps, and one whose body holds an op that would be opaque stay one
opaque op: the steps already written are read by nothing and pruned with the rest of the
dead code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.tf.convert import (NotUnrolled, TensorList, Unsupported, dtype_name,
                                             dtype_of)
from specgraph.frontends.tf.shape_ops import stack, unstack

__all__ = ["CONVERTERS", "UNROLL_LIMIT"]

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register

UNROLL_LIMIT = 64  # steps written out (as JAX's ``scan`` and PyTorch's recurrent layers)


@_reg("While", "StatelessWhile")
def _while(cx: Any, op: Any) -> Any:
    """The loop run at trace time: its outputs are the loop variables once ``cond`` fails."""
    cond, body = cx.function(op, "cond"), cx.function(op, "body")
    if cond is None or body is None:
        raise Unsupported("a loop whose functions cannot be read")
    state = [cx.entry(t) for t in op.inputs]
    cx.unrolled += 1
    try:
        for _ in range(UNROLL_LIMIT):
            if not _holds(cx, op, cond, state):
                return tuple(state)
            state = list(cx.call(op, body, state))
        if _holds(cx, op, cond, state):
            raise NotUnrolled(f"a loop of more than {UNROLL_LIMIT} steps")
        return tuple(state)
    except NotUnrolled:
        pass
    finally:
        cx.unrolled -= 1
    return cx.opaque(op)  # in a loop being unrolled, that loop is given up in turn


def _holds(cx: Any, op: Any, cond: Any, state: list[Any]) -> bool:
    """Whether ``cond`` holds on ``state``; it must be a constant at trace time."""
    (result,) = cx.call(op, cond, state)[:1]
    if not isinstance(result, np.ndarray) or result.size != 1:
        raise NotUnrolled("a loop whose condition is known only when the model runs")
    return bool(result.item())


# --- TensorLists -----------------------------------------------------------------------
def _list(cx: Any, t: Any) -> TensorList:
    entry = cx.entry(t)
    if not isinstance(entry, TensorList):
        raise Unsupported(f"{t.name} is not a list known at trace time")
    return entry


def _index(cx: Any, t: Any, items: tuple[Any, ...]) -> int:
    (index,) = cx.const_ints(t)
    if not 0 <= index < len(items):
        raise Unsupported(f"index {index} of a list of {len(items)} items")
    return index


@_reg("TensorListReserve")
def _reserve(cx: Any, op: Any) -> Any:
    (count,) = cx.const_ints(op.inputs[1])
    if count < 0:
        raise Unsupported("a list of unknown length")
    return TensorList((None,) * count)


@_reg("TensorListFromTensor")
def _from_tensor(cx: Any, op: Any) -> Any:
    x = cx.value(op.inputs[0])
    if not x.shape:
        raise Unsupported("a list made from a scalar")
    return TensorList(unstack(cx, x, 0))


@_reg("TensorListGetItem")
def _get_item(cx: Any, op: Any) -> Any:
    items = _list(cx, op.inputs[0]).items
    item = items[_index(cx, op.inputs[1], items)]
    if item is None:
        raise Unsupported("a read of an item never set")
    return item


@_reg("TensorListSetItem")
def _set_item(cx: Any, op: Any) -> Any:
    items = _list(cx, op.inputs[0]).items
    index = _index(cx, op.inputs[1], items)
    item = cx.value(op.inputs[2])
    return TensorList(items[:index] + (item,) + items[index + 1:])


@_reg("TensorListStack")
def _stack(cx: Any, op: Any) -> Any:
    items = _list(cx, op.inputs[0]).items
    if not items or any(item is None for item in items):
        raise Unsupported("a stack of a list with items never set")
    shapes = {tuple(item.shape) for item in items}
    if len(shapes) != 1:
        raise Unsupported(f"a stack of items of shapes {sorted(shapes)}")
    out = ((len(items),) + shapes.pop(), dtype_of(items[0]))
    return stack(cx, items, 0, out)


@_reg("TensorListLength")
def _length(cx: Any, op: Any) -> Any:
    return np.asarray(len(_list(cx, op.inputs[0]).items), dtype=np.int32)


@_reg("TensorListElementShape")
def _element_shape(cx: Any, op: Any) -> Any:
    shapes = {tuple(i.shape) for i in _list(cx, op.inputs[0]).items if i is not None}
    if len(shapes) != 1:
        raise Unsupported("the element shape of a list with no items or mixed ones")
    dtype = dtype_name(op.outputs[0].dtype)
    if dtype is None:
        raise Unsupported(f"a shape of dtype {op.outputs[0].dtype.name}")
    return np.asarray(shapes.pop(), dtype=np.dtype(dtype))
