"""The BERT encoders of bert_torch.py ported to Flax (linen), to hold against
bert_layer.spec.yaml and bert_base.spec.yaml."""

import jax
import jax.numpy as jnp
from flax import linen as nn


class Layer(nn.Module):
    d_model: int = 32
    heads: int = 4
    d_ff: int = 128
    eps: float = 1e-12
    approximate: bool = False  # Flax's nn.gelu defaults to the tanh approximation

    @nn.compact
    def __call__(self, x):
        b, t, d = x.shape

        def split(z):
            return z.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)

        q = split(nn.Dense(d, name="query")(x))
        k = split(nn.Dense(d, name="key")(x))
        v = split(nn.Dense(d, name="value")(x))
        scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // self.heads)
        context = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = nn.LayerNorm(epsilon=self.eps, name="attention_norm")(
            x + nn.Dense(d, name="attention_output")(context))
        h = nn.gelu(nn.Dense(self.d_ff, name="intermediate")(x), approximate=self.approximate)
        return nn.LayerNorm(epsilon=self.eps, name="output_norm")(
            x + nn.Dense(d, name="output")(h))


class Encoder(nn.Module):
    layers: int = 2
    eps: float = 1e-12

    @nn.compact
    def __call__(self, x):
        for i in range(self.layers):
            x = Layer(eps=self.eps, name=f"layer_{i}")(x)
        return x


def _init(module, shape):
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    return module, module.init(jax.random.PRNGKey(0), x), (x,)


def encoder():
    """As bert_layer.spec.yaml says."""
    return _init(Encoder(), (2, 8, 32))


def encoder_eps():
    """With Flax's default LayerNorm epsilon (1e-6) instead of BERT's 1e-12."""
    return _init(Encoder(eps=1e-6), (2, 8, 32))


def base_layer():
    """One BERT-base layer, GELU with erf (approximate=False), as bert_base.spec.yaml says."""
    return _init(Layer(768, 12, 3072), (2, 16, 768))


def base_layer_flax_gelu():
    """The same with Flax's default nn.gelu, which is the tanh approximation."""
    return _init(Layer(768, 12, 3072, approximate=True), (2, 16, 768))
