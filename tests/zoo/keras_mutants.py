"""Keras mutants of the golden transformer block and CNN: one planted difference each (the
table in ``tests/zoo/mutations.py``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import keras
from keras import layers, ops

from tests.zoo.keras_models import _normal, _randomize

__all__ = ["mutant"]

# Each mutation overrides some knobs of the model's defaults (None: the golden model).
_BLOCK = {"heads": 4, "hidden": 64, "eps1": 1e-5, "q_bias": True, "scaled": True,
          "causal": False, "softmax_axis": -1, "gelu": "exact", "post_ln": False,
          "residual1": True}
_BLOCK_MUTATIONS: dict[str, dict[str, Any]] = {
    "missing_activation": {"gelu": None},
    "eps": {"eps1": 1e-12},
    "gelu_approximation": {"gelu": "tanh"},
    "missing_bias": {"q_bias": False},
    "missing_residual": {"residual1": False},
    "post_ln": {"post_ln": True},
    "missing_scale": {"scaled": False},
    "causal": {"causal": True},
    "hidden_size": {"hidden": 48},
    "num_heads": {"heads": 2},
    "softmax_axis": {"softmax_axis": -2},
}
_CNN = {"filters1": 8, "stride1": 1, "stride2": 2, "bias1": True, "relu1": True,
        "relu_first": False, "eps2": 1e-3, "pad2": ((1, 1), (1, 1)), "norm2": "batch"}
_CNN_MUTATIONS: dict[str, dict[str, Any]] = {
    "missing_activation": {"relu1": False},
    "eps": {"eps2": 1e-5},
    "stride_moved": {"stride1": 2, "stride2": 1},
    "asymmetric_padding": {"pad2": ((0, 1), (0, 1))},
    "missing_bias": {"bias1": False},
    "swapped_layers": {"relu_first": True},
    "hidden_size": {"filters1": 10},
    "batchnorm_to_layernorm": {"norm2": "layer"},
}


class _Attention(layers.Layer):
    """The zoo's hand-written self-attention with knobs: q bias, scale, causal mask, the
    softmax axis."""

    def __init__(self, d: int, heads: int, knobs: dict[str, Any], **kwargs) -> None:
        super().__init__(**kwargs)
        self.d, self.heads, self.knobs = d, heads, knobs
        self.query = layers.Dense(d, use_bias=knobs["q_bias"], name="query")
        self.key = layers.Dense(d, name="key")
        self.value = layers.Dense(d, name="value")
        self.out = layers.Dense(d, name="out")

    def _split(self, x):
        x = ops.reshape(x, (x.shape[0], x.shape[1], self.heads, self.d // self.heads))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x):
        q, k, v = (self._split(f(x)) for f in (self.query, self.key, self.value))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        if self.knobs["scaled"]:
            scores = scores / math.sqrt(self.d // self.heads)
        if self.knobs["causal"]:
            t = x.shape[1]
            scores = scores + np.triu(np.full((t, t), -1e9, "float32"), k=1)
        y = ops.matmul(ops.softmax(scores, axis=self.knobs["softmax_axis"]), v)
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (x.shape[0], x.shape[1], self.d))
        return self.out(y)


class _Block(keras.Model):
    """The golden pre-LN block (``PreLNBlock`` of keras_models) with mutation knobs."""

    def __init__(self, knobs: dict[str, Any], d: int = 16, **kwargs) -> None:
        super().__init__(**kwargs)
        self.knobs = knobs
        self.ln1 = layers.LayerNormalization(epsilon=knobs["eps1"], name="ln1")
        self.attn = _Attention(d, knobs["heads"], knobs, name="attn")
        self.ln2 = layers.LayerNormalization(epsilon=1e-6, name="ln2")
        self.mlp1 = layers.Dense(knobs["hidden"], name="mlp1")
        self.mlp2 = layers.Dense(d, name="mlp2")

    def _mlp(self, x):
        h = self.mlp1(x)
        if self.knobs["gelu"] is not None:
            h = keras.activations.gelu(h, approximate=self.knobs["gelu"] == "tanh")
        return self.mlp2(h)

    def call(self, x):
        if self.knobs["post_ln"]:
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self._mlp(x))
        a = self.attn(self.ln1(x))
        x = x + a if self.knobs["residual1"] else a
        return x + self._mlp(self.ln2(x))


def _block(knobs: dict[str, Any]):
    keras.utils.set_random_seed(0)
    model = _Block(knobs, name="block")
    x = _normal(np.random.default_rng(0), 2, 5, 16)
    model(x)
    _randomize(model)
    return model, (x,)


def _cnn(knobs: dict[str, Any]):
    keras.utils.set_random_seed(0)
    if knobs["stride1"] == 1:  # as the golden writes it
        conv1 = [layers.Conv2D(knobs["filters1"], 3, padding="same", use_bias=knobs["bias1"],
                               name="conv1")]
    else:  # "same" would pad only the end: pad 1 on every side by hand
        conv1 = [layers.ZeroPadding2D(1, name="pad1"),
                 layers.Conv2D(knobs["filters1"], 3, strides=knobs["stride1"], padding="valid",
                               use_bias=knobs["bias1"], name="conv1")]
    bn1 = layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name="bn1")
    relu1 = [layers.ReLU(name="relu1")] if knobs["relu1"] else []
    norm1 = relu1 + [bn1] if knobs["relu_first"] else [bn1] + relu1
    if knobs["norm2"] == "layer":
        norm2 = layers.LayerNormalization(axis=-1, epsilon=knobs["eps2"], name="bn2")
    else:
        norm2 = layers.BatchNormalization(epsilon=knobs["eps2"], momentum=0.9, name="bn2")
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        *conv1,
        *norm1,
        layers.MaxPooling2D(2, name="pool1"),
        layers.ZeroPadding2D(knobs["pad2"], name="pad2"),
        layers.Conv2D(12, 3, strides=knobs["stride2"], padding="valid", use_bias=False,
                      name="conv2"),
        norm2,
        layers.ReLU(name="relu2"),
        layers.AveragePooling2D(2, name="pool2"),
        layers.GlobalAveragePooling2D(name="gap"),
        layers.Dense(5, name="head"),
    ], name="cnn")
    _randomize(model)
    return model, (_normal(np.random.default_rng(0), 2, 16, 16, 3),)


_FACTORIES = {"transformer_block": (_block, _BLOCK, _BLOCK_MUTATIONS),
              "cnn": (_cnn, _CNN, _CNN_MUTATIONS)}


def mutant(model: str, mutation: str | None):
    """``(model, example_inputs)`` of the golden ``model`` ("transformer_block" or "cnn")
    with ``mutation`` planted (a mutation of the table in ``tests/zoo/mutations.py``), or
    the golden itself for None."""
    if model not in _FACTORIES:
        raise KeyError(f"unknown model {model!r}; expected one of {sorted(_FACTORIES)}")
    build, defaults, mutations = _FACTORIES[model]
    if mutation is not None and mutation not in mutations:
        raise KeyError(f"unknown mutation {mutation!r} of {model}; expected one of "
                       f"{sorted(mutations)}")
    return build({**defaults, **mutations.get(mutation, {})})
