"""One TensorFlow op alone in a graph of its own, its inputs as constants (the values known
at trace time) or placeholders of their known shapes: TensorFlow's own shape inference
gives its output shapes where the traced graph left them unknown (a reshape to sizes
computed by a ``tf.cond`` that AutoGraph wrote), and a session computes its outputs where
every input is known (a ``FloorMod`` or ``TensorScatterUpdate`` building a mask from
constants, which no converter needs to know).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["infer_shapes", "evaluate"]

Known = Any  # np.ndarray (a value known at trace time) | tuple[int, ...] (a shape only)


def _alone(op: Any, inputs: Sequence[Known]) -> tuple[Any, Any]:
    """A graph holding ``op`` with ``inputs`` (arrays as constants, shapes as
    placeholders); returns the graph and the copy of the op."""
    if any(a.HasField("func") or a.list.func for a in op.node_def.attr.values()):
        raise ValueError(f"{op.type} calls functions")
    graph = tf.Graph()
    with graph.as_default():
        tensors = []
        for t, known in zip(op.inputs, inputs):
            if isinstance(known, np.ndarray):
                tensors.append(tf.constant(known.astype(t.dtype.as_numpy_dtype), t.dtype))
            else:
                tensors.append(tf.compat.v1.placeholder(t.dtype, known))
        copy = graph.create_op(op.type, tensors, attrs=dict(op.node_def.attr), name="op")
    return graph, copy


def infer_shapes(op: Any, inputs: Sequence[Known]) -> list[tuple[int, ...] | None]:
    """The static shape of each of ``op``'s outputs given ``inputs`` (None where TensorFlow
    cannot tell either)."""
    try:
        _, copy = _alone(op, inputs)
    except (ValueError, TypeError, tf.errors.OpError):
        return [None] * len(op.outputs)
    shapes = []
    for t in copy.outputs:
        dims = t.shape.as_list() if t.shape.rank is not None else None
        shapes.append(None if dims is None or None in dims else tuple(int(d) for d in dims))
    return shapes


def evaluate(op: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """``op``'s outputs computed by TensorFlow on known ``inputs``, or None where it
    cannot run alone (a stateful op, a function call, an error)."""
    if op.op_def.is_stateful:
        return None
    try:
        graph, copy = _alone(op, inputs)
        with tf.compat.v1.Session(graph=graph) as session:
            return [np.asarray(a) for a in session.run(list(copy.outputs))]
    except (ValueError, TypeError, tf.errors.OpError):
        return None
