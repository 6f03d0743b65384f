"""Tiny TensorFlow models built in code (Keras 3, tf_keras, tf.Module): the TF test fixtures.

Each factory returns ``(model, example_inputs)`` with deterministic weights: Keras'
initializers under ``keras.utils.set_random_seed``, then every bias, norm parameter and
running statistic overwritten with seeded non-trivial values, so a wrong formula shows.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
import keras
from keras import layers, ops


def _randomize(model, seed: int = 1) -> None:
    """Non-trivial biases, norm affine parameters and batch-norm statistics."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        name = (getattr(v, "path", None) or v.name).split("/")[-1].split(":")[0]
        shape = tuple(v.shape)
        if name in ("moving_variance",):
            v.assign(rng.uniform(0.5, 1.5, shape).astype("float32"))
        elif name in ("gamma", "scale"):
            v.assign((1 + 0.3 * rng.standard_normal(shape)).astype("float32"))
        elif name in ("bias", "beta", "moving_mean"):
            v.assign((0.3 * rng.standard_normal(shape)).astype("float32"))


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


# --- Keras 3 ------------------------------------------------------------------------------
def mlp():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((6,)),
        layers.Dense(16, activation="relu", name="fc1"),
        layers.Dense(16, activation="tanh", name="fc2"),
        layers.Dense(3, name="fc3"),
    ], name="mlp")
    _randomize(model)
    return model, (_normal(np.random.default_rng(0), 4, 6),)


def _cnn(golden: bool):
    """The CNN of every zoo. ``golden`` writes it so that it computes what PyTorch's does:
    explicit symmetric padding before the strided conv (Keras' "same" pads only the end
    there) and PyTorch's BatchNorm eps and momentum; otherwise it is written the Keras way."""
    keras.utils.set_random_seed(0)
    conv2 = [layers.ZeroPadding2D(1, name="pad2"),
             layers.Conv2D(12, 3, strides=2, padding="valid", use_bias=False, name="conv2")]
    if not golden:
        conv2 = [layers.Conv2D(12, 3, strides=2, padding="same", use_bias=False,
                               name="conv2")]
    bn1 = (layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name="bn1") if golden
           else layers.BatchNormalization(name="bn1"))
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        layers.Conv2D(8, 3, padding="same", name="conv1"),
        bn1,
        layers.ReLU(name="relu1"),
        layers.MaxPooling2D(2, name="pool1"),
        *conv2,
        layers.BatchNormalization(epsilon=1e-3, momentum=0.9 if golden else 0.99, name="bn2"),
        layers.ReLU(name="relu2"),
        layers.AveragePooling2D(2, name="pool2"),
        layers.GlobalAveragePooling2D(name="gap"),
        layers.Dense(5, name="head"),
    ], name="cnn")
    _randomize(model)
    return model, (_normal(np.random.default_rng(0), 2, 16, 16, 3),)


def cnn_golden():
    return _cnn(golden=True)


def cnn():
    return _cnn(golden=False)


