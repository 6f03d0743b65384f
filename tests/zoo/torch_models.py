"""Tiny PyTorch models built in code: the fixtures every PyTorch test draws from."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 6, hidden: int = 16, d_out: int = 3) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.fc3(h)


class CNN(nn.Module):
    """Conv + BatchNorm + pooling, the classic image classifier shape."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(12, eps=1e-3)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(12, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(F.relu(self.bn1(self.conv1(x))))
        h = F.relu(self.bn2(self.conv2(h)))
        h = F.avg_pool2d(h, 2, ceil_mode=True)
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.head(h)


class PreLNBlock(nn.Module):
    """Pre-LN transformer block: LN -> multi-head attention -> residual, LN -> GELU MLP."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate q, k, v projections, as most ports write it."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for proj in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    """Pre-LN block with separate q/k/v: the golden model every framework writes too."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class EmbeddingClassifier(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 12, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.classifier = nn.Linear(d, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids).mean(dim=1)
        return F.log_softmax(self.classifier(self.norm(h)), dim=-1)


class DepthwiseSeparable(nn.Module):
    """MobileNet-style block: depthwise 3x3, pointwise 1x1, hardswish, residual."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.pointwise = nn.Conv2d(c, c, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.bn1(self.depthwise(x)))
        h = F.hardswish(self.bn2(self.pointwise(h)))
        return x + h


class CausalSelfAttention(nn.Module):
    """GPT-style attention written with scaled_dot_product_attention and a causal mask."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.RMSNorm(d, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        return x + F.silu(self.proj(y))


class ConvVariety(nn.Module):
    """1d/3d and transposed convolutions, group norm, assorted activations and pools."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2)
        self.up = nn.ConvTranspose1d(6, 4, 4, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.c3 = nn.Conv3d(1, 2, 2, padding="same")

    def forward(self, x: torch.Tensor, vol: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.leaky_relu(self.c1(x), 0.2)
        h = F.elu(self.gn(self.up(h)))
        h = F.max_pool1d(F.softplus(h, beta=2.0), 3, stride=2, padding=1)
        v = F.mish(self.c3(vol))
        v = F.adaptive_max_pool3d(v, (2, 3, 1))
        return h, torch.sigmoid(v).std(dim=(2, 3), keepdim=True)


@dataclasses.dataclass
class TwoHeadOutput:
    logits: torch.Tensor
    features: torch.Tensor


class DictIO(nn.Module):
    """Pytree inputs (a dict) and a dataclass output."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 5)
        self.b = nn.Linear(2, 5)
        self.drop = nn.Dropout(0.3)

    def forward(self, batch: dict[str, torch.Tensor]) -> TwoHeadOutput:
        h = self.drop(self.a(batch["x"]) + self.b(batch["y"]))
        return TwoHeadOutput(logits=h.softmax(-1), features=h)


def _seeded(factory):
    def build():
        torch.manual_seed(0)
        model, inputs = factory()
        _randomize_norm_stats(model)
        return model.eval(), inputs

    build.__name__ = factory.__name__
    return build


def _randomize_norm_stats(model: nn.Module) -> None:
    """Non-trivial running statistics and affine params, so a wrong BN formula shows."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
            if getattr(m, "weight", None) is not None:
                with torch.no_grad():
                    m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                    if m.bias is not None:
                        m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


MODELS = {
    "mlp": _seeded(lambda: (MLP(), (torch.randn(4, 6),))),
    "cnn": _seeded(lambda: (CNN(), (torch.randn(2, 3, 16, 16),))),
    "preln_block": _seeded(lambda: (PreLNBlock(), (torch.randn(2, 5, 16),))),
    "transformer_block": _seeded(lambda: (TransformerBlock(), (torch.randn(2, 5, 16),))),
    "embedding_classifier": _seeded(
        lambda: (EmbeddingClassifier(), (torch.randint(0, 50, (3, 7)),))),
    "depthwise_separable": _seeded(lambda: (DepthwiseSeparable(), (torch.randn(2, 8, 9, 9),))),
    "causal_sdpa": _seeded(lambda: (CausalSelfAttention(), (torch.randn(2, 6, 16),))),
    "conv_variety": _seeded(
        lambda: (ConvVariety(), (torch.randn(2, 4, 17), torch.randn(1, 1, 4, 5, 3)))),
    "dict_io": _seeded(lambda: (DictIO(), ({"x": torch.randn(2, 3), "y": torch.randn(2, 2)},))),
}


# --- models that reach the kernels tests/zoo/torch_faults.py plants faults in ------------
class LengthsChecked(nn.Module):
    """Flaubert's and XLM's ``assert lengths.max().item() <= slen``: a number read off the
    data that only the program's own check reads (``use``: computed with as well)."""

    def __init__(self, use: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.use = use

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        lengths = (ids != 2).sum(dim=1)
        assert lengths.max().item() <= ids.shape[1]
        y = self.fc(x)
        return y * lengths.sum().item() if self.use else y


class WideClassifier(nn.Module):
    """Linear 32 -> 1030 then softmax over the classes: a softmax axis longer than 1024
    whose length is not a multiple of 4."""

    def __init__(self, d_in: int = 32, classes: int = 1030) -> None:
        super().__init__()
        self.head = nn.Linear(d_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.head(x), dim=-1)


class GeluMLP(nn.Module):
    """Linear -> exact GELU -> linear."""

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


MODELS.update({
    "wide_classifier": _seeded(lambda: (WideClassifier(), (torch.randn(4, 32),))),
    "gelu_mlp": _seeded(lambda: (GeluMLP(), (torch.randn(4, 32),))),
})
