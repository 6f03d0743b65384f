"""The alignment on small built graphs shaped like HF's encoder-decoders: which node pairs
with which (the scopes only let the assertions read the pairs; the alignment never does)."""

from __future__ import annotations

import re

import numpy as np

from specgraph.align import align
from specgraph.ir import Graph, GraphBuilder, Value

F = "float32"
B, T, D, H, V = 2, 4, 8, 2, 16

# the order the two ports write an attention's projections in (HF's TF and PyTorch Marian)
TF_ORDER = ("q", "k", "k.reshape", "v", "v.reshape", "v.transpose", "q.reshape",
            "q.transpose", "k.transpose")
TORCH_ORDER = ("q", "q.reshape", "q.transpose", "k", "v", "k.reshape", "k.transpose",
               "v.reshape", "v.transpose")


def _norm(b: GraphBuilder, x: Value, scope: str, eps: float = 1e-5) -> Value:
    return b.add("layer_norm", [x, b.param(f"{scope}.weight", (D,), F),
                                b.param(f"{scope}.bias", (D,), F)],
                 {"axis": 2, "bias": True, "eps": eps, "scale": True}, shape=x.shape,
                 dtype=F, scope=scope)


def _linear(b: GraphBuilder, x: Value, scope: str) -> Value:
    return b.add("linear", [x, b.param(f"{scope}.weight", (D, D), F),
                            b.param(f"{scope}.bias", (D,), F)],
                 {"bias": True}, shape=x.shape, dtype=F, scope=scope)


