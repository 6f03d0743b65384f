"""Recurrent layers across frameworks: PyTorch's ``nn.LSTM``/``nn.RNN`` against the Keras
layers a port uses. PyTorch adds two biases to each step's pre-activations (``b_ih`` and
``b_hh``), Keras one, and Keras runs the steps time-major; both are one graph with numbers,
the two biases one parameter (their sum), and a real difference between the layers is
still a finding."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
import torch.nn as nn

from specgraph.check import compare
from specgraph.frontends import tf as tf_frontend
from specgraph.frontends import torch as torch_frontend
from specgraph.numeric.program import canonical_param_grads, native_weights
from specgraph.passes import canonicalize_model

B, T, I, H = 2, 5, 3, 4
X = np.random.default_rng(0).normal(size=(B, T, I)).astype(np.float32)


class Recurrent(nn.Module):
    """A PyTorch recurrent layer, batch first, returning every step's output."""

    def __init__(self, kind: str, **kwargs) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(I, H, batch_first=True, **kwargs)

    def forward(self, x):
        return self.rnn(x)[0]


def _torch(kind: str, **kwargs):
    torch.manual_seed(0)
    return torch_frontend.trace(Recurrent(kind, **kwargs).eval(), (torch.from_numpy(X),),
                                reference=f"torch_{kind}")


def _keras(kind: str, **kwargs):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((T, I), batch_size=B)
    layer = getattr(keras.layers, kind)(H, return_sequences=True, unroll=True, **kwargs)
    return tf_frontend.trace(keras.Model(inputs, layer(inputs)), (X,),
                             reference=f"keras_{kind}")


def _agree(report) -> None:
    assert report.equivalent, [f.message for f in report.findings]
    numbers = report.numeric
    assert numbers.transferred and numbers.outputs and numbers.gradients
    assert all(not st.diverges for st in numbers.outputs.values())
    assert all(not st.diverges for st in numbers.gradients.values())


@pytest.mark.parametrize("torch_kind,keras_kind", [("LSTM", "LSTM"), ("RNN", "SimpleRNN")])
def test_a_pytorch_layer_and_its_keras_port_are_one_graph_with_numbers(torch_kind,
                                                                         keras_kind) -> None:
    """Before, an LSTM was 7 findings: the split and stack of Keras' time-major steps, and
    PyTorch's two biases against Keras' one."""
    report = compare(_torch(torch_kind), _keras(keras_kind))
    _agree(report)
    (note,) = [n for n in report.notes if "parameters added together" in n]
    assert note.startswith("lhs holds rnn.bias_hh_l0") and "+rnn.bias_ih_l0" in note and \
        "as 2 parameters" in note and "twice as far" in note, note
    # the other way: Keras' one bias moved into PyTorch's two (b_ih the bias, b_hh zero)
    _agree(compare(_keras(keras_kind), _torch(torch_kind)))


@pytest.mark.parametrize("torch_kind,keras_kind", [("LSTM", "LSTM"), ("RNN", "SimpleRNN")])
def test_stacked_layers_against_keras_layers_one_on_another_are_one_graph(torch_kind,
                                                                         keras_kind) -> None:
    """``num_layers=2`` (pytorch/examples' word language model) against two Keras layers:
    Keras stacks the first layer's steps and the second unstacks them again, where PyTorch
    hands each step on (the stack then the split along the same axis is the steps)."""
    torch.manual_seed(0)
    lhs = _torch(torch_kind, num_layers=2)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((T, I), batch_size=B)
    first = getattr(keras.layers, keras_kind)(H, return_sequences=True)(inputs)
    second = getattr(keras.layers, keras_kind)(H, return_sequences=True)(first)
    rhs = tf_frontend.trace(keras.Model(inputs, second), (X,), reference="stacked")
    report = compare(lhs, rhs)
    _agree(report)
    assert len(report.numeric.gradients) == 6  # each layer's kernels and its one bias


