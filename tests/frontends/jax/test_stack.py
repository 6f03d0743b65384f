"""``jnp.stack`` (JAX's stack primitive) is each operand given a new axis, then a concat."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from specgraph.frontends import jax as jax_frontend
from specgraph.interpreter import run

X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack_is_unsqueeze_then_concat(axis: int) -> None:
    traced = jax_frontend.trace(lambda p, x: jnp.stack((-x[..., 1::2], x[..., ::2]), axis=axis),
                                {}, (X,), reference="stack")
    ops = [n.op for n in traced.graph.nodes]
    assert "opaque" not in ops and ops.count("unsqueeze") == 2 and "concat" in ops
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_array_equal(got[key], want)
