"""ResNet-50's downsampling bottleneck (v1.5: the stride in the 3x3) in Keras, channels-last,
with convolutions without biases before their batch norms: the 3x3 padded by one pixel on
every side as in the paper, or with Keras' padding="same", which for a stride of 2 on an
even size pads only the bottom and right. Each both as a subclassed model and as a
functional one (``keras.Model(inputs, outputs)``)."""

import keras
import numpy as np
from keras import layers


class Bottleneck(keras.Model):
    def __init__(self, width: int = 128, stride: int = 2, same: bool = False) -> None:
        super().__init__()
        self.same = same
        self.conv1 = layers.Conv2D(width, 1, use_bias=False, name="conv1")
        self.bn1 = layers.BatchNormalization(epsilon=1e-5, name="bn1")
        if not same:  # a layer never called would stay unbuilt
            self.pad = layers.ZeroPadding2D(1)
        self.conv2 = layers.Conv2D(width, 3, strides=stride, use_bias=False, name="conv2",
                                   padding="same" if same else "valid")
        self.bn2 = layers.BatchNormalization(epsilon=1e-5, name="bn2")
        self.conv3 = layers.Conv2D(4 * width, 1, use_bias=False, name="conv3")
        self.bn3 = layers.BatchNormalization(epsilon=1e-5, name="bn3")
        self.downsample_conv = layers.Conv2D(4 * width, 1, strides=stride, use_bias=False,
                                             name="downsample_conv")
        self.downsample_bn = layers.BatchNormalization(epsilon=1e-5, name="downsample_bn")

    def call(self, x):
        h = keras.ops.relu(self.bn1(self.conv1(x)))
        h = keras.ops.relu(self.bn2(self.conv2(h if self.same else self.pad(h))))
        h = self.bn3(self.conv3(h))
        return keras.ops.relu(h + self.downsample_bn(self.downsample_conv(x)))


def _make(same: bool):
    keras.utils.set_random_seed(0)
    data = np.random.default_rng(0).standard_normal((2, 16, 16, 256)).astype("float32")
    model = Bottleneck(same=same)
    model(data)
    return model, (data,)


def _functional(same: bool, width: int = 128, stride: int = 2) -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((16, 16, 256), name="x")
    h = layers.Conv2D(width, 1, use_bias=False, name="conv1")(x)
    h = layers.BatchNormalization(epsilon=1e-5, name="bn1")(h)
    h = layers.ReLU(name="relu1")(h)
    if not same:
        h = layers.ZeroPadding2D(1, name="pad")(h)
    h = layers.Conv2D(width, 3, strides=stride, use_bias=False, name="conv2",
                      padding="same" if same else "valid")(h)
    h = layers.BatchNormalization(epsilon=1e-5, name="bn2")(h)
    h = layers.ReLU(name="relu2")(h)
    h = layers.Conv2D(4 * width, 1, use_bias=False, name="conv3")(h)
    h = layers.BatchNormalization(epsilon=1e-5, name="bn3")(h)
    shortcut = layers.Conv2D(4 * width, 1, strides=stride, use_bias=False,
                             name="downsample_conv")(x)
    shortcut = layers.BatchNormalization(epsilon=1e-5, name="downsample_bn")(shortcut)
    out = layers.ReLU(name="out")(layers.Add(name="residual")([h, shortcut]))
    return keras.Model(x, out, name="bottleneck")


def _make_functional(same: bool):
    data = np.random.default_rng(0).standard_normal((2, 16, 16, 256)).astype("float32")
    return _functional(same), (data,)


def bottleneck_v15():
    """The 3x3 padded by one pixel on every side, as the paper's."""
    return _make(False)


def bottleneck_v15_same_padding():
    """padding="same": for a stride of 2 on an even size, TF pads the bottom and right only."""
    return _make(True)


def functional_v15():
    """The functional model, the 3x3 padded by one pixel on every side."""
    return _make_functional(False)


def functional_v15_same_padding():
    """The functional model with padding="same" in the 3x3."""
    return _make_functional(True)
