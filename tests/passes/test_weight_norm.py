"""Weight normalization written out (Flax: v / norm(v) * g; TF: l2_normalize(v) * g, with its
clamp of Σv² at 1e-12) is ``weight_norm``, as PyTorch's parametrization traces, proved on
random parameter values; another formula stays written out."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.interpreter import run
from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops

V = (6, 4, 5)  # [out, in/groups, k]: PyTorch's conv weight, normed over axes 0 and 1


def _conv_with(style: str):
    """A 1-D conv whose kernel is g·v/‖v‖ written the way ``style`` writes it."""
    f = B(2, 4, 9)
    v = f.p("v", *V)
    if style == "tf":  # g stored as [k, 1, 1], read transposed
        g = f("transpose", f.p("g", 5, 1, 1), perm=(2, 1, 0))
        s = f("maximum", f("reduce_sum", f("mul", v, v), axes=(0, 1), keepdims=True),
              f.c(1e-12))
        w = f("mul", f("mul", v, f("rsqrt", s)), g)
    else:
        g = f.p("g", 1, 1, 5)
        norm = f("sqrt", f("reduce_sum", f("mul", v, v), axes=(0, 1), keepdims=False))
        if style == "flax":
            w = f("mul", f("div", v, norm), g)
        elif style == "no_sqrt":  # divides by Σv², not by the norm
            w = f("mul", f("div", v, f("mul", norm, norm)), g)
        else:  # "other_axes": the norm over axes 1 and 2, the gain sized for axis 2
            n12 = f("sqrt", f("reduce_sum", f("mul", v, v), axes=(1, 2), keepdims=True))
            w = f("mul", f("div", v, n12), g)
    conv = f("conv", f.x, w, stride=(1,), padding=(0, 0), dilation=(1,), groups=1,
             bias=False)
    return f.build(conv)


def _run(g, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(g.inputs[0].shape)
    v = rng.standard_normal(V)
    gain = rng.uniform(0.5, 1.5, 5)
    weights = {"v": v, "g": gain.reshape(g.params["g"].shape)}
    return run(g, [x], weights)["y"]


@pytest.mark.parametrize("style", ["flax", "tf"])
def test_written_out_weight_norm_is_weight_norm(style: str):
    g = _conv_with(style)
    c = canonicalize(g)
    (wn,) = [n for n in c.nodes if n.op == "weight_norm"]
    assert wn.attrs["axes"] == (0, 1) and wn.inputs[0] is c.params["v"]
    assert wn.inputs[1].shape == (1, 1, 5)
    np.testing.assert_allclose(_run(c), _run(g), rtol=1e-9)


@pytest.mark.parametrize("style", ["no_sqrt", "other_axes"])
def test_another_formula_stays_written_out(style: str):
    assert "weight_norm" not in _ops(canonicalize(_conv_with(style)))


def _wio_weight_norm():
    """JAX's weight norm of a [k, in, out] kernel with an [out] gain, transposed to the
    [out, in, k] the conv reads."""
    f = B(2, 4, 9)
    v = f.p("v", 5, 4, 6)
    norm = f("sqrt", f("reduce_sum", f("mul", v, v), axes=(0, 1), keepdims=True))
    w = f("transpose", f("div", f("mul", f("reshape", f.p("g", 6), shape=(1, 1, 6)), v),
                         norm), perm=(2, 1, 0))
    conv = f("conv", f.x, w, stride=(1,), padding=(0, 0), dilation=(1,), groups=1,
             bias=False)
    return f.build(conv)


def test_a_transposed_weight_norm_is_the_weight_norm_of_the_transposed_weight():
    g = _wio_weight_norm()
    c = canonicalize(g)
    assert _ops(c) == ["reshape", "transpose", "weight_norm", "conv"]
    wn = c.nodes[2]
    assert wn.attrs["axes"] == (1, 2) and wn.inputs[0] is c.nodes[1].outputs[0]
    assert c.nodes[1].inputs[0] is c.params["v"] and wn.inputs[1].shape == (6, 1, 1)
    rng = np.random.default_rng(0)
    x, weights = rng.standard_normal((2, 4, 9)), {"v": rng.standard_normal((5, 4, 6)),
                                                   "g": rng.uniform(0.5, 1.5, 6)}
    np.testing.assert_allclose(run(c, [x], weights)["y"], run(g, [x], weights)["y"],
                               rtol=1e-9)


def test_the_parameters_of_a_transposed_weight_norm_take_the_layout_read():
    """At the model's boundary v is stored [out, in, k] and the gain [out, 1, 1], as
    PyTorch's weight_norm stores them."""
    from specgraph.model import TracedModel
    from specgraph.passes import canonicalize_model

    g = _wio_weight_norm()
    rng = np.random.default_rng(0)
    weights = {"v": rng.standard_normal((5, 4, 6)), "g": rng.uniform(0.5, 1.5, 6)}
    traced = TracedModel(g, weights, {"x": rng.standard_normal((2, 4, 9))}, {}, "jax", "t")
    c = canonicalize_model(traced)
    assert _ops(c.graph) == ["weight_norm", "conv"]
    assert c.graph.params["v"].shape == (6, 4, 5) and c.graph.params["g"].shape == (6, 1, 1)
    assert c.param_layouts == {"v": (("transpose", (2, 1, 0)),), "g": (("reshape", (6, 1, 1)),)}
    np.testing.assert_allclose(run(c.graph, [traced.inputs["x"]], c.weights)["y"],
                               run(g, [traced.inputs["x"]], weights)["y"], rtol=1e-9)
