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
