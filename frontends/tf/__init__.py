"""The TensorFlow frontend (Keras 3, tf_keras and ``tf.Module``).

- ``tracer``: a concrete function's graph onto the shared IR, walked by ``convert`` with the
  op converters in ``ops`` and ``shape_ops`` (native op -> canonical op), Keras layer names
  from ``scopes``; ``quiet`` keeps TensorFlow's native logging off the terminal;
- ``kernels`` and ``kernels_spatial``: canonical op -> TensorFlow's own kernels, the inverse
  of the converter tables; ``runner``: ``TfRunner`` (eager or XLA-compiled per op);
- ``repro``: the TensorFlow script that reproduces one layer's divergence.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from specgraph.frontends.tf.tracer import FRAMEWORK, accepts, trace

__all__ = ["from_numpy", "trace", "accepts", "FRAMEWORK"]


def from_numpy(data: Any) -> Any:
    """A NumPy array as a TensorFlow tensor."""
    return tf.constant(data)
