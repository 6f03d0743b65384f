"""Unpacking a stacked tensor, however written, is one split into pieces of one with the
shared reshapes and transposes done before it; anything else is left as written."""

from __future__ import annotations

import numpy as np

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


def test_pieces_transposed_differently_keep_their_transposes():
    f = B(4, 3, 4, 4)
    parts = _unbind(f, f.x, 1, 3)
    perms = [(1, 0, 2), (0, 2, 1), (1, 0, 2)]
    g = f.build(_combine(f, [f("transpose", p, perm=q) for p, q in zip(parts, perms)]))
    c = canonicalize(g)
    assert _ops(c).count("transpose") == 3
    _same(g, c)


def test_merged_batch_axes_move_below_attention():
    """Attention over [B·H, T, d] pieces that merge [B, H, T, d] attends per (b, h) anyway."""
    f = B(2, 3, 5, 4)
    q, k, v = (f("reshape", f(a, f.x), shape=(6, 5, 4)) for a in ("tanh", "sigmoid", "neg"))
    g = f.build(f("reshape", f("attention", q, k, v, scale=0.5), shape=(2, 3, 5, 4)))
    c = canonicalize(g)
    assert "reshape" not in _ops(c) and c.nodes[-1].outputs[0].shape == (2, 3, 5, 4)
    _same(g, c)
