"""Mutants of the peer corpus: one planted difference in a real model of
``bench/peer_models.py``, written in the framework's own code, as a person porting it might
make it: a config value (a LayerNorm eps, the other GELU, a rope theta) or one layer's
method replaced in the built model (a residual dropped, the heads split transposed).

Every mutant is a factory here, ``<arch>_<framework>_<mutation>``, so that it is compared
through the CLI's own code path: ``specgraph diff bench/peer_models.py:bert_flax
bench/peer_mutants.py:bert_torch_eps``. ``CORPUS`` lists them: the mutation (its layer's op
and the ops where the numbers part first, as in ``tests/zoo/mutations.py``), the frameworks
whose port carries it, and how it is planted in each.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.peer_models import ARCHS, factory
from tests.zoo.mutations import Mutation

__all__ = ["CORPUS", "Plant", "corpus_models", "mutant_factory"]


@dataclass(frozen=True)
class Plant:
    """One mutation of the corpus.

    Attributes:
        mutation: the mutation (``model`` is the architecture of ``bench/peer_models.py``).
        changes: framework -> config attributes set in that framework's port.
        edits: framework -> the edit of the built model (PyTorch, TensorFlow: a function of
            the model; Flax: a context the model is called in).
        what: the mutation, in words.
    """

    mutation: Mutation
    what: str
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    edits: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks whose port carries the mutation, in ``ARCHS`` order."""
        return tuple(fw for fw in ARCHS[self.mutation.model].classes
                     if fw in self.changes or fw in self.edits)


# --- edits: one layer's method replaced in the built model ---------------------------------

_LAYER = 1  # the layer of the stack an edit changes (the last of the small configs' two)


def _torch_bert_no_residual(model: Any) -> None:
    """Layer 1's feed-forward output drops its residual: LayerNorm(dense(h)), not
    LayerNorm(dense(h) + input) (``BertOutput.forward``)."""
    out = model.encoder.layer[_LAYER].output

    def forward(self: Any, hidden_states: Any, input_tensor: Any) -> Any:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)))

    out.forward = types.MethodType(forward, out)


def _tf_bert_no_residual(model: Any) -> None:
    """The same in ``TFBertOutput.call``."""
    out = model.bert.encoder.layer[_LAYER].bert_output

    def call(self: Any, hidden_states: Any, input_tensor: Any, training: bool = False) -> Any:
        hidden_states = self.dropout(inputs=self.dense(inputs=hidden_states),
                                     training=training)
        return self.LayerNorm(inputs=hidden_states)

    out.call = types.MethodType(call, out)


