"""HF transformers' BERT with 12 layers (narrow, random weights, nothing downloaded), in
PyTorch and in Flax, as model references: the report's golden on a real model."""

from __future__ import annotations

import functools

import numpy as np

EXAMPLE = np.random.default_rng(0).integers(1, 99, (2, 8)).astype(np.int64)


def _config():
    import transformers

    return transformers.BertConfig(hidden_size=32, num_hidden_layers=12, num_attention_heads=4,
                                   intermediate_size=64, vocab_size=99,
                                   max_position_embeddings=32)


def torch_eps_changed():
    """PyTorch's BERT with one LayerNorm's eps 1e-5 instead of the config's 1e-12."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(_config()).eval()
    model.encoder.layer[5].output.LayerNorm.eps = 1e-5
    return model, (torch.from_numpy(EXAMPLE),)


def flax():
    """Flax's BERT as HF ports it."""
    import jax
    import transformers

    model = transformers.FlaxBertModel(_config(), _do_init=False)
    init = functools.partial(model.init_weights, input_shape=model.input_shape)
    params = jax.jit(init)(jax.random.PRNGKey(0))

    def apply_fn(params, input_ids):
        return model(input_ids, params=params)

    return apply_fn, params, (EXAMPLE.astype(np.int32),)
