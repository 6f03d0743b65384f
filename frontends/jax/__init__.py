"""The JAX frontend, and Flax linen and NNX on top of it.

- ``tracer``: a jaxpr onto the shared IR, walked by ``walk`` with the primitive converters
  in ``ops``, ``shape_ops`` and ``layers`` (native primitive -> canonical op), and ``fusion``
  for the composites JAX writes inline (attention, pooling windows);
- ``flax``: parameter names and module-path scopes for Flax linen and NNX;
- ``kernels`` and ``kernels_spatial``: canonical op -> jax.numpy, lax and jax.nn, the
  inverse of the converter tables; ``runner``: ``JaxRunner``, one XLA computation per
  layer;
- ``repro``: the JAX script that reproduces one layer's divergence.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from specgraph.frontends.jax.tracer import (FLAX_FRAMEWORK, FRAMEWORK, accepts, trace,
                                            trace_linen, trace_nnx)

__all__ = ["from_numpy", "trace", "trace_linen", "trace_nnx", "accepts", "FRAMEWORK",
           "FLAX_FRAMEWORK"]


def from_numpy(data: Any) -> Any:
    """A NumPy array as a JAX array."""
    return jnp.asarray(data)
