"""Numbers on real models written by others: HF transformers' GPT-2 and ViT in PyTorch, Flax
and TensorFlow (tf-keras), small configs, random weights, nothing downloaded. Every ordered
pair of frameworks is compared with lhs's weights moved into rhs by specgraph, on input seeds
0-19, forward and backward, float32 on CPU.

The models compute the same function, so any finding is a false alarm: canonicalization
makes the three frameworks' graphs one (patch flattening, TF's repeated class token and
stable_softmax shift, Flax's in-graph position ids and causal mask, TFConv1D's [1, n] biases,
the tied lm_head), so every pair is equivalent in structure and in numbers.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import numpy as np
import pytest

from specgraph.check import compare
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.result import NumericResult

transformers = pytest.importorskip("transformers")

FRAMEWORKS = ("torch", "flax", "tf")
MODELS = ("vit", "gpt2")
PAIRS = [(m, a, b) for m in MODELS for a, b in itertools.permutations(FRAMEWORKS, 2)]
SEEDS = tuple(range(20))
# float32 runs of the same function on different kernels agree to a few 1e-6 here
END_TO_END_RTOL = 1e-4


def _config(name: str):
    if name == "gpt2":
        return transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                       n_positions=16, use_cache=False)
    return transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, image_size=32, patch_size=8)


def _example(name: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if name == "gpt2":
        return rng.integers(0, 100, (2, 8)).astype(np.int32)
    return rng.standard_normal((2, 3, 32, 32)).astype(np.float32)


def _torch(name: str, weights: bool) -> TracedModel:
    pytest.importorskip("torch")
    import torch

    from specgraph.frontends import torch as frontend

    torch.manual_seed(0)
    model = (transformers.GPT2LMHeadModel if name == "gpt2" else transformers.ViTModel)(
        _config(name))
    x = _example(name)
    x = torch.from_numpy(x.astype(np.int64) if name == "gpt2" else x)
    return frontend.trace(model.eval(), (x,), reference=f"torch-{name}")


def _flax(name: str, weights: bool) -> TracedModel:
    pytest.importorskip("flax")
    import jax

    from specgraph.frontends import jax as frontend

    cls = transformers.FlaxGPT2LMHeadModel if name == "gpt2" else transformers.FlaxViTModel
    model = cls(_config(name), _do_init=False)
    init = functools.partial(model.init_weights, input_shape=model.input_shape)
    key = jax.random.PRNGKey(0)
    if weights:
        params = jax.jit(init)(key)  # one compilation, not one per initializer
    else:  # only the graph matters: rhs receives lhs's weights
        params = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype),
                                        jax.eval_shape(init, key))

    def apply_fn(params, inputs):
        return model(inputs, params=params)

    return frontend.trace(apply_fn, params, (_example(name),), reference=f"flax-{name}")


def _tf(name: str, weights: bool) -> TracedModel:
    pytest.importorskip("tf_keras")
    import tensorflow as tf

    from specgraph.frontends import tf as frontend

    tf.random.set_seed(0)
    cls = transformers.TFGPT2LMHeadModel if name == "gpt2" else transformers.TFViTModel
    model = cls(_config(name))
    x = _example(name)
    model(x)  # build the weights
    return frontend.trace(model, (x,), reference=f"tf-{name}")


_BUILD = {"torch": _torch, "flax": _flax, "tf": _tf}


@functools.cache
def _traced(name: str, framework: str, weights: bool = True) -> TracedModel:
    """The model traced as written (compare canonicalizes it); ``weights=False`` may leave
    the weights unset where the model is only ever rhs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _BUILD[framework](name, weights)


def _numbers(lhs: TracedModel, rhs: TracedModel, seed: int) -> NumericResult:
    report = compare(lhs, rhs, mode="numbers",
                     options=NumericOptions(seeds=(seed,)))
    assert report.numeric is not None and report.numeric.seeds == (seed,)
    return report.numeric


def _assert_end_to_end(n: NumericResult, lhs: TracedModel) -> None:
    """The outputs and every parameter's gradient agree: within the check's own tolerances
    and within END_TO_END_RTOL of their scale."""
    assert set(n.gradients) == set(lhs.weights), "some parameter's gradient was not compared"
    worst = {**{f"output {k}": s for k, s in n.outputs.items()},
             **{f"gradient {k}": s for k, s in n.gradients.items()}}
    bad = {k: (s.max_rel, s.mismatch) for k, s in worst.items()
           if s.diverges or s.max_rel > END_TO_END_RTOL}
    assert not bad, bad


def _same_shape_divergences(n: NumericResult) -> list[str]:
    """Aligned layers whose two tensors have one shape but differ, forward or backward."""
    out = []
    for layer in n.layers:
        for kind in ("forward", "backward"):
            stats = getattr(layer, kind)
            if stats is not None and stats.diverges and not stats.shape_differs:
                out.append(f"{kind} {layer.lhs} / {layer.rhs} ({stats.max_rel:.3g})")
    return out


def _pair_id(pair: tuple[str, str, str]) -> str:
    return f"{pair[0]}-{pair[1]}-{pair[2]}"


@pytest.mark.slow
@pytest.mark.parametrize("pair", [
    pytest.param(p, id=_pair_id(p)) for p in PAIRS])
def test_hf_pair_is_equivalent_over_twenty_seeds(pair: tuple[str, str, str]) -> None:
    name, a, b = pair
    report = compare(_traced(name, a), _traced(name, b), options=NumericOptions(seeds=SEEDS))
    assert report.equivalent, [f.message for f in report.findings]
    assert report.numeric is not None and report.numeric.seeds == SEEDS


@pytest.mark.slow
@pytest.mark.parametrize("pair", [pytest.param(p, id=_pair_id(p)) for p in PAIRS])
def test_hf_pair_numbers_agree_over_twenty_seeds(pair: tuple[str, str, str]) -> None:
    """Numbers only: outputs and all gradients agree on every seed, and so does every aligned
    layer whose two tensors have one shape."""
    name, a, b = pair
    lhs, rhs = _traced(name, a), _traced(name, b)
    for seed in SEEDS:
        n = _numbers(lhs, rhs, seed)
        _assert_end_to_end(n, lhs)
        wrong = _same_shape_divergences(n)
        assert not wrong, (seed, wrong)


@pytest.mark.slow  # 5-6 s on 2 cores once HF's Flax models are not built before it
def test_vit_torch_to_flax_numbers_agree() -> None:
    """The cheapest pair, two seeds: the outputs, every gradient and every aligned layer
    agree forward and backward."""
    lhs, rhs = _traced("vit", "torch"), _traced("vit", "flax", weights=False)
    for seed in (0, 1):
        n = _numbers(lhs, rhs, seed)
        _assert_end_to_end(n, lhs)
        assert not _same_shape_divergences(n), seed
        assert n.layers and all(layer.backward is not None for layer in n.layers)