def _tf_split_transposed(tf: Any, x: Any, heads: int) -> Any:
    """[B, T, h·d] split as (d, h) where the model splits it as (h, d), to [B, h, T, d]."""
    b, t, width = x.shape
    x = tf.reshape(x, (-1 if b is None else b, t, width // heads, heads))
    return tf.transpose(x, (0, 3, 1, 2))


def _tf_gpt2_heads_transposed(model: Any) -> None:
    """Layer 1's attention splits its query, key and value as (head_dim, heads) instead of
    (heads, head_dim) (``TFAttention.split_heads``)."""
    import tensorflow as tf

    attn = model.transformer.h[_LAYER].attn
    attn.split_heads = lambda x: _tf_split_transposed(tf, x, attn.n_head)


def _tf_bert_heads_transposed(model: Any) -> None:
    """The same in ``TFBertSelfAttention.transpose_for_scores``."""
    import tensorflow as tf

    attn = model.bert.encoder.layer[_LAYER].attention.self_attention
    attn.transpose_for_scores = lambda x, batch_size: _tf_split_transposed(
        tf, x, attn.num_attention_heads)


@contextlib.contextmanager
def _method(cls: type, name: str, replace: Callable[[Callable[..., Any]], Callable[..., Any]]
            ) -> Iterator[None]:
    """``cls.name`` replaced by ``replace(original)`` within the context."""
    original = cls.__dict__[name]
    setattr(cls, name, replace(original))
    try:
        yield
    finally:
        setattr(cls, name, original)


def _in_layer(module: Any) -> bool:
    return str(_LAYER) in module.scope.path


def _flax_gpt2_heads_transposed() -> contextlib.AbstractContextManager[None]:
    """Layer 1's attention splits as (head_dim, heads) (``FlaxGPT2Attention._split_heads``)."""
    from transformers.models.gpt2 import modeling_flax_gpt2 as gpt2

    def replace(original: Callable[..., Any]) -> Callable[..., Any]:
        def split(self: Any, hidden_states: Any) -> Any:
            if not _in_layer(self):
                return original(self, hidden_states)
            shape = hidden_states.shape[:2] + (self.head_dim, self.num_heads)
            return hidden_states.reshape(shape).swapaxes(-1, -2)
        return split

    return _method(gpt2.FlaxGPT2Attention, "_split_heads", replace)


# --- the table ------------------------------------------------------------------------------

def _m(model: str, name: str, op: str, *also: str) -> Mutation:
    return Mutation(model, name, op, frozenset({op, *also}))


CORPUS: tuple[Plant, ...] = (
    Plant(_m("bert", "eps", "layer_norm"),
          "every LayerNorm's eps 1e-5 instead of BERT's 1e-12 (config layer_norm_eps)",
          changes={"torch": {"layer_norm_eps": 1e-5}, "tf": {"layer_norm_eps": 1e-5}}),
    Plant(_m("gpt2", "eps", "layer_norm"),
          "every LayerNorm's eps 1e-6 instead of GPT-2's 1e-5 (config layer_norm_epsilon)",
          changes={"flax": {"layer_norm_epsilon": 1e-6}}),
    Plant(_m("bert", "gelu", "gelu"),
          "the tanh GELU instead of BERT's erf GELU (config hidden_act)",
          changes={"torch": {"hidden_act": "gelu_pytorch_tanh"},
                   "flax": {"hidden_act": "gelu_new"}}),
    Plant(_m("gpt2", "gelu", "gelu"),
          "the erf GELU instead of GPT-2's tanh GELU (config activation_function)",
          changes={"tf": {"activation_function": "gelu"}}),
    # not in Flax: FlaxLlama builds its tables with theta 10000 whatever the config says
    # (modeling_flax_llama.py, create_sinusoidal_positions), so the same change there
    # changes nothing, and specgraph rightly finds nothing
    Plant(_m("llama", "rope_theta", "rotary_embedding"),
          "rotary embeddings with theta 500000 instead of 10000 (config rope_theta)",
          changes={"torch": {"rope_theta": 5e5}}),
    Plant(_m("bert", "missing_residual", "add"),
          "layer 1's feed-forward block drops its residual (its output's forward replaced)",
          edits={"torch": _torch_bert_no_residual, "tf": _tf_bert_no_residual}),
    # the reshape that splits the heads is the mutated layer; the transpose that follows it
    # is where the numbers first part (the reshape's values are the same, in another shape)
    Plant(_m("bert", "heads_transposed", "reshape", "transpose"),
          "layer 1's attention splits heads as (head_dim, heads) (its method replaced)",
          edits={"tf": _tf_bert_heads_transposed}),
    Plant(_m("gpt2", "heads_transposed", "reshape", "transpose"),
          "layer 1's attention splits heads as (head_dim, heads) (its method replaced)",
          edits={"tf": _tf_gpt2_heads_transposed, "flax": _flax_gpt2_heads_transposed}),
)


def corpus_models() -> tuple[str, ...]:
    """The architectures with mutants, in table order."""
    return tuple(dict.fromkeys(p.mutation.model for p in CORPUS))


def mutant_factory(plant: Plant, framework: str) -> Callable[[], tuple[Any, ...]]:
    """The factory of ``plant``'s mutant in ``framework``."""
    if framework not in plant.frameworks:
        raise KeyError(f"{plant.mutation.model}/{plant.mutation.name} is not planted in "
                       f"{framework}; it is in {', '.join(plant.frameworks)}")
    make = factory(plant.mutation.model, framework, plant.changes.get(framework),
                   plant.edits.get(framework))
    make.__name__ = f"{plant.mutation.model}_{framework}_{plant.mutation.name}"
    return make


for _plant in CORPUS:
    for _fw in _plant.frameworks:
        globals()[f"{_plant.mutation.model}_{_fw}_{_plant.mutation.name}"] = mutant_factory(
            _plant, _fw)
