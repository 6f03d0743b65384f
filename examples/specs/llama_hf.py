"""HF transformers' LLaMA (two decoder layers at a small width, random weights: nothing is
downloaded) in PyTorch and Flax, to hold against llama_layer.spec.yaml."""

import numpy as np

CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4, intermediate_size=64, vocab_size=99,
              max_position_embeddings=32, rope_theta=10000.0, rms_norm_eps=1e-6,
              use_cache=False)


def _config(**changes):
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.LlamaConfig(**{**CONFIG, **changes})


def _ids():
    return np.random.default_rng(0).integers(1, 99, (2, 8)).astype(np.int64)


def _torch(**changes):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaModel(_config(**changes)).eval()
    return model, (torch.from_numpy(_ids()),)


def llama_torch():
    """As LLaMA has it: rotary positions with theta 10000."""
    return _torch()


def llama_torch_theta():
    """Llama 3's rotary base, 500000, where the spec states LLaMA's 10000."""
    return _torch(rope_theta=500000.0)


def _flax(**changes):
    import jax
    import transformers

    model = transformers.FlaxLlamaModel(_config(**changes), _do_init=False)
    params = jax.jit(lambda key: model.init_weights(key, model.input_shape))(
        jax.random.PRNGKey(0))

    def apply_fn(params, input_ids):
        return model(input_ids, params=params)

    return apply_fn, params, (_ids().astype(np.int32),)


def llama_flax():
    """HF's Flax port."""
    return _flax()


def llama_flax_theta():
    """HF's Flax port configured with Llama 3's rotary base: it ignores config.rope_theta
    and rotates with 10000, so it satisfies LLaMA's spec where it should not."""
    return _flax(rope_theta=500000.0)
