"""Unified layouts: a residual stream between NCHW convolutions and NHWC layers comes out in
one layout whichever side of the adds the models put their transposes on, and the rewrite
computes the same values."""

from __future__ import annotations

from specgraph.passes import canonicalize
from specgraph.passes.layouts import UnifyLayoutsPass
from tests.passes.test_raising import B, _ops, _same

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _branch(f, r_nchw, i):
    """A depthwise conv in NCHW, then an NHWC norm and layer scale."""
    h = f("transpose", _conv(f, r_nchw, i), perm=NHWC)
    return f("mul", f("layer_norm", h, axis=3, scale=False, bias=False), f.p(f"s{i}", 5))


def _conv(f, x, i):
    return f("conv", x, f.p(f"w{i}", x.shape[1], 1, 1, 1), groups=x.shape[1], bias=False,
             stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))


def _keras_like():
    f = B(2, 4, 3, 5)  # NHWC input
    r = f("tanh", f.x)
    for i in range(3):
        r = f("add", r, _branch(f, f("transpose", r, perm=NCHW), i))
    return f.build(f("reduce_mean", r, axes=(1, 2)))


def _torch_like():
    f = B(2, 4, 3, 5)
    r = f("transpose", f("tanh", f.x), perm=NCHW)
    for i in range(3):
        r = f("add", r, f("transpose", _branch(f, r, i), perm=NCHW))
    return f.build(f("reduce_mean", r, axes=(2, 3)))


def test_a_residual_stream_takes_one_layout_whichever_side_transposes():
    a, b = canonicalize(_keras_like()), canonicalize(_torch_like())
    assert _ops(a) == _ops(b)
    assert _ops(a).count("transpose") == 6  # into and out of each conv, none at the adds
    _same(_torch_like(), b)
    _same(_keras_like(), a)


def test_the_cheapest_layout_is_left_alone():
    g = canonicalize(_keras_like())
    assert not UnifyLayoutsPass()(g).modified


def test_the_rewrite_alone_is_exact():
    g = _torch_like()
    result = UnifyLayoutsPass()(g)
    assert result.modified
    _same(g, result.graph)


def test_a_norm_after_a_long_residual_stream_is_raised():
    """The written-out norm's cone reaches back through many residual adds; it stops at the
    stream's values that another layer reads."""
    f = B(2, 4, 4, 8)
    r = f("tanh", f.x)
    for i in range(12):
        side = f("transpose", _conv(f, f("transpose", r, perm=NCHW), i), perm=NHWC)
        side = f("layer_norm", side, f.p(f"g{i}", 8), f.p(f"b{i}", 8), axis=3)
        r = f("add", r, f("mul", side, f.p(f"s{i}", 8)))
    m = f("reduce_mean", r, axes=(3,), keepdims=True)
    d = f("sub", r, m)
    v = f("reduce_mean", f("mul", d, d), axes=(3,), keepdims=True)
    y = f("mul", d, f("rsqrt", f("add", v, f.c(1e-6))))
    g = f.build(y)
    c = canonicalize(g)
    assert "layer_norm" in _ops(c) and "rsqrt" not in _ops(c)
    _same(g, c)
