"""Scalar constants written as Python floats or as float32 values: the sigmoid approximation
of GELU, ``x * sigmoid(1.702 x)`` (CLIP's QuickGELU) with ``1.702`` a Python float, a
``torch.tensor``, ``np.float32`` or ``jnp.float32``; and a LayerNorm's eps written out
``1e-5`` or ``float32(1e-5)``, or given to the layer (PyTorch, Flax, Keras). Another
approximation of GELU (tanh against erf), another constant (1.7 against 1.702) and another
eps (1e-6 against 1e-5) stay different."""

from __future__ import annotations

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, assert_reported_different, canonical, jax_side, keras_side,
                                 linen_side, onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
from jax import lax  # noqa: E402

from specgraph.graph_nx import isomorphic  # noqa: E402

B, T, C = 2, 5, 8
X = rand(0, B, T, C)
DENSE = {"kernel": rand(1, C, C, scale=C ** -0.5), "bias": rand(2, C, scale=0.1)}


# --- the sigmoid approximation of GELU -------------------------------------------------------
class TorchActivation(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(C, C)
        self.how = how

    def forward(self, x):
        h = self.fc(x)
        if self.how == "python-float":
            return h * torch.sigmoid(1.702 * h)
        if self.how == "float32-tensor":
            return h * torch.sigmoid(torch.tensor(1.702, dtype=torch.float32) * h)
        if self.how == "other-constant":
            return h * torch.sigmoid(1.7 * h)
        if self.how == "gelu-tanh":
            return torch.nn.functional.gelu(h, approximate="tanh")
        return torch.nn.functional.gelu(h)  # erf


def _torch_activation(how: str):
    return torch_side(TorchActivation(how), X, name=f"torch_{how.replace('-', '_')}")


@side
def torch_python_float():
    return _torch_activation("python-float")


@side
def torch_float32_tensor():
    return _torch_activation("float32-tensor")


@side
def torch_other_constant():
    return _torch_activation("other-constant")


@side
def torch_gelu_tanh():
    return _torch_activation("gelu-tanh")


@side
def torch_gelu_erf():
    return _torch_activation("gelu-erf")


@side
def onnx_python_float():
    return onnx_side(TorchActivation("python-float"), X, name="onnx_python_float")


def _jax_quick_gelu(constant):
    def apply(p, x):
        h = x @ p["kernel"] + p["bias"]
        return h * jax.nn.sigmoid(constant * h)

    return apply


@side
def jax_python_float():
    return jax_side(_jax_quick_gelu(1.702), DENSE, X, name="jax_python_float")


@side
def jax_float32():
    return jax_side(_jax_quick_gelu(jnp.float32(1.702)), DENSE, X, name="jax_float32")


@side
def jax_numpy_float32():
    return jax_side(_jax_quick_gelu(np.float32(1.702)), DENSE, X, name="jax_numpy_float32")


class KerasQuickGelu(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.fc = keras.layers.Dense(C)

    def call(self, x):
        h = self.fc(x)
        return h * tf.sigmoid(1.702 * h)


@side
def keras_python_float():
    return keras_side(KerasQuickGelu(), X, name="keras_python_float")


# --- a LayerNorm's eps -----------------------------------------------------------------------
class TorchNorm(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(C, eps=1e-6 if how == "layer-1e-6" else 1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1 + 0.1 * torch.randn(C))
            self.norm.bias.copy_(0.1 * torch.randn(C))
        self.how = how

    def forward(self, x):
        if self.how.startswith("layer"):
            return self.norm(x)
        eps = 1e-5 if self.how == "python-eps" else torch.tensor(1e-5, dtype=torch.float32)
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * self.norm.weight + self.norm.bias


@side
def torch_layer_norm():
    return torch_side(TorchNorm("layer"), X, name="torch_layer_norm")


@side
def torch_layer_norm_1e_6():
    return torch_side(TorchNorm("layer-1e-6"), X, name="torch_layer_norm_1e_6")


@side
def torch_python_eps():
    return torch_side(TorchNorm("python-eps"), X, name="torch_python_eps")


@side
def torch_float32_eps():
    return torch_side(TorchNorm("float32-eps"), X, name="torch_float32_eps")


NORM = {"scale": 1 + rand(3, C, scale=0.1), "bias": rand(4, C, scale=0.1)}


@side
def jax_float32_eps():
    def apply(p, x):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + np.float32(1e-5)) * p["scale"] + p["bias"]

    return jax_side(apply, NORM, X, name="jax_float32_eps")


@side
def linen_layer_norm():
    return linen_side(fnn.LayerNorm(epsilon=1e-5), {"params": NORM}, X, name="linen_layer_norm")


@side
def keras_layer_norm():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((T, C)), keras.layers.LayerNormalization(epsilon=1e-5)])
    return keras_side(model, X, name="keras_layer_norm")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_python_float, torch_float32_tensor),
    Pair(torch_python_float, onnx_python_float),
    Pair(torch_python_float, jax_python_float),
    Pair(torch_python_float, jax_float32),
    Pair(torch_python_float, jax_numpy_float32),
    Pair(torch_python_float, keras_python_float),
    Pair(torch_layer_norm, torch_python_eps),
    Pair(torch_layer_norm, torch_float32_eps),
    Pair(torch_layer_norm, jax_float32_eps),
    Pair(torch_layer_norm, linen_layer_norm),
    Pair(torch_layer_norm, keras_layer_norm),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


# --- genuine differences -------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs, code", [
    (torch_gelu_erf, torch_gelu_tanh, "attr-mismatch"),
    (torch_python_float, torch_other_constant, "edge-mismatch"),
    (torch_python_float, torch_gelu_erf, "op-mismatch"),
    (torch_layer_norm, torch_layer_norm_1e_6, "attr-mismatch"),
], ids=["gelu-tanh~erf", "1.702~1.7", "sigmoid-approximation~erf", "eps-1e-5~1e-6"])
def test_another_constant_stays_different(lhs, rhs, code: str) -> None:
    """Another approximation or another constant is another function: the canonical graphs
    differ and the diff says how."""
    assert not isomorphic(canonical(lhs()).graph, canonical(rhs()).graph)
    assert_reported_different(lhs(), rhs(), mode="structure", codes=[code])
