"""A pad before a max-pool folds into the pool's padding only where the pad's producer
never outputs less than the padded value: proved on the producer's range."""

from __future__ import annotations

import pytest

from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same

_POOL = {"kernel": (3, 3), "stride": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1)}


def _padded_pool(producer: str, value: float = 0.0, nhwc: bool = False):
    """max_pool(pad(producer(x))) over [2, 3, 8, 8], the pad written as TF writes it
    (through an NHWC transpose) when ``nhwc``."""
    f = B(2, 3, 8, 8)
    h = f(producer, f.x) if producer != "add" else f("add", f.x, f.c(1.0))
    if nhwc:
        t = f("transpose", h, perm=(0, 2, 3, 1))
        t = f("pad", t, pads=(0, 1, 1, 0, 0, 1, 1, 0), value=value)
        h = f("transpose", t, perm=(0, 3, 1, 2))
    else:
        h = f("pad", h, pads=(0, 0, 1, 1, 0, 0, 1, 1), value=value)
    return f.build(f("max_pool", h, **_POOL))


@pytest.mark.parametrize("producer", ["relu", "sigmoid"])
@pytest.mark.parametrize("nhwc", [False, True])
def test_a_zero_pad_of_a_non_negative_output_folds_into_the_max_pool(producer: str, nhwc: bool):
    g = _padded_pool(producer, nhwc=nhwc)
    c = canonicalize(g)
    assert _ops(c) == [producer, "max_pool"]
    assert c.nodes[1].attrs["padding"] == (1, 1, 1, 1)
    _same(g, c)


@pytest.mark.parametrize(("producer", "value"), [("add", 0.0), ("relu", 0.5), ("tanh", 0.0)])
def test_a_pad_that_can_win_a_window_stays(producer: str, value: float):
    """A producer that can output less than the padded value (a shifted input, a ReLU
    against a pad of 0.5, a tanh against 0) keeps its pad: the pool's -inf would differ."""
    c = canonicalize(_padded_pool(producer, value))
    assert "pad" in _ops(c)
    assert all(n.attrs["padding"] == (0, 0, 0, 0) for n in c.nodes if n.op == "max_pool")


def test_a_pad_of_a_conv_output_stays_even_where_random_values_rarely_show_it():
    """A conv's output is negative in about half its elements, but a window of the pool
    parts only where every real element in it is negative: random values can miss that,
    the producer's bound (none, for a conv) cannot."""
    f = B(2, 3, 8, 8)
    h = f("conv", f.x, f.p("w", 4, 3, 3, 3), f.p("b", 4), stride=(1, 1), padding=(1, 1, 1, 1),
          dilation=(1, 1), groups=1, bias=True)
    pooled = f("max_pool", f("pad", h, pads=(0, 0, 1, 1, 0, 0, 1, 1)), kernel=(3, 3),
               stride=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1))
    assert "pad" in _ops(canonicalize(f.build(pooled)))


def test_a_clip_from_above_the_pad_value_also_folds():
    f = B(2, 3, 8, 8)
    h = f("clip", f.x, min=0.0, max=6.0)  # relu6
    g = f.build(f("max_pool", f("pad", h, pads=(0, 0, 1, 1, 0, 0, 1, 1)), **_POOL))
    c = canonicalize(g)
    assert _ops(c) == ["clip", "max_pool"]
    _same(g, c)
