"""A small CNN twice: PyTorch with ``padding=1`` and its Flax port with ``padding="SAME"``.

With stride 2 on an even input the two conventions part: PyTorch pads one row and column on
every side, ``"SAME"`` (Flax, TensorFlow) pads only at the bottom and right. The output shapes
agree, so the port runs and trains; every value of the strided conv is computed over another
window.

    specgraph report examples/report/cnn_padding.py:torch_cnn \\
        examples/report/cnn_padding.py:flax_cnn -o cnn.html
"""

import numpy as np


def _image():
    return np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)


def torch_cnn():
    import torch
    from torch import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)  # pads 1 on every side
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.stem(x))
            x = torch.relu(self.down(x))
            return self.head(x.mean(dim=(2, 3)))

    torch.manual_seed(0)
    return CNN(), (torch.from_numpy(_image()),)


def flax_cnn():
    import jax
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jax.numpy.transpose(x, (0, 2, 3, 1))  # NCHW in, as the PyTorch model
            x = nn.relu(nn.Conv(8, (3, 3), padding="SAME", name="stem")(x))
            x = nn.relu(nn.Conv(16, (3, 3), strides=2, padding="SAME", name="down")(x))
            return nn.Dense(10, name="head")(x.mean(axis=(1, 2)))

    x = _image()
    model = CNN()
    return model, model.init(jax.random.PRNGKey(0), x), (x,)
