"""A division by a constant is a multiplication by its reciprocal, computed in float64 from
the constant as stored; divisions by zero, by non-constants and integer divisions stay."""

from __future__ import annotations

import numpy as np

from specgraph.graph_nx import isomorphic
from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same


def _scaled(op: str, value) -> B:
    f = B(2, 3)
    return f.build(f("tanh", f(op, f.x, f.c(value))))


def test_dividing_by_a_constant_is_multiplying_by_its_reciprocal():
    c = canonicalize(_scaled("div", np.sqrt(8.0)))
    assert _ops(c) == ["mul", "tanh"]
    (data,) = c.constants.values()
    assert c.nodes[0].inputs[1].dtype == "float32"
    assert data == 1.0 / np.float64(np.float32(np.sqrt(8.0)))
    assert isomorphic(c, canonicalize(_scaled("mul", 8.0 ** -0.5)))
    _same(_scaled("div", np.sqrt(8.0)), c)


def test_per_channel_divisors_become_per_channel_reciprocals():
    """Normalization's (x - mean) / std over channels."""
    f = B(2, 3, 4, 4)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    g = f.build(f("div", f("sub", f.x, f.c(np.full((3, 1, 1), 0.5))), f.c(std)))
    c = canonicalize(g)
    assert "div" not in _ops(c)
    _same(g, c)


def test_what_is_no_division_by_a_nonzero_constant_stays():
    f = B(2, 3)
    g = f.build(f("div", f.x, f.c([1.0, 0.0, 2.0])))
    assert _ops(canonicalize(g)) == ["div"]
    f = B(2, 3)
    g = f.build(f("div", f.c(2.0), f("tanh", f.x)))
    assert _ops(canonicalize(g)) == ["tanh", "div"]
    f = B(2, 3)
    g = f.build(f("div", f.x, f.c(3.0), rounding="floor"))
    assert _ops(canonicalize(g)) == ["div"]


def test_a_shared_divisor_gives_one_shared_reciprocal():
    f = B(2, 3)
    c = f.c(3.0)
    g = f.build(f("add", f("div", f.x, c), f("div", f("tanh", f.x), c)))
    canonical = canonicalize(g)
    assert "div" not in _ops(canonical) and len(canonical.constants) == 1
    _same(g, canonical)


def test_a_rounding_division_is_no_scalar_factor():
    # x mod 2 as TensorFlow's FloorMod converts: x - floor(x / 2) * 2, which is not x - x
    f = B(2, 3)
    g = f.build(f("sub", f.x, f("mul", f("div", f.x, f.c(2.0), rounding="floor"), f.c(2.0))))
    c = canonicalize(g)
    assert _ops(c) == ["div", "mul", "sub"]
    _same(g, c)
    f = B(2, 3)
    g = f.build(f("tanh", f("div", f.x, f.c(1.0), rounding="floor")))  # x // 1 is floor(x)
    assert _ops(canonicalize(g)) == ["div", "tanh"]


def test_a_tied_output_head_keeps_its_scaled_input_in_every_framework():
    """T5's tied head scales the decoder's states by d_model**-0.5, then multiplies by the
    shared embedding's transpose: PyTorch's tied Linear and TensorFlow's matmul with
    ``transpose_b`` are one layer, the scaling before it (a product with something made of
    parameters alone is a linear layer, which reads its scaled input)."""
    def head(op: str) -> B:
        f = B(2, 3, 4)
        shared = f.p("shared", 5, 4)
        x = f("mul", f("tanh", f.x), f.c(0.5))
        w = f("transpose", shared, perm=(1, 0))
        return f.build(f(op, x, w, bias=False) if op == "linear" else f(op, x, w))

    matmul, linear = canonicalize(head("matmul")), canonicalize(head("linear"))
    assert _ops(matmul) == ["tanh", "mul", "transpose", "linear"]
    assert isomorphic(matmul, linear)
    _same(head("matmul"), matmul)


def test_a_product_deep_in_a_network_is_judged_without_recursion():
    """Whether an operand is made of parameters alone is walked up the graph without
    recursion: a product 3000 layers down (a ResNet-50's head is 500) canonicalizes."""
    f = B(2, 4)
    x = f.x
    for _ in range(3000):
        x = f("tanh", x)
    w = f("transpose", f("tanh", f.x), perm=(1, 0))
    g = f.build(f("matmul", f("mul", x, f.c(0.5)), w))
    c = canonicalize(g)
    assert _ops(c)[-2:] == ["matmul", "mul"]  # two activations: the scale moves past
