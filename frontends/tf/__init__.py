"""The TensorFlow frontend: a concrete function's graph onto the shared IR (``tracer``,
walked by ``convert`` with the op converters in ``ops`` and ``shape_ops``, Keras layer
names from ``scopes``), and the runner that executes canonical nodes with TensorFlow's own
kernels (``runner``)."""

from typing import Any

from specgraph.frontends.tf.tracer import FRAMEWORK, accepts, trace

__all__ = ["from_numpy", "trace", "accepts", "FRAMEWORK"]


def from_numpy(data: Any) -> Any:
    """A NumPy array as this framework's tensor."""
    import tensorflow as tf

    return tf.constant(data)