def test_without_biases_the_layers_are_one_graph_and_nothing_is_summed() -> None:
    report = compare(_torch("LSTM", bias=False), _keras("LSTM", use_bias=False))
    _agree(report)
    assert not [n for n in report.notes if "added together" in n]


def test_a_keras_port_with_another_gate_activation_is_found() -> None:
    report = compare(_torch("LSTM"), _keras("LSTM", recurrent_activation="hard_sigmoid"))
    (finding,) = report.findings
    assert finding.code == "op-mismatch" and \
        "sigmoid where rhs computes hardsigmoid" in finding.message and \
        "numbers confirm" in finding.message, finding.message


def test_a_gru_port_whose_gates_keras_orders_otherwise_is_a_finding_not_a_crash() -> None:
    """Keras packs a GRU's gates (z, r, h), PyTorch (r, z, n): not one graph yet."""
    report = compare(_torch("GRU"), _keras("GRU"))
    assert not report.equivalent


def test_the_two_biases_are_one_parameter_and_the_program_keeps_its_own() -> None:
    traced = _torch("LSTM")
    canonical = canonicalize_model(traced)
    name = "rnn.bias_hh_l0+rnn.bias_ih_l0"
    assert [t for t, _ in canonical.param_sums[name]] == ["rnn.bias_hh_l0", "rnn.bias_ih_l0"]
    assert not {"rnn.bias_ih_l0", "rnn.bias_hh_l0"} & set(canonical.graph.params)
    own = {k: np.asarray(canonical.weights[k]) for k in canonical.graph.params}
    b_ih, b_hh = (np.asarray(traced.weights[f"rnn.bias_{k}_l0"]) for k in ("ih", "hh"))
    np.testing.assert_allclose(own[name], b_ih + b_hh, rtol=1e-6)
    # the model's own sum: its program keeps both terms as they are
    natives = native_weights(canonical, own, canonical.param_shapes)
    np.testing.assert_array_equal(natives["rnn.bias_ih_l0"], b_ih)
    np.testing.assert_array_equal(natives["rnn.bias_hh_l0"], b_hh)
    # another model's bias: held by the first term, the others zero
    other = {**own, name: np.arange(4 * H, dtype=np.float32)}
    natives = native_weights(canonical, other, canonical.param_shapes)
    np.testing.assert_array_equal(natives["rnn.bias_hh_l0"], other[name])
    np.testing.assert_array_equal(natives["rnn.bias_ih_l0"], np.zeros(4 * H, np.float32))
    # each term's gradient is the sum's
    ramp = np.arange(4 * H, dtype=np.float32)
    grads = canonical_param_grads(canonical, {"rnn.bias_ih_l0": ramp, "rnn.bias_hh_l0": ramp})
    np.testing.assert_array_equal(grads[name], ramp)
    assert not {"rnn.bias_ih_l0", "rnn.bias_hh_l0"} & set(grads)


class TwoLayers(nn.Module):
    """Two linear layers of one input added: two biases."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(I, H), nn.Linear(I, H)

    def forward(self, x):
        return torch.tanh(self.a(x) + self.b(x * 2.0))


def test_two_linear_layers_added_against_one_bias_are_one_graph_with_a_note() -> None:
    """Keras' port gives one of the two layers no bias: the same function, one bias."""
    torch.manual_seed(0)
    lhs = torch_frontend.trace(TwoLayers().eval(), (torch.from_numpy(X),), reference="two")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((T, I), batch_size=B)
    summed = keras.layers.Dense(H)(inputs) + keras.layers.Dense(H, use_bias=False)(
        inputs * 2.0)
    rhs = tf_frontend.trace(keras.Model(inputs, keras.ops.tanh(summed)), (X,),
                            reference="one")
    report = compare(lhs, rhs)
    _agree(report)
    assert [n for n in report.notes if "a.bias+b.bias as 2 parameters" in n], report.notes
