"""Idioms met in real models written by others (HF transformers' CLIP, XGLM, RoFormer,
Pegasus, BERT and their exports), each once a crash or a false alarm, as small models."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specgraph.check import compare
from tests.idioms.catalog import canonical, linen_side, torch_side

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from specgraph.frontends import onnx as onnx_frontend  # noqa: E402
from specgraph.frontends import torch as torch_frontend  # noqa: E402

B, T, C = 2, 5, 8
X = np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32)


def _equivalent(lhs, rhs, **kwargs):
    report = compare(lhs, rhs, **kwargs)
    assert report.equivalent, [f.message for f in report.findings]
    return report


# --- CLIP: a class embedding of rank 1 expanded over the batch, or jnp.tile'd ------------
class TorchClassToken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cls = torch.nn.Parameter(torch.randn(C))
        self.fc = torch.nn.Linear(C, C)

    def forward(self, x):
        return self.fc(torch.cat([self.cls.expand(x.shape[0], 1, -1), x], dim=1))


class LinenClassToken(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        cls = self.param("cls", fnn.initializers.normal(1.0), (C,))
        tiled = jnp.tile(cls.reshape(1, 1, C), (x.shape[0], 1, 1))  # JAX's tile primitive
        return fnn.Dense(C, name="fc")(jnp.concatenate([tiled, x], axis=1))


def test_a_rank_one_class_embedding_expanded_or_tiled_is_one_graph() -> None:
    """PyTorch CLIP's ``class_embedding.expand(B, 1, -1)`` (a rank-1 parameter expanded to
    rank 3 crashed canonicalization) against Flax CLIP's ``jnp.tile`` (an opaque op)."""
    lhs = torch_side(TorchClassToken(), X, name="torch_cls")
    module = LinenClassToken()
    rhs = linen_side(module, module.init(jax.random.PRNGKey(0), X), X, name="linen_cls")
    _equivalent(lhs, rhs)


# --- CLIP: a position table looked up at every row, or added whole ------------------------
class TorchWholeTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pos = torch.nn.Embedding(T, C)
        self.register_buffer("ids", torch.arange(T).expand((1, -1)), persistent=False)

    def forward(self, x):
        return torch.tanh(x + self.pos(self.ids))


class LinenWholeTable(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        table = self.param("pos", fnn.initializers.normal(1.0), (T, C))
        return jnp.tanh(x + table)  # TF's CLIP adds its table whole


def test_a_lookup_of_every_row_in_order_is_the_table() -> None:
    lhs = torch_side(TorchWholeTable(), X, name="torch_table")
    module = LinenWholeTable()
    rhs = linen_side(module, module.init(jax.random.PRNGKey(0), X), X, name="linen_table")
    assert "embedding" not in [n.op for n in canonical(lhs).graph.nodes]
    _equivalent(lhs, rhs)


# --- XGLM: scores clamped at finfo.min after the mask -------------------------------------
class TorchClampedAttention(torch.nn.Module):
    def __init__(self, clamp: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.clamp = clamp

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-1, -2) * C ** -0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores + torch.zeros(T, T).masked_fill(~causal, torch.finfo(torch.float32).min)
        if self.clamp:
            scores = torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
        return torch.softmax(scores, dim=-1) @ v


def test_scores_clamped_at_the_lowest_float_are_still_attention() -> None:
    """XGLM's ``max(scores, finfo.min)`` kept its attention written out, and q, k and v
    (alike until attention reads them) were paired with the wrong projections."""
    clamped = torch_side(TorchClampedAttention(True), X, name="torch_clamped")
    plain = torch_side(TorchClampedAttention(False), X, name="torch_plain")
    ops = [n.op for n in canonical(clamped).graph.nodes]
    assert "attention" in ops and "maximum" not in ops
    _equivalent(clamped, plain)


# --- RoFormer, Pegasus, Marian: a method decorated with torch.no_grad() -------------------
class NoGradPositions(torch.nn.Embedding):
    @torch.no_grad()
    def forward(self, x):  # type: ignore[override]
        return super().forward(torch.arange(x.shape[1]))


class TorchNoGrad(torch.nn.Module):
    def __init__(self, no_grad: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pos = NoGradPositions(T, C) if no_grad else torch.nn.Embedding(T, C)
        self.fc = torch.nn.Linear(C, C)
        self.no_grad = no_grad

    def forward(self, x):
        pos = self.pos(x) if self.no_grad else self.pos(torch.arange(x.shape[1]))
        return self.fc(x + pos)


def test_a_no_grad_method_is_written_in_line_without_gradients() -> None:
    """A ``@torch.no_grad()`` forward is exported as a call of a graph of its own; it was an
    opaque op (exit 2 when run). In line, its values are the model's and its table gets no
    gradient, as in PyTorch: the same function as the model without ``no_grad``, the
    table's training the one difference the numbers note."""
    frozen = torch_side(TorchNoGrad(True), X, name="torch_no_grad")
    assert "opaque" not in [n.op for n in canonical(frozen).graph.nodes]
    trained = torch_side(TorchNoGrad(False), X, name="torch_grad")
    report = _equivalent(frozen, trained)
    assert any("no gradient" in n or "not compared" in n for n in report.numeric.notes), \
        report.numeric.notes


# --- exports: what only training reads, and constants folded from the weights -------------
class TorchPaddedEmbeddings(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.word = torch.nn.Embedding(20, C, padding_idx=0)
        self.pos = torch.nn.Embedding(16, C)
        self.register_buffer("position_ids", torch.arange(16).expand((1, -1)), persistent=False)
        self.norm = torch.nn.LayerNorm(C)

    def forward(self, ids):
        return self.norm(self.word(ids) + self.pos(self.position_ids[:, :ids.shape[1]]))


def test_an_export_holds_no_padding_row_and_folds_the_position_lookup() -> None:
    """BERT-like embeddings against their default export (the optimizer folds the position
    lookup at the buffer's fixed ids into a constant; ONNX has no padding row): equivalent,
    each said in a note."""
    model = TorchPaddedEmbeddings().eval()
    ids = torch.from_numpy(np.random.default_rng(1).integers(1, 20, (B, T)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (ids,), dynamo=True, verbose=False)
    direct = torch_frontend.trace(model, (ids,), reference="embeddings")
    exported = onnx_frontend.trace_model(program.model_proto, (ids.numpy(),),
                                         reference="embeddings.onnx")
    report = _equivalent(direct, exported)
    assert any("inference program (onnx)" in n and "padding_idx" in n for n in report.notes)
    assert any("holds as constants what lhs computes" in n for n in report.notes), report.notes
    assert report.numeric is not None and report.numeric.outputs
