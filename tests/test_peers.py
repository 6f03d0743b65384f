"""A fast subset of the peer corpus (``python -m bench.peers`` runs all of it): HF
transformers' ports compared through the CLI's code path get the right verdict: equivalent,
or exactly the genuine differences between the ports."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("tensorflow")

from bench.peers import expected, run_pair  # noqa: E402

FAST = [
    ("gpt2", "tf", "flax"),        # equivalent: Conv1D biases, the tied head, Flax's masks
    ("t5", "torch", "tf"),         # equivalent: relative position bias + causal mask
    ("opt", "flax", "tf"),         # equivalent: TF attends over [B*H, T, d]
    ("bert", "torch", "flax"),     # PyTorch's padding row: a training-only difference
    ("electra", "tf", "flax"),     # Flax ELECTRA's default token type 1
    ("mistral", "tf", "flax"),     # Flax Mistral's diagonal mask (sliding_window=None)
    ("resnet_v1", "tf", "torch"),  # a stride moved: TF ignores downsample_in_bottleneck
    # padded batches: each library's own attention mask
    ("bert_padded", "tf", "flax"),        # -1e4 added against finfo.min selected
    ("distilbert_padded", "tf", "torch"),  # scores - 1e30·(1 - m) against SDPA's mask
    ("gpt2_padded", "torch", "flax"),     # causal & padding to SDPA; combine_masks bias
    ("gpt2_padded", "tf", "torch"),       # causal -1e4 band and -1e4 padding added
    ("t5_padded", "tf", "torch"),         # the mask added to the position bias: -1e9
    ("t5_lm", "tf", "torch"),             # the tied head: scaled states, a matmul or Linear
    ("opt_padded", "torch", "tf"),        # a mask written in place; -1e8 causal + padding
    ("gpt_neo_padded", "torch", "flax"),  # a causal buffer selected, then the 4D mask added
    ("mistral_padded", "tf", "flax"),     # two float32.min masks summed (-inf where both)
    # fused q/k/v indexed per head or split, ALiBi on [B*H, T, T] scores, -inf or lowest mask
    ("bloom", "flax", "torch"),
    ("funnel", "tf", "torch"),  # the sequence pooled as [B, 1, T, D] or as TF's 1-D pool
    ("vit_mae", "tf", "torch"),  # random masking: argsort, or TF's top_k of -noise, -ids - 1
    ("sam_vision", "tf", "torch"),  # windows · heads merged, split after TF's attention
    ("vit_no_qkv_bias", "tf", "torch"),  # TF's ViT keeps q/k/v biases the config leaves out
]
SLOW = [
    ("resnet50", "keras", "torch"),   # Keras' ResNet50: conv biases, BatchNorm eps, momentum
    ("convnext_tiny", "keras", "torch"),  # HF's pooled LayerNorm eps 1e-12; layouts converge
    ("llama_theta", "flax", "torch"),  # Flax's Llama builds its tables with theta 10000
    ("llama_rope_linear", "flax", "torch"),  # ... and ignores linear rope scaling
]


@pytest.mark.parametrize("pair", [*FAST, *(pytest.param(p, marks=pytest.mark.slow)
                                            for p in SLOW)], ids="-".join)
def test_peer_pair_gets_the_right_verdict(pair: tuple[str, str, str]) -> None:
    outcome = run_pair(*pair)
    assert outcome.kind == "right", (outcome.exit, sorted(outcome.found), outcome.detail)
    assert outcome.found == expected(*pair)


@pytest.mark.parametrize("model", sorted({f"{arch}_{fw}" for arch, lhs, rhs in FAST
                                          for fw in (lhs, rhs)}))
def test_peer_model_traces_with_no_opaque_node(model: str) -> None:
    from specgraph.loading import trace
    from specgraph.passes import canonicalize_model

    traced = trace(f"bench/peer_models.py:{model}")
    assert [n.origin for n in traced.graph.nodes if n.op == "opaque"] == []
    assert [n for n in canonicalize_model(traced).graph.nodes if n.op == "opaque"] == []


@pytest.mark.parametrize("model", ["wav2vec2_torch", "whisper_flax", "deberta_v2_tf",
                                   "convnext_torch"])
def test_peer_model_canonical_graph_is_a_fixed_point_of_the_passes(model: str) -> None:
    """Canonicalization ends where no pass changes the graph. Two passes that undo each
    other were stopped only by the guard against cycles, so the canonical form hung on the
    passes' order: the transposes and layouts passes moved a transpose across wav2vec2's
    and Whisper's feature-encoder gelu (the layouts pass's tie goes one way, sinking the
    other, ConvNeXt's residual stream alike), and the scalars and batch reshapes passes a
    scaling across DeBERTa's merge of batch and heads."""
    from specgraph.loading import trace
    from specgraph.passes import DEFAULT_PASSES, canonicalize_model
    from specgraph.passes.manager import FINISHING_PASSES

    graph = canonicalize_model(trace(f"bench/peer_models.py:{model}")).graph
    assert not [p.name for p in (*DEFAULT_PASSES, *FINISHING_PASSES) if p(graph).modified]


def test_a_local_attention_window_that_differs_on_a_padded_batch_is_one_finding(
        tmp_path) -> None:
    """GPT-Neo's local layers on a padded batch: PyTorch selects with its band buffer,
    then adds its 4D mask (causal and padding); Flax ands the band into its boolean mask.
    Both raise to attention with the band and-ed into the padding mask, so Flax with a
    window of 3 against PyTorch's 4 is one finding that names the two windows."""
    from specgraph.check import compare

    models = tmp_path / "neo_windows.py"
    models.write_text("from bench.peer_models import factory\n"
                      "flax_window_3 = factory('gpt_neo_padded', 'flax', {'window_size': 3})\n")
    report = compare("bench/peer_models.py:gpt_neo_padded_torch", f"{models}:flax_window_3")
    assert [f.code for f in report.findings] == ["edge-mismatch"], [
        f.message for f in report.findings]
    assert "a window of its last 4 positions in lhs but its last 3 in rhs" in \
        report.findings[0].message
