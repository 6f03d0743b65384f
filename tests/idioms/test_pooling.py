"""Pooling: zero padding before a max-pool whose input is a ReLU's output (never negative,
so a zero pads as -inf would) against the pool's own padding (PyTorch's ResNet stem, HF's TF
ResNet's ``ZeroPadding2D`` + ``MaxPool2D``, Flax's ``max_pool`` padding with -inf, ``jnp.pad``);
and global average pooling as a mean over H and W, an average pool with a full window, or
``adaptive_avg_pool2d(1)``. Zero padding before a max-pool of values that can be negative,
and TF's SAME padding (one row after, none before), stay different."""

from __future__ import annotations

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, assert_reported_different, canonical, keras_side,
                                 linen_side, onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

from specgraph.graph_nx import isomorphic  # noqa: E402

F = torch.nn.functional
B, CIN, COUT, S = 2, 3, 4, 8
NCHW = rand(0, B, CIN, S, S)
NHWC = np.ascontiguousarray(NCHW.transpose(0, 2, 3, 1))
OIHW = rand(1, COUT, CIN, 3, 3, scale=0.3)
HWIO = np.ascontiguousarray(OIHW.transpose(2, 3, 1, 0))
BIAS = rand(2, COUT, scale=0.1)
CONV = {"kernel": HWIO, "bias": BIAS}


class TorchPooled(torch.nn.Module):
    """conv 3x3 -> ReLU (unless ``relu`` is False) -> the pool ``how``."""

    def __init__(self, how: str, relu: bool = True) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(CIN, COUT, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.from_numpy(OIHW))
            self.conv.bias.copy_(torch.from_numpy(BIAS))
        self.how, self.relu = how, relu
        self.adaptive = torch.nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        h = self.conv(x)
        h = F.relu(h) if self.relu else h
        if self.how == "max-pool-padding":
            return F.max_pool2d(h, 3, 2, padding=1)
        if self.how == "zero-pad":
            return F.max_pool2d(F.pad(h, (1, 1, 1, 1)), 3, 2)
        if self.how == "adaptive":
            return F.adaptive_avg_pool2d(h, 1).flatten(1)
        if self.how == "adaptive-module":
            return torch.flatten(self.adaptive(h), 1)
        if self.how == "mean":
            return h.mean(dim=(2, 3))
        if self.how == "mean-keepdim":
            return h.mean([-1, -2], keepdim=True).flatten(1)
        return F.avg_pool2d(h, h.shape[-2:]).flatten(1)  # full window


def _torch(how: str, relu: bool = True):
    name = f"torch_{how}" + ("" if relu else "_no_relu")
    return torch_side(TorchPooled(how, relu), NCHW, name=name)


# --- zero padding before a max-pool ----------------------------------------------------------
@side
def torch_max_pool_padding():
    return _torch("max-pool-padding")


@side
def torch_zero_pad():
    return _torch("zero-pad")


@side
def onnx_zero_pad():
    return onnx_side(TorchPooled("zero-pad"), NCHW, name="onnx_zero_pad")


@side
def torch_max_pool_padding_no_relu():
    return _torch("max-pool-padding", relu=False)


@side
def torch_zero_pad_no_relu():
    return _torch("zero-pad", relu=False)


class LinenPooled(fnn.Module):
    how: str

    @fnn.compact
    def __call__(self, x):
        h = fnn.relu(fnn.Conv(COUT, (3, 3), padding=1, name="conv")(x))
        if self.how == "max-pool-padding":  # Flax pads with -inf
            return fnn.max_pool(h, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        if self.how == "zero-pad":
            h = jnp.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
            return fnn.max_pool(h, (3, 3), (2, 2))
        if self.how == "mean":  # Flax's ResNet
            return jnp.mean(h, axis=(1, 2))
        return fnn.avg_pool(h, (S, S)).reshape(B, COUT)  # full window


def _linen(how: str):
    return linen_side(LinenPooled(how), {"params": {"conv": CONV}}, NHWC, name=f"linen_{how}")


@side
def linen_max_pool_padding():
    return _linen("max-pool-padding")


@side
def linen_zero_pad():
    return _linen("zero-pad")


def _keras(*pool: keras.layers.Layer, name: str):
    conv = keras.layers.Conv2D(COUT, 3, padding="same", activation="relu")
    model = keras.Sequential([keras.Input((S, S, CIN)), conv, *pool])
    conv.set_weights([HWIO, BIAS])
    return keras_side(model, NHWC, name=name)


@side
def keras_zero_padding_2d():  # HF's TF ResNet embedder
    return _keras(keras.layers.ZeroPadding2D(1), keras.layers.MaxPool2D(3, 2),
                  name="keras_zero_padding_2d")


@side
def keras_same():
    return _keras(keras.layers.MaxPool2D(3, 2, padding="same"), name="keras_same")


# --- global average pooling ----------------------------------------------------------------
@side
def torch_adaptive():
    return _torch("adaptive")


@side
def torch_adaptive_module():
    return _torch("adaptive-module")


@side
def torch_mean():
    return _torch("mean")


@side
def torch_mean_keepdim():
    return _torch("mean-keepdim")


@side
def torch_full_window():
    return _torch("full-window")


@side
def onnx_mean():
    return onnx_side(TorchPooled("mean"), NCHW, name="onnx_mean")


@side
def linen_mean():
    return _linen("mean")


@side
def linen_full_window():
    return _linen("full-window")


@side
def keras_global_average():
    return _keras(keras.layers.GlobalAveragePooling2D(), name="keras_global_average")


@side
def keras_full_window():
    return _keras(keras.layers.AveragePooling2D(S), keras.layers.Flatten(),
                  name="keras_full_window")


# --- the pairs -----------------------------------------------------------------------------

PAIRS = [
    Pair(torch_max_pool_padding, torch_zero_pad),
    Pair(torch_max_pool_padding, onnx_zero_pad),
    Pair(torch_max_pool_padding, linen_max_pool_padding),
    Pair(torch_max_pool_padding, linen_zero_pad),
    Pair(torch_max_pool_padding, keras_zero_padding_2d),
    Pair(torch_adaptive, torch_adaptive_module),
    Pair(torch_adaptive, torch_mean),
    Pair(torch_adaptive, torch_mean_keepdim),
    Pair(torch_adaptive, torch_full_window),
    Pair(torch_adaptive, onnx_mean),
    Pair(torch_adaptive, linen_mean),
    Pair(torch_adaptive, linen_full_window),
    Pair(torch_adaptive, keras_global_average),
    Pair(torch_adaptive, keras_full_window),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


# --- genuine differences -------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs", [
    (torch_max_pool_padding_no_relu, torch_zero_pad_no_relu),
    (torch_max_pool_padding, keras_same)], ids=["zero-pad-of-negative-values", "tf-same"])
def test_other_padding_stays_different(lhs, rhs) -> None:
    """Zeros win a max over negative values; TF's SAME pads one row after and none
    before, where PyTorch's padding=1 pads one on each side."""
    assert not isomorphic(canonical(lhs()).graph, canonical(rhs()).graph)
    assert_reported_different(lhs(), rhs(), mode="numbers", codes=["numeric-divergence"])
