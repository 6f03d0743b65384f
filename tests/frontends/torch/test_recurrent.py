"""PyTorch's recurrent layers written out step by step (``frontends/torch/recurrent.py``):
faithful to the fused op for every configuration, one graph with the ports people write
(a loop of ``nn.LSTMCell``/``nn.GRUCell``, a cell written by hand), and a port's wrong gate
a finding the numbers confirm."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from specgraph.check import compare
from specgraph.frontends import torch as torch_frontend
from specgraph.frontends.torch.recurrent import UNROLL_LIMIT
from specgraph.interpreter import run

H = 16


class WithState(nn.Module):
    """A recurrent layer given its initial state, returning every output."""

    def __init__(self, kind: str, **kwargs) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(8, H, **kwargs)

    def forward(self, x, h):
        if isinstance(self.rnn, nn.LSTM):
            y, (hn, cn) = self.rnn(x, (h, h * 0.5))
            return y, hn, cn
        y, hn = self.rnn(x, h)
        return y, hn


CONFIGS = [{}, {"num_layers": 2}, {"bidirectional": True}, {"bias": False},
           {"num_layers": 3, "bidirectional": True, "batch_first": True}]


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(c) or "default")
def test_the_written_out_layer_computes_what_the_fused_op_does(kind, config) -> None:
    torch.manual_seed(0)
    layers = (2 if config.get("bidirectional") else 1) * config.get("num_layers", 1)
    x = torch.randn(2, 5, 8) if config.get("batch_first") else torch.randn(5, 2, 8)
    model = WithState(kind, **config).eval()
    traced = torch_frontend.trace(model, (x, torch.randn(layers, 2, H)), reference=kind)
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    for name, want in traced.outputs.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


class Stacked(nn.Module):
    """``nn.LSTM``/``nn.GRU`` batch-first, a linear head on the last step."""

    def __init__(self, kind: str = "LSTM") -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(8, H, batch_first=True)
        self.fc = nn.Linear(H, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class CellLoop(nn.Module):
    """The same, as a loop of ``nn.LSTMCell``/``nn.GRUCell`` over the steps."""

    def __init__(self, kind: str = "LSTM") -> None:
        super().__init__()
        self.cell = getattr(nn, f"{kind}Cell")(8, H)
        self.fc = nn.Linear(H, 4)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], H)
        state = (h, h) if isinstance(self.cell, nn.LSTMCell) else h
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
        return self.fc(state[0] if isinstance(state, tuple) else state)


class ByHand(nn.Module):
    """An LSTM cell written by hand, as papers' code does: one linear for the input, one
    for the state, the gates chunked in PyTorch's order (i, f, g, o)."""

    def __init__(self, candidate=torch.tanh, order=(0, 1, 2, 3)) -> None:
        super().__init__()
        self.ih, self.hh, self.fc = nn.Linear(8, 4 * H), nn.Linear(H, 4 * H), nn.Linear(H, 4)
        self.candidate, self.order = candidate, order

    def forward(self, x):
        h = c = x.new_zeros(x.shape[0], H)
        for t in range(x.shape[1]):
            gates = (self.ih(x[:, t]) + self.hh(h)).chunk(4, dim=-1)
            i, f, g, o = (gates[k] for k in self.order)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * self.candidate(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.fc(h)


X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)


