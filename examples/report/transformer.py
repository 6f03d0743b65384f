"""A pre-LN transformer block on raw sensor readings, in PyTorch and in Flax.

The readings sit near 1013 with a spread of 0.4. Flax's ``nn.LayerNorm`` computes the
variance as E[x²]−E[x]² by default (``use_fast_variance=True``), which cancels in float32 on
such inputs; PyTorch's computes it around the mean. The structure is the same; the numbers
of the models' own programs (``--native``) part at the first layer norm, and specgraph
blames the Flax side with each side's error against float64.

    specgraph report examples/report/transformer.py:torch_block \\
        examples/report/transformer.py:flax_block --native -o transformer.html
    specgraph diff examples/report/transformer.py:torch_block \\
        examples/report/transformer.py:flax_block_two_pass --native   # equivalent
"""

import numpy as np

D, HEADS, FFN, T = 48, 4, 96, 16


def _readings():
    rng = np.random.default_rng(0)
    return (1013.0 + 0.4 * rng.standard_normal((2, T, D))).astype(np.float32)


def torch_block():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value, self.out = (nn.Linear(D, D) for _ in range(4))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (p(x).view(b, t, HEADS, D // HEADS).transpose(1, 2)
                       for p in (self.query, self.key, self.value))
            y = F.scaled_dot_product_attention(q, k, v)
            return self.out(y.transpose(1, 2).reshape(b, t, D))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D, eps=1e-6)  # Flax's default eps
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(D, eps=1e-6)
            self.fc1 = nn.Linear(D, FFN)
            self.fc2 = nn.Linear(FFN, D)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    torch.manual_seed(0)
    return Block(), (torch.from_numpy(_readings()),)


def _flax(fast):
    import jax
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm(use_fast_variance=fast, name="ln1")(x)
            x = x + nn.MultiHeadDotProductAttention(HEADS, name="attn")(h, h)
            h = nn.LayerNorm(use_fast_variance=fast, name="ln2")(x)
            h = nn.gelu(nn.Dense(FFN, name="fc1")(h), approximate=False)
            return x + nn.Dense(D, name="fc2")(h)

    x = _readings()
    model = Block()
    return model, model.init(jax.random.PRNGKey(0), x), (x,)


def flax_block():
    """Flax's defaults: the fast variance."""
    return _flax(True)


def flax_block_two_pass():
    """``use_fast_variance=False``: the variance around the mean, as PyTorch."""
    return _flax(False)
