"""Duplicate views are one node: TF's Tensordot reshapes the same windows once per Dense
layer (query, key, value), PyTorch once; arithmetic is left as written."""

from __future__ import annotations

from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same


def test_the_same_reshape_written_three_times_is_one():
    f = B(2, 8, 6)
    heads = [f("tanh", f("reshape", f.x, shape=(16, 6))) for _ in range(3)]
    g = f.build(f("add", f("add", heads[0], heads[1]), heads[2]))
    c = canonicalize(g)
    assert _ops(c).count("reshape") == 1
    _same(g, c)


def test_two_layer_norms_of_one_input_stay_two_layers():
    f = B(2, 8, 6)
    outs = []
    for eps in (1e-5, 1e-3):
        mean = f("reduce_mean", f.x, axes=(2,), keepdims=True)
        d = f("sub", f.x, mean)
        var = f("reduce_mean", f("mul", d, d), axes=(2,), keepdims=True)
        outs.append(f("mul", d, f("rsqrt", f("add", var, f.c(eps)))))
    c = canonicalize(f.build(f("add", *outs)))
    assert sorted(n.attrs["eps"] for n in c.nodes if n.op == "layer_norm") == [1e-5, 1e-3]
