"""Unpacking a fused qkv tensor: ``q, k, v = qkv`` against indexing, ``unbind``, ``split``
and ``chunk`` (PyTorch), ``jnp.split`` and indexing (JAX), ``tf.unstack``, ``tf.split`` and
indexing (TF), and splitting the projection along its features before the heads (GPT-2)."""

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

B, T, C, H = 2, 5, 8, 2
D = C // H
X = rand(0, B, T, C)


# --- PyTorch -------------------------------------------------------------------------------
class TorchQKV(torch.nn.Module):
    def __init__(self, unpack: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.unpack = unpack

    def heads(self, x):
        if self.unpack == "split-features":  # GPT-2: split the features, then each to heads
            q, k, v = self.qkv(x).split(C, dim=2)
            return [t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v)]
        qkv = self.qkv(x).reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        if self.unpack == "tuple":
            q, k, v = qkv
        elif self.unpack == "index":
            q, k, v = qkv[0], qkv[1], qkv[2]
        elif self.unpack == "unbind":
            q, k, v = qkv.unbind(0)
        elif self.unpack == "split":
            q, k, v = (t.squeeze(0) for t in qkv.split(1, dim=0))
        elif self.unpack == "chunk":
            q, k, v = (t.squeeze(0) for t in torch.chunk(qkv, 3, dim=0))
        return q, k, v

    def forward(self, x):
        q, k, v = self.heads(x)
        a = torch.softmax(q @ k.transpose(-2, -1) * D ** -0.5, dim=-1) @ v
        return a.transpose(1, 2).reshape(B, T, C)


@side
def torch_tuple():
    return torch_side(TorchQKV("tuple"), X, name="torch_tuple")


@side
def torch_index():
    return torch_side(TorchQKV("index"), X, name="torch_index")


@side
def torch_unbind():
    return torch_side(TorchQKV("unbind"), X, name="torch_unbind")


@side
def torch_split():
    return torch_side(TorchQKV("split"), X, name="torch_split")


@side
def torch_chunk():
    return torch_side(TorchQKV("chunk"), X, name="torch_chunk")


@side
def torch_split_features():
    return torch_side(TorchQKV("split-features"), X, name="torch_split_features")


@side
def onnx_tuple():
    return onnx_side(TorchQKV("tuple"), X, name="onnx_tuple")


@side
def onnx_index():
    return onnx_side(TorchQKV("index"), X, name="onnx_index")


# --- JAX and Flax linen ----------------------------------------------------------------------
PARAMS = {"qkv": {"kernel": rand(1, C, 3 * C, scale=C ** -0.5), "bias": rand(2, 3 * C)}}


def _jax_attention(q, k, v):
    a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(D).astype(q.dtype), axis=-1) @ v
    return a.transpose(0, 2, 1, 3).reshape(B, T, C)


def _jax_qkv(p, x):
    y = x @ p["qkv"]["kernel"] + p["qkv"]["bias"]
    return y.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)


def jax_index_fn(p, x):
    qkv = _jax_qkv(p, x)
    return _jax_attention(qkv[0], qkv[1], qkv[2])


def jax_split_fn(p, x):
    q, k, v = (t[0] for t in jnp.split(_jax_qkv(p, x), 3, axis=0))
    return _jax_attention(q, k, v)


def jax_tuple_fn(p, x):
    q, k, v = _jax_qkv(p, x)
    return _jax_attention(q, k, v)


@side
def jax_index():
    return jax_side(jax_index_fn, PARAMS, X, name="jax_index")


@side
def jax_split():
    return jax_side(jax_split_fn, PARAMS, X, name="jax_split")


@side
def jax_tuple():
    return jax_side(jax_tuple_fn, PARAMS, X, name="jax_tuple")


class LinenQKV(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        qkv = fnn.Dense(3 * C, name="qkv")(x).reshape(B, T, 3, H, D)
        q, k, v = (jnp.squeeze(t, 2).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, 2))
        return _jax_attention(q, k, v)


@side
def linen_split():
    return linen_side(LinenQKV(), {"params": PARAMS}, X, name="linen_split")


# --- TensorFlow / Keras 3 ------------------------------------------------------------------
class KerasQKV(keras.Model):
    def __init__(self, unpack: str) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.qkv = keras.layers.Dense(3 * C)
        self.unpack = unpack

    def call(self, x):
        qkv = tf.transpose(tf.reshape(self.qkv(x), (B, T, 3, H, D)), (2, 0, 3, 1, 4))
        if self.unpack == "unstack":
            q, k, v = tf.unstack(qkv, axis=0)
        elif self.unpack == "split":
            q, k, v = (tf.squeeze(t, 0) for t in tf.split(qkv, 3, axis=0))
        else:
            q, k, v = qkv[0], qkv[1], qkv[2]
        scores = tf.matmul(q, k, transpose_b=True) / tf.sqrt(float(D))
        a = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
        return tf.reshape(tf.transpose(a, (0, 2, 1, 3)), (B, T, C))


@side
def keras_unstack():
    return keras_side(KerasQKV("unstack"), X, name="keras_unstack")


@side
def keras_split():
    return keras_side(KerasQKV("split"), X, name="keras_split")


@side
def keras_index():
    return keras_side(KerasQKV("index"), X, name="keras_index")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_tuple, torch_index),
    Pair(torch_tuple, torch_unbind),
    Pair(torch_tuple, torch_split),
    Pair(torch_tuple, torch_chunk),
    Pair(torch_tuple, torch_split_features),
    Pair(torch_tuple, onnx_tuple),
    Pair(torch_tuple, onnx_index),
    Pair(torch_tuple, jax_index),
    Pair(torch_tuple, jax_split),
    Pair(torch_tuple, jax_tuple),
    Pair(torch_tuple, linen_split),
    Pair(torch_tuple, keras_unstack),
    Pair(torch_tuple, keras_split),
    Pair(torch_tuple, keras_index),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)
