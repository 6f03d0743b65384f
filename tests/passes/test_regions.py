"""The proof shortcuts of ``regions.agrees``: evaluation on fewer slices only along axes that
both sides compute slice by slice, and remembered verdicts that never cross a difference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgraph.ir import Graph, GraphBuilder, Value
from specgraph.ops import get_spec
from specgraph.passes import canonicalize
from specgraph.passes.regions import agrees
from specgraph.passes.rewrite import Rewriter
from specgraph.passes.slices import reduce_region
from tests.passes.test_raising import B, _ops, _same

F = "float32"


def _region(build, shape) -> tuple[Graph, Value, Value]:
    b = GraphBuilder()
    x = b.input("x", shape, F)

    def add(op, inputs, **attrs):
        arrays = [np.ones(v.shape) for v in inputs]
        spec = get_spec(op)
        out = np.shape(spec.reference(*arrays, **spec.normalize_attrs(attrs)))
        return b.add(op, list(inputs), attrs, shape=out, dtype=F)

    def const(value):
        return b.constant(np.asarray(value, dtype=np.float32))

    y = build(x, add, const)
    b.output("y", y)
    return b.build(), x, y


def _norm_rows(x, add, const):
    mean = add("reduce_mean", [x], axes=(2,), keepdims=False)
    d = add("sub", [x, add("reshape", [mean], shape=(*x.shape[:2], 1))])
    var = add("reduce_mean", [add("mul", [d, d])], axes=(2,), keepdims=True)
    return add("mul", [d, add("rsqrt", [add("add", [var, const(1e-5)])])])


def test_rows_of_a_norm_are_cut_and_the_normalized_axis_kept() -> None:
    g, x, y = _region(_norm_rows, (4, 64, 96))
    reduced = reduce_region(g.nodes, y, {y: (0, 1), x: (0, 1)})
    assert reduced.shapes == {x: (1, 43, 96)}  # 43·96 >= 4096 output elements kept
    (reshape,) = [n for n in reduced.nodes if n.op == "reshape"]
    assert reshape.attrs["shape"] == (1, 43, 1)


@pytest.mark.parametrize("mixing", ["reduced", "merged by a reshape", "constant varies"])
def test_an_axis_the_region_mixes_is_not_cut(mixing: str) -> None:
    def build(x, add, const):
        if mixing == "reduced":
            return add("sub", [x, add("reduce_mean", [x], axes=(0,), keepdims=True)])
        if mixing == "merged by a reshape":
            flat = add("relu", [add("reshape", [x], shape=(64 * 128,))])
            return add("reshape", [flat], shape=(64, 128))
        ramp = np.arange(64, dtype=np.float32).reshape(64, 1)
        return add("mul", [x, const(ramp)])  # row i scaled by i: rows differ

    g, x, y = _region(build, (64, 128))
    reduced = reduce_region(g.nodes, y, {y: (0, 1), x: (0, 1)})
    if mixing == "merged by a reshape":
        assert reduced is None
    else:  # the columns are still independent
        assert reduced.shapes[x][0] == 64 and reduced.shapes[x][1] < 128


def _agrees(g: Graph, x: Value, y: Value, op: str, batch: bool, **attrs) -> bool:
    rw = Rewriter(g)
    for node in g.nodes:
        rw.keep(node)
    spec = get_spec(op)
    attrs = spec.normalize_attrs(attrs)
    axes = tuple(a for a in range(y.rank) if a != attrs.get("axis"))
    return agrees(rw, list(g.nodes), y, [x], lambda env: spec.reference(env[x], **attrs),
                  batch={y: axes, x: axes} if batch else None)


@pytest.mark.parametrize("batch", [False, True])
def test_cut_evaluation_gives_the_full_verdicts(batch: bool) -> None:
    clip, x, y = _region(lambda x, add, const: add("clip", [x], min=0.0, max=6.0), (64, 512))
    assert _agrees(clip, x, y, "relu", batch) is False  # relu6 is not relu, even on a cut
    relu, x, y = _region(lambda x, add, const: add("maximum", [x, const(0.0)]), (64, 512))
    assert _agrees(relu, x, y, "relu", batch) is True
    norm, x, y = _region(_norm_rows, (4, 64, 96))
    rw = Rewriter(norm)
    for node in norm.nodes:
        rw.keep(node)
    for eps, want in ((1e-5, True), (1e-1, False)):
        def layer_norm(env, eps=eps):
            return get_spec("layer_norm").reference(env[x], axis=2, eps=eps, scale=False,
                                                    bias=False)
        got = agrees(rw, list(norm.nodes), y, [x], layer_norm, claim=("ln", eps),
                     batch={y: (0, 1), x: (0, 1)} if batch else None)
        assert got is want


def _gelu(f: B, x: Value, const: float) -> Value:
    t = f("erf", f("div", x, f.c(const)))
    return f("mul", f("mul", x, f.c(0.5)), f("add", f.c(1.0), t))


def test_identical_regions_differing_in_a_constant_get_their_own_verdicts() -> None:
    f = B(64, 96)
    first = _gelu(f, f.x, math.sqrt(2.0))
    g = f.build(_gelu(f, first, 1.5))  # the same formula with another constant
    c = canonicalize(g)
    assert _ops(c)[0] == "gelu" and "gelu" not in _ops(c)[1:]
    _same(g, c)


def test_large_layers_raise_as_small_ones() -> None:
    f = B(4, 64, 96)
    gamma, beta = f.p("ln.weight", 96), f.p("ln.bias", 96)
    outs = []
    for eps in (1e-5, 1e-3, 1e-5):  # identical layers, one with another eps
        mean = f("reduce_mean", f.x, axes=(2,), keepdims=True)
        d = f("sub", f.x, mean)
        var = f("reduce_mean", f("mul", d, d), axes=(2,), keepdims=True)
        inv = f("mul", f("rsqrt", f("add", var, f.c(eps))), gamma)
        outs.append(f("add", f("mul", d, inv), beta))
    g = f.build(f("add", f("add", outs[0], outs[1]), outs[2]))
    c = canonicalize(g)
    norms = [n.attrs["eps"] for n in c.nodes if n.op == "layer_norm"]
    assert norms == [1e-5, 1e-3, 1e-5]
    _same(g, c)
