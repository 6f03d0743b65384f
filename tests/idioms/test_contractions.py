"""Contractions: a linear layer written as a layer, ``@``, ``matmul``, ``einsum``,
``tensordot``, ``addmm`` on a flattened view (GPT-2's Conv1D) and Keras' EinsumDense; and
attention's two products written with ``@`` or with ``einsum``, heads first or heads after
the sequence axis (Flax's layout)."""

from __future__ import annotations

import pytest

from tests.idioms.catalog import (Pair, jax_side, keras_side, linen_side, onnx_side, pair_tests,
                                 rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

B, T, C, O = 2, 5, 8, 6
X = rand(0, B, T, C)


# --- a linear layer ------------------------------------------------------------------------
class TorchLinear(torch.nn.Module):
    """``weight`` [O, C] as nn.Linear keeps it, except ``addmm`` (GPT-2's Conv1D: [C, O])."""

    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        shape = (C, O) if how == "addmm" else (O, C)
        self.weight = torch.nn.Parameter(torch.randn(*shape) * C ** -0.5)
        self.bias = torch.nn.Parameter(torch.randn(O) * 0.1)
        self.how = how

    def forward(self, x):
        w, b = self.weight, self.bias
        if self.how == "F.linear":
            return torch.nn.functional.linear(x, w, b)
        if self.how == "@":
            return x @ w.T + b
        if self.how == "matmul":
            return torch.matmul(x, w.t()) + b
        if self.how == "einsum":
            return torch.einsum("btc,oc->bto", x, w) + b
        if self.how == "tensordot":
            return torch.tensordot(x, w, dims=([2], [1])) + b
        return torch.addmm(b, x.view(-1, C), w).view(B, T, O)  # addmm


class TorchLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(C, O)

    def forward(self, x):
        return self.fc(x)


@side
def torch_layer():
    return torch_side(TorchLayer(), X, name="torch_layer")


def _torch(how: str, name: str):
    return torch_side(TorchLinear(how), X, name=name)


@side
def torch_functional():
    return _torch("F.linear", "torch_functional")


@side
def torch_at():
    return _torch("@", "torch_at")


@side
def torch_matmul():
    return _torch("matmul", "torch_matmul")


@side
def torch_einsum():
    return _torch("einsum", "torch_einsum")


@side
def torch_tensordot():
    return _torch("tensordot", "torch_tensordot")


@side
def torch_addmm():
    return _torch("addmm", "torch_addmm")


@side
def onnx_einsum():
    return onnx_side(TorchLinear("einsum"), X, name="onnx_einsum")


@side
def onnx_addmm():
    return onnx_side(TorchLinear("addmm"), X, name="onnx_addmm")


DENSE = {"kernel": rand(1, C, O, scale=C ** -0.5), "bias": rand(2, O, scale=0.1)}


@side
def jax_at():
    return jax_side(lambda p, x: x @ p["kernel"] + p["bias"], DENSE, X, name="jax_at")


@side
def jax_einsum():
    return jax_side(lambda p, x: jnp.einsum("btc,co->bto", x, p["kernel"]) + p["bias"],
                    DENSE, X, name="jax_einsum")


@side
def jax_tensordot():
    return jax_side(lambda p, x: jnp.tensordot(x, p["kernel"], axes=1) + p["bias"],
                    DENSE, X, name="jax_tensordot")


@side
def jax_dot():
    return jax_side(lambda p, x: jnp.dot(x, p["kernel"]) + p["bias"], DENSE, X,
                    name="jax_dot")


@side
def linen_dense():
    return linen_side(fnn.Dense(O), {"params": DENSE}, X, name="linen_dense")


@side
def linen_dense_general():
    return linen_side(fnn.DenseGeneral(O, axis=-1), {"params": DENSE}, X,
                      name="linen_dense_general")


@side
def linen_einsum():
    module = fnn.Einsum((C, O), "btc,co->bto")
    return linen_side(module, {"params": DENSE}, X, name="linen_einsum")


class KerasContract(keras.Model):
    def __init__(self, how: str) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.w = self.add_weight(shape=(C, O), name="kernel")
        self.b = self.add_weight(shape=(O,), name="bias", initializer="random_normal")
        self.how = how

    def call(self, x):
        if self.how == "einsum":
            return tf.einsum("btc,co->bto", x, self.w) + self.b
        if self.how == "tensordot":
            return tf.tensordot(x, self.w, axes=1) + self.b
        return tf.matmul(x, self.w) + self.b


@side
def keras_dense():
    keras.utils.set_random_seed(0)
    return keras_side(keras.Sequential([keras.Input((T, C)), keras.layers.Dense(O)]), X,
                      name="keras_dense")


@side
def keras_einsum_dense():
    keras.utils.set_random_seed(0)
    layer = keras.layers.EinsumDense("btc,co->bto", output_shape=(T, O), bias_axes="o")
    return keras_side(keras.Sequential([keras.Input((T, C)), layer]), X,
                      name="keras_einsum_dense")


@side
def keras_einsum():
    return keras_side(KerasContract("einsum"), X, name="keras_einsum")


@side
def keras_tensordot():
    return keras_side(KerasContract("tensordot"), X, name="keras_tensordot")


@side
def keras_matmul():
    return keras_side(KerasContract("matmul"), X, name="keras_matmul")


# --- attention's two products --------------------------------------------------------------
H = 2
D = C // H
QKV = (rand(3, B, T, H, D), rand(4, B, T, H, D), rand(5, B, T, H, D))  # [B, T, H, D] each


class TorchProducts(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, q, k, v):
        if self.how == "einsum-bthd":  # heads after the sequence axis, as Flax keeps them
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) * D ** -0.5
            return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.how == "einsum":
            s = torch.einsum("bhqd,bhkd->bhqk", q, k) * D ** -0.5
            return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v).transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) * D ** -0.5
        return torch.matmul(s.softmax(-1), v).transpose(1, 2)


