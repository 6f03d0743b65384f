"""Layouts: a convolution over an NCHW input written channels-first (PyTorch, ``lax.conv``'s
default NCHW/OIHW), or transposed to NHWC inside the model and back at its output (JAX,
Flax, Keras), or over a channels-last input (Keras); its weight kept in PyTorch's OIHW or
in TF's HWIO and permuted in ``forward``. And a channels-last input whose first layers are
elementwise before the first convolution: rescaling by 1/255 and normalization
``(x - mean) / std`` (Keras' ``Rescaling`` and ``Normalization`` layers, NumPy constants in
JAX, constants or non-persistent buffers in PyTorch)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, jax_side, keras_side, linen_side, onnx_side, pair_tests,
                                 rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
from jax import lax  # noqa: E402

F = torch.nn.functional
B, CIN, COUT, S = 2, 3, 4, 6
NCHW = rand(0, B, CIN, S, S)
NHWC = np.ascontiguousarray(NCHW.transpose(0, 2, 3, 1))
OIHW = rand(1, COUT, CIN, 3, 3, scale=0.3)
HWIO = np.ascontiguousarray(OIHW.transpose(2, 3, 1, 0))
BIAS = rand(2, COUT, scale=0.1)


# --- a convolution over an NCHW input --------------------------------------------------------
class TorchConv(torch.nn.Module):
    def __init__(self, weight: str) -> None:
        super().__init__()
        layout = OIHW if weight == "oihw" else HWIO
        self.weight = torch.nn.Parameter(torch.from_numpy(layout.copy()))
        self.bias = torch.nn.Parameter(torch.from_numpy(BIAS.copy()))
        self.layout = weight

    def forward(self, x):
        w = self.weight if self.layout == "oihw" else self.weight.permute(3, 2, 0, 1)
        return F.relu(F.conv2d(x, w, self.bias, padding=1))


@side
def torch_oihw():
    return torch_side(TorchConv("oihw"), NCHW, name="torch_oihw")


@side
def torch_hwio():
    return torch_side(TorchConv("hwio"), NCHW, name="torch_hwio")


@side
def onnx_hwio():
    return onnx_side(TorchConv("hwio"), NCHW, name="onnx_hwio")


@side
def jax_nchw():
    def apply(p, x):  # lax.conv's default dimension numbers: NCHW, OIHW
        y = lax.conv(x, p["kernel"], (1, 1), "SAME") + p["bias"][None, :, None, None]
        return jax.nn.relu(y)

    return jax_side(apply, {"kernel": OIHW, "bias": BIAS}, NCHW, name="jax_nchw")


@side
def jax_nhwc_inside():
    def apply(p, x):
        h = jnp.transpose(x, (0, 2, 3, 1))
        h = lax.conv_general_dilated(h, p["kernel"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.transpose(jax.nn.relu(h + p["bias"]), (0, 3, 1, 2))

    return jax_side(apply, {"kernel": HWIO, "bias": BIAS}, NCHW, name="jax_nhwc_inside")


class LinenConv(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        h = fnn.Conv(COUT, (3, 3), padding=1, name="conv")(x.transpose(0, 2, 3, 1))
        return fnn.relu(h).transpose(0, 3, 1, 2)


@side
def linen_nhwc_inside():
    variables = {"params": {"conv": {"kernel": HWIO, "bias": BIAS}}}
    return linen_side(LinenConv(), variables, NCHW, name="linen_nhwc_inside")


def _keras_conv():
    conv = keras.layers.Conv2D(COUT, 3, padding="same", activation="relu")
    conv.build((None, S, S, CIN))
    conv.set_weights([HWIO, BIAS])
    return conv


@side
def keras_permute_inside():
    model = keras.Sequential([keras.Input((CIN, S, S)), keras.layers.Permute((2, 3, 1)),
                              _keras_conv(), keras.layers.Permute((3, 1, 2))])
    return keras_side(model, NCHW, name="keras_permute_inside")


@side
def keras_channels_last():
    model = keras.Sequential([keras.Input((S, S, CIN)), _keras_conv()])
    return keras_side(model, NHWC, name="keras_channels_last")


# --- elementwise layers before the first convolution ---------------------------------------
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.5, 0.25, 2.0], dtype=np.float32)  # powers of two: sqrt(STD**2) is exact
PIXELS_NCHW = np.random.default_rng(3).integers(0, 256, (B, CIN, S, S)).astype(np.float32)
PIXELS_NHWC = np.ascontiguousarray(PIXELS_NCHW.transpose(0, 2, 3, 1))


class TorchPreprocessed(torch.nn.Module):
    """x / 255, then (x - mean) / std per channel, then the conv (NCHW throughout)."""

    def __init__(self, constants: str) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(CIN, COUT, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.from_numpy(OIHW))
            self.conv.bias.copy_(torch.from_numpy(BIAS))
        self.constants = constants
        if constants == "buffers":  # not in the state dict: constants, not weights
            self.register_buffer("mean", torch.from_numpy(MEAN).view(1, CIN, 1, 1),
                                 persistent=False)
            self.register_buffer("std", torch.from_numpy(STD).view(1, CIN, 1, 1),
                                 persistent=False)

    def forward(self, x):
        if self.constants == "buffers":
            mean, std = self.mean, self.std
        else:
            mean = torch.tensor(MEAN).view(1, CIN, 1, 1)
            std = torch.tensor(STD).view(1, CIN, 1, 1)
        x = x / 255.0 if self.constants != "reciprocal" else x * (1.0 / 255.0)
        return self.conv((x - mean) / std)


@side
def torch_preprocess_constants():
    return torch_side(TorchPreprocessed("constants"), PIXELS_NCHW,
                      name="torch_preprocess_constants")


@side
def torch_preprocess_reciprocal():
    return torch_side(TorchPreprocessed("reciprocal"), PIXELS_NCHW,
                      name="torch_preprocess_reciprocal")


@side
def torch_preprocess_buffers():
    return torch_side(TorchPreprocessed("buffers"), PIXELS_NCHW,
                      name="torch_preprocess_buffers")


@side
def keras_preprocess_layers():
    model = keras.Sequential([
        keras.Input((S, S, CIN)),
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Normalization(mean=MEAN, variance=STD ** 2),
        keras.layers.Conv2D(COUT, 3, padding="same"),
    ])
    model.layers[-1].set_weights([HWIO, BIAS])
    return keras_side(model, PIXELS_NHWC, name="keras_preprocess_layers")


class LinenPreprocessed(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        x = (x / 255.0 - MEAN) / STD
        return fnn.Conv(COUT, (3, 3), padding=1, name="conv")(x)


@side
def linen_preprocess_nhwc():
    variables = {"params": {"conv": {"kernel": HWIO, "bias": BIAS}}}
    return linen_side(LinenPreprocessed(), variables, PIXELS_NHWC,
                      name="linen_preprocess_nhwc")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_oihw, torch_hwio),
    Pair(torch_oihw, onnx_hwio),
    Pair(torch_oihw, jax_nchw),
    Pair(torch_oihw, jax_nhwc_inside),
    Pair(torch_oihw, linen_nhwc_inside),
    Pair(torch_oihw, keras_permute_inside),
    Pair(torch_oihw, keras_channels_last),
    Pair(torch_preprocess_constants, torch_preprocess_reciprocal),
    Pair(torch_preprocess_constants, torch_preprocess_buffers),
    Pair(torch_preprocess_constants, keras_preprocess_layers),
    Pair(torch_preprocess_constants, linen_preprocess_nhwc),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)
