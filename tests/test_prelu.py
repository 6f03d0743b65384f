"""PReLU written in each framework's words: PyTorch's ``nn.PReLU`` (one ATen op), its ONNX
export (``PRelu``), Keras's ``PReLU`` (``relu(x) - alpha·relu(-x)``) and Flax's
``nn.PReLU`` (``where(x >= 0, x, slope·x)``) are one ``prelu`` with its slope as a
parameter; before, PyTorch's was an opaque op and every port a finding with no numbers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specgraph.check import compare
from tests.idioms.catalog import canonical, keras_side, linen_side, onnx_side, torch_side

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((2, 4, 6, 6)).astype(np.float32)
X_LAST = np.ascontiguousarray(X.transpose(0, 2, 3, 1))


class ConvPReLU(torch.nn.Module):
    def __init__(self, slopes: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.act = torch.nn.PReLU(slopes)
        with torch.no_grad():
            self.act.weight.copy_(torch.rand(self.act.weight.shape) * 0.5)

    def forward(self, x):
        return self.act(self.conv(x))


def _keras(model: ConvPReLU, **prelu):
    tf = pytest.importorskip("tensorflow")
    inp = tf.keras.Input((6, 6, 4))
    conv, act = tf.keras.layers.Conv2D(4, 3, padding="same"), tf.keras.layers.PReLU(**prelu)
    keras = tf.keras.Model(inp, act(conv(inp)))
    conv.set_weights([model.conv.weight.detach().numpy().transpose(2, 3, 1, 0),
                      model.conv.bias.detach().numpy()])
    if prelu.get("shared_axes") == [1, 2]:
        act.set_weights([model.act.weight.detach().numpy().reshape(1, 1, -1)])
    return keras


def _ops(traced) -> list[str]:
    return [n.op for n in canonical(traced).graph.nodes]


def test_pytorchs_prelu_and_keras_per_channel_prelu_are_one_graph_with_numbers() -> None:
    model = ConvPReLU().eval()
    keras = _keras(model, shared_axes=[1, 2])
    assert np.abs(model(torch.from_numpy(X)).detach().numpy().transpose(0, 2, 3, 1)
                  - keras(X_LAST).numpy()).max() < 1e-5
    lhs, rhs = torch_side(model, X, name="torch"), keras_side(keras, X_LAST, name="keras")
    assert _ops(lhs) == _ops(rhs) == ["conv", "prelu"]
    report = compare(lhs, rhs)
    assert report.equivalent and not report.notes, [f.message for f in report.findings]
    assert report.numeric is not None and len(report.numeric.layers) == 2
    # the slope is a parameter on both sides: its gradient is compared too
    assert any("alpha" in name or "act" in name for name in report.numeric.gradients)


def test_a_keras_prelu_with_a_slope_per_element_is_another_model() -> None:
    model = ConvPReLU().eval()
    report = compare(torch_side(model, X, name="torch"),
                     keras_side(_keras(model), X_LAST, name="keras"))
    assert not report.equivalent


@pytest.mark.parametrize("slopes", [4, 1], ids=["per_channel", "shared"])
def test_pytorchs_prelu_and_its_onnx_export_are_one_graph(slopes: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lhs = torch_side(ConvPReLU(slopes).eval(), X, name="torch")
        rhs = onnx_side(ConvPReLU(slopes).eval(), X, name="export")
    assert _ops(lhs) == _ops(rhs) == ["conv", "prelu"]
    report = compare(lhs, rhs)
    assert report.equivalent and not report.notes, [f.message for f in report.findings]


def test_flax_prelu_is_pytorchs_with_one_slope() -> None:
    fnn = pytest.importorskip("flax.linen")
    jnp = pytest.importorskip("jax.numpy")

    class Linen(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            return fnn.PReLU()(fnn.Conv(4, (3, 3), padding=1, name="conv")(x))

    model = ConvPReLU(1).eval()
    params = {"conv": {"kernel": jnp.asarray(model.conv.weight.detach().numpy()
                                             .transpose(2, 3, 1, 0)),
                       "bias": jnp.asarray(model.conv.bias.detach().numpy())},
              "PReLU_0": {"negative_slope": jnp.asarray(model.act.weight.detach().numpy()[0])}}
    rhs = linen_side(Linen(), {"params": params}, X_LAST, name="flax")
    assert _ops(rhs) == ["conv", "prelu"]
    report = compare(torch_side(model, X, name="torch"), rhs)
    assert report.equivalent, [f.message for f in report.findings]


def test_prelu_against_leaky_relu_is_a_finding() -> None:
    tf = pytest.importorskip("tensorflow")
    model = ConvPReLU().eval()
    inp = tf.keras.Input((6, 6, 4))
    conv = tf.keras.layers.Conv2D(4, 3, padding="same")
    keras = tf.keras.Model(inp, tf.keras.layers.LeakyReLU(0.25)(conv(inp)))
    report = compare(torch_side(model, X, name="torch"), keras_side(keras, X_LAST, name="keras"))
    assert not report.equivalent
    assert any("prelu" in f.message for f in report.findings)
