"""Layout transposes: an NHWC stretch between two NCHW layers (TF's residual add, its
squeeze-excitation, its pads) comes out in one form, the transposes hoisted above the ops
that read their inverses; a hoist never adds transposes."""

from __future__ import annotations

from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def test_an_nhwc_residual_add_between_nchw_layers_is_the_nchw_add():
    """PyTorch: add(conv, transpose(mlp(transpose(conv)))); TF: the add in NHWC, then a
    transpose back: one form."""
    f = B(2, 3, 4, 5)
    h = f("relu", f.x)
    mlp = f("layer_norm", f("transpose", h, perm=NHWC), axis=3, scale=False, bias=False)
    torch_like = f.build(f("add", h, f("transpose", mlp, perm=NCHW)))
    f = B(2, 3, 4, 5)
    h = f("relu", f.x)
    t = f("transpose", h, perm=NHWC)
    mlp = f("layer_norm", t, axis=3, scale=False, bias=False)
    tf_like = f.build(f("transpose", f("add", t, mlp), perm=NCHW))
    a, b = canonicalize(torch_like), canonicalize(tf_like)
    assert _ops(a) == _ops(b) and _ops(b).count("transpose") == 2
    _same(tf_like, b)


def test_squeeze_excitation_in_nhwc_is_the_nchw_one():
    f = B(2, 3, 4, 5)
    t = f("transpose", f("relu", f.x), perm=NHWC)
    pooled = f("reduce_mean", t, axes=(1, 2), keepdims=True)
    gate = f("sigmoid", f("transpose", pooled, perm=NCHW))
    g = f.build(f("transpose", f("mul", t, f("transpose", gate, perm=NHWC)), perm=NCHW))
    c = canonicalize(g)
    assert _ops(c) == ["relu", "reduce_mean", "sigmoid", "mul"]
    assert c.nodes[1].attrs["axes"] == (2, 3)
    _same(g, c)


def test_a_transpose_pair_around_a_pad_is_the_pad_in_the_outer_layout():
    f = B(2, 3, 4, 5)
    t = f("pad", f("transpose", f("relu", f.x), perm=NHWC), pads=(0, 1, 2, 0, 0, 3, 4, 0))
    g = f.build(f("transpose", t, perm=NCHW))
    c = canonicalize(g)
    assert _ops(c) == ["relu", "pad"] and c.nodes[1].attrs["pads"] == (0, 0, 1, 2, 0, 0, 3, 4)
    _same(g, c)


def test_no_hoist_where_it_would_not_remove_a_transpose():
    """add(transpose(a), b) read back by the inverse transpose: hoisting removes two and
    adds one; add(transpose(a), b) with two non-transposed readers of the output does not
    reach the hoist at all, and with b and c both needing transposes the hoist would add
    two to remove two: left as written."""
    f = B(2, 3, 4, 5)
    t = f("transpose", f("relu", f.x), perm=NHWC)
    b, c = f("tanh", t), f("sigmoid", t)
    g = f.build(f("transpose", f("where", f("greater", b, c), b, t), perm=NCHW))
    c2 = canonicalize(g)
    _same(g, c2)
    assert _ops(c2).count("transpose") <= 2


def test_a_channels_last_concat_between_nchw_layers_is_the_nchw_concat():
    """Keras joins two NHWC maps along channels (each the transpose of an NCHW layer's
    output) and transposes back for the next conv; PyTorch joins the NCHW maps along axis 1:
    one form, no transposes."""
    f = B(2, 3, 4, 5)
    a, b = f("relu", f.x), f("sigmoid", f.x)
    torch_like = f.build(f("concat", a, b, axis=1))
    f = B(2, 3, 4, 5)
    a, b = f("relu", f.x), f("sigmoid", f.x)
    joined = f("concat", f("transpose", a, perm=NHWC), f("transpose", b, perm=NHWC), axis=3)
    tf_like = f.build(f("transpose", joined, perm=NCHW))
    c = canonicalize(tf_like)
    assert _ops(c) == _ops(canonicalize(torch_like)) == ["relu", "sigmoid", "concat"]
    assert c.nodes[2].attrs["axis"] == 1
    _same(tf_like, c)


def test_a_concat_of_an_nhwc_map_read_elsewhere_is_hoisted_into_the_outer_layout():
    """concat(transpose(a), transpose(b)) read back by the inverse transpose, transpose(a)
    also read by another layer: the concat moves into the outer layout, which removes two
    transposes and adds none."""
    f = B(2, 3, 4, 5)
    a, b = f("relu", f.x), f("sigmoid", f.x)
    ta = f("transpose", a, perm=NHWC)
    joined = f("concat", ta, f("transpose", b, perm=NHWC), axis=3)
    total = f("reduce_sum", ta, axes=(1, 2, 3), keepdims=True)
    g = f.build(f("add", f("transpose", joined, perm=NCHW), total))
    c = canonicalize(g)
    (concat,) = [n for n in c.nodes if n.op == "concat"]
    assert concat.attrs["axis"] == 1 and [c.producer(v).op for v in concat.inputs] == [
        "relu", "sigmoid"]
    assert c.consumers(concat.outputs[0])[0].op == "add"
    _same(g, c)


def test_a_channels_first_split_is_the_split_then_the_transpose():
    """Tokens [B, H·W, C] made [B, C, H·W] and unflattened (PyTorch) or unflattened to
    [B, H, W, C] and made channels-first (Keras): one form, the split first. Heads merged
    after a transpose are left as written."""
    f = B(2, 20, 3)
    torch_like = f.build(f("reshape", f("transpose", f("tanh", f.x), perm=(0, 2, 1)),
                           shape=(2, 3, 4, 5)))
    f = B(2, 20, 3)
    grid = f("reshape", f("tanh", f.x), shape=(2, 4, 5, 3))
    tf_like = f.build(f("transpose", grid, perm=NCHW))
    a, b = canonicalize(torch_like), canonicalize(tf_like)
    assert _ops(a) == _ops(b) == ["tanh", "reshape", "transpose"]
    assert a.nodes[1].outputs[0].shape == (2, 4, 5, 3) and a.nodes[2].attrs["perm"] == NCHW
    _same(torch_like, a)
    f = B(2, 2, 20, 3)
    heads = f("transpose", f("tanh", f.x), perm=(0, 2, 1, 3))
    g = f.build(f("reshape", heads, shape=(2, 20, 6)))
    assert _ops(canonicalize(g)) == ["tanh", "transpose", "reshape"]