class SelfAttention(layers.Layer):
    """Multi-head self-attention from separate q/k/v projections and an output projection."""

    def __init__(self, d: int, heads: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.d, self.heads = d, heads
        self.query = layers.Dense(d, name="query")
        self.key = layers.Dense(d, name="key")
        self.value = layers.Dense(d, name="value")
        self.out = layers.Dense(d, name="out")

    def _split(self, x):
        b, t = x.shape[0], x.shape[1]
        x = ops.reshape(x, (b, t, self.heads, self.d // self.heads))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x):
        q, k, v = (self._split(f(x)) for f in (self.query, self.key, self.value))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(self.d // self.heads)
        y = ops.matmul(ops.softmax(scores, axis=-1), v)
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (x.shape[0], x.shape[1], self.d))
        return self.out(y)


class PreLNBlock(keras.Model):
    """Pre-LN transformer block: LN -> attention -> residual, LN -> GELU MLP -> residual."""

    def __init__(self, d: int = 16, heads: int = 4, builtin_mha: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.builtin_mha = builtin_mha
        self.ln1 = layers.LayerNormalization(epsilon=1e-5, name="ln1")
        if builtin_mha:
            self.attn = layers.MultiHeadAttention(heads, d // heads, name="attn")
        else:
            self.attn = SelfAttention(d, heads, name="attn")
        self.ln2 = layers.LayerNormalization(epsilon=1e-6, name="ln2")
        self.mlp1 = layers.Dense(4 * d, name="mlp1")
        self.mlp2 = layers.Dense(d, name="mlp2")

    def call(self, x):
        h = self.ln1(x)
        x = x + (self.attn(h, h) if self.builtin_mha else self.attn(h))
        h = keras.activations.gelu(self.mlp1(self.ln2(x)), approximate=False)
        return x + self.mlp2(h)


def _block(builtin_mha: bool):
    def build():
        keras.utils.set_random_seed(0)
        model = PreLNBlock(builtin_mha=builtin_mha, name="block")
        x = _normal(np.random.default_rng(0), 2, 5, 16)
        model(x)
        _randomize(model)
        return model, (x,)

    return build


def embedding_classifier():
    keras.utils.set_random_seed(0)
    ids = keras.Input((7,), dtype="int32", name="ids")
    h = layers.Embedding(50, 12, name="embed")(ids)
    h = ops.mean(h, axis=1)
    h = layers.LayerNormalization(epsilon=1e-5, name="norm")(h)
    h = layers.Dense(4, name="classifier")(h)
    model = keras.Model(ids, ops.log_softmax(h, axis=-1), name="embedding_classifier")
    _randomize(model)
    ids_value = np.random.default_rng(0).integers(0, 50, (3, 7)).astype("int32")
    return model, (ids_value,)


def conv_variety():
    """Conv1D with dilation, depthwise and transposed convs, SAME padding with odd sizes."""
    keras.utils.set_random_seed(0)
    seq = keras.Input((17, 4), name="seq")
    h = layers.Conv1D(6, 3, strides=2, padding="same", dilation_rate=1, name="c1")(seq)
    h = layers.LeakyReLU(negative_slope=0.2, name="leaky")(h)
    h = layers.Conv1D(6, 3, padding="valid", dilation_rate=2, activation="elu", name="c2")(h)
    img = keras.Input((9, 7, 4), name="img")
    g = layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, name="dw")(img)
    g = layers.Activation("relu6", name="relu6")(g)
    g = layers.Conv2DTranspose(3, 3, strides=2, padding="same", name="up")(g)
    g = layers.AveragePooling2D(3, strides=2, padding="same", name="avg")(g)
    g = layers.MaxPooling2D(2, padding="same", name="maxp")(g)
    g = layers.Activation("softplus", name="softplus")(g)
    model = keras.Model([seq, img], {"seq": h, "img": layers.Flatten(name="flat")(g)},
                        name="conv_variety")
    _randomize(model)
    rng = np.random.default_rng(0)
    return model, ([_normal(rng, 2, 17, 4), _normal(rng, 2, 9, 7, 4)],)


# --- tf_keras (Keras 2) and tf.Module -------------------------------------------------------
def tf_keras_cnn():
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    kl = tf_keras.layers
    model = tf_keras.Sequential([
        kl.InputLayer((8, 8, 3)),
        kl.Conv2D(4, 3, padding="same", name="conv"),
        kl.BatchNormalization(name="bn"),
        kl.ReLU(name="relu"),
        kl.DepthwiseConv2D(3, padding="valid", name="dw"),
        kl.GlobalAveragePooling2D(name="gap"),
        kl.Dense(3, activation="softmax", name="head"),
    ], name="tfk_cnn")
    _randomize(model)
    return model, (_normal(np.random.default_rng(0), 2, 8, 8, 3),)


def tf_keras_text():
    """tf_keras' Embedding reads its table with ResourceGather; its LayerNormalization is a
    fused batch norm in training mode over a reshaped input."""
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    kl = tf_keras.layers
    model = tf_keras.Sequential([
        kl.InputLayer((5,), dtype="int32"),
        kl.Embedding(20, 6, name="emb"),
        kl.LayerNormalization(epsilon=1e-5, name="ln"),
        kl.GlobalAveragePooling1D(name="pool"),
        kl.Dense(3, activation="gelu", name="head"),
    ], name="tfk_text")
    _randomize(model)
    return model, (np.random.default_rng(0).integers(0, 20, (2, 5)).astype("int32"),)


class TinyModule(tf.Module):
    """A plain tf.Module: two dense layers written with tf ops, a traced ``__call__``."""

    def __init__(self) -> None:
        super().__init__(name="tiny")
        rng = np.random.default_rng(0)
        self.hidden = {"w": tf.Variable(_normal(rng, 5, 8)), "b": tf.Variable(_normal(rng, 8))}
        self.out_w = tf.Variable(_normal(rng, 8, 2))

    @tf.function(input_signature=[tf.TensorSpec((3, 5), tf.float32)])
    def __call__(self, x):
        h = tf.nn.sigmoid(tf.matmul(x, self.hidden["w"]) + self.hidden["b"])
        return tf.nn.softmax(tf.matmul(h, self.out_w), axis=-1)


def tf_module():
    return TinyModule(), (_normal(np.random.default_rng(0), 3, 5),)


class OpVariety(tf.Module):
    """Raw TF ops the Keras layers above do not reach: slicing, stacking, gathers, padding,
    shape arithmetic, einsum with an ellipsis, integer division, a 3-D convolution."""

    def __init__(self) -> None:
        super().__init__(name="op_variety")
        rng = np.random.default_rng(2)
        self.w = tf.Variable(_normal(rng, 6, 4))
        self.k3 = tf.Variable(_normal(rng, 2, 2, 2, 3, 2))

    def __call__(self, x, ids, vol):
        b = tf.shape(x)[0]
        h = tf.reshape(tf.matmul(x, self.w, transpose_b=True), [b, 3, 2])[:, None, 1:, ...]
        h = tf.reshape(tf.tile(h, [1, 6, 1, 1]), [b, -1, 4])  # [2, 6, 4]
        a, c = tf.split(h, [2, 4], axis=1)
        parts = tf.unstack(c, axis=1)
        s = tf.stack([parts[0], parts[-1][:, ::-1]], axis=-1)  # [2, 4, 2]
        s = tf.einsum("...ij,...kj->...ik", s, s) + tf.linalg.matmul(s, s, adjoint_b=True)
        g = tf.gather(x, ids[0] % 4, axis=1) * tf.cast(ids // 3, tf.float32)  # [2, 3]
        g = tf.pad(g, [[0, 1], [2, 0]], mode="REFLECT") + tf.range(5, dtype=tf.float32)
        q = tf.where(g > 0.1, tf.math.squared_difference(g, 1.0), tf.math.divide_no_nan(g, g - g))
        q = tf.clip_by_value(q, -2.0, 3.0) + tf.math.floormod(tf.abs(g) * 3, 2.0)
        stats = tf.concat([tf.reduce_max(a, axis=[1, 2]), tf.reduce_prod(a, 2)[:, 0],
                           tf.cast(tf.argmax(a[:, 0], axis=-1), tf.float32)], axis=0)
        v = tf.nn.conv3d(vol, self.k3, strides=[1, 2, 1, 1, 1], padding="SAME")
        v = tf.nn.avg_pool3d(v, 2, 1, "VALID") + tf.zeros_like(v[:, :1, :1, :1])
        v = tf.pad(tf.slice(v, [0, 0, 1, 0, 0], [-1, -1, 2, -1, -1]), [[0, 0]] * 4 + [[1, 0]],
                   constant_values=0.5) * tf.cast(tf.size(x) - tf.rank(x), tf.float32)
        total = tf.cumsum(tf.broadcast_to(stats[None], [2, 6]), axis=1) + tf.fill([b, 1], 0.5)
        q = tf.nn.selu(tf.math.erf(q)) + tf.sqrt(tf.nn.elu(q) + 1.0)
        return {"s": tf.math.rsqrt(tf.square(s) + 1.0), "q": tf.exp(-tf.pow(q, 2.0)),
                "total": total + tf.reduce_mean(tf.math.log(tf.abs(q) + 1.0)), "v": v}


def op_variety():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 9, (2, 3)).astype("int32")
    return OpVariety(), (_normal(rng, 2, 4), ids, _normal(rng, 1, 5, 4, 3, 3))


MODELS = {
    "mlp": mlp,
    "cnn": cnn,
    "cnn_golden": cnn_golden,
    "preln_block": _block(False),
    "preln_block_mha": _block(True),
    "embedding_classifier": embedding_classifier,
    "conv_variety": conv_variety,
    "tf_keras_cnn": tf_keras_cnn,
    "tf_keras_text": tf_keras_text,
    "tf_module": tf_module,
    "op_variety": op_variety,
}
