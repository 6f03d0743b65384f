"""Rotary position embeddings applied to a projection's heads, written the ways models
write them: precomputed sin/cos tables kept as buffers and sliced (GPT-NeoX), computed in
``forward`` from an ``inv_freq`` buffer (HF's Llama), split halves rotated explicitly, and a
NumPy table as a constant (HF's Flax Llama), all with ``rotate_half`` (the half layout:
dimension i pairs with i + d/2); and in the interleaved layout (dimension 2i pairs with
2i + 1), a complex multiply (Meta's Llama) or ``rotate_every_two`` (GPT-J, in PyTorch and
Flax). Another theta, and the other layout on the same weights, stay different."""

from __future__ import annotations

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, assert_reported_different, canonical, jax_side, keras_side,
                                 onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

from specgraph.graph_nx import isomorphic  # noqa: E402

B, T, H, D, MAX_POS = 2, 5, 2, 8, 16
C = H * D
THETA = 10000.0
X = rand(0, B, T, C)


def _inv_freq(theta: float = THETA) -> np.ndarray:
    return (1.0 / theta ** (np.arange(0, D, 2) / D)).astype(np.float32)


def _angles(theta: float = THETA) -> np.ndarray:
    """[MAX_POS, D/2] float32: position × frequency."""
    return np.outer(np.arange(MAX_POS), _inv_freq(theta)).astype(np.float32)


