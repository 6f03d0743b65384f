"""The peer corpus: real models written by others, as specgraph model references.

HF transformers' architectures that it implements in two or three of PyTorch, TensorFlow
(tf-keras) and Flax, each in a small config (two layers, narrow) with random weights
(nothing is downloaded), and Keras applications against their counterparts written
elsewhere. Every model is a factory here, so that each pair is compared through the CLI's
own code path: ``specgraph diff bench/peer_models.py:bert_torch
bench/peer_models.py:bert_flax``.

``ARCHS`` lists each architecture: its category, its config, the model class per framework,
and its example inputs (one NumPy dict, the same arrays for every framework).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ARCHS", "Arch", "factory"]

BATCH, SEQ, VOCAB = 2, 8, 99
IMAGE, PATCH = 32, 8


def _ids(seed: int = 0, vocab: int = VOCAB, seq: int = SEQ) -> np.ndarray:
    # token 0 is the padding token of many configs: keep it out of the example
    return np.random.default_rng(seed).integers(1, vocab, (BATCH, seq)).astype(np.int64)


def _pixels(channels: int = 3, size: int = IMAGE) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((BATCH, channels, size, size)).astype(
        np.float32)


def _text(**extra: Callable[[], np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
    def make() -> dict[str, np.ndarray]:
        return {"input_ids": _ids(), **{k: f() for k, f in extra.items()}}
    return make


def _text_of(seq: int) -> Callable[[], dict[str, np.ndarray]]:
    """Token ids of another length (BigBird's block-sparse attention needs 8 blocks)."""
    def make() -> dict[str, np.ndarray]:
        return {"input_ids": _ids(0, seq=seq)}
    return make


def _padding() -> np.ndarray:
    """An attention mask of a padded batch: the first sequence whole, the second's last
    three positions padding (what a tokenizer gives two texts of unequal length)."""
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, SEQ - 3:] = 0
    return mask


def _seq2seq() -> dict[str, np.ndarray]:
    return {"input_ids": _ids(0), "decoder_input_ids": _ids(1, seq=SEQ - 2)}


def _seq2seq_padded() -> dict[str, np.ndarray]:
    return {**_seq2seq(), "attention_mask": _padding()}


def _vision() -> dict[str, np.ndarray]:
    return {"pixel_values": _pixels()}


def _masked_vision() -> dict[str, np.ndarray]:
    """Pixels, and the noise ViTMAE's random masking sorts (given: the same tokens kept on
    every side)."""
    patches = (IMAGE // PATCH) ** 2
    return {"noise": np.random.default_rng(4).random((BATCH, patches)).astype(np.float32),
            "pixel_values": _pixels()}


def _audio() -> dict[str, np.ndarray]:
    wave = np.random.default_rng(2).standard_normal((BATCH, 1600)).astype(np.float32)
    return {"input_values": wave}


def _whisper() -> dict[str, np.ndarray]:
    features = np.random.default_rng(3).standard_normal((BATCH, 16, 32)).astype(np.float32)
    return {"input_features": features, "decoder_input_ids": _ids(1, seq=SEQ - 2)}


@dataclass(frozen=True)
class Arch:
    """One architecture of the corpus.

    Attributes:
        category: encoder, decoder, encoder-decoder, vision or audio.
        config: ``(transformers, ) -> config`` in a small size.
        classes: framework (``torch``, ``tf``, ``flax``) -> model class name (``keras``:
            the name of a Keras application, built with the arguments in ``keras``).
        inputs: the example inputs, one NumPy dict (int64 ids; each framework casts), given
            to every framework in the order of their names (TensorFlow sorts a dict's keys).
    """

    category: str
    config: Callable[[Any], Any]
    classes: dict[str, str]
    inputs: Callable[[], dict[str, np.ndarray]]
    notes: str = field(default="")
    keras: dict[str, Any] = field(default_factory=dict)


def _small(**kw: Any) -> dict[str, Any]:
    return {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 64, "vocab_size": VOCAB, **kw}


def _classes(name: str, frameworks: str = "torch,tf,flax") -> dict[str, str]:
    prefix = {"torch": "", "tf": "TF", "flax": "Flax"}
    return {fw: prefix[fw] + name for fw in frameworks.split(",")}


def _s2s(**kw: Any) -> dict[str, Any]:
    """A one-layer encoder-decoder config of BART's family."""
    return dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                vocab_size=VOCAB, max_position_embeddings=32, use_cache=False, **kw)


