"""Keras' MobileNetV3Small application (random weights, alpha 0.5, 32 px) against a PyTorch
port written layer by layer: hard-swish written by hand or as ``F.hardswish``, squeeze-excite
gates of ``relu6(x + 3) / 6``, Keras' "same" padding of strided depthwise convs written as an
explicit pad. Keras 3 writes ``hard_swish`` as x times its ``hard_sigmoid``, which was left as
arithmetic: the faithful port was 4 findings (2 with ``F.hardswish``), and a planted gate of
``clamp(0.2x + 0.5, 0, 1)`` was 6 findings, 3 of them about an identical stem."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.check import compare
from tests.idioms.catalog import keras_side, torch_side

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")
nn, F = torch.nn, torch.nn.functional

ALPHA = 0.5
H = 32


def _depth(v, divisor=8, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _x():
    rng = np.random.default_rng(0)
    return (rng.uniform(0, 255, (2, H, H, 3))).astype(np.float32)


def hsig(x, bug=""):
    if bug == "hsig":
        return torch.clamp(0.2 * x + 0.5, 0, 1)
    return F.relu6(x + 3.0) * (1.0 / 6.0)


HS = {"how": "manual"}  # how the port writes hard-swish: by hand, or F.hardswish


def hswish(x):
    if HS["how"] == "builtin":
        return F.hardswish(x)
    return x * F.relu6(x + 3.0) / 6.0


def bn(c, eps=1e-3):
    return nn.BatchNorm2d(c, eps=eps, momentum=0.001)


def same_pad_strided(x, k):
    # Keras correct_pad for even inputs: (k//2 - 1, k//2)
    lo, hi = k // 2 - 1, k // 2
    if x.shape[-1] % 2:
        lo = k // 2
    return F.pad(x, (lo, hi, lo, hi))


class SE(nn.Module):
    def __init__(self, c, ratio, bug=""):
        super().__init__()
        self.conv = nn.Conv2d(c, _depth(c * ratio), 1)
        self.conv_1 = nn.Conv2d(_depth(c * ratio), c, 1)
        self.bug = bug

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = F.relu(self.conv(s))
        s = hsig(self.conv_1(s), self.bug)
        return x * s


class Block(nn.Module):
    def __init__(self, cin, expansion, filters, k, stride, se_ratio, act, block_id, bug=""):
        super().__init__()
        self.block_id, self.stride, self.k, self.act = block_id, stride, k, act
        mid = _depth(cin * expansion)
        if block_id:
            self.expand = nn.Conv2d(cin, mid, 1, bias=False)
            self.expand_bn = bn(mid)
        else:
            mid = cin
        self.depthwise = nn.Conv2d(mid, mid, k, stride, padding=0 if stride == 2 else k // 2, groups=mid, bias=False)
        self.depthwise_bn = bn(mid)
        self.se = SE(mid, se_ratio, bug) if se_ratio else None
        self.project = nn.Conv2d(mid, filters, 1, bias=False)
        self.project_bn = bn(filters, 1e-5 if (bug == "eps" and block_id == 5) else 1e-3)
        self.res = stride == 1 and cin == filters

    def _act(self, x):
        return F.relu(x) if self.act == "relu" else hswish(x)

    def forward(self, x):
        sc = x
        if self.block_id:
            x = self._act(self.expand_bn(self.expand(x)))
        if self.stride == 2:
            x = same_pad_strided(x, self.k)
        x = self._act(self.depthwise_bn(self.depthwise(x)))
        if self.se is not None:
            x = self.se(x)
        x = self.project_bn(self.project(x))
        if self.res:
            x = sc + x
        return x


class MNV3S(nn.Module):
    def __init__(self, bug=""):
        super().__init__()
        d = lambda c: _depth(c * ALPHA)
        self.conv = nn.Conv2d(3, 16, 3, 2, bias=False)
        self.conv_bn = bn(16)
        cfg = [(1, d(16), 3, 2, .25, "relu"), (72/16, d(24), 3, 2, None, "relu"), (88/24, d(24), 3, 1, None, "relu"),
               (4, d(40), 5, 2, .25, "hs"), (6, d(40), 5, 1, .25, "hs"), (6, d(40), 5, 1, .25, "hs"),
               (3, d(48), 5, 1, .25, "hs"), (3, d(48), 5, 1, .25, "hs"), (6, d(96), 5, 2, .25, "hs"),
               (6, d(96), 5, 1, .25, "hs"), (6, d(96), 5, 1, .25, "hs")]
        blocks, cin = [], 16
        for i, (e, f, k, s, se, a) in enumerate(cfg):
            blocks.append(Block(cin, e, f, k, s, se, a, i, bug if i == 5 else ""))
            cin = f
        self.blocks = nn.ModuleList(blocks)
        self.conv_1 = nn.Conv2d(cin, _depth(cin * 6), 1, bias=False)
        self.conv_1_bn = bn(_depth(cin * 6))

    def forward(self, x):
        x = x * (1.0 / 127.5) - 1.0 if HS["how"] == "manual" else x * (1.0 / 127.5) + (-1.0)
        x = F.pad(x, (0, 1, 0, 1))
        x = hswish(self.conv_bn(self.conv(x)))
        for b in self.blocks:
            x = b(x)
        x = hswish(self.conv_1_bn(self.conv_1(x)))
        return x.mean((2, 3))


def _port(bug: str = ""):
    torch.manual_seed(0)
    model = MNV3S(bug).eval()
    for mod in model.modules():  # statistics and affine parameters away from 0 and 1
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-.5, .5)
            mod.running_var.uniform_(.5, 1.5)
            mod.weight.data.uniform_(.5, 1.5)
            mod.bias.data.uniform_(-.5, .5)
    return torch_side(model, _x().transpose(0, 3, 1, 2).copy(), name="torch_mobilenet_v3")


@pytest.fixture(scope="module")


def keras_mobilenet():
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV3Small(input_shape=(H, H, 3), alpha=ALPHA,
                                                weights=None, include_top=False, pooling="avg")
    return keras_side(model, _x(), name="keras_mobilenet_v3")


@pytest.mark.parametrize("how", ["manual", "builtin"])


def test_the_faithful_port_is_equivalent(keras_mobilenet, how: str) -> None:
    HS["how"] = how
    try:
        port = _port()
    finally:
        HS["how"] = "manual"
    report = compare(port, keras_mobilenet)
    assert report.equivalent, [f.message for f in report.findings]


@pytest.mark.parametrize("bug, words", [
    ("hsig", "hardsigmoid alpha is 0.2 in lhs"),
    ("eps", "batch_norm eps is 1e-05 in lhs"),
])


def test_a_planted_bug_is_one_finding_that_names_it(keras_mobilenet, bug: str,
                                                    words: str) -> None:
    report = compare(_port(bug), keras_mobilenet)
    assert len(report.findings) == 1, [f.message for f in report.findings]
    assert words in report.findings[0].message, report.findings[0].message
