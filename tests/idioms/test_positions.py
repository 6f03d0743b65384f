"""Position and token-type ids: position ids as a sliced buffer (``self.position_ids[:, :T]``,
HF's PyTorch models), ``arange`` (expanded over the batch or not; Flax's
``broadcast_to(arange)``, TF's ``tf.range``) or an input in both models; zero token-type ids
as a sliced buffer (HF), ``zeros_like(ids)``, ``zeros`` or ``tf.fill``. Embeddings are
summed (BERT's embedding layer without its LayerNorm). An input where the other side builds
the ids stays different (the models take different inputs), and so do ids that start
elsewhere (OPT's offset of 2)."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.check import InputMismatchError
from tests.idioms.catalog import (Pair, assert_reported_different, canonical, jax_side, keras_side,
                                 linen_side, onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

from specgraph.graph_nx import isomorphic  # noqa: E402

B, T, C, VOCAB, MAX_POS = 2, 5, 8, 20, 16
IDS = np.random.default_rng(0).integers(0, VOCAB, (B, T)).astype(np.int64)
POSITIONS = np.broadcast_to(np.arange(T), (B, T)).astype(np.int64).copy()
ZEROS = np.zeros((B, T), dtype=np.int64)


# --- PyTorch -------------------------------------------------------------------------------
class TorchEmbeddings(torch.nn.Module):
    """word + position (+ token type) embeddings; ``positions`` and ``types`` say how the
    ids are made."""

    def __init__(self, positions: str, types: str | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.word = torch.nn.Embedding(VOCAB, C)
        self.position = torch.nn.Embedding(MAX_POS, C)
        self.token_type = torch.nn.Embedding(2, C) if types else None
        self.register_buffer("position_ids", torch.arange(MAX_POS).expand((1, -1)),
                             persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, MAX_POS), dtype=torch.long),
                             persistent=False)
        self.positions, self.types = positions, types

    def forward(self, ids, extra=None):
        pos = {"buffer": lambda: self.position_ids[:, :T],
               "arange": lambda: torch.arange(T).unsqueeze(0),
               "arange-expanded": lambda: torch.arange(T).expand(B, T),
               "offset": lambda: torch.arange(T).unsqueeze(0) + 2,
               "input": lambda: extra}[self.positions]()
        h = self.word(ids) + self.position(pos)
        if self.types is None:
            return h
        types = {"buffer": lambda: self.token_type_ids[:, :T].expand(B, T),
                 "zeros_like": lambda: torch.zeros_like(ids),
                 "zeros": lambda: torch.zeros(B, T, dtype=torch.long),
                 "input": lambda: extra}[self.types]()
        return h + self.token_type(types)


def _torch(positions: str, types: str | None = None, *extra: np.ndarray):
    name = f"torch_positions_{positions}" + (f"_types_{types}" if types else "")
    return torch_side(TorchEmbeddings(positions, types), IDS, *extra, name=name)


@side
def torch_buffer():
    return _torch("buffer")


@side
def torch_arange():
    return _torch("arange")


@side
def torch_arange_expanded():
    return _torch("arange-expanded")


@side
def torch_offset():
    return _torch("offset")


@side
def torch_position_input():
    return _torch("input", None, POSITIONS)


@side
def onnx_buffer():
    return onnx_side(TorchEmbeddings("buffer"), IDS, name="onnx_buffer", optimize=False)


@side
def torch_types_buffer():
    return _torch("buffer", "buffer")


@side
def torch_types_zeros_like():
    return _torch("arange", "zeros_like")


@side
def torch_types_zeros():
    return _torch("arange", "zeros")


@side
def torch_types_input():
    return _torch("arange", "input", ZEROS)


@side
def onnx_types_buffer():
    return onnx_side(TorchEmbeddings("buffer", "buffer"), IDS, name="onnx_types_buffer",
                     optimize=False)


# --- JAX and Flax linen ----------------------------------------------------------------------
TABLES = {"word": rand(1, VOCAB, C), "position": rand(2, MAX_POS, C), "token_type": rand(3, 2, C)}
IDS32 = IDS.astype(np.int32)


@side
def jax_arange():
    def apply(p, ids):
        return p["word"][ids] + p["position"][jnp.arange(ids.shape[1])[None, :]]

    return jax_side(apply, {k: TABLES[k] for k in ("word", "position")}, IDS32,
                    name="jax_arange")


@side
def jax_position_input():
    def apply(p, ids, positions):
        return p["word"][ids] + p["position"][positions]

    return jax_side(apply, {k: TABLES[k] for k in ("word", "position")}, IDS32,
                    POSITIONS.astype(np.int32), name="jax_position_input")


class LinenEmbeddings(fnn.Module):
    """HF's Flax BERT: broadcast_to(arange) positions, zeros_like token types."""

    types: bool = False

    @fnn.compact
    def __call__(self, ids):
        positions = jnp.broadcast_to(jnp.arange(jnp.atleast_2d(ids).shape[-1]), ids.shape)
        h = fnn.Embed(VOCAB, C, name="word")(ids) + fnn.Embed(MAX_POS, C, name="position")(
            positions)
        if self.types:
            h = h + fnn.Embed(2, C, name="token_type")(jnp.zeros_like(ids))
        return h


