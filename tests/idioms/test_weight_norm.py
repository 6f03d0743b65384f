"""Weight-normalized convolutions: ``torch.nn.utils.parametrizations.weight_norm`` (and the
older hook-based ``torch.nn.utils.weight_norm``) against ``g * v / ||v||`` written out in
PyTorch, JAX and TF, and Flax's ``WeightNorm`` wrapper; the norm taken per output channel
(``dim=0``, the default). Normalizing over another axis (wav2vec2's positional conv,
``dim=2``) stays different."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.idioms.catalog import (Pair, assert_reported_different, jax_side, keras_side,
                                 linen_side, onnx_side, pair_tests, rand, side, torch_side)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

import flax.linen as fnn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
from jax import lax  # noqa: E402

F = torch.nn.functional
B, C, W, K = 2, 4, 6, 3
NCW = rand(0, B, C, W)
NWC = np.ascontiguousarray(NCW.transpose(0, 2, 1))
V_OIW = rand(1, C, C, K, scale=0.5)  # PyTorch's [out, in, width]
G = (1 + rand(2, C, scale=0.2)).reshape(C, 1, 1)
BIAS = rand(3, C, scale=0.1)
V_WIO = np.ascontiguousarray(V_OIW.transpose(2, 1, 0))  # TF's and Flax's [width, in, out]


# --- PyTorch -------------------------------------------------------------------------------
def _conv(dim: int = 0) -> torch.nn.Conv1d:
    conv = torch.nn.Conv1d(C, C, K, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(V_OIW))
        conv.bias.copy_(torch.from_numpy(BIAS))
    return conv


class TorchParametrized(torch.nn.Module):
    def __init__(self, dim: int = 0) -> None:
        super().__init__()
        self.conv = torch.nn.utils.parametrizations.weight_norm(_conv(), dim=dim)

    def forward(self, x):
        return self.conv(x)


class TorchHooked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.conv = torch.nn.utils.weight_norm(_conv())

    def forward(self, x):
        return self.conv(x)


class TorchWritten(torch.nn.Module):
    """g * v / ||v||, the norm as ``how`` writes it."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.g = torch.nn.Parameter(torch.from_numpy(G.copy()))
        self.v = torch.nn.Parameter(torch.from_numpy(V_OIW.copy()))
        self.bias = torch.nn.Parameter(torch.from_numpy(BIAS.copy()))
        self.how = how

    def forward(self, x):
        v = self.v
        if self.how == "norm":
            w = self.g * v / v.norm(dim=(1, 2), keepdim=True)
        elif self.how == "rsqrt-eps":  # as Flax's WeightNorm does, with its epsilon
            w = self.g * v * torch.rsqrt(v.pow(2).sum(dim=(1, 2), keepdim=True) + 1e-12)
        else:
            w = self.g * v / v.pow(2).sum(dim=(1, 2), keepdim=True).sqrt()
        return F.conv1d(x, w, self.bias, padding=1)


@side
def torch_parametrization():
    return torch_side(TorchParametrized(), NCW, name="torch_parametrization")


@side
def torch_parametrization_dim2():
    return torch_side(TorchParametrized(dim=2), NCW, name="torch_parametrization_dim2")


@side
def torch_hooked():
    return torch_side(TorchHooked(), NCW, name="torch_hooked")


@side
def torch_written():
    return torch_side(TorchWritten("sqrt"), NCW, name="torch_written")


@side
def torch_written_norm():
    return torch_side(TorchWritten("norm"), NCW, name="torch_written_norm")


@side
def torch_written_eps():
    return torch_side(TorchWritten("rsqrt-eps"), NCW, name="torch_written_eps")


@side
def onnx_parametrization():
    return onnx_side(TorchParametrized(), NCW, name="onnx_parametrization", optimize=False)


# --- JAX and Flax linen ----------------------------------------------------------------------
@side
def jax_written():
    def apply(p, x):  # x [B, W, C], v [W, in, out], g [out]
        v = p["v"]
        w = p["g"] * v / jnp.sqrt(jnp.sum(v ** 2, axis=(0, 1), keepdims=True))
        y = lax.conv_general_dilated(x, w, (1,), ((1, 1),),
                                     dimension_numbers=("NWC", "WIO", "NWC"))
        return y + p["bias"]

    params = {"g": G.reshape(C), "v": V_WIO, "bias": BIAS}
    return jax_side(apply, params, NWC, name="jax_written")


class LinenWeightNorm(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        return fnn.WeightNorm(fnn.Conv(C, (K,), padding=1, name="conv"), name="norm")(x)


@side
def linen_weight_norm():
    variables = {"params": {"norm": {"conv/kernel/scale": G.reshape(C)},
                            "conv": {"kernel": V_WIO, "bias": BIAS}}}
    return linen_side(LinenWeightNorm(), variables, NWC, name="linen_weight_norm")


# --- TensorFlow / Keras 3 ------------------------------------------------------------------
class KerasWritten(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.g = self.add_weight(shape=(C,), name="g")
        self.v = self.add_weight(shape=(K, C, C), name="v")
        self.b = self.add_weight(shape=(C,), name="bias")
        self.g.assign(G.reshape(C))
        self.v.assign(V_WIO)
        self.b.assign(BIAS)

    def call(self, x):
        w = self.g * self.v / tf.norm(self.v, axis=(0, 1), keepdims=True)
        return tf.nn.conv1d(x, w, stride=1, padding="SAME") + self.b


@side
def keras_written():
    return keras_side(KerasWritten(), NWC, name="keras_written")


# --- the pairs -----------------------------------------------------------------------------
PAIRS = [
    Pair(torch_written, torch_parametrization),
    Pair(torch_written, torch_hooked),
    Pair(torch_written, torch_written_norm),
    Pair(torch_written, onnx_parametrization),
    Pair(torch_written, jax_written),
    Pair(torch_written_eps, linen_weight_norm),
    Pair(torch_written, keras_written),
]


test_canonical_form, test_numbers = pair_tests(PAIRS)


def test_another_norm_axis_stays_different() -> None:
    """wav2vec2 normalizes over the kernel's width (dim=2): a g of another shape."""
    assert_reported_different(torch_parametrization(), torch_parametrization_dim2(),
                              codes=["param-mismatch"])
