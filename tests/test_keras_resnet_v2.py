"""Keras' ResNet50V2 application (random weights) against a PyTorch port written layer by
layer, as a researcher ports it: the faithful port is equivalent, the shortcut written as a
strided slice or as a 1x1 max pool alike, and a planted bug is one finding named plainly.

ResNetV2's batch norms come before the convolutions (pre-activation), several of them on
the residual stream itself; Keras' inference arithmetic for those was left unraised (the
norm's input is a sum the cone walks through): 11 findings and no numbers."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.check import compare
from tests.idioms.catalog import keras_side, torch_side

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")
F = torch.nn.functional

IMAGE = np.random.default_rng(1).standard_normal((2, 32, 32, 3)).astype(np.float32)
EPS = 1.001e-5  # Keras' applications' batch norm epsilon


def _bn(channels: int, eps: float = EPS):
    return torch.nn.BatchNorm2d(channels, eps=eps, momentum=0.01)


class Block(torch.nn.Module):
    """Keras' ``block2``: pre-activation, 1x1 / 3x3 (strided, padded by hand) / 1x1, and the
    shortcut (a 1x1 conv of the pre-activation in the first block of a stack, the input
    subsampled where the block strides)."""

    def __init__(self, cin: int, f: int, stride: int, conv_shortcut: bool, shortcut: str,
                 bug: str | None) -> None:
        super().__init__()
        self.stride, self.shortcut, self.bug = stride, shortcut, bug
        self.preact_bn = _bn(cin)
        self.conv0 = torch.nn.Conv2d(cin, 4 * f, 1, stride) if conv_shortcut else None
        self.conv1, self.bn1 = torch.nn.Conv2d(cin, f, 1, bias=False), _bn(f)
        self.conv2, self.bn2 = torch.nn.Conv2d(f, f, 3, stride, bias=False), _bn(f)
        self.conv3 = torch.nn.Conv2d(f, 4 * f, 1)

    def forward(self, x):
        pre = self.preact_bn(x)
        pre = pre if self.bug == "no_preact_relu" else F.relu(pre)
        if self.conv0 is not None:
            short = self.conv0(pre)
        elif self.stride == 1:
            short = x
        elif self.shortcut == "max_pool":
            short = F.max_pool2d(x, 1, self.stride)
        else:
            short = x[:, :, ::self.stride, ::self.stride]
        h = F.relu(self.bn1(self.conv1(pre)))
        h = F.relu(self.bn2(self.conv2(F.pad(h, (1, 1, 1, 1)))))
        return short + self.conv3(h)


class ResNet50V2(torch.nn.Module):
    def __init__(self, shortcut: str = "max_pool", bug: str | None = None,
                 at: tuple[int, int] = (1, 2)) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = torch.nn.Conv2d(3, 64, 7, 2)
        blocks, cin = [], 64
        for stack, (f, n, s) in enumerate([(64, 3, 2), (128, 4, 2), (256, 6, 2), (512, 3, 1)]):
            for b in range(n):
                blocks.append(Block(cin, f, s if b == n - 1 else 1, b == 0, shortcut,
                                    bug if (stack, b) == at else None))
                cin = 4 * f
        self.blocks = torch.nn.ModuleList(blocks)
        self.post_bn = _bn(2048, 1e-5 if bug == "post_eps" else EPS)
        self.fc = torch.nn.Linear(2048, 10)
        self.bug = bug

    def forward(self, x):
        x = F.max_pool2d(F.pad(self.conv1(F.pad(x, (3, 3, 3, 3))), (1, 1, 1, 1)), 3, 2)
        for block in self.blocks:
            x = block(x)
        x = self.fc(F.relu(self.post_bn(x)).mean((2, 3)))
        return x if self.bug == "no_softmax" else F.softmax(x, -1)


@pytest.fixture(scope="module")
def keras_resnet():
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50V2(weights=None, input_shape=(32, 32, 3), classes=10)
    return keras_side(model, IMAGE, name="keras_resnet50v2")


def _port(**kwargs):
    return torch_side(ResNet50V2(**kwargs).eval(), IMAGE.transpose(0, 3, 1, 2).copy(),
                      name="torch_resnet50v2")


@pytest.mark.parametrize("shortcut", ["max_pool", "slice"])
def test_the_faithful_port_is_equivalent(keras_resnet, shortcut: str) -> None:
    report = compare(keras_resnet, _port(shortcut=shortcut))
    assert report.equivalent, [f.message for f in report.findings]
    assert report.numeric is not None


@pytest.mark.parametrize("bug, words", [
    ("no_preact_relu", ["rhs has no relu", "conv3_block3_preact"]),
    ("post_eps", ["batch_norm eps is 1.001e-05 in lhs", "but 1e-05 in rhs"]),
    ("no_softmax", ["rhs has no softmax"]),
])
def test_a_planted_bug_is_one_finding_that_names_it(keras_resnet, bug: str,
                                                    words: list[str]) -> None:
    report = compare(keras_resnet, _port(bug=bug))
    assert len(report.findings) == 1, [f.message for f in report.findings]
    for word in words:
        assert word in report.findings[0].message, report.findings[0].message
