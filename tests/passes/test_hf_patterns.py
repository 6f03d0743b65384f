"""The ways HF's PyTorch, Flax and TF models write one layer become one canonical form, each
rewrite proved; a variant that computes something else is left as written."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.ir import GraphBuilder
from specgraph.passes import canonicalize
from tests.passes.test_raising import B, F, _ops, _same


def _attention(mask: str) -> object:
    """softmax(q·kᵀ/√8 masked as ``mask`` writes it + 1e-9)·v over [2, 2, 5, 8]."""
    f = B(2, 2, 5, 8)
    q, k, v = f.x, f("sub", f.x, f.c(0.5)), f("add", f.x, f.c(1.0))
    s = f("div", f("matmul", q, f("transpose", k, perm=(0, 1, 3, 2))), f.c(np.sqrt(8.0)))
    keep = np.tril(np.ones((5, 5), np.float32))
    if mask == "tf":  # HF TF GPT-2: w·b − 1e4·(1 − b)
        s = f("sub", f("mul", s, f.c(keep[None, None])), f.c(1e4 * (1 - keep)[None, None]))
    elif mask == "finfo":  # HF Flax GPT-2: + where(b, 0, finfo.min)
        s = f("add", s, f.c(np.where(keep, 0, np.finfo(np.float32).min)[None, None]))
    elif mask == "upper":  # keeps j >= i: not causal
        s = f("add", s, f.c(np.where(keep.T, 0, -1e9).astype(np.float32)))
    p = f("softmax", f("add", s, f.c(1e-9)), axis=3)  # HF TF's stable_softmax
    return f.build(f("matmul", p, v))


@pytest.mark.parametrize("mask", ["none", "tf", "finfo"])
def test_hf_attention_with_stable_softmax_and_its_causal_mask_is_attention(mask: str):
    g = _attention(mask)
    c = canonicalize(g)
    (att,) = [n for n in c.nodes if n.op == "attention"]
    assert att.attrs["causal"] is (mask != "none") and not att.attrs["has_mask"]
    assert att.attrs["scale"] == pytest.approx(8 ** -0.5)
    _same(g, c)


def test_a_constant_mask_that_is_not_causal_is_the_attention_s_one_mask_input():
    g = _attention("upper")
    c = canonicalize(g)
    (att,) = [n for n in c.nodes if n.op == "attention"]
    assert att.attrs["has_mask"] and not att.attrs["causal"]
    mask = np.asarray(c.constants[att.inputs[3]]).reshape(5, 5)  # [1, 1, 5, 5]
    keep_upper = np.triu(np.ones((5, 5), bool))
    assert np.array_equal(mask == 0, keep_upper)
    assert np.all(np.isneginf(mask[~keep_upper]))
    _same(g, c)


def test_softmax_of_shifted_logits_drops_only_a_shift_along_its_axis():
    f = B(3, 4)
    g = f.build(f("softmax", f("add", f.x, f.c(1e-9)), axis=1))
    c = canonicalize(g)
    assert _ops(c) == ["softmax"]
    _same(g, c)
    f = B(3, 4)  # a constant that varies along the axis changes the result
    ramp = f.c(np.arange(4, dtype=np.float32))
    assert _ops(canonicalize(f.build(f("softmax", f("add", f.x, ramp), axis=1)))) == \
        ["add", "softmax"]


@pytest.mark.parametrize("causal", [True, False])
def test_attention_with_a_constant_causal_mask_is_causal(causal: bool):
    f = B(2, 2, 5, 8)
    keep = np.tril(np.ones((5, 5), bool))
    mask = f.c((keep if causal else keep.T)[None, None], np.bool_)
    k, v = f("sub", f.x, f.c(0.5)), f("add", f.x, f.c(1.0))
    g = f.build(f("attention", f.x, k, v, mask, scale=0.25, has_mask=True))
    c = canonicalize(g)
    (att,) = [n for n in c.nodes if n.op == "attention"]
    assert att.attrs["causal"] is causal and att.attrs["has_mask"] is not causal
    _same(g, c)


def test_patch_flattening_orders_are_one_form():
    """PyTorch: reshape[N, C, HW]·transpose; Flax and Keras: transpose to NHWC·reshape."""
    graphs = []
    for torch_order in (True, False):
        f = B(2, 6, 3, 4)
        if torch_order:
            y = f("transpose", f("reshape", f.x, shape=(2, 6, 12)), perm=(0, 2, 1))
        else:
            y = f("reshape", f("transpose", f.x, perm=(0, 2, 3, 1)), shape=(2, 12, 6))
        g = f.build(f("relu", y))
        c = canonicalize(g)
        _same(g, c)
        graphs.append([(n.op, dict(n.attrs)) for n in c.nodes])
    assert graphs[0] == graphs[1]
    f = B(2, 6, 3, 4)  # a reshape that splits is left alone
    y = f("transpose", f("reshape", f.x, shape=(2, 3, 2, 12)), perm=(0, 2, 1, 3))
    assert _ops(canonicalize(f.build(y))) == ["reshape", "transpose"]


def test_tf_repeat_of_a_class_token_is_an_expand():
    f = B(2, 4, 8)
    cls = f.p("cls_token", 1, 1, 8)
    tiled = f("tile", f("reshape", cls, shape=(1, 1, 1, 8)), repeats=(1, 2, 1, 1))
    g = f.build(f("concat", f("reshape", tiled, shape=(2, 1, 8)), f.x, axis=1))
    c = canonicalize(g)
    assert _ops(c) == ["expand", "concat"]
    _same(g, c)
    f = B(2, 4, 8)  # repeating an axis of size > 1 is not a broadcast
    g = f.build(f("tile", f.x, repeats=(1, 2, 1)))
    assert _ops(canonicalize(g)) == ["tile"]


def test_position_ids_and_masks_built_from_arange_fold_and_shrink():
    """Flax GPT-2: emb(expand(arange)) + x is emb(arange) + x, as PyTorch writes it: the
    rows once along the batch, and no leading size-one axis (x + rows broadcasts)."""
    b = GraphBuilder()
    x = b.input("x", (2, 5, 8), F)
    table = b.param("wpe", (16, 8), F)
    ids = b.add("arange", [], {"start": 0.0, "limit": 5.0, "delta": 1.0, "dtype": "int32"},
                shape=(5,), dtype="int32")
    ids = b.add("expand", [b.add("reshape", [ids], {"shape": (1, 5)}, shape=(1, 5),
                                 dtype="int32")], {"shape": (2, 5)}, shape=(2, 5),
                dtype="int32")
    rows = b.add("embedding", [ids, table], shape=(2, 5, 8), dtype=F)
    b.output("y", b.add("add", [x, rows], shape=(2, 5, 8), dtype=F))
    g = b.build()
    c = canonicalize(g)
    assert _ops(c) == ["embedding", "add"]
    (emb,) = [n for n in c.nodes if n.op == "embedding"]
    assert emb.outputs[0].shape == (5, 8)
    np.testing.assert_array_equal(c.constants[emb.inputs[0]], [0, 1, 2, 3, 4])
    _same(g, c)


def test_tf_conv1d_bias_and_tied_lm_head_become_linears():
    """TFConv1D: reshape·matmul·add([1, n])·reshape; the tied head: matmul by
    transpose(reshape(wte, [1, V, d]))."""
    f = B(2, 5, 8)
    w, bias, wte = f.p("c_fc.weight", 8, 8), f.p("c_fc.bias", 1, 8), f.p("wte", 12, 8)
    flat = f("add", f("matmul", f("reshape", f.x, shape=(10, 8)), w), bias)
    h = f("reshape", flat, shape=(2, 5, 8))
    head = f("transpose", f("reshape", wte, shape=(1, 12, 8)), perm=(0, 2, 1))
    g = f.build(f("matmul", h, head))
    c = canonicalize(g)
    assert _ops(c) == ["reshape", "linear", "transpose", "linear"]
    assert [n.attrs["bias"] for n in c.nodes if n.op == "linear"] == [True, False]
    _same(g, c)


def test_tf_dense_on_swin_windows_is_the_linear_on_the_windows():
    """HF's TF Swin: its windows [2, 2, 2, 4, 4, 16] flattened with the batch to [128, 16]
    for each Dense, then back to [8, 16, 16] with the bias added; PyTorch reshapes the
    windows to [8, 16, 16] once and applies its three linears: one form."""
    def windows(f):
        return f("transpose", f("reshape", f.x, shape=(2, 2, 4, 2, 4, 16)),
                 perm=(0, 1, 3, 2, 4, 5))

    f = B(2, 8, 8, 16)
    w = windows(f)
    outs = []
    for name in ("q", "k", "v"):
        flat = f("matmul", f("reshape", w, shape=(128, 16)), f.p(f"{name}.kernel", 16, 16))
        outs.append(f("add", f("reshape", flat, shape=(8, 16, 16)), f.p(f"{name}.bias", 16)))
    tf_like = f.build(f("add", f("add", outs[0], outs[1]), outs[2]))
    f = B(2, 8, 8, 16)
    x = f("reshape", windows(f), shape=(8, 16, 16))
    outs = [f("linear", x, f.p(f"{n}.kernel", 16, 16), f.p(f"{n}.bias", 16)) for n in "qkv"]
    torch_like = f.build(f("add", f("add", outs[0], outs[1]), outs[2]))
    a, b = canonicalize(tf_like), canonicalize(torch_like)
    assert _ops(a) == _ops(b) and _ops(a).count("linear") == 3
    assert _ops(a).count("reshape") == 2  # the windows split, then regrouped once
    _same(tf_like, a)
