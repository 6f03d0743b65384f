"""Global pooling written three ways (PyTorch's adaptive pool, a mean over H and W, Flax's
avg_pool whose one window covers the input) is one spatial mean, proved."""

from __future__ import annotations

import pytest

from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same


def _pool(op: str, kernel: tuple[int, int], padding=(0, 0, 0, 0), **extra):
    f = B(2, 3, 4, 5)
    return f.build(f(op, f("relu", f.x), kernel=kernel, stride=kernel, padding=padding,
                     dilation=(1, 1), **extra))


@pytest.mark.parametrize(("op", "reduce"), [("avg_pool", "reduce_mean"),
                                            ("max_pool", "reduce_max")])
def test_a_pool_whose_window_is_the_whole_input_is_a_spatial_reduction(op: str, reduce: str):
    g = _pool(op, (4, 5))
    c = canonicalize(g)
    assert _ops(c) == ["relu", reduce]
    assert c.nodes[1].attrs["axes"] == (2, 3) and c.nodes[1].attrs["keepdims"]
    _same(g, c)


def test_flax_global_avg_pool_and_torch_adaptive_pool_are_one_form():
    f = B(2, 3, 4, 5)
    torch_like = canonicalize(f.build(f("adaptive_avg_pool", f("relu", f.x),
                                        output_size=(1, 1))))
    flax_like = canonicalize(_pool("avg_pool", (4, 5)))
    assert [(n.op, dict(n.attrs)) for n in torch_like.nodes] == \
        [(n.op, dict(n.attrs)) for n in flax_like.nodes]


@pytest.mark.parametrize(("kernel", "padding", "extra"), [
    ((2, 5), (0, 0, 0, 0), {}),  # two windows
    ((4, 5), (0, 0, 0, 0), {"divisor": 7}),  # a sum over 20 divided by 7
])
def test_a_pool_that_is_not_one_mean_stays(kernel, padding, extra):
    c = canonicalize(_pool("avg_pool", kernel, padding, **extra))
    assert "avg_pool" in _ops(c)


def test_a_mean_over_a_reshape_that_adds_a_unit_axis_is_the_mean_of_its_input():
    """TF's 1-D global pool: [N, L, C] reshaped to [N, 1, L, C], a mean over axis 2, then
    reshaped back: PyTorch's mean over L."""
    f = B(2, 16, 8)
    pooled = f("reduce_mean", f("reshape", f.x, shape=(2, 1, 16, 8)), axes=(2,),
               keepdims=False)
    g = f.build(f("reshape", pooled, shape=(2, 8)))
    c = canonicalize(g)
    assert _ops(c) == ["reduce_mean"] and c.nodes[0].attrs["axes"] == (1,)
    _same(g, c)
