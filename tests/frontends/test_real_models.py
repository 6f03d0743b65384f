"""Real models written by others trace with no opaque node and the fp64 interpreter
reproduces them: Keras applications (random weights), and HF transformers' GPT-2 and ViT in
TensorFlow (tf-keras) and Flax (small configs, random weights, nothing downloaded).
HF's PyTorch versions are in test_torch_peers.py."""

from __future__ import annotations


import numpy as np
import pytest

from specgraph.interpreter import run
from tests.helpers import relative_error

pytest.importorskip("tensorflow")
transformers = pytest.importorskip("transformers")


def _check(traced) -> None:
    assert not [n.attrs["target"] for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    assert set(got) == set(traced.outputs)
    for key, want in traced.outputs.items():
        err = relative_error(got[key], want)
        assert err < 1e-5, (key, err)


@pytest.mark.parametrize("name", ["MobileNetV2", "EfficientNetB0"])
def test_keras_application(name: str) -> None:
    import keras

    from specgraph.frontends import tf as tf_frontend

    keras.utils.set_random_seed(0)
    kwargs = {"alpha": 0.35} if name == "MobileNetV2" else {}
    model = getattr(keras.applications, name)(weights=None, input_shape=(64, 64, 3), **kwargs)
    x = np.random.default_rng(0).uniform(0, 255, (1, 64, 64, 3)).astype("float32")
    _check(tf_frontend.trace(model, (x,), reference=name))


def _gpt2_config():
    return transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                   n_positions=16, use_cache=False)


def _vit_config():
    return transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, image_size=32, patch_size=8)


@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_hf_tensorflow_model(name: str) -> None:
    from specgraph.frontends import tf as tf_frontend

    rng = np.random.default_rng(0)
    if name == "gpt2":
        model = transformers.TFGPT2LMHeadModel(_gpt2_config())
        x = rng.integers(0, 100, (2, 8)).astype("int32")
    else:
        model = transformers.TFViTModel(_vit_config())
        x = rng.standard_normal((2, 3, 32, 32)).astype("float32")
    model(x)  # build the weights
    _check(tf_frontend.trace(model, (x,), reference=f"tf-{name}"))


@pytest.mark.slow  # 5-8 s each on 2 cores: building HF's Flax model and tracing it
@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_hf_flax_model(name: str) -> None:
    pytest.importorskip("flax")
    from specgraph.frontends import jax as jax_frontend

    rng = np.random.default_rng(0)
    if name == "gpt2":
        model = transformers.FlaxGPT2LMHeadModel(_gpt2_config(), seed=0)
        x = rng.integers(0, 100, (2, 8)).astype("int32")
    else:
        model = transformers.FlaxViTModel(_vit_config(), seed=0)
        x = rng.standard_normal((2, 3, 32, 32)).astype("float32")

    def apply_fn(params, inputs):
        return model(inputs, params=params)

    _check(jax_frontend.trace(apply_fn, model.params, (x,), reference=f"flax-{name}"))
