"""Attention masks: no mask against masks that keep every key; causal masks built with
``tril``, ``triu``, ``arange`` comparisons, ``band_part``, ``make_causal_mask`` or a
registered buffer, filled with -inf, ``finfo.min``, -1e4 or -1e9, added or selected, or
``is_causal``; key-padding masks built from an ``attention_mask`` input, as HF builds its
extended mask (``(1 - mask[:, None, None, :]) * finfo.min``), as Flax selects
(``where(mask, s, finfo.min)``), as Keras' masked ``Softmax`` selects (-1e9, then zeros
the masked probabilities), as old BERT adds (-1e4), or as a boolean mask handed to SDPA.

Fills that drown the keys they mask (-inf, ``finfo.min``, -1e4, -1e9, a boolean) are one
mask: they agree wherever a row keeps a key. Genuine differences stay different: a mask
that drops a key against none, a causal window one key wider; and on an input with a fully
masked row the numbers still part the fills (-inf gives NaN, -1e4 leaves the scores'
softmax, ``finfo.min`` a uniform average, PyTorch's SDPA zeros, and so does Keras' masked
``Softmax``; SDPA's boolean mask exported to ONNX adds ``finfo.min``, and averages).
"""

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

from specgraph.graph_nx import isomorphic  # noqa: E402

F = torch.nn.functional
B, T, C, H = 2, 5, 8, 2
D = C // H
X = rand(0, B, T, C)
PADDED = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=np.int64)  # no row fully masked
EMPTY_ROW = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=np.int64)  # row 1 masks all


