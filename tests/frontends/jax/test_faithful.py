"""The fp64 reference interpreter, run on the traced graph with the model's own weights,
reproduces JAX, Flax linen and Flax NNX: within 1e-5 relative of the float32 model, and to
~1e-9 of the same model run by JAX in float64. This is the proof that the IR is complete
and faithful."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specgraph.frontends.jax import tracer as jax_frontend
from specgraph.interpreter import run
from tests.helpers import relative_error
from tests.zoo.jax_models import MODELS, trace



def _float64(tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(jnp.asarray(a).dtype,
                                                                 jnp.floating) else a, tree)


def _run_float64(name: str) -> Any:
    """The zoo model ``name`` run by JAX (under jit) in float64 on the same weights and
    inputs."""
    framework = name.split("/")[1]
    factory = MODELS[name]()
    with jax.enable_x64(True):
        if framework == "jax":
            apply_fn, params, inputs = factory
            return jax.jit(apply_fn)(_float64(params), *_float64(inputs))
        if framework == "linen":
            module, variables, inputs = factory
            return jax.jit(module.apply)(_float64(variables), *_float64(inputs))
        module, inputs = factory
        graphdef, state = nnx.split(module)

        def apply(state: Any, *xs: Any) -> Any:
            copy = nnx.merge(graphdef, state)
            copy.eval()  # NNX layers fix their computation dtype when built: widen it too
            copy.set_attributes(dtype=jnp.float64, raise_if_not_found=False)
            return copy(*xs)

        return jax.jit(apply)(_float64(state), *_float64(inputs))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_reproduces_float32_model(name: str) -> None:
    traced = trace(name)
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    assert set(got) == set(traced.outputs)
    for key, want in traced.outputs.items():
        assert got[key].shape == want.shape, key
        assert relative_error(got[key], want) < 1e-5, (name, key, relative_error(got[key], want))


# jax.nn.dot_product_attention (NNX's attention) takes its softmax in float32 even on
# float64 inputs, so JAX's own float64 run is only that close to exact.
_FLOAT64_TOLERANCE = {"preln/nnx": 1e-7}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_matches_float64_model_tightly(name: str) -> None:
    traced = trace(name)
    want = dict(jax_frontend.leaves_with_names(_run_float64(name), ""))
    assert set(want) == set(traced.graph.output_names)
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, value in want.items():
        assert np.asarray(value).dtype == np.float64
        err = relative_error(got[key], np.asarray(value))
        assert err < _FLOAT64_TOLERANCE.get(name, 1e-9), (name, key, err)
