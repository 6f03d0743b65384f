"""BERT encoders written in PyTorch, to hold against bert_layer.spec.yaml (a small encoder)
and bert_base.spec.yaml (one BERT-base layer)."""

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        context = nn.functional.scaled_dot_product_attention(q, k, v)
        return context.transpose(1, 2).reshape(b, t, d)


class AnnotatedLayerNorm(nn.Module):
    """LayerNorm as The Annotated Transformer writes it: eps added to the (unbiased)
    standard deviation, not to the variance under the root."""

    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class Layer(nn.Module):
    def __init__(self, d_model: int = 32, heads: int = 4, d_ff: int = 128,
                 eps: float = 1e-12, approximate: str = "none", relu: bool = False,
                 norm_first: bool = False, annotated: bool = False) -> None:
        super().__init__()
        self.attention = SelfAttention(d_model, heads)
        self.attention_output = nn.Linear(d_model, d_model)
        self.attention_norm = AnnotatedLayerNorm(d_model, eps) if annotated else \
            nn.LayerNorm(d_model, eps=eps)
        self.intermediate = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU() if relu else nn.GELU(approximate=approximate)
        self.norm_first = norm_first
        self.output = nn.Linear(d_ff, d_model)
        self.output_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x))
            x = x + self.attention_output(self.attention(self.attention_norm(x)))
            return x + self.output(self.act(self.intermediate(self.output_norm(x))))
        x = self.attention_norm(x + self.attention_output(self.attention(x)))
        return self.output_norm(x + self.output(self.act(self.intermediate(x))))


class Encoder(nn.Module):
    def __init__(self, layers: int = 2, **sizes: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(**sizes) for _ in range(layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


def encoder():
    """As the spec says."""
    torch.manual_seed(0)
    return Encoder(), (torch.randn(2, 8, 32),)


def encoder_eps():
    """With PyTorch's default LayerNorm eps (1e-5) instead of BERT's 1e-12."""
    torch.manual_seed(0)
    return Encoder(eps=1e-5), (torch.randn(2, 8, 32),)


def encoder_annotated_norm():
    """The attention's LayerNorm as The Annotated Transformer writes it: (x - mean) /
    (std + eps), the std unbiased."""
    torch.manual_seed(0)
    return Encoder(annotated=True), (torch.randn(2, 8, 32),)


def base_layer():
    """One BERT-base layer (H 768, A 12, 4H, eps 1e-12, GELU with erf)."""
    torch.manual_seed(0)
    return Layer(768, 12, 3072).eval(), (torch.randn(2, 16, 768),)


def base_layer_tanh():
    """The same with GELU's tanh approximation, as in GPT-2 and some BERT ports."""
    torch.manual_seed(0)
    return Layer(768, 12, 3072, approximate="tanh").eval(), (torch.randn(2, 16, 768),)