# --- PyTorch -------------------------------------------------------------------------------
class TorchAttention(torch.nn.Module):
    """Self-attention (q, k, v projections, heads, no output projection) with the mask
    ``how`` (and, for key-padding masks, an ``attention_mask`` [B, T] of ones and zeros)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.how = how
        if how == "buffer":  # nanoGPT's causal buffer, longer than T
            self.register_buffer("bias", torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8),
                                 persistent=False)

    def forward(self, x, attention_mask=None):
        q, k, v = (p(x).view(B, T, H, D).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.attend(q, k, v, attention_mask).transpose(1, 2).reshape(B, T, C)

    def attend(self, q, k, v, attention_mask):
        sdpa = {"sdpa": None, "sdpa-ones": torch.ones(T, T, dtype=torch.bool),
                "sdpa-causal": None, "sdpa-tril": torch.ones(T, T, dtype=torch.bool).tril()}
        if self.how in sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa[self.how],
                                                  is_causal=self.how == "sdpa-causal")
        if self.how == "sdpa-padding":
            mask = attention_mask[:, None, None, :].bool()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        s = q @ k.transpose(-2, -1) / D ** 0.5
        return torch.softmax(self.mask(s, attention_mask), dim=-1) @ v

    def mask(self, s, attention_mask):
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        if self.how == "ones":
            return s.masked_fill(torch.ones(T, T) == 0, float("-inf"))
        if self.how == "drop-last-key":
            return s.masked_fill(j == T - 1, float("-inf"))
        if self.how == "buffer":
            return s.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        if self.how == "triu-inf":
            return s + torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        if self.how == "triu-finfo":
            return s.masked_fill(torch.ones(T, T).triu(1).bool(), torch.finfo(s.dtype).min)
        if self.how == "arange-1e4":
            return s + (j > i).float() * -1e4
        if self.how == "window":  # keys j <= i + 1: one key wider than causal
            return s.masked_fill(j > i + 1, float("-inf"))
        m = attention_mask[:, None, None, :]
        if self.how == "hf-finfo":  # HF's extended attention mask
            return s + (1.0 - m.to(s.dtype)) * torch.finfo(s.dtype).min
        if self.how == "fill-finfo":
            return s.masked_fill(m == 0, torch.finfo(s.dtype).min)
        if self.how == "fill-inf":
            return s.masked_fill(m == 0, float("-inf"))
        if self.how == "bert-1e4":
            return s + (1.0 - m.to(s.dtype)) * -10000.0
        if self.how == "add-1e9":
            return s + (1.0 - m.to(s.dtype)) * -1e9
        raise ValueError(self.how)


def _torch(how: str, *extra: np.ndarray):
    return torch_side(TorchAttention(how), X, *extra, name=f"torch_{how}")


def _onnx(how: str, *extra: np.ndarray):
    return onnx_side(TorchAttention(how), X, *extra, name=f"onnx_{how}")


@side
def torch_sdpa():
    return _torch("sdpa")


@side
def torch_sdpa_ones():
    return _torch("sdpa-ones")


@side
def torch_ones():
    return _torch("ones")


@side
def torch_drop_last_key():
    return _torch("drop-last-key")


@side
def torch_sdpa_causal():
    return _torch("sdpa-causal")


@side
def torch_sdpa_tril():
    return _torch("sdpa-tril")


@side
def torch_buffer():
    return _torch("buffer")


@side
def torch_triu_inf():
    return _torch("triu-inf")


@side
def torch_triu_finfo():
    return _torch("triu-finfo")


@side
def torch_arange_1e4():
    return _torch("arange-1e4")


@side
def torch_window():
    return _torch("window")


@side
def onnx_sdpa_causal():
    return _onnx("sdpa-causal")


@side
def onnx_buffer():
    return _onnx("buffer")


@side
def torch_hf_finfo():
    return _torch("hf-finfo", PADDED)


@side
def torch_fill_finfo():
    return _torch("fill-finfo", PADDED)


@side
def torch_sdpa_padding():
    return _torch("sdpa-padding", PADDED)


@side
def torch_fill_inf():
    return _torch("fill-inf", PADDED)


@side
def torch_bert_1e4():
    return _torch("bert-1e4", PADDED)


@side
def torch_add_1e9():
    return _torch("add-1e9", PADDED)


@side
def onnx_hf_finfo():
    return _onnx("hf-finfo", PADDED)


@side
def onnx_sdpa_padding():
    return _onnx("sdpa-padding", PADDED)


# --- JAX and Flax linen ----------------------------------------------------------------------
PROJ = {name: {"kernel": rand(i, C, C, scale=C ** -0.5), "bias": rand(10 + i, C, scale=0.1)}
        for i, name in enumerate("qkv")}
INT_PADDED = PADDED.astype(np.int32)


def _heads(p, x):
    """q, k, v as Flax keeps them: [B, T, H, D]."""
    return [(x @ p[n]["kernel"] + p[n]["bias"]).reshape(B, T, H, D) for n in "qkv"]


def _jax_attention(p, x, mask, fill):
    """Flax's way: scores selected where ``mask`` holds, ``fill`` elsewhere."""
    q, k, v = _heads(p, x)
    s = jnp.einsum("bqhd,bkhd->bhqk", q / jnp.sqrt(D).astype(q.dtype), k)
    s = jnp.where(mask, s, fill)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(B, T, C)


@side
def jax_ones():
    return jax_side(lambda p, x: _jax_attention(p, x, jnp.ones((T, T), bool), -1e9),
                    PROJ, X, name="jax_ones")


@side
def jax_tril_finfo():
    def apply(p, x):
        mask = jnp.tril(jnp.ones((T, T), dtype=bool))
        return _jax_attention(p, x, mask, jnp.finfo(x.dtype).min)

    return jax_side(apply, PROJ, X, name="jax_tril_finfo")


@side
def jax_padding_finfo():
    def apply(p, x, m):
        return _jax_attention(p, x, m[:, None, None, :].astype(bool), jnp.finfo(x.dtype).min)

    return jax_side(apply, PROJ, X, INT_PADDED, name="jax_padding_finfo")


@side
def jax_padding_inf():
    def apply(p, x, m):
        return _jax_attention(p, x, m[:, None, None, :] > 0, -jnp.inf)

    return jax_side(apply, PROJ, X, INT_PADDED, name="jax_padding_inf")


@side
def jax_bert_1e4():
    def apply(p, x, m):
        q, k, v = _heads(p, x)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(D).astype(q.dtype)
        s = s + (1.0 - m[:, None, None, :].astype(s.dtype)) * -10000.0
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(B, T, C)

    return jax_side(apply, PROJ, X, INT_PADDED, name="jax_bert_1e4")


