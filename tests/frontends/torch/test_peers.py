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
    # Conv1D (addmm) becomes linear, the packed c_attn one per q, k and v (its weight
    # stored as the three blocks); gelu_new's tanh formula becomes gelu(tanh).
    assert ops["linear"] == 2 * 6 + 1 and ops["attention"] == 2 and ops["layer_norm"] == 5
    assert "transformer.h.0.attn.c_attn.weight[32:64]" in traced.param_pieces
    gelus = [n for n in traced.graph.nodes if n.op == "gelu"]
    assert len(gelus) == 2 and all(n.attrs["approximate"] == "tanh" for n in gelus)
    causal = [n.attrs["causal"] or n.attrs["has_mask"] for n in traced.graph.nodes
              if n.op == "attention"]
    assert all(causal)
    assert traced.graph.output_names == ("logits",)


class _Padded(torch.nn.Module):
    """GPT-2 called as a batch with padding is: ids and an attention mask."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_gpt2_with_a_padding_mask_traces_op_by_op(attention) -> None:
    """transformers builds a padded mask with torch.vmap over a Python function, which
    torch.export records as one opaque call: the trace builds it the way transformers does
    on older PyTorch (the same boolean mask), and leaves vmap as it found it."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                     n_positions=16, use_cache=False,
                                     attn_implementation=attention)
    model = _Padded(transformers.GPT2LMHeadModel(config))
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    traced = torch_frontend.trace(model, (ids, mask), reference="gpt2-padded")
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    targets = {str(n.target) for n in traced.program.ep.graph.nodes}
    assert not [t for t in targets if "vmap" in t or "flat_apply" in t or "batch_dim" in t]
    got = run(traced.graph, traced.inputs, traced.weights)
    # the model, built in training mode, is given back in it; the trace ran it in eval mode
    assert model.training and "handed over in training mode" in traced.notes[0]
    with torch.no_grad():
        want = model.eval()(ids, mask).logits.numpy()
    assert relative_error(got["logits"], want) < 1e-5
    # the masked row's padded keys are masked: changing their ids leaves the rest alone
    import transformers.masking_utils as masking

    assert masking.sdpa_mask is masking.sdpa_mask_recent_torch  # put back
    assert torch.vmap(torch.sin)(torch.zeros(3)).shape == (3,)  # no vmap level left behind


PADDED_GPT2 = """
import torch
import transformers


class Padded(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                     n_positions=16, use_cache=False)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    return Padded(transformers.GPT2LMHeadModel(config)), (torch.randint(0, 100, (2, 8)), mask)
"""


def test_padded_gpt2_agrees_with_its_compiled_self(tmp_path, capsys) -> None:
    """The exported program compiled whole (it once carried vmap's calls, which
    torch.compile refuses), forward and backward, against the same program eager."""
    import json

    from specgraph.cli import main

    path = tmp_path / "padded_gpt2.py"
    path.write_text(PADDED_GPT2)
    code = main(["diff", f"{path}:gpt2", f"{path}:gpt2", "--native", "--rhs-context",
                 "compiled", "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["findings"] == []
