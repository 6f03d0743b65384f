"""Zoo models traced and canonicalized once per test session, by zoo name."""

from __future__ import annotations

import functools
import warnings

from specgraph.model import TracedModel
from specgraph.passes import canonicalize_model


@functools.cache
def torch_model(name: str) -> TracedModel:
    """``tests.zoo.torch_models.MODELS[name]`` traced with the PyTorch frontend."""
    from specgraph.frontends import torch as frontend
    from tests.zoo import torch_models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return canonicalize_model(frontend.trace(*torch_models.MODELS[name](), reference=name))


@functools.cache
def jax_model(name: str) -> TracedModel:
    """``tests.zoo.jax_models.MODELS[name]`` (``name/jax|linen|nnx``) traced."""
    from tests.zoo import jax_models

    return canonicalize_model(jax_models.trace(name))