class LinenAttention(fnn.Module):
    how: str

    @fnn.compact
    def __call__(self, x, attention_mask=None):
        q, k, v = (fnn.DenseGeneral((H, D), name=n)(x) for n in "qkv")
        if self.how == "causal":
            mask = fnn.make_causal_mask(jnp.ones((B, T)))
        elif self.how == "ones":
            mask = jnp.ones((B, 1, T, T))
        else:  # padding
            mask = fnn.make_attention_mask(jnp.ones((B, T)), attention_mask)
        return fnn.dot_product_attention(q, k, v, mask=mask).reshape(B, T, C)


LINEN = {"params": {n: {"kernel": p["kernel"].reshape(C, H, D), "bias": p["bias"].reshape(H, D)}
                    for n, p in PROJ.items()}}


@side
def linen_ones():
    return linen_side(LinenAttention("ones"), LINEN, X, name="linen_ones")


@side
def linen_causal():
    return linen_side(LinenAttention("causal"), LINEN, X, name="linen_causal")


@side
def linen_padding():
    return linen_side(LinenAttention("padding"), LINEN, X, INT_PADDED, name="linen_padding")


# --- TensorFlow / Keras 3 ------------------------------------------------------------------
class KerasAttention(keras.Model):
    def __init__(self, how: str) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.how = how
        self.q, self.k, self.v = (keras.layers.Dense(C) for _ in range(3))
        self.softmax = keras.layers.Softmax(axis=-1)

    def call(self, x, attention_mask=None):
        q, k, v = (tf.transpose(tf.reshape(p(x), (B, T, H, D)), (0, 2, 1, 3))
                   for p in (self.q, self.k, self.v))
        s = tf.matmul(q, k, transpose_b=True) / tf.sqrt(float(D))
        if self.how == "band-part":  # TF GPT-2: w * b - 1e4 * (1 - b)
            b = tf.linalg.band_part(tf.ones((T, T)), -1, 0)
            p = tf.nn.softmax(s * b - 1e4 * (1 - b), axis=-1)
        elif self.how == "ones":
            p = tf.nn.softmax(tf.where(tf.ones((T, T), tf.bool), s, -1e9), axis=-1)
        elif self.how == "softmax-mask":  # where(mask, s, -1e9), softmax, zeros where masked
            p = self.softmax(s, mask=tf.cast(attention_mask[:, None, None, :], tf.bool))
        elif self.how == "where-inf":
            keep = tf.cast(attention_mask[:, None, None, :], tf.bool)
            p = tf.nn.softmax(tf.where(keep, s, float("-inf")), axis=-1)
        else:  # hf-1e4, HF TF BERT's extended mask
            m = tf.cast(attention_mask[:, None, None, :], s.dtype)
            p = tf.nn.softmax(s + (1.0 - m) * -10000.0, axis=-1)
        return tf.reshape(tf.transpose(tf.matmul(p, v), (0, 2, 1, 3)), (B, T, C))


@side
def keras_ones():
    return keras_side(KerasAttention("ones"), X, name="keras_ones")


@side
def keras_band_part():
    return keras_side(KerasAttention("band-part"), X, name="keras_band_part")


@side
def keras_softmax_mask():
    return keras_side(KerasAttention("softmax-mask"), X, INT_PADDED, name="keras_softmax_mask")


@side
def keras_where_inf():
    return keras_side(KerasAttention("where-inf"), X, INT_PADDED, name="keras_where_inf")


