"""Every raising rule, proved: the written-out form becomes the layer op with the right
attributes and the same float64 result; a formula whose arithmetic differs is left alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgraph.interpreter import run
from specgraph.ir import Graph, GraphBuilder
from specgraph.passes import canonicalize

F = "float32"


class B:
    """A terse builder for decomposed formulas: shapes follow NumPy broadcasting."""

    def __init__(self, *shape: int) -> None:
        self.b = GraphBuilder()
        self.x = self.b.input("x", shape, F)

    def c(self, value, dtype=np.float32):
        return self.b.constant(np.array(value, dtype=dtype))

    def p(self, name, *shape):
        return self.b.param(name, shape, F)

    def __call__(self, op, *inputs, **attrs):
        arrays = [np.zeros(v.shape) for v in inputs]
        from specgraph.ops import get_spec

        spec = get_spec(op)
        with np.errstate(all="ignore"):
            shape = np.shape(spec.reference(*arrays, **spec.normalize_attrs(attrs)))
        return self.b.add(op, list(inputs), attrs, shape=shape, dtype=F)

    def build(self, y) -> Graph:
        self.b.output("y", y)
        return self.b.build()


def _same(before: Graph, after: Graph, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = 3 * rng.standard_normal(before.inputs[0].shape)
    weights = {k: rng.uniform(0.5, 1.5, v.shape) for k, v in before.params.items()}
    want = run(before, [x], weights)["y"]
    got = run(after, [x], {k: weights[k] for k in after.params})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def _ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def _gelu(tanh: bool, const: float | None = None) -> Graph:
    f = B(3, 7)
    x = f.x
    if tanh:
        inner = f("add", x, f("mul", f("pow", x, f.c(3.0)), f.c(const or 0.044715)))
        t = f("tanh", f("mul", inner, f.c(math.sqrt(2 / math.pi))))
    else:
        t = f("erf", f("div", x, f.c(const or math.sqrt(2.0))))
    return f.build(f("mul", f("mul", x, f.c(0.5)), f("add", f.c(1.0), t)))


@pytest.mark.parametrize(("tanh", "approximate"), [(False, "none"), (True, "tanh")])
def test_gelu_formula_becomes_gelu_with_its_approximation(tanh: bool, approximate: str):
    g = _gelu(tanh)
    c = canonicalize(g)
    assert _ops(c) == ["gelu"] and c.nodes[0].attrs["approximate"] == approximate
    _same(g, c)


@pytest.mark.parametrize(("tanh", "const"), [(False, 1.5), (True, 0.05)])
def test_a_different_gelu_constant_is_not_raised(tanh: bool, const: float):
    assert "gelu" not in _ops(canonicalize(_gelu(tanh, const)))


def test_relu_silu_and_relu6_stay_distinct():
    f = B(4, 5)
    relu = f("maximum", f.x, f.c(0.0))
    silu = f("mul", relu, f("sigmoid", relu))
    six = f("clip", silu, min=0.0, max=6.0)
    g = f.build(six)
    c = canonicalize(g)
    assert _ops(c) == ["relu", "silu", "clip"]
    _same(g, c)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_written_out_becomes_softmax_with_its_axis(log: bool):
    f = B(2, 3, 5)
    m = f("reduce_max", f.x, axes=(1,), keepdims=True)
    s = f("sub", f.x, m)
    e = f("exp", s)
    z = f("reduce_sum", e, axes=(1,), keepdims=True)
    y = f("sub", s, f("log", z)) if log else f("div", e, z)
    g = f.build(y)
    c = canonicalize(g)
    assert _ops(c) == ["log_softmax" if log else "softmax"] and c.nodes[0].attrs["axis"] == 1
    _same(g, c)


def _written_out_layer_norm(f: B, x, eps: float, style: str, name: str = "ln"):
    gamma, beta = f.p(f"{name}.weight", 8), f.p(f"{name}.bias", 8)
    mean = f("reduce_mean", x, axes=(2,), keepdims=True)
    d = f("sub", x, mean)
    if style == "keras":  # variance of the centred value, then x·inv + (β - μ·inv)
        var = f("reduce_mean", f("mul", d, d), axes=(2,), keepdims=True)
        inv = f("mul", f("rsqrt", f("add", var, f.c(eps))), gamma)
        return f("add", f("mul", x, inv), f("sub", beta, f("mul", mean, inv)))
    if style == "flax":  # E[x²] - E[x]², clamped at 0
        var = f("maximum", f.c(0.0), f("sub", f("reduce_mean", f("mul", x, x), axes=(2,),
                                                  keepdims=True), f("mul", mean, mean)))
        return f("add", f("mul", d, f("mul", f("rsqrt", f("add", var, f.c(eps))), gamma)), beta)
    # HF's Flax ports: the statistics reduced without keepdims, then reshaped to [..., 1]
    shape = (*x.shape[:-1], 1)
    mean = f("reduce_mean", x, axes=(2,), keepdims=False)
    var = f("maximum", f.c(0.0), f("sub", f("reduce_mean", f("mul", x, x), axes=(2,)),
                                   f("mul", mean, mean)))
    d = f("sub", x, f("reshape", mean, shape=shape))
    inv = f("rsqrt", f("add", f("reshape", var, shape=shape), f.c(eps)))
    return f("add", f("mul", f("mul", d, inv), gamma), beta)


def _layer_norm(eps: float, style: str) -> Graph:
    f = B(2, 5, 8)
    return f.build(_written_out_layer_norm(f, f.x, eps, style))


@pytest.mark.parametrize("style", ["keras", "flax", "hf_flax"])
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_arithmetic_becomes_layer_norm_with_its_eps(style: str, eps: float):
    g = _layer_norm(eps, style)
    c = canonicalize(g)
    assert _ops(c) == ["layer_norm"]
    assert dict(c.nodes[0].attrs) == {"axis": 2, "bias": True, "eps": eps, "scale": True}
    assert [c.param_name(v) for v in c.nodes[0].inputs[1:]] == ["ln.weight", "ln.bias"]
    _same(g, c)


@pytest.mark.parametrize("style", ["keras", "flax", "hf_flax"])
def test_every_layer_norm_of_a_deep_pre_norm_stream_is_raised(style: str):
    # GPT-2 and ViT in Flax: each block adds to a residual stream that only adds and layer
    # norms read, so the stream's arithmetic reaches back through every earlier block
    f = B(2, 5, 8)
    x = f.x
    for i in range(12):
        h = _written_out_layer_norm(f, x, 1e-5, style, f"h.{i}.ln")
        x = f("add", x, f("matmul", h, f.p(f"h.{i}.w", 8, 8)))
    g = f.build(_written_out_layer_norm(f, x, 1e-5, style, "ln_f"))
    c = canonicalize(g)
    assert _ops(c).count("layer_norm") == 13 and "reduce_mean" not in _ops(c)
    _same(g, c)


def test_rms_norm_arithmetic_becomes_rms_norm():
    f = B(3, 6)
    w = f.p("norm.weight", 6)
    ms = f("reduce_mean", f("pow", f.x, f.c(2.0)), axes=(1,), keepdims=True)
    g = f.build(f("mul", f("mul", f.x, f("rsqrt", f("add", ms, f.c(1e-6)))), w))
    c = canonicalize(g)
    assert _ops(c) == ["rms_norm"] and c.nodes[0].attrs["eps"] == 1e-6
    _same(g, c)


def test_channels_last_batch_norm_arithmetic_becomes_batch_norm():
    f = B(2, 4, 4, 3)
    mean, var, scale, bias = (f.p(f"bn.{n}", 3) for n in ("mean", "var", "scale", "bias"))
    inv = f("mul", f("rsqrt", f("add", var, f.c(1e-3))), scale)
    g = f.build(f("add", f("mul", f("sub", f.x, mean), inv), bias))
    c = canonicalize(g)
    assert _ops(c) == ["transpose", "batch_norm", "transpose"]
    bn = c.nodes[1]
    assert bn.attrs["eps"] == 1e-3
    assert [c.param_name(v) for v in bn.inputs[1:]] == ["bn.mean", "bn.var", "bn.scale",
                                                        "bn.bias"]
    _same(g, c)


def test_matmul_and_bias_add_become_linear():
    f = B(4, 6)
    w, b = f.p("dense.kernel", 6, 3), f.p("dense.bias", 3)
    y = f("add", f("matmul", f.x, w), f("reshape", b, shape=(1, 3)))
    g = f.build(y)
    c = canonicalize(g)
    assert _ops(c) == ["linear"] and c.nodes[0].attrs["bias"] is True
    _same(g, c)


def test_bias_on_the_wrong_axis_stays_an_add():
    f = B(3, 3)
    w, b = f.p("dense.kernel", 3, 3), f.p("dense.bias", 3)
    g = f.build(f("add", f("matmul", f.x, w), f("reshape", b, shape=(3, 1))))
    assert _ops(canonicalize(g)) == ["linear", "reshape", "add"]


def _attention(scale: float, causal: bool) -> Graph:
    f = B(2, 2, 5, 4)
    q, k, v = f.x, f("sub", f.x, f.c(0.5)), f("add", f.x, f.c(1.0))
    s = f("mul", f("matmul", q, f("transpose", k, perm=(0, 1, 3, 2))), f.c(scale))
    if causal:
        keep = np.tril(np.ones((5, 5), dtype=bool))
        s = f("where", f.c(keep, np.bool_), s, f.c(-np.inf))
    return f.build(f("matmul", f("softmax", s, axis=3), v))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_written_out_becomes_attention(causal: bool):
    g = _attention(0.5, causal)
    c = canonicalize(g)
    (att,) = [n for n in c.nodes if n.op == "attention"]
    assert att.attrs["causal"] is causal and att.attrs["scale"] == 0.5
    _same(g, c)


def test_transposes_around_elementwise_ops_cancel():
    f = B(2, 3, 4, 5)
    t = f("transpose", f.x, perm=(0, 2, 3, 1))
    y = f("transpose", f("relu", f("add", t, f.c(1.0))), perm=(0, 3, 1, 2))
    g = f.build(y)
    c = canonicalize(g)
    assert _ops(c) == ["add", "relu"]
    _same(g, c)


def test_transposes_move_through_reductions():
    f = B(2, 3, 4, 5)
    t = f("transpose", f.x, perm=(0, 2, 3, 1))
    g = f.build(f("reduce_mean", t, axes=(1, 2), keepdims=False))
    c = canonicalize(g)
    assert _ops(c) == ["reduce_mean"] and c.nodes[0].attrs["axes"] == (2, 3)
    _same(g, c)


def test_scale_split_between_q_and_k_is_one_attention_scale():
    f = B(2, 2, 5, 4)  # torch.onnx writes softmax((q·√s)·(kᵀ·√s))·v
    k = f("transpose", f("sub", f.x, f.c(0.5)), perm=(0, 1, 3, 2))
    q = f("mul", f.x, f.c(math.sqrt(0.125)))
    s = f("matmul", q, f("mul", k, f.c(math.sqrt(0.125))))
    g = f.build(f("matmul", f("softmax", s, axis=3), f("add", f.x, f.c(1.0))))
    c = canonicalize(g)
    (att,) = [n for n in c.nodes if n.op == "attention"]
    assert att.attrs["scale"] == pytest.approx(0.125)
    _same(g, c)


def test_einsum_attention_lowers_and_raises_like_matmul_attention():
    f = B(2, 5, 2, 4)  # b, t, heads, head_dim, as Flax lays it out
    k = f("mul", f.x, f.c(0.5))
    scores = f("einsum", f.x, k, equation="bqhd,bkhd->bhqk")
    p = f("softmax", f("mul", scores, f.c(0.5)), axis=3)
    g = f.build(f("einsum", p, f("add", f.x, f.c(1.0)), equation="bhqk,bkhd->bqhd"))
    c = canonicalize(g)
    assert "attention" in _ops(c) and "einsum" not in _ops(c)
    _same(g, c)
