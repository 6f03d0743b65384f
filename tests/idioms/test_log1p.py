"""``log1p`` and ``expm1`` (softplus written by hand, a log-likelihood's ``log(1 + p)``),
called as functions of PyTorch, JAX or TensorFlow, or written out as ``log(1 + x)`` and
``exp(x) - 1``: one canonical form, so a PyTorch model that calls them is compared, not
refused as an opaque op."""

from __future__ import annotations

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, jax_side, keras_side, pair_tests, rand, side,
                                  torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

B, C = 3, 8
X = rand(0, B, C)
W = rand(1, C, C, scale=C ** -0.5)


class TorchLog1p(torch.nn.Module):
    def __init__(self, written_out: bool) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.from_numpy(W.copy()))
        self.written_out = written_out

    def forward(self, x):
        h = torch.relu(x @ self.w)
        if self.written_out:
            return torch.log(1 + h) + (torch.exp(0.5 * x) - 1)
        return torch.log1p(h) + torch.expm1(0.5 * x)


@side
def torch_log1p():
    return torch_side(TorchLog1p(False), X, name="torch_log1p")


@side
def torch_written_out():
    return torch_side(TorchLog1p(True), X, name="torch_written_out")


@side
def jax_log1p():
    def apply(params, x):
        return jnp.log1p(jax.nn.relu(x @ params["w"])) + jnp.expm1(x * 0.5)

    return jax_side(apply, {"w": W}, X, name="jax_log1p")


class KerasLog1p(keras.Model):
    def build(self, shape):
        self.w = self.add_weight(shape=(C, C), name="w")
        self.w.assign(W)

    def call(self, x):
        h = tf.nn.relu(tf.matmul(x, self.w))
        return tf.math.log1p(h) + tf.math.expm1(0.5 * x)


@side
def keras_log1p():
    return keras_side(KerasLog1p(), X, name="keras_log1p")


PAIRS = [
    Pair(torch_log1p, torch_written_out),
    Pair(torch_log1p, jax_log1p,
         structure="JAX's trace reads one constant 1.0 in log1p's add and expm1's sub where "
                   "PyTorch's has two; constants that are equal are not merged, so the "
                   "graphs are not isomorphic (the diff aligns them: equivalent)"),
    Pair(torch_log1p, keras_log1p),
]

test_canonical_form, test_numbers = pair_tests(PAIRS)


def test_log1p_is_no_opaque_op():
    assert not [n for n in torch_log1p().graph.nodes if n.op == "opaque"]
    assert np.isfinite(torch_log1p().outputs[torch_log1p().graph.output_names[0]]).all()
