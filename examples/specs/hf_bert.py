"""HF transformers' BERT (a 12-layer encoder at a small width, random weights: nothing is
downloaded) in PyTorch and Flax, to draft a spec from with ``specgraph spec init`` and to
check against it."""

import contextlib

import numpy as np

CONFIG = dict(hidden_size=32, num_hidden_layers=12, num_attention_heads=4,
              intermediate_size=64, vocab_size=99, max_position_embeddings=32)


def _config():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.BertConfig(**CONFIG)


def _ids():
    return np.random.default_rng(0).integers(1, 99, (2, 8)).astype(np.int64)


def bert_torch():
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(_config()).eval()
    return model, (torch.from_numpy(_ids()),)


def _flax(edit=None):
    import jax
    import transformers

    model = transformers.FlaxBertModel(_config(), _do_init=False)
    params = jax.jit(lambda key: model.init_weights(key, model.input_shape))(
        jax.random.PRNGKey(0))

    def apply_fn(params, input_ids):
        with edit() if edit is not None else contextlib.nullcontext():
            return model(input_ids, params=params)

    return apply_fn, params, (_ids().astype(np.int32),)


def bert_flax():
    """The Flax port, as HF ships it."""
    return _flax()


def bert_flax_eps():
    """The Flax port with one LayerNorm changed: layer 5's output LayerNorm with eps 1e-5."""
    from flax import linen as nn

    def interceptor(call, args, kwargs, context):
        module = context.module
        if isinstance(module, nn.LayerNorm) and context.method_name == "__call__" and \
                module.path == ("encoder", "layer", "5", "output", "LayerNorm"):
            changed = module.clone(parent=None, epsilon=1e-5)
            return changed.apply({"params": module.variables["params"]}, *args, **kwargs)
        return call(*args, **kwargs)

    return _flax(lambda: nn.intercept_methods(interceptor))
