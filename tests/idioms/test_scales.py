"""Scales: attention's 1/sqrt(d) given to SDPA, written after q·kᵀ as a division or a
multiplication by the reciprocal, multiplied into q (Flax, Keras' MultiHeadAttention) or k
before the product, or split between them (d^-1/4 each, as Whisper does); a mask that adds
zeros everywhere; and a division by sqrt(d) against a multiplication by its reciprocal
outside attention. A different scale stays different."""

from __future__ import annotations

import math

import pytest

from tests.idioms.catalog import (Pair, assert_reported_different, canonical, jax_side, keras_side,
                                 linen_side, onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

from specgraph.graph_nx import isomorphic  # noqa: E402

F = torch.nn.functional
B, T, C, H = 2, 5, 8, 2
D = C // H
X = rand(0, B, T, C)


# --- attention's scale ---------------------------------------------------------------------
class TorchAttention(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.how = how

    def forward(self, x):
        q, k, v = (p(x).view(B, T, H, D).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.attend(q, k, v).transpose(1, 2).reshape(B, T, C)

    def attend(self, q, k, v):
        how = self.how
        if how.startswith("sdpa"):
            mask = torch.zeros(T, T) if how == "sdpa-zero-mask" else None
            scale = D ** -0.5 if how == "sdpa-scale" else None
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        if how == "q-scaled":
            s = (q * D ** -0.5) @ k.transpose(-2, -1)
        elif how == "k-scaled":
            s = q @ (k.transpose(-2, -1) * D ** -0.5)
        elif how == "qk-scaled":  # Whisper: both scaled by d^-1/4
            s = (q * D ** -0.25) @ (k * D ** -0.25).transpose(-2, -1)
        elif how == "div-sqrt":
            s = q @ k.transpose(-2, -1) / math.sqrt(D)
        elif how == "mul-reciprocal":
            s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(D))
        elif how == "zero-mask":
            s = q @ k.transpose(-2, -1) / math.sqrt(D) + torch.zeros(1, 1, T, T)
        elif how == "div-d":  # a different scale: 1/d
            s = q @ k.transpose(-2, -1) / D
        return torch.softmax(s, dim=-1) @ v


def _torch(how: str):
    return torch_side(TorchAttention(how), X, name=f"torch_{how}")


@side
def torch_sdpa():
    return _torch("sdpa")


@side
def torch_sdpa_scale():
    return _torch("sdpa-scale")


@side
def torch_sdpa_zero_mask():
    return _torch("sdpa-zero-mask")


@side
def torch_q_scaled():
    return _torch("q-scaled")


@side
def torch_k_scaled():
    return _torch("k-scaled")


@side
def torch_qk_scaled():
    return _torch("qk-scaled")


@side
def torch_div_sqrt():
    return _torch("div-sqrt")


@side
def torch_mul_reciprocal():
    return _torch("mul-reciprocal")


@side
def torch_zero_mask():
    return _torch("zero-mask")


@side
def torch_div_d():
    return _torch("div-d")


@side
def onnx_q_scaled():
    return onnx_side(TorchAttention("q-scaled"), X, name="onnx_q_scaled")


PROJ = {n: {"kernel": rand(i, C, H, D, scale=C ** -0.5), "bias": rand(10 + i, H, D, scale=0.1)}
        for i, n in enumerate("qkv")}


class LinenAttention(fnn.Module):
    """Flax's dot_product_attention divides q by sqrt(depth) before the product."""

    @fnn.compact
    def __call__(self, x):
        q, k, v = (fnn.DenseGeneral((H, D), name=n)(x) for n in "qkv")
        return fnn.dot_product_attention(q, k, v).reshape(B, T, C)


@side
def linen_attention():
    return linen_side(LinenAttention(), {"params": PROJ}, X, name="linen_attention")


@side
def jax_k_scaled():
    def apply(p, x):
        q, k, v = (jnp.einsum("btc,chd->bthd", x, p[n]["kernel"]) + p[n]["bias"] for n in "qkv")
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k * D ** -0.5)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(B, T, C)

    return jax_side(apply, PROJ, X, name="jax_k_scaled")


class KerasAttention(keras.Model):
    """Keras' MultiHeadAttention's way: q multiplied by 1/sqrt(d) before the product."""

    def __init__(self) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.q, self.k, self.v = (keras.layers.EinsumDense("btc,chd->bthd", (T, H, D),
                                                           bias_axes="hd") for _ in range(3))

    def call(self, x):
        q = self.q(x) * (1.0 / math.sqrt(float(D)))
        s = tf.einsum("bqhd,bkhd->bhqk", q, self.k(x))
        y = tf.einsum("bhqk,bkhd->bqhd", tf.nn.softmax(s, axis=-1), self.v(x))
        return tf.reshape(y, (B, T, C))


@side
def keras_q_scaled():
    return keras_side(KerasAttention(), X, name="keras_q_scaled")


# --- a division by sqrt(d) outside attention -------------------------------------------------
class TorchScaled(torch.nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(C, C)
        self.how = how

    def forward(self, x):
        if self.how == "div":
            return self.fc(x) / math.sqrt(C)
        return self.fc(x) * C ** -0.5


@side
def torch_linear_div():
    return torch_side(TorchScaled("div"), X, name="torch_linear_div")


@side
def torch_linear_mul():
    return torch_side(TorchScaled("mul"), X, name="torch_linear_mul")


@side
def jax_linear_div():
    dense = {"kernel": rand(1, C, C), "bias": rand(2, C)}
    return jax_side(lambda p, x: (x @ p["kernel"] + p["bias"]) / jnp.sqrt(jnp.float32(C)),
                    dense, X, name="jax_linear_div")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_sdpa, torch_sdpa_scale),
    Pair(torch_sdpa, torch_div_sqrt),
    Pair(torch_sdpa, torch_mul_reciprocal),
    Pair(torch_sdpa, torch_q_scaled),
    Pair(torch_sdpa, torch_k_scaled),
    Pair(torch_sdpa, torch_qk_scaled),
    Pair(torch_sdpa, onnx_q_scaled),
    Pair(torch_sdpa, linen_attention),
    Pair(torch_sdpa, jax_k_scaled),
    Pair(torch_sdpa, keras_q_scaled),
    Pair(torch_sdpa, torch_sdpa_zero_mask),
    Pair(torch_sdpa, torch_zero_mask),
    Pair(torch_linear_div, torch_linear_mul),
    Pair(torch_linear_div, jax_linear_div),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


def test_a_different_scale_stays_different() -> None:
    """1/d instead of 1/sqrt(d): the attention's scale attribute differs, and the numbers."""
    assert not isomorphic(canonical(torch_sdpa()).graph, canonical(torch_div_d()).graph)
    report = assert_reported_different(torch_sdpa(), torch_div_d(), codes=["attr-mismatch"])
    assert any(f.attr == "scale" for f in report.findings)
    assert_reported_different(torch_sdpa(), torch_div_d(), mode="numbers",
                              codes=["numeric-divergence"])