@side
def keras_hf_1e4():
    return keras_side(KerasAttention("hf-1e4"), X, INT_PADDED, name="keras_hf_1e4")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    # a mask that keeps every key is no mask
    Pair(torch_sdpa, torch_sdpa_ones),
    Pair(torch_sdpa, torch_ones),
    Pair(torch_sdpa, jax_ones),
    Pair(torch_sdpa, linen_ones),
    Pair(torch_sdpa, keras_ones),
    # causal masks
    Pair(torch_sdpa_causal, torch_sdpa_tril),
    Pair(torch_sdpa_causal, torch_buffer),
    Pair(torch_sdpa_causal, torch_triu_inf),
    Pair(torch_sdpa_causal, torch_triu_finfo),
    Pair(torch_sdpa_causal, torch_arange_1e4),
    Pair(torch_sdpa_causal, onnx_sdpa_causal),
    Pair(torch_sdpa_causal, onnx_buffer),
    Pair(torch_sdpa_causal, jax_tril_finfo),
    Pair(torch_sdpa_causal, linen_causal),
    Pair(torch_sdpa_causal, keras_band_part),
    # key-padding masks from an attention_mask input, the same fill spelled otherwise
    Pair(torch_hf_finfo, torch_fill_finfo),
    Pair(torch_hf_finfo, onnx_hf_finfo),
    Pair(torch_hf_finfo, jax_padding_finfo),
    Pair(torch_hf_finfo, linen_padding),
    Pair(torch_hf_finfo, onnx_sdpa_padding),  # the exporter adds finfo.min (see below)
    Pair(torch_fill_inf, jax_padding_inf),
    Pair(torch_fill_inf, keras_where_inf),
    Pair(torch_bert_1e4, jax_bert_1e4),
    Pair(torch_bert_1e4, keras_hf_1e4),
    Pair(torch_sdpa_padding, keras_softmax_mask),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


# --- genuine differences -------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs", [(torch_sdpa, torch_drop_last_key),
                                      (torch_sdpa_causal, torch_window)],
                         ids=["a-dropped-key", "a-window-one-key-wider"])
def test_a_different_constant_mask_stays_different(lhs, rhs) -> None:
    assert not isomorphic(canonical(lhs()).graph, canonical(rhs()).graph)
    assert_reported_different(lhs(), rhs(), mode="numbers", codes=["numeric-divergence"])


FILLS = [(torch_bert_1e4, torch_fill_inf, "numeric-divergence"),
         (torch_hf_finfo, torch_fill_inf, "numeric-divergence"),
         (torch_bert_1e4, torch_hf_finfo, "numeric-divergence"),
         (torch_sdpa_padding, torch_fill_inf, "nan-introduced"),  # -inf: NaN where SDPA zeros
         (torch_sdpa_padding, torch_add_1e9, "numeric-divergence")]
FILL_IDS = ["-1e4~-inf", "finfo.min~-inf", "-1e4~finfo.min", "sdpa-bool~written-inf",
            "sdpa-bool~-1e9"]


@pytest.mark.parametrize("lhs, rhs, code", FILLS, ids=FILL_IDS)
def test_drowning_fills_are_one_mask_and_a_fully_masked_row_still_parts_them(lhs, rhs, code
                                                                             ) -> None:
    """Fills that drown the keys they mask agree wherever a row keeps a key, so they are one
    canonical mask (TensorFlow's BERT adds -1e4 where PyTorch's adds finfo.min: the same
    model). A row that keeps no key parts them (-inf gives NaN, -1e4 the scores' softmax,
    finfo.min a uniform average, SDPA zeros): each side's own program runs, so an input
    with such a row still shows it in the numbers."""
    left, right = lhs(), rhs()
    assert isomorphic(canonical(left).graph, canonical(right).graph)
    with_empty_row = [
        torch_side(TorchAttention(t.native.how), X, EMPTY_ROW, name=f"{t.reference}_empty")
        for t in (left, right)]
    assert_reported_different(*with_empty_row, mode="numbers", codes=[code])


def test_the_exported_sdpa_boolean_mask_averages_a_fully_masked_row() -> None:
    """``torch.onnx.export`` writes SDPA's boolean mask as ``Where(m, 0, finfo.min)`` added
    to the scores (then ``IsNaN``·``Where``, which finds no NaN to zero): the same mask
    wherever a row keeps a key, so one canonical graph; a fully masked row averages the
    values where SDPA gives zeros, and an input with such a row shows it in the numbers."""
    assert isomorphic(canonical(torch_sdpa_padding()).graph,
                      canonical(onnx_sdpa_padding()).graph)
    module = TorchAttention("sdpa-padding")
    assert_reported_different(
        torch_side(module, X, EMPTY_ROW, name="torch_sdpa_padding_empty"),
        onnx_side(module, X, EMPTY_ROW, name="onnx_sdpa_padding_empty"),
        mode="numbers", codes=["numeric-divergence"])
