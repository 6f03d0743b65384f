"""Activation functions and softmax, with the variants frameworks disagree on as attributes."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from specgraph.ops._sym import call
from specgraph.ops.registry import Attr, op

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _sigmoid(x):
    return special.expit(x)


def _softplus(x, beta=1.0, threshold=20.0):
    x = np.asarray(x)
    bx = beta * x
    soft = np.logaddexp(0.0, bx) / beta
    return np.where(bx > threshold, x, soft)


@op("relu", equation=lambda x: call("relu", x), category="activation", onnx="Relu")
def relu(x):
    """max(x, 0)."""
    return np.maximum(x, 0)


@op(
    "gelu",
    attrs={"approximate": Attr("str", "none", choices=("none", "tanh"),
                               doc="'none': x·Φ(x) with erf; 'tanh': the tanh approximation")},
    equation=lambda x, approximate: call("gelu" if approximate == "none" else "gelu_tanh", x),
    category="activation",
    onnx="Gelu",
)
def gelu(x, approximate="none"):
    """Gaussian error linear unit, exact (erf) or with the tanh approximation."""
    x = np.asarray(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + special.erf(x / math.sqrt(2.0)))


@op("sigmoid", equation=lambda x: call("sigmoid", x), category="activation", onnx="Sigmoid")
def sigmoid(x):
    """1 / (1 + e**-x)."""
    return _sigmoid(x)


@op("tanh", equation=lambda x: call("tanh", x), category="activation", onnx="Tanh")
def tanh(x):
    """Hyperbolic tangent."""
    return np.tanh(x)


@op("silu", equation=lambda x: call("silu", x), category="activation")
def silu(x):
    """x·sigmoid(x) (swish)."""
    return np.asarray(x) * _sigmoid(x)


@op(
    "softplus",
    attrs={
        "beta": Attr("float", 1.0, doc="log(1 + e**(beta·x)) / beta"),
        "threshold": Attr("float", 20.0, doc="linear above beta·x > threshold"),
    },
    equation=lambda x, beta, threshold: call("softplus", x, beta=beta if beta != 1 else None),
    category="activation",
    onnx="Softplus",
)
def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + e**(beta·x)) / beta, linear above the threshold."""
    return _softplus(x, beta, threshold)


@op(
    "leaky_relu",
    attrs={"alpha": Attr("float", 0.01, doc="slope for x < 0")},
    equation=lambda x, alpha: call("leaky_relu", x, alpha=alpha),
    category="activation",
    onnx="LeakyRelu",
)
def leaky_relu(x, alpha=0.01):
    """x for x >= 0, alpha·x below."""
    x = np.asarray(x)
    return np.where(x >= 0, x, alpha * x)


@op(
    "elu",
    attrs={"alpha": Attr("float", 1.0, doc="alpha·(e**x - 1) for x < 0")},
    equation=lambda x, alpha: call("elu", x, alpha=alpha if alpha != 1 else None),
    category="activation",
    onnx="Elu",
)
def elu(x, alpha=1.0):
    """x for x > 0, alpha·(e**x - 1) below."""
    x = np.asarray(x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


@op("hardswish", equation=lambda x: call("hardswish", x), category="activation",
    onnx="HardSwish")
def hardswish(x):
    """x·relu6(x + 3) / 6."""
    x = np.asarray(x)
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


@op(
    "hardsigmoid",
    attrs={
        "alpha": Attr("float", 1.0 / 6.0, doc="slope (PyTorch 1/6, ONNX and Keras 2 0.2)"),
        "beta": Attr("float", 0.5, doc="offset"),
    },
    equation=lambda x, alpha, beta: call("hardsigmoid", x, alpha=alpha, beta=beta),
    category="activation",
    onnx="HardSigmoid",
)
def hardsigmoid(x, alpha=1.0 / 6.0, beta=0.5):
    """clip(alpha·x + beta, 0, 1)."""
    return np.clip(alpha * np.asarray(x) + beta, 0.0, 1.0)


@op("mish", equation=lambda x: call("mish", x), category="activation", onnx="Mish")
def mish(x):
    """x·tanh(softplus(x))."""
    x = np.asarray(x)
    return x * np.tanh(np.logaddexp(0.0, x))


def _softmax(x, axis):
    x = np.asarray(x)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@op(
    "softmax",
    attrs={"axis": Attr("int", doc="the axis normalized over, non-negative")},
    equation=lambda x, axis: call("softmax", x, axis=axis),
    category="layer",
    onnx="Softmax",
)
def softmax(x, axis):
    """e**x / sum(e**x) along ``axis``."""
    return _softmax(x, axis)


@op(
    "log_softmax",
    attrs={"axis": Attr("int", doc="the axis normalized over, non-negative")},
    equation=lambda x, axis: call("log_softmax", x, axis=axis),
    category="layer",
    onnx="LogSoftmax",
)
def log_softmax(x, axis):
    """x - log(sum(e**x)) along ``axis``."""
    x = np.asarray(x)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@op("dropout", attrs={"p": Attr("float", 0.5, doc="drop probability in training")},
    equation=lambda x, p: x, category="activation", onnx="Dropout")
def dropout(x, p=0.5):
    """Identity at inference (the probability is kept so a diff can compare it)."""
    return np.array(x, copy=True)