def _traced(model: nn.Module, name: str):
    torch.manual_seed(0)
    return torch_frontend.trace(model.eval(), (torch.from_numpy(X),), reference=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_layer_and_its_loop_of_cells_are_equivalent(kind) -> None:
    """``nn.LSTM`` against the loop of ``nn.LSTMCell`` a port writes (its weights moved in):
    before, both were opaque ops, a finding naming two targets."""
    torch.manual_seed(0)
    layer = Stacked(kind)
    report = compare(_traced(layer, "layer"), _traced(CellLoop(kind), "cells"))
    assert report.equivalent, [f.message for f in report.findings]
    outputs = report.numeric.outputs
    assert outputs and all(not st.diverges for st in outputs.values())


def test_an_lstm_written_by_hand_is_equivalent_and_a_wrong_candidate_is_found() -> None:
    torch.manual_seed(0)
    assert compare(_traced(Stacked(), "layer"), _traced(ByHand(), "hand")).equivalent
    report = compare(_traced(Stacked(), "layer"),
                     _traced(ByHand(candidate=torch.sigmoid), "hand"))
    (finding,) = report.findings
    assert finding.code == "op-mismatch" and "tanh where rhs computes sigmoid" in \
        finding.message and "numbers confirm" in finding.message, finding.message


def test_gates_read_in_another_order_are_found() -> None:
    """A port that chunks the gates as (f, i, g, o) where PyTorch packs (i, f, g, o): the
    same ops, read from each other's rows."""
    report = compare(_traced(Stacked(), "layer"), _traced(ByHand(order=(1, 0, 2, 3)), "hand"))
    assert not report.equivalent
    assert report.numeric is not None and any(
        st.diverges for st in report.numeric.outputs.values())


def test_a_sequence_longer_than_the_limit_and_a_projection_stay_opaque() -> None:
    long = torch.randn(1, UNROLL_LIMIT + 1, 8)
    traced = torch_frontend.trace(Stacked().eval(), (long,), reference="long")
    assert [n.op for n in traced.graph.nodes].count("opaque") == 1
    projected = nn.LSTM(8, H, proj_size=4, batch_first=True).eval()
    traced = torch_frontend.trace(projected, (torch.randn(2, 5, 8),), reference="proj")
    assert [n.op for n in traced.graph.nodes].count("opaque") == 1


class WordLanguageModel(nn.Module):
    """pytorch/examples' word_language_model ``RNNModel`` as written there (embedding,
    dropout, a 2-layer LSTM or GRU with dropout between its layers, a linear decoder,
    log-softmax), handed over in training mode, its hidden state built as
    ``init_hidden`` builds it."""

    def __init__(self, rnn_type: str = "LSTM", ntoken: int = 50, ninp: int = 16,
                 nhid: int = 16, nlayers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)

    def forward(self, input):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, self.init_hidden(input.shape[1]))
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return torch.log_softmax(decoded, dim=1), hidden


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_pytorch_examples_word_language_model_traces_faithfully(kind) -> None:
    torch.manual_seed(0)
    model = WordLanguageModel(kind)  # training mode, as the example's train() leaves it
    ids = torch.randint(0, 50, (7, 3))
    traced = torch_frontend.trace(model, (ids,), reference="word_language_model")
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    for name, want in traced.outputs.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
    (note,) = traced.notes  # its dropouts, the LSTM's between layers too, were off
    assert "drop" in note and "rnn" in note and model.training, note


def test_a_layer_written_out_against_an_opaque_one_is_told_in_a_few_words() -> None:
    """Against a side whose recurrent layer is one opaque op (Keras' LSTM in TF, an ONNX
    export's ``LSTM``), the missing run was all 76 op names joined by dots: a long run is
    told by its length and the kinds of op in it."""
    from specgraph.report import CHAIN, chain

    ops = ("linear", "add", "split", "sigmoid") * 19
    assert chain(ops[:CHAIN]) == "·".join(ops[:CHAIN])
    assert chain(ops) == "76 ops (linear, add, split, sigmoid)"

    class Opaque(nn.Module):  # the same layer, opaque: a projection of one feature
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(8, H, batch_first=True, proj_size=H - 1)
            self.fc = nn.Linear(H - 1, 4)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])

    report = compare(_traced(Stacked(), "layer"), _traced(Opaque(), "opaque"),
                     mode="structure")
    text = " ".join(f.message for f in report.findings)
    assert " ops (" in text and "sigmoid·sigmoid" not in text, text
