"""Real models written by others, in PyTorch: HF transformers' GPT-2 and ViT (random weights
from small configs, nothing downloaded) trace with no opaque node, the fp64 interpreter
reproduces them, and canonicalization raises their written-out parts."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specgraph.frontends import torch as torch_frontend
from specgraph.interpreter import run
from specgraph.passes import canonicalize_model
from tests.helpers import relative_error

transformers = pytest.importorskip("transformers")


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                     n_positions=16, use_cache=False)
    return transformers.GPT2LMHeadModel(config), (torch.randint(0, 100, (2, 8)),)


def _vit():
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, image_size=32, patch_size=8)
    return transformers.ViTModel(config), (torch.randn(2, 3, 32, 32),)


@pytest.mark.parametrize("factory", [_gpt2, _vit], ids=["gpt2", "vit"])
def test_hf_model_traces_faithfully(factory) -> None:
    model, inputs = factory()
    traced = torch_frontend.trace(model, inputs, reference=factory.__name__)
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        err = relative_error(got[key], want)
        assert err < 1e-5, (key, err)


def test_gpt2_canonical_form_has_its_layers() -> None:
    traced = canonicalize_model(torch_frontend.trace(*_gpt2(), reference="gpt2"))
    ops = Counter(n.op for n in traced.graph.nodes)
    # Conv1D (addmm) becomes linear; gelu_new's tanh formula becomes gelu(tanh).
    assert ops["linear"] == 2 * 4 + 1 and ops["attention"] == 2 and ops["layer_norm"] == 5
    gelus = [n for n in traced.graph.nodes if n.op == "gelu"]
    assert len(gelus) == 2 and all(n.attrs["approximate"] == "tanh" for n in gelus)
    causal = [n.attrs["causal"] or n.attrs["has_mask"] for n in traced.graph.nodes
              if n.op == "attention"]
    assert all(causal)
    assert traced.graph.output_names == ("logits",)