# --- PyTorch -------------------------------------------------------------------------------
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):  # GPT-J
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rotate_pairs(x):  # lucidrains' rotary-embedding-torch, its einops written out
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class TorchRotary(torch.nn.Module):
    """q = rope(x W + b) over [B, H, T, D] heads, the rotation written as ``how``."""

    def __init__(self, how: str, theta: float = THETA) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(C, C)
        self.how, self.theta = how, theta
        self.register_buffer("inv_freq", torch.from_numpy(_inv_freq(theta)), persistent=False)
        emb = torch.cat([torch.from_numpy(_angles(theta))] * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x):
        q = self.q(x).view(B, T, H, D).transpose(1, 2)
        return getattr(self, self.how.replace("-", "_"))(q)

    def freqs(self):
        """[T, D/2] angles computed in forward from constants (no buffer)."""
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        return torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]

    def computed(self, q):
        emb = torch.cat((self.freqs(), self.freqs()), dim=-1)
        return q * emb.cos() + rotate_half(q) * emb.sin()

    def tables(self, q):  # GPT-NeoX: precomputed tables kept as buffers, sliced
        cos, sin = self.cos_cached[:T], self.sin_cached[:T]
        return q * cos + rotate_half(q) * sin

    def inv_freq_buffer(self, q):  # HF's Llama: the tables computed from an inv_freq buffer
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return q * emb.cos() + rotate_half(q) * emb.sin()

    def split_halves(self, q):
        cos, sin = self.freqs().cos(), self.freqs().sin()
        x1, x2 = q[..., : D // 2], q[..., D // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def pairs(self, q):  # lucidrains: the angles repeated per pair, einops' expand + flatten
        freqs = self.freqs()[..., None].expand(T, D // 2, 2).flatten(-2)
        return q * freqs.cos() + rotate_pairs(q) * freqs.sin()

    def every_two(self, q):  # GPT-J
        cos = torch.repeat_interleave(self.freqs().cos(), 2, dim=-1)
        sin = torch.repeat_interleave(self.freqs().sin(), 2, dim=-1)
        return q * cos + rotate_every_two(q) * sin

    def complex(self, q):  # Meta's Llama: pairs (2i, 2i + 1) as complex numbers
        freqs_cis = torch.polar(torch.ones_like(self.freqs()), self.freqs())
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * freqs_cis).flatten(3)


def _torch(how: str, theta: float = THETA, suffix: str = ""):
    name = f"torch_{how.replace('-', '_')}{suffix}"
    return torch_side(TorchRotary(how, theta), X, name=name)


@side
def torch_computed():
    return _torch("computed")


@side
def torch_tables():
    return _torch("tables")


@side
def torch_inv_freq_buffer():
    return _torch("inv-freq-buffer")


@side
def torch_split_halves():
    return _torch("split-halves")


@side
def onnx_computed():
    return onnx_side(TorchRotary("computed"), X, name="onnx_computed")


@side
def torch_pairs():
    return _torch("pairs")


@side
def torch_every_two():
    return _torch("every-two")


@side
def torch_complex():
    return _torch("complex")


@side
def torch_computed_theta_500k():
    return _torch("computed", 500000.0, "_theta_500k")


@side
def torch_inv_freq_buffer_theta_500k():
    return _torch("inv-freq-buffer", 500000.0, "_theta_500k")


# --- JAX (HF's Flax Llama and GPT-J: a NumPy sin/cos table, a constant) ---------------------
PROJ = {"kernel": rand(1, C, C, scale=C ** -0.5), "bias": rand(2, C, scale=0.1)}


def _jax_heads(p, x):
    return (x @ p["kernel"] + p["bias"]).reshape(B, T, H, D).transpose(0, 2, 1, 3)


@side
def jax_rotate_half():
    emb = np.concatenate([_angles()] * 2, axis=-1)[:T]
    cos, sin = np.cos(emb), np.sin(emb)

    def apply(p, x):
        q = _jax_heads(p, x)
        rotated = jnp.concatenate((-q[..., D // 2:], q[..., : D // 2]), axis=-1)
        return q * cos + rotated * sin

    return jax_side(apply, PROJ, X, name="jax_rotate_half")


@side
def jax_every_two():
    angles = _angles()[:T]
    cos, sin = (np.repeat(f(angles), 2, axis=-1) for f in (np.cos, np.sin))

    def apply(p, x):
        q = _jax_heads(p, x)
        rotated = jnp.stack((-q[..., 1::2], q[..., ::2]), axis=-1).reshape(q.shape)
        return q * cos + rotated * sin

    return jax_side(apply, PROJ, X, name="jax_every_two")


# --- TensorFlow / Keras 3 ------------------------------------------------------------------
class KerasRotary(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.q = keras.layers.Dense(C)

    def call(self, x):
        q = tf.transpose(tf.reshape(self.q(x), (B, T, H, D)), (0, 2, 1, 3))
        freqs = tf.einsum("i,j->ij", tf.range(T, dtype=tf.float32), _inv_freq())
        emb = tf.concat((freqs, freqs), axis=-1)
        x1, x2 = tf.split(q, 2, axis=-1)
        return q * tf.cos(emb) + tf.concat((-x2, x1), axis=-1) * tf.sin(emb)


@side
def keras_rotate_half():
    return keras_side(KerasRotary(), X, name="keras_rotate_half")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    # the half layout
    Pair(torch_computed, torch_tables),
    Pair(torch_computed, torch_inv_freq_buffer),
    Pair(torch_computed, torch_split_halves),
    Pair(torch_computed, onnx_computed),
    Pair(torch_computed, jax_rotate_half),
    Pair(torch_computed, keras_rotate_half),
    # the interleaved layout
    Pair(torch_pairs, torch_every_two),
    Pair(torch_pairs, torch_complex),
    Pair(torch_pairs, jax_every_two),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


# --- genuine differences -------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs", [
    (torch_computed, torch_computed_theta_500k),
    (torch_computed, torch_pairs),
    (torch_inv_freq_buffer, torch_inv_freq_buffer_theta_500k),
], ids=["theta", "layout", "theta-in-a-buffer"])
def test_another_rotary_stays_different(lhs, rhs) -> None:
    """A frequency table built from theta 500000, or the interleaved pairs rotated where
    the other side rotates halves (same weights): other numbers."""
    assert_reported_different(lhs(), rhs(), codes=["numeric-divergence"], mode="numbers")


def test_another_theta_is_another_canonical_graph() -> None:
    assert not isomorphic(canonical(torch_computed()).graph,
                          canonical(torch_computed_theta_500k()).graph)
    assert_reported_different(torch_computed(), torch_computed_theta_500k(), mode="structure")