def _linen_vars(types: bool) -> dict:
    names = ("word", "position", "token_type") if types else ("word", "position")
    return {"params": {n: {"embedding": TABLES[n]} for n in names}}


@side
def linen_broadcast_arange():
    return linen_side(LinenEmbeddings(), _linen_vars(False), IDS32,
                      name="linen_broadcast_arange")


@side
def linen_types_zeros_like():
    return linen_side(LinenEmbeddings(types=True), _linen_vars(True), IDS32,
                      name="linen_types_zeros_like")


# --- TensorFlow / Keras 3 ------------------------------------------------------------------
class KerasEmbeddings(keras.Model):
    """HF's TF BERT: tf.range positions, tf.fill(0) token types, tables read with
    tf.gather."""

    def __init__(self, types: bool = False) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.word = self.add_weight(shape=(VOCAB, C), name="word")
        self.position = self.add_weight(shape=(MAX_POS, C), name="position")
        self.token_type = self.add_weight(shape=(2, C), name="token_type") if types else None

    def call(self, ids):
        positions = tf.expand_dims(tf.range(start=0, limit=T), axis=0)
        h = tf.gather(self.word, ids) + tf.gather(self.position, positions)
        if self.token_type is not None:
            h = h + tf.gather(self.token_type, tf.fill(dims=(B, T), value=0))
        return h


@side
def keras_range():
    return keras_side(KerasEmbeddings(), IDS32, name="keras_range")


@side
def keras_types_fill():
    return keras_side(KerasEmbeddings(types=True), IDS32, name="keras_types_fill")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    # position ids: HF's PyTorch buffer against the constants other code builds
    Pair(torch_buffer, torch_arange),
    Pair(torch_buffer, onnx_buffer),
    Pair(torch_buffer, jax_arange),
    Pair(torch_buffer, linen_broadcast_arange),
    Pair(torch_buffer, keras_range),
    # position ids: arange however written
    Pair(torch_arange, torch_arange_expanded),
    Pair(torch_arange, jax_arange),
    Pair(torch_arange, linen_broadcast_arange),
    Pair(torch_arange, keras_range),
    # position ids: an input of both models
    Pair(torch_position_input, jax_position_input),
    # zero token-type ids: HF's PyTorch buffer against zeros however written
    Pair(torch_types_buffer, torch_types_zeros_like),
    Pair(torch_types_buffer, onnx_types_buffer),
    Pair(torch_types_buffer, linen_types_zeros_like),
    Pair(torch_types_buffer, keras_types_fill),
    Pair(torch_types_zeros_like, torch_types_zeros),
    Pair(torch_types_zeros_like, linen_types_zeros_like),
    Pair(torch_types_zeros_like, keras_types_fill),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


# --- genuine differences -------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs", [(torch_arange, torch_position_input),
                                      (torch_types_zeros_like, torch_types_input)],
                         ids=["position-ids", "token-type-ids"])
def test_ids_as_an_input_stay_different(lhs, rhs) -> None:
    """A model that reads its ids from an input computes a function of that input: it is
    not the model that builds them (specgraph says the inputs differ)."""
    with pytest.raises(InputMismatchError, match="different inputs"):
        assert_reported_different(lhs(), rhs())


def test_ids_from_another_offset_stay_different() -> None:
    """OPT's positions start at 2: other rows of the table are read."""
    assert_reported_different(torch_arange(), torch_offset(), mode="numbers",
                              codes=["numeric-divergence"])


def test_ids_from_another_offset_are_another_canonical_graph() -> None:
    assert not isomorphic(canonical(torch_arange()).graph, canonical(torch_offset()).graph)
    assert_reported_different(torch_arange(), torch_offset(), mode="structure")
