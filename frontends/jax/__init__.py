"""The JAX frontend: a jaxpr onto the shared IR (``tracer`` and its ``walk``, with the
primitive converters in ``ops``, ``shape_ops`` and ``layers``, and ``fusion`` for the
composites JAX writes inline), Flax linen and NNX on top of it (``flax``), and the runner
that executes canonical nodes with jax.numpy, lax and jax.nn (``runner``)."""

from typing import Any

from specgraph.frontends.jax.tracer import (FLAX_FRAMEWORK, FRAMEWORK, accepts, trace,
                                            trace_linen, trace_nnx)

__all__ = ["from_numpy", "trace", "trace_linen", "trace_nnx", "accepts", "FRAMEWORK", "FLAX_FRAMEWORK"]


def from_numpy(data: Any) -> Any:
    """A NumPy array as this framework's tensor."""
    import jax.numpy as jnp

    return jnp.asarray(data)
