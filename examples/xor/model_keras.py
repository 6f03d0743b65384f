"""XOR + linear regression in Keras 3 with one hidden layer; `forgot_activation` drops the ReLU."""

import numpy as np
import keras
from keras import layers

# The four XOR corners: the example batch the factories hand to a tracer.
CORNERS = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=np.float32)


class XorRegressor(keras.Model):
    """Two tasks from one hidden layer: an XOR logit and a linear-regression prediction."""

    def __init__(self, hidden: int = 8, use_activation: bool = True) -> None:
        super().__init__(name="xor_regressor")
        self.use_activation = use_activation
        self.hidden = layers.Dense(hidden, name="hidden")
        self.act = layers.ReLU(name="act")
        self.head = layers.Dense(2, name="head")  # column 0: XOR logit, column 1: regression

    def call(self, x):
        h = self.hidden(x)
        if self.use_activation:  # forgot_activation() skips this: the model is then linear
            h = self.act(h)
        out = self.head(h)
        return {"xor_logit": out[:, 0], "regression": out[:, 1]}


def _build(use_activation: bool) -> XorRegressor:
    keras.utils.set_random_seed(0)
    model = XorRegressor(use_activation=use_activation)
    model(CORNERS)  # creates the weights, the same for both factories
    return model


def correct():
    """The model as specified: hidden layer, ReLU, head."""
    return _build(True), (CORNERS.copy(),)


def forgot_activation():
    """Same weights, but the forward pass never applies the ReLU."""
    return _build(False), (CORNERS.copy(),)