ARCHS: dict[str, Arch] = {
    # --- encoders ---------------------------------------------------------------------
    "bert": Arch("encoder", lambda t: t.BertConfig(**_small(max_position_embeddings=32)),
                 _classes("BertModel"), _text()),
    "albert": Arch("encoder", lambda t: t.AlbertConfig(**_small(embedding_size=16,
                                                                 max_position_embeddings=32)),
                   _classes("AlbertModel"), _text()),
    "electra": Arch("encoder", lambda t: t.ElectraConfig(**_small(embedding_size=16,
                                                                   max_position_embeddings=32)),
                    _classes("ElectraModel"), _text()),
    "distilbert": Arch("encoder", lambda t: t.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=VOCAB,
        max_position_embeddings=32), _classes("DistilBertModel"), _text()),
    "roberta": Arch("encoder", lambda t: t.RobertaConfig(**_small(max_position_embeddings=40)),
                    _classes("RobertaModel"), _text()),
    # disentangled attention: relative positions in buckets, gathered along the keys
    # (torch.gather against TF's take_along_axis), a LayerNorm of the position table, a
    # 1-D conv that TF writes as a 2-D one of height one
    "deberta_v2": Arch("encoder", lambda t: t.DebertaV2Config(**_small(
        max_position_embeddings=32, relative_attention=True, pos_att_type=["p2c", "c2p"],
        position_buckets=8, max_relative_positions=-1, norm_rel_ebd="layer_norm",
        share_att_key=True, position_biased_input=False, type_vocab_size=0,
        conv_kernel_size=3, conv_act="gelu")), _classes("DebertaV2Model", "torch,tf"),
        _text()),
    # block-sparse attention: Flax picks the blocks with nested jax.vmap of p[i]
    "bigbird_sparse": Arch("encoder", lambda t: t.BigBirdConfig(**_small(
        max_position_embeddings=64, attention_type="block_sparse", block_size=2,
        num_random_blocks=1)), _classes("BigBirdModel", "torch,flax"),
        _text_of(16)),
    # --- a padded batch: each library's own attention mask (additive, boolean, written out)
    "bert_padded": Arch("encoder", lambda t: t.BertConfig(**_small(max_position_embeddings=32)),
                        _classes("BertModel"), _text(attention_mask=_padding)),
    "distilbert_padded": Arch("encoder", lambda t: t.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=VOCAB,
        max_position_embeddings=32), _classes("DistilBertModel"), _text(attention_mask=_padding)),
    "gpt2_padded": Arch("decoder", lambda t: t.GPT2Config(n_layer=2, n_embd=32, n_head=4,
                                                          vocab_size=VOCAB, n_positions=32,
                                                          use_cache=False),
                        _classes("GPT2LMHeadModel"), _text(attention_mask=_padding)),
    # OPT counts its positions along the mask; PyTorch writes the mask in place (copy_),
    # TensorFlow adds a causal and a padding mask of -1e8, Flax combines booleans
    "opt_padded": Arch("decoder", lambda t: t.OPTConfig(
        hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=32, word_embed_proj_dim=32,
        use_cache=False), _classes("OPTForCausalLM"), _text(attention_mask=_padding)),
    # TensorFlow's Mistral adds a causal and a padding mask of float32.min (-inf where both
    # mask); a window longer than the sequence (Flax's diagonal mask is the "mistral" one)
    "mistral_padded": Arch("decoder", lambda t: t.MistralConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, sliding_window=4096,
                 use_cache=False)), _classes("MistralForCausalLM"),
        _text(attention_mask=_padding)),
    "t5_padded": Arch("encoder-decoder", lambda t: t.T5Config(
        d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4,
        vocab_size=VOCAB, relative_attention_num_buckets=8, use_cache=False),
        _classes("T5Model", "torch,tf"), _seq2seq_padded),
    # --- decoders ---------------------------------------------------------------------
    "gpt2": Arch("decoder", lambda t: t.GPT2Config(n_layer=2, n_embd=32, n_head=4,
                                                   vocab_size=VOCAB, n_positions=32,
                                                   use_cache=False),
                 _classes("GPT2LMHeadModel"), _text()),
    "gpt_neo": Arch("decoder", lambda t: t.GPTNeoConfig(
        num_layers=2, hidden_size=32, num_heads=4, vocab_size=VOCAB,
        max_position_embeddings=32, attention_types=[[["global", "local"], 1]],
        window_size=4, use_cache=False), _classes("GPTNeoForCausalLM", "torch,flax"), _text()),
    # PyTorch applies its causal buffer with where(mask, w, finfo.min), then adds the
    # padding mask; Flax combines boolean masks
    "gpt_neo_padded": Arch("decoder", lambda t: t.GPTNeoConfig(
        num_layers=2, hidden_size=32, num_heads=4, vocab_size=VOCAB,
        max_position_embeddings=32, attention_types=[[["global", "local"], 1]],
        window_size=4, use_cache=False), _classes("GPTNeoForCausalLM", "torch,flax"),
        _text(attention_mask=_padding)),
    "opt": Arch("decoder", lambda t: t.OPTConfig(
        hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=32, word_embed_proj_dim=32,
        use_cache=False), _classes("OPTForCausalLM"), _text()),
    "llama": Arch("decoder", lambda t: t.LlamaConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, use_cache=False)),
        _classes("LlamaForCausalLM", "torch,flax"), _text()),
    # Llama 3's rotary base: Flax's Llama (and Mistral, Gemma) build their tables with 10000
    "llama_theta": Arch("decoder", lambda t: t.LlamaConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, use_cache=False,
                 rope_theta=500000.0)), _classes("LlamaForCausalLM", "torch,flax"), _text()),
    # long-context fine-tunes' linear RoPE scaling: positions divided by the factor
    "llama_rope_linear": Arch("decoder", lambda t: t.LlamaConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, use_cache=False,
                 rope_scaling={"rope_type": "linear", "factor": 2.0})),
        _classes("LlamaForCausalLM", "torch,flax"), _text()),
    # biased projections (attention_bias, mlp_bias), one key and value head (MQA)
    "llama_bias": Arch("decoder", lambda t: t.LlamaConfig(
        **_small(num_key_value_heads=1, max_position_embeddings=32, use_cache=False,
                 attention_bias=True, mlp_bias=True)),
        _classes("LlamaForCausalLM", "torch,flax"), _text()),
    "mistral": Arch("decoder", lambda t: t.MistralConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, sliding_window=None,
                 use_cache=False)), _classes("MistralForCausalLM"), _text()),
    "gemma": Arch("decoder", lambda t: t.GemmaConfig(
        **_small(num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                 use_cache=False)), _classes("GemmaForCausalLM", "torch,flax"), _text()),
    # one key/value head (multi-query, as Gemma-2B): the heads transpose moves an axis of one
    "gemma_mqa": Arch("decoder", lambda t: t.GemmaConfig(
        **_small(num_key_value_heads=1, head_dim=8, max_position_embeddings=32,
                 use_cache=False)), _classes("GemmaForCausalLM", "torch,flax"), _text()),
    # a window shorter than the sequence: TF's Mistral never reads sliding_window
    "mistral_window": Arch("decoder", lambda t: t.MistralConfig(
        **_small(num_key_value_heads=2, max_position_embeddings=32, sliding_window=4,
                 use_cache=False)), _classes("MistralForCausalLM", "torch,tf"), _text()),
    # a fused query-key-value projection indexed per head (PyTorch) or split (Flax), and
    # ALiBi added to the scores flattened over batch and heads (PyTorch's baddbmm)
    "bloom": Arch("decoder", lambda t: t.BloomConfig(
        hidden_size=32, n_layer=2, n_head=4, vocab_size=VOCAB, use_cache=False),
        _classes("BloomForCausalLM", "torch,flax"), _text()),
    # --- encoder-decoders -------------------------------------------------------------
    "bart": Arch("encoder-decoder", lambda t: t.BartConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        vocab_size=VOCAB, max_position_embeddings=32, use_cache=False),
        _classes("BartModel"), _seq2seq),
    "t5": Arch("encoder-decoder", lambda t: t.T5Config(
        d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4,
        vocab_size=VOCAB, relative_attention_num_buckets=8, use_cache=False),
        # FlaxT5 calls jnp.clip(a_max=...), which JAX 0.10 no longer takes
        _classes("T5Model", "torch,tf"), _seq2seq),
    # with its tied output head: the decoder's states scaled by d_model**-0.5, then the
    # shared embedding's transpose (a matmul in TensorFlow, a tied Linear in PyTorch)
    "t5_lm": Arch("encoder-decoder", lambda t: t.T5Config(
        d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4,
        vocab_size=VOCAB, relative_attention_num_buckets=8, use_cache=False),
        _classes("T5ForConditionalGeneration", "torch,tf"), _seq2seq_padded),
    "whisper": Arch("encoder-decoder", lambda t: t.WhisperConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        vocab_size=VOCAB, num_mel_bins=16, max_source_positions=16, max_target_positions=32,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        use_cache=False), _classes("WhisperModel"), _whisper),
    # --- vision -----------------------------------------------------------------------
    "vit": Arch("vision", lambda t: t.ViTConfig(**_small(image_size=IMAGE, patch_size=PATCH)),
                _classes("ViTModel"), _vision),
    "vit_no_qkv_bias": Arch("vision", lambda t: t.ViTConfig(**_small(
        image_size=IMAGE, patch_size=PATCH, qkv_bias=False)), _classes("ViTModel"), _vision),
    "beit": Arch("vision", lambda t: t.BeitConfig(**_small(image_size=IMAGE,
                                                            patch_size=PATCH)),
                 _classes("BeitModel", "torch,flax"), _vision),
    "resnet": Arch("vision", lambda t: t.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck"),
        _classes("ResNetModel"), _vision),
    # HF's PyTorch ResNet strides in the first 1x1 conv of a block (v1) when asked to;
    # its TF and Flax ports do not read downsample_in_bottleneck
    "resnet_v1": Arch("vision", lambda t: t.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck",
        downsample_in_bottleneck=True), _classes("ResNetModel"), _vision),
    "regnet": Arch("vision", lambda t: t.RegNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8),
        _classes("RegNetModel"), _vision),
    "convnext": Arch("vision", lambda t: t.ConvNextConfig(
        num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], patch_size=4,
        image_size=IMAGE), _classes("ConvNextModel", "torch,tf"), _vision),
    "swin": Arch("vision", lambda t: t.SwinConfig(
        image_size=IMAGE, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
        window_size=4), _classes("SwinModel", "torch,tf"), _vision),
    # --- Keras applications against HF's ports ---------------------------------------
    # Keras' ResNet50 is v1 (stride in the first 1x1 conv of a block), as HF's PyTorch
    # ResNet is with downsample_in_bottleneck=True (its TF and Flax ports do not read it)
    "resnet50": Arch("vision", lambda t: t.ResNetConfig(downsample_in_bottleneck=True,
                                                        num_labels=10),
                     {"keras": "ResNet50", "torch": "ResNetForImageClassification"}, _vision,
                     keras={"classes": 10, "classifier_activation": None}),
    # ConvNeXt-T: Keras keeps the residual stream NHWC and transposes each depthwise conv's
    # input, HF's PyTorch port keeps it NCHW and transposes each block's branch back
    "convnext_tiny": Arch("vision", lambda t: t.ConvNextConfig(num_labels=10),
                          {"keras": "ConvNeXtTiny", "torch": "ConvNextForImageClassification"},
                          _vision, keras={"classes": 10, "classifier_activation": None,
                                          "include_preprocessing": False}),
    # --- audio ------------------------------------------------------------------------
    "wav2vec2": Arch("audio", lambda t: t.Wav2Vec2Config(
        **_small(conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
                 num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                 do_stable_layer_norm=True, feat_extract_norm="layer")),  # as Flax has it
        _classes("Wav2Vec2Model"), _audio),
    "hubert": Arch("audio", lambda t: t.HubertConfig(
        **_small(conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
                 num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                 do_stable_layer_norm=True, feat_extract_norm="layer")),
        _classes("HubertModel", "torch,tf"), _audio),
    # Hubert's default feature encoder: a GroupNorm in its first conv, post-LN layers
    "hubert_group": Arch("audio", lambda t: t.HubertConfig(
        **_small(conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
                 num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2)),
        _classes("HubertModel", "torch,tf"), _audio),
    # --- more ports: text -------------------------------------------------------------
    # CLIP pools the token at the highest id (eos_token_id 2) or the first eos_token_id
    "clip_text": Arch("encoder", lambda t: t.CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=32, eos_token_id=2),
        _classes("CLIPTextModel"), _text()),
    "clip_text_eos": Arch("encoder", lambda t: t.CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=32, eos_token_id=5),
        _classes("CLIPTextModel"), _text()),
    # rotary on the first rotary_dim features, interleaved pairs
    "gptj": Arch("decoder", lambda t: t.GPTJConfig(
        n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=32, vocab_size=VOCAB,
        use_cache=False), _classes("GPTJForCausalLM"), _text()),
    # TF's XGLM has a head of its own, tied to the embedding only when PyTorch weights
    # are loaded
    "xglm": Arch("decoder", lambda t: t.XGLMConfig(
        d_model=32, num_layers=2, attention_heads=4, ffn_dim=64, vocab_size=VOCAB,
        max_position_embeddings=32, use_cache=False),
        _classes("XGLMForCausalLM"), _text()),
    "mpnet": Arch("encoder", lambda t: t.MPNetConfig(**_small(max_position_embeddings=40)),
                  _classes("MPNetModel", "torch,tf"), _text()),
    "mobilebert": Arch("encoder", lambda t: t.MobileBertConfig(
        vocab_size=VOCAB, hidden_size=32, embedding_size=16, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, intra_bottleneck_size=16,
        true_hidden_size=16, num_feedforward_networks=2, max_position_embeddings=32),
        _classes("MobileBertModel", "torch,tf"), _text()),
    "xlnet": Arch("encoder", lambda t: t.XLNetConfig(
        d_model=32, n_layer=2, n_head=4, d_inner=64, vocab_size=VOCAB, use_mems_eval=False),
        _classes("XLNetModel", "torch,tf"), _text()),
    # factorized attention and a float mask (PyTorch's relative-shift attention builds an
    # arange from tensors, which torch.export leaves symbolic: not traced yet)
    "funnel": Arch("encoder", lambda t: t.FunnelConfig(
        d_model=32, n_head=4, d_head=8, d_inner=64, block_sizes=[1, 1], vocab_size=VOCAB,
        attention_type="factorized"), _classes("FunnelBaseModel", "torch,tf"),
        _text(attention_mask=lambda: np.ones((BATCH, SEQ), np.float32))),
    "marian": Arch("encoder-decoder", lambda t: t.MarianConfig(**_s2s(
        pad_token_id=0, decoder_start_token_id=0)), _classes("MarianModel"), _seq2seq),
    "pegasus": Arch("encoder-decoder", lambda t: t.PegasusConfig(**_s2s()),
                    _classes("PegasusModel"), _seq2seq),
    "mbart": Arch("encoder-decoder", lambda t: t.MBartConfig(**_s2s()),
                  _classes("MBartModel"), _seq2seq),
    # --- more ports: vision -----------------------------------------------------------
    "clip_vision": Arch("vision", lambda t: t.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=IMAGE, patch_size=PATCH), _classes("CLIPVisionModel"), _vision),
    "dinov2": Arch("vision", lambda t: t.Dinov2Config(**_small(image_size=IMAGE,
                                                               patch_size=PATCH)),
                   _classes("Dinov2Model", "torch,flax"), _vision),
    "deit": Arch("vision", lambda t: t.DeiTConfig(**_small(image_size=IMAGE, patch_size=PATCH)),
                 _classes("DeiTModel", "torch,tf"), _vision),
    "segformer": Arch("vision", lambda t: t.SegformerConfig(
        num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
        hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
        mlp_ratios=[2, 2], decoder_hidden_size=32), _classes("SegformerModel", "torch,tf"),
        _vision),
    "convnextv2": Arch("vision", lambda t: t.ConvNextV2Config(
        num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], patch_size=4,
        image_size=IMAGE), _classes("ConvNextV2Model", "torch,tf"), _vision),
    # the last stage's keys and values: a strided conv makes its 2x2 map 1x1
    "cvt": Arch("vision", lambda t: t.CvtConfig(
        embed_dim=[16, 32, 32], num_heads=[1, 2, 2], depth=[1, 2, 3], image_size=IMAGE),
        _classes("CvtModel", "torch,tf"), _vision),
    # --- a twelfth round: XLM's in-place mask product through an eval dropout, ESM's
    # padding index of 0 added to int32 positions, CTRL, BlenderbotSmall, Data2VecVision
    "xlm": Arch("encoder", lambda t: t.XLMConfig(
        emb_dim=32, n_layers=2, n_heads=4, vocab_size=VOCAB, max_position_embeddings=32),
        _classes("XLMModel", "torch,tf"), _text()),
    "esm": Arch("encoder", lambda t: t.EsmConfig(**_small(
        max_position_embeddings=40, pad_token_id=0, position_embedding_type="absolute")),
        _classes("EsmModel", "torch,tf"), _text()),
    "ctrl": Arch("decoder", lambda t: t.CTRLConfig(
        n_embd=32, n_layer=2, n_head=4, dff=64, vocab_size=VOCAB, n_positions=32,
        use_cache=False), _classes("CTRLModel", "torch,tf"), _text()),
    "blenderbot_small": Arch("encoder-decoder", lambda t: t.BlenderbotSmallConfig(**_s2s()),
                             _classes("BlenderbotSmallModel"), _seq2seq),
    "data2vec_vision": Arch("vision", lambda t: t.Data2VecVisionConfig(**_small(
        image_size=IMAGE, patch_size=PATCH)), _classes("Data2VecVisionModel", "torch,tf"),
        _vision),
    "convbert": Arch("encoder", lambda t: t.ConvBertConfig(**_small(
        max_position_embeddings=32, embedding_size=32, head_ratio=2, conv_kernel_size=3)),
        _classes("ConvBertModel", "torch,tf"), _text()),
    "sam_vision": Arch("vision", lambda t: t.SamVisionConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_dim=64,
        image_size=IMAGE, patch_size=PATCH, output_channels=16, window_size=2,
        global_attn_indexes=[1], num_pos_feats=8), _classes("SamVisionModel", "torch,tf"),
        _vision),
    "vit_mae": Arch("vision", lambda t: t.ViTMAEConfig(**_small(
        image_size=IMAGE, patch_size=PATCH, mask_ratio=0.5)), _classes("ViTMAEModel", "torch,tf"),
        _masked_vision),
}