def _branches(b: GraphBuilder, x: Value, memory: Value, scope: str,
              order: tuple[str, ...]) -> list[Value]:
    """q (from ``x``), k and v (from ``memory``) split into heads, written in ``order``."""
    made: dict[str, Value] = {}
    for step in order:
        name, _, what = step.partition(".")
        source = x if name == "q" else memory
        t = source.shape[1]
        if not what:
            made[step] = _linear(b, source, f"{scope}.{name}")
        elif what == "reshape":
            made[step] = b.add("reshape", [made[name]], {"shape": (B, t, H, D // H)},
                               shape=(B, t, H, D // H), dtype=F, scope=f"{scope}.{name}")
        else:
            made[step] = b.add("transpose", [made[f"{name}.reshape"]], {"perm": (0, 2, 1, 3)},
                               shape=(B, H, t, D // H), dtype=F, scope=f"{scope}.{name}")
    return [made[f"{name}.transpose"] for name in "qkv"]


def _attention(b: GraphBuilder, x: Value, scope: str, order: tuple[str, ...], *,
               memory: Value | None = None, one_sided: str | None = None) -> Value:
    """An attention layer with its residual and LayerNorm; k and v read ``memory`` where
    given (cross-attention); ``one_sided``: an op on k and v that only this side has, of
    one input (``tanh``) or reading the branch twice (``add``)."""
    q, k, v = _branches(b, x, x if memory is None else memory, scope, order)
    if one_sided is not None:
        k, v = (b.add(one_sided, [h] * (2 if one_sided == "add" else 1), shape=h.shape,
                      dtype=F, scope=scope) for h in (k, v))
    t = x.shape[1]
    a = b.add("attention", [q, k, v], {"causal": False, "has_mask": False, "scale": 0.5},
              shape=(B, H, t, D // H), dtype=F, scope=scope)
    a = b.add("transpose", [a], {"perm": (0, 2, 1, 3)}, shape=(B, t, H, D // H), dtype=F,
              scope=scope)
    a = b.add("reshape", [a], {"shape": (B, t, D)}, shape=(B, t, D), dtype=F, scope=scope)
    a = _linear(b, a, f"{scope}.out")
    return _norm(b, b.add("add", [x, a], shape=x.shape, dtype=F, scope=scope), f"{scope}.norm")


def _embedded(b: GraphBuilder, ids: Value, scope: str, padding_idx: int | None) -> Value:
    """Marian's: a token embedding (PyTorch's with a padding row) plus a position table."""
    t = ids.shape[1]
    tokens = b.add("embedding", [ids, b.param(f"{scope}.tokens", (V, D), F)],
                   {"padding_idx": padding_idx}, shape=(B, t, D), dtype=F, scope=scope)
    positions = b.add("embedding", [b.constant(np.arange(t)), b.param(f"{scope}.positions",
                                                                      (T, D), F)],
                      shape=(t, D), dtype=F, scope=scope)
    return b.add("add", [tokens, positions], shape=(B, t, D), dtype=F, scope=scope)


def _encoder_decoder(order: tuple[str, ...], padding_idx: int | None,
                     one_sided: str | None) -> Graph:
    """Two encoder layers and two decoder layers (self- then cross-attention), the
    decoder's k and v through ``one_sided``."""
    b = GraphBuilder("encoder_decoder")
    memory = _embedded(b, b.input("ids", (B, T), "int64"), "encoder", padding_idx)
    for i in range(2):
        memory = _attention(b, memory, f"encoder.layers.{i}", order)
    y = _embedded(b, b.input("decoder_ids", (B, T - 1), "int64"), "decoder", padding_idx)
    for i in range(2):
        y = _attention(b, y, f"decoder.layers.{i}.self", order, one_sided=one_sided)
        y = _attention(b, y, f"decoder.layers.{i}.cross", order, memory=memory,
                       one_sided=one_sided)
    b.output("y", y)
    return b.build()


def _crossed(lhs: Graph, rhs: Graph) -> list[tuple[str, str]]:
    """The pairs of nodes of different places (layers, or branches of an attention)."""
    return [(lhs.nodes[i].scope, rhs.nodes[j].scope) for i, j in align(lhs, rhs).pairs
            if lhs.nodes[i].scope != rhs.nodes[j].scope]


def test_an_encoder_between_two_differences_keeps_its_layers_in_order() -> None:
    """Below the encoder, PyTorch's padding row; above it, an op only one side has on the
    decoder's k and v (it reads each branch twice, so nothing sees through it). No node of
    the encoder has a context alike on both sides, and the two sides write q, k and v in
    different orders: the encoder's layers were paired 0 with 1 and 1 with 0 by graph
    order. They are anchored from the pairs made around them (the position tables)."""
    lhs = _encoder_decoder(TF_ORDER, None, None)
    rhs = _encoder_decoder(TORCH_ORDER, 1, "add")
    for a, b in (lhs, rhs), (rhs, lhs):
        assert [pair for pair in _crossed(a, b) if re.match("encoder", pair[0])] == []


def test_twins_pair_through_an_op_one_side_lacks() -> None:
    """q, k and v are twins until attention reads them; where one side has an op of its own
    between k (and v) and the attention (PyTorch's KV cache joining the new keys to an
    empty past was one), the branches still pair by the slot of the attention they
    reach, and the encoder with them."""
    lhs = _encoder_decoder(TF_ORDER, None, None)
    rhs = _encoder_decoder(TORCH_ORDER, 1, "tanh")
    assert _crossed(lhs, rhs) == [] and _crossed(rhs, lhs) == []


# the orders of HF's CLIP text attention in PyTorch and as Flax's jaxpr lists it
CLIP_TORCH_ORDER = ("q", "k", "v", "q.reshape", "q.transpose", "k.reshape", "k.transpose",
                    "v.reshape", "v.transpose")
CLIP_FLAX_ORDER = ("q", "k", "v", "q.reshape", "k.reshape", "v.reshape", "q.transpose",
                   "v.transpose", "k.transpose")


def _quick_gelu_stack(order: tuple[str, ...], constant_first: bool, tail: str) -> Graph:
    """Two layers of attention then an MLP with CLIP's quick GELU, x·sigmoid(1.702·x), the
    constant written before x (Flax) or after it (PyTorch); the graph ends in ``tail``."""
    b = GraphBuilder("quick_gelu_stack")
    x = b.input("x", (B, T, D), F)
    for i in range(2):
        x = _attention(b, x, f"layers.{i}.attn", order)
        h = _linear(b, x, f"layers.{i}.fc1")
        c = b.constant(np.float32(1.702))
        scaled = b.add("mul", [c, h] if constant_first else [h, c], shape=h.shape, dtype=F,
                       scope=f"layers.{i}.mlp")
        gate = b.add("sigmoid", [scaled], shape=h.shape, dtype=F, scope=f"layers.{i}.mlp")
        h = b.add("mul", [h, gate], shape=h.shape, dtype=F, scope=f"layers.{i}.mlp")
        x = b.add("add", [x, _linear(b, h, f"layers.{i}.fc2")], shape=x.shape, dtype=F,
                  scope=f"layers.{i}")
    b.output("y", b.add(tail, [x], shape=x.shape, dtype=F, scope="head"))
    return b.build()


def test_operands_of_a_commutative_op_in_either_order_keep_the_context_alike() -> None:
    """Flax's CLIP writes quick GELU's ``1.702 * x`` where PyTorch writes ``x * 1.702``, and
    its pooled text token differs in form at the end, so no node downstream matched by
    context; every node after the first MLP hashed apart, the second layer's q, k and v
    (written in another order) were paired by graph order, k with v, and the numbers
    parted there by 4 times their scale."""
    lhs = _quick_gelu_stack(CLIP_TORCH_ORDER, False, "tanh")
    rhs = _quick_gelu_stack(CLIP_FLAX_ORDER, True, "relu")
    assert _crossed(lhs, rhs) == [] and _crossed(rhs, lhs) == []
