"""The golden transformer block and CNN in PyTorch with one planted mutation each (the table
in ``tests/zoo/mutations.py``), for ``tests/test_mutations.py`` and ``bench/mutations.py``."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.zoo.torch_models import _randomize_norm_stats


class Block(nn.Module):
    def __init__(self, *, eps1=1e-5, approximate="none", activation=True, q_bias=True,
                 residual=True, post_ln=False, scale=None, causal=False, hidden=64, heads=4,
                 softmax_axis=-1, d=16) -> None:
        super().__init__()
        self.heads, self.scale, self.causal = heads, scale, causal
        self.approximate, self.activation, self.residual = approximate, activation, residual
        self.post_ln, self.softmax_axis = post_ln, softmax_axis
        self.ln1 = nn.LayerNorm(d, eps=eps1)
        self.q = nn.Linear(d, d, bias=q_bias)
        self.k, self.v, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        if self.softmax_axis == -1:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                               scale=self.scale)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
            y = s.softmax(self.softmax_axis) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.activation:
            h = F.gelu(h, approximate=self.approximate)
        return self.fc2(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.post_ln:
            x = self.ln1(x + self.attend(x))
            return self.ln2(x + self.mlp(x))
        h = self.attend(self.ln1(x))
        x = x + h if self.residual else h
        return x + self.mlp(self.ln2(x))


class CNN(nn.Module):
    def __init__(self, *, activation=True, eps2=1e-3, strides=(1, 2), asymmetric=False,
                 bias1=True, swapped=False, c1=8, layer_norm=False) -> None:
        super().__init__()
        self.activation, self.asymmetric, self.swapped = activation, asymmetric, swapped
        self.layer_norm = layer_norm
        self.conv1 = nn.Conv2d(3, c1, 3, stride=strides[0], padding=1, bias=bias1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, 12, 3, stride=strides[1], padding=0 if asymmetric else 1,
                               bias=False)
        self.bn2 = nn.LayerNorm(12, eps=eps2) if layer_norm else nn.BatchNorm2d(12, eps=eps2)
        self.head = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        if self.swapped:
            h = self.bn1(F.relu(h))
        else:
            h = self.bn1(h)
            h = F.relu(h) if self.activation else h
        h = F.max_pool2d(h, 2)
        if self.asymmetric:
            h = F.pad(h, (0, 1, 0, 1))
        h = self.conv2(h)
        if self.layer_norm:
            h = self.bn2(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        else:
            h = self.bn2(h)
        h = F.avg_pool2d(F.relu(h), 2)
        return self.head(h.mean(dim=(2, 3)))


_BLOCK = {
    "missing_activation": {"activation": False}, "eps": {"eps1": 1e-12},
    "gelu_approximation": {"approximate": "tanh"}, "missing_bias": {"q_bias": False},
    "missing_residual": {"residual": False}, "post_ln": {"post_ln": True},
    "missing_scale": {"scale": 1.0}, "causal": {"causal": True}, "hidden_size": {"hidden": 48},
    "num_heads": {"heads": 2}, "softmax_axis": {"softmax_axis": -2},
}
_CNN = {
    "missing_activation": {"activation": False}, "eps": {"eps2": 1e-5},
    "stride_moved": {"strides": (2, 1)}, "asymmetric_padding": {"asymmetric": True},
    "missing_bias": {"bias1": False}, "swapped_layers": {"swapped": True},
    "hidden_size": {"c1": 10}, "batchnorm_to_layernorm": {"layer_norm": True},
}
_KNOBS = {"transformer_block": _BLOCK, "cnn": _CNN}


def mutant(model: str, mutation: str | None):
    """The golden ``model`` ("transformer_block" or "cnn") with ``mutation`` planted (None:
    the golden itself): ``(module, example_inputs)``."""
    if model not in _KNOBS:
        raise KeyError(f"no mutants of {model!r}; use one of {sorted(_KNOBS)}")
    if mutation is not None and mutation not in _KNOBS[model]:
        raise KeyError(f"no mutation {mutation!r} of {model!r}; use one of "
                       f"{sorted(_KNOBS[model])}")
    torch.manual_seed(0)
    if model == "transformer_block":
        net, x = Block(**_BLOCK.get(mutation, {})), torch.randn(2, 5, 16)
    else:
        net, x = CNN(**_CNN.get(mutation, {})), torch.randn(2, 3, 16, 16)
    _randomize_norm_stats(net)
    return net.eval(), (x,)
