"""Unpacking a stacked tensor, however written, is one split into pieces of one with the
shared reshapes and transposes done before it; anything else is left as written."""

from __future__ import annotations

import numpy as np

from specgraph.diff import diff
from specgraph.graph_nx import isomorphic
from specgraph.passes import canonicalize
from tests.passes.test_raising import F, B, _ops, _same


def _combine(f: B, parts) -> object:
    """One output that reads every part differently (so none is interchangeable)."""
    acts = ("tanh", "sigmoid", "relu", "neg")
    return f("concat", *(f(a, p) for a, p in zip(acts, parts)), axis=-1)


def _unbind(f: B, x, axis: int, n: int):
    shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    pieces = f.b.add_multi("split", [x], {"axis": axis, "sizes": (1,) * n},
                           outputs=[(shape, F)] * n)
    return [f("squeeze", p, axes=(axis,)) for p in pieces]


def _unbound(shape, axis: int):
    f = B(*shape)
    return f.build(_combine(f, _unbind(f, f.x, axis, shape[axis])))


def test_gathers_of_every_index_are_a_split():
    """qkv[0], qkv[1], qkv[-1]: the pieces of unbind."""
    f = B(3, 2, 4)
    parts = [f("gather", f.x, f.c(i, np.int64), axis=0) for i in (0, 1, -1)]
    g = f.build(_combine(f, parts))
    c = canonicalize(g)
    assert "gather" not in _ops(c) and "split" in _ops(c)
    assert isomorphic(c, canonicalize(_unbound((3, 2, 4), 0)))
    _same(g, c)


def test_gathers_of_some_indices_stay():
    """qkv[0] and qkv[1] of three, and x[:, 0] along another axis: no full unpacking."""
    f = B(3, 3, 4)
    parts = [f("gather", f.x, f.c(i, np.int64), axis=0) for i in (0, 1)]
    parts.append(f("gather", f.x, f.c(0, np.int64), axis=1))
    c = canonicalize(f.build(_combine(f, parts)))
    assert _ops(c).count("gather") == 3 and "split" not in _ops(c)


def _heads_first(split_features: bool):
    """[B, T, 3·H·D] to q, k, v of [B, H, T, D]: GPT-2's split of the features then a view
    and a transpose per part, or one view and permute then unbind."""
    f = B(2, 5, 24)
    if split_features:
        pieces = f.b.add_multi("split", [f.x], {"axis": 2, "sizes": (8, 8, 8)},
                               outputs=[((2, 5, 8), F)] * 3)
        parts = [f("transpose", f("reshape", p, shape=(2, 5, 2, 4)), perm=(0, 2, 1, 3))
                 for p in pieces]
    else:
        qkv = f("transpose", f("reshape", f.x, shape=(2, 5, 3, 2, 4)), perm=(2, 0, 3, 1, 4))
        parts = _unbind(f, qkv, 0, 3)
    return f.build(_combine(f, parts))


def _heads_after_split():
    """Flax: split the stacked axis of [B, T, 3, H, D], then transpose each part."""
    f = B(2, 5, 24)
    parts = _unbind(f, f("reshape", f.x, shape=(2, 5, 3, 2, 4)), 2, 3)
    return f.build(_combine(f, [f("transpose", p, perm=(0, 2, 1, 3)) for p in parts]))


def test_splitting_features_first_is_one_reshape_and_transpose_then_split():
    reference = canonicalize(_heads_first(False))
    for g in (_heads_first(True), _heads_after_split()):
        c = canonicalize(g)
        assert isomorphic(c, reference), _ops(c)
        _same(g, c)


def test_a_split_into_unequal_pieces_stays():
    f = B(2, 12)
    pieces = f.b.add_multi("split", [f.x], {"axis": 1, "sizes": (4, 8)},
                           outputs=[((2, 4), F), ((2, 8), F)])
    g = f.build(_combine(f, [f("reshape", pieces[0], shape=(2, 2, 2)),
                             f("reshape", pieces[1], shape=(2, 2, 4))]))
    assert _ops(canonicalize(g))[0] == "split"


