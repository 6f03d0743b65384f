"""The Transformer's encoder layer (base: d_model 512, 8 heads, d_ff 2048, ReLU) in PyTorch,
post-LN as the paper has it or pre-LN as most later code, to hold against
transformer_base.spec.yaml."""

import torch
from bert_torch import Layer


def _make(norm_first: bool):
    torch.manual_seed(0)
    layer = Layer(512, 8, 2048, eps=1e-5, relu=True, norm_first=norm_first).eval()
    return layer, (torch.randn(2, 10, 512),)


def post_ln():
    """LayerNorm(x + Sublayer(x)), as in section 3.1."""
    return _make(False)


def pre_ln():
    """x + Sublayer(LayerNorm(x)): the pre-LN variant (Xiong et al. 2020), not the paper's."""
    return _make(True)