@side
def torch_products_matmul():
    return torch_side(TorchProducts("matmul"), *QKV, name="torch_products_matmul")


@side
def torch_products_einsum():
    return torch_side(TorchProducts("einsum"), *QKV, name="torch_products_einsum")


@side
def torch_products_einsum_bthd():
    return torch_side(TorchProducts("einsum-bthd"), *QKV, name="torch_products_einsum_bthd")


@side
def onnx_products_einsum_bthd():
    return onnx_side(TorchProducts("einsum-bthd"), *QKV, name="onnx_products_einsum_bthd")


def _jax_products(_, q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q / jnp.sqrt(D).astype(q.dtype), k)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


@side
def jax_products_einsum():
    return jax_side(_jax_products, {}, *QKV, name="jax_products_einsum")


class LinenProducts(fnn.Module):
    @fnn.compact
    def __call__(self, q, k, v):
        return fnn.dot_product_attention(q, k, v)


@side
def linen_dot_product_attention():
    return linen_side(LinenProducts(), {}, *QKV, name="linen_dot_product_attention")


class KerasProducts(keras.Model):
    def call(self, q, k, v):
        s = tf.einsum("bqhd,bkhd->bhqk", q, k) / tf.sqrt(float(D))
        return tf.einsum("bhqk,bkhd->bqhd", tf.nn.softmax(s, axis=-1), v)


@side
def keras_products_einsum():
    return keras_side(KerasProducts(), *QKV, name="keras_products_einsum")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_layer, torch_functional),
    Pair(torch_layer, torch_at),
    Pair(torch_layer, torch_matmul),
    Pair(torch_layer, torch_einsum),
    Pair(torch_layer, torch_tensordot),
    Pair(torch_layer, torch_addmm),
    Pair(torch_layer, onnx_einsum),
    Pair(torch_layer, onnx_addmm),
    Pair(torch_layer, jax_at),
    Pair(torch_layer, jax_einsum),
    Pair(torch_layer, jax_tensordot),
    Pair(torch_layer, jax_dot),
    Pair(torch_layer, linen_dense),
    Pair(torch_layer, linen_dense_general),
    Pair(torch_layer, linen_einsum),
    Pair(torch_layer, keras_dense),
    Pair(torch_layer, keras_einsum_dense),
    Pair(torch_layer, keras_einsum),
    Pair(torch_layer, keras_tensordot),
    Pair(torch_layer, keras_matmul),
    Pair(torch_products_matmul, torch_products_einsum),
    Pair(torch_products_matmul, torch_products_einsum_bthd),
    Pair(torch_products_matmul, onnx_products_einsum_bthd),
    Pair(torch_products_matmul, jax_products_einsum),
    Pair(torch_products_matmul, linen_dot_product_attention),
    Pair(torch_products_matmul, keras_products_einsum),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)