def test_pieces_transposed_differently_share_the_first_piece_s_transpose():
    """Flax's BLOOM splits [B, T, H, 3, D] and transposes its query and value to [B, H, T,
    D], its key to [B, H, D, T]; PyTorch's moves the stacked axis first for all three and
    transposes the unpacked key alone: one graph, the key's own transpose after its
    reshape."""
    f = B(2, 4, 3, 3, 4)  # T = D: the pieces concatenate
    parts = _unbind(f, f.x, 3, 3)
    perms = [(0, 2, 1, 3), (0, 2, 3, 1), (0, 2, 1, 3)]
    flax = f.build(_combine(f, [f("transpose", p, perm=q) for p, q in zip(parts, perms)]))
    t = B(2, 4, 3, 3, 4)
    q, k, v = _unbind(t, t("transpose", t.x, perm=(3, 0, 2, 1, 4)), 0, 3)
    torch = t.build(_combine(t, [q, t("transpose", k, perm=(0, 1, 3, 2)), v]))
    c = canonicalize(flax)
    assert isomorphic(c, canonicalize(torch)), _ops(c)
    assert _ops(c).count("transpose") == 2
    _same(flax, c)


def test_merged_batch_axes_move_below_attention():
    """Attention over [B·H, T, d] pieces that merge [B, H, T, d] attends per (b, h) anyway."""
    f = B(2, 3, 5, 4)
    q, k, v = (f("reshape", f(a, f.x), shape=(6, 5, 4)) for a in ("tanh", "sigmoid", "neg"))
    g = f.build(f("reshape", f("attention", q, k, v, scale=0.5), shape=(2, 3, 5, 4)))
    c = canonicalize(g)
    assert "reshape" not in _ops(c) and c.nodes[-1].outputs[0].shape == (2, 3, 5, 4)
    _same(g, c)


def _bloom_scores(flattened: bool, mask_fill: float):
    """BLOOM's attention probabilities from stacked [3, B, H, T, D] pieces: PyTorch's flattens
    the query's piece, stacked axis and all, and the transposed key to [B·H, ...], adds
    ALiBi laid out [B·H, 1, T] and then the causal mask; Flax's multiplies [B, H, T, D]
    and adds ALiBi and the mask summed beforehand (with the lowest float, not -inf)."""
    b, h, t, d = 2, 3, 5, 4
    f = B(3, b, h, t, d)
    pieces = f.b.add_multi("split", [f.x], {"axis": 0, "sizes": (1, 1, 1)},
                           outputs=[((1, b, h, t, d), F)] * 3)
    alibi = np.arange(b * h * t, dtype=np.float32).reshape(b, h, 1, t) / 8
    causal = np.triu(np.full((t, t), mask_fill, np.float32), 1)[None, None]
    key = f("transpose", f("reshape", pieces[1], shape=(b, h, t, d)), perm=(0, 1, 3, 2))
    if flattened:
        q = f("reshape", pieces[0], shape=(b * h, t, d))
        scores = f("matmul", q, f("reshape", key, shape=(b * h, d, t)))
        scores = f("add", f.c(alibi.reshape(b * h, 1, t)), f("mul", scores, f.c(0.5)))
        scores = f("add", f("reshape", scores, shape=(b, h, t, t)), f.c(causal))
    else:
        q = f("reshape", pieces[0], shape=(b, h, t, d))
        scores = f("add", f("mul", f("matmul", q, key), f.c(0.5)), f.c(alibi + causal))
    return f.build(f("softmax", scores, axis=-1))


def test_bloom_s_flattened_scores_with_alibi_and_mask_are_the_heads_scores():
    fill = float(np.finfo(np.float32).min)
    flattened = _bloom_scores(True, fill)
    c = canonicalize(flattened)
    assert isomorphic(c, canonicalize(_bloom_scores(False, fill))), _ops(c)
    assert _ops(c).count("add") == 1 and _ops(c).count("reshape") == 2
    _same(flattened, c)


def test_a_mask_filled_with_minus_inf_drowns_the_keys_a_lowest_float_drowns():
    """PyTorch's BLOOM masks with -inf, Flax's with float32's lowest: the same keys drowned
    in the softmax; a key masked on one side alone is a difference."""
    torch = canonicalize(_bloom_scores(True, -np.inf))
    lowest = float(np.finfo(np.float32).min)
    findings, _ = diff(torch, canonicalize(_bloom_scores(False, lowest)))
    assert findings == []
    findings, _ = diff(torch, canonicalize(_bloom_scores(False, 0.0)))
    assert [f.code for f in findings] == ["edge-mismatch"], [f.message for f in findings]