@functools.cache
def _transformers() -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _config(name: str, changes: dict[str, Any] | None) -> Any:
    """The architecture's small config, with ``changes`` (attribute -> value) made."""
    config = ARCHS[name].config(_transformers())
    for key, value in (changes or {}).items():
        setattr(config, key, value)
    return config


def _torch(name: str, changes: dict[str, Any] | None = None,
           edit: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    import torch

    t = _transformers()
    arch = ARCHS[name]
    torch.manual_seed(0)
    model = getattr(t, arch.classes["torch"])(_config(name, changes)).eval()
    if edit is not None:
        edit(model)
    inputs = {k: torch.from_numpy(v) for k, v in sorted(arch.inputs().items())}
    return _Keywords(model, tuple(inputs)), tuple(inputs.values())


def _tf(name: str, changes: dict[str, Any] | None = None,
        edit: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    import tensorflow as tf

    t = _transformers()
    arch = ARCHS[name]
    tf.random.set_seed(0)
    model = getattr(t, arch.classes["tf"])(_config(name, changes))
    inputs = {k: v.astype(np.int32) if v.dtype == np.int64 else v
              for k, v in arch.inputs().items()}
    model(inputs)  # build the weights
    if edit is not None:
        edit(model)
    return model, (inputs,)


def _flax(name: str, changes: dict[str, Any] | None = None,
          edit: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
          ) -> tuple[Any, Any, Any]:
    """(``edit``, if given, makes the context every call of the model runs in.)"""
    import jax

    t = _transformers()
    arch = ARCHS[name]
    model = getattr(t, arch.classes["flax"])(_config(name, changes), _do_init=False)
    init = functools.partial(model.init_weights, input_shape=model.input_shape)
    params = jax.jit(init)(jax.random.PRNGKey(0))  # one compilation, not one per weight
    names = sorted(arch.inputs())
    inputs = tuple(v.astype(np.int32) if v.dtype == np.int64 else v
                   for _, v in sorted(arch.inputs().items()))

    def apply_fn(params: Any, *arrays: Any) -> Any:
        with edit() if edit is not None else contextlib.nullcontext():
            return model(**dict(zip(names, arrays)), params=params)

    return apply_fn, params, inputs


def _keras(name: str, changes: dict[str, Any] | None = None,
           edit: Callable[..., Any] | None = None) -> tuple[Any, Any]:
    import keras

    if changes or edit:
        raise ValueError("a Keras application is built as Keras ships it: no changes")

    arch = ARCHS[name]
    keras.utils.set_random_seed(0)
    (pixels,) = arch.inputs().values()
    channels_last = np.ascontiguousarray(pixels.transpose(0, 2, 3, 1))
    build = getattr(keras.applications, arch.classes["keras"])
    model = build(weights=None, input_shape=channels_last.shape[1:], **arch.keras)
    return model, (channels_last,)


class _Keywords:
    """A PyTorch module called with its inputs by keyword, as HF models are."""

    def __new__(cls, model: Any, names: tuple[str, ...]) -> Any:
        import torch

        class Keywords(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *arrays: Any) -> Any:
                return self.model(**dict(zip(names, arrays)))

        return Keywords()


_BUILD = {"torch": _torch, "tf": _tf, "flax": _flax, "keras": _keras}


def factory(name: str, framework: str, changes: dict[str, Any] | None = None,
            edit: Callable[..., Any] | None = None) -> Callable[[], tuple[Any, ...]]:
    """The factory of ``name`` in ``framework`` (what ``bench/peer_models.py:<name>_<fw>``
    names); with ``changes``, attributes of its config set (``{"rope_theta": 5e5}``), and
    with ``edit``, the built model edited: PyTorch and TensorFlow call ``edit(model)``; Flax
    calls the model inside ``edit()``, a context (the mutants of ``bench/peer_mutants.py``)."""
    def make() -> tuple[Any, ...]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _BUILD[framework](name, changes, edit)

    make.__name__ = f"{name}_{framework}"
    return make


for _name, _arch in ARCHS.items():
    for _fw in _arch.classes:
        globals()[f"{_name}_{_fw}"] = factory(_name, _fw)
