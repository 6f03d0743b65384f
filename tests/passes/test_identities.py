"""No-ops the corpus writes: a select on a constant condition, a mask of zeros added to the
scores, a transpose that only moves size-1 axes of a reshape's output."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.passes import canonicalize
from tests.passes.test_raising import B, _ops, _same


@pytest.mark.parametrize("everywhere", [True, False])
def test_a_select_on_a_constant_condition_is_the_operand_it_picks(everywhere: bool):
    f = B(2, 3)
    keep = f.c(np.full((2, 3), everywhere), np.bool_)
    g = f.build(f("where", keep, f("tanh", f.x), f("sigmoid", f.x)))
    c = canonicalize(g)
    assert _ops(c) == ["tanh" if everywhere else "sigmoid"]
    _same(g, c)


def test_a_select_on_a_mixed_condition_stays():
    f = B(2, 3)
    keep = f.c(np.array([[True, False, True]] * 2), np.bool_)
    assert "where" in _ops(canonicalize(f.build(f("where", keep, f("tanh", f.x), f.x))))


def test_adding_a_broadcast_mask_of_zeros_is_no_op_but_a_nonzero_one_stays():
    f = B(2, 4, 5, 5)
    g = f.build(f("softmax", f("add", f.x, f.c(np.zeros((2, 1, 1, 5)))), axis=3))
    assert _ops(canonicalize(g)) == ["softmax"]
    f = B(2, 4, 5, 5)
    bias = np.zeros((2, 1, 1, 5))
    bias[1, ..., 4] = -1e9
    g = f.build(f("softmax", f("add", f.x, f.c(bias)), axis=3))
    assert "add" in _ops(canonicalize(g))


def test_a_transpose_moving_only_unit_axes_of_a_reshape_is_one_reshape():
    """TF's x[:, :, None] then a channels-first transpose is PyTorch's x[:, None]."""
    f = B(2, 7)
    g = f.build(f("relu", f("transpose", f("reshape", f.x, shape=(2, 7, 1)), perm=(0, 2, 1))))
    c = canonicalize(g)
    assert _ops(c) == ["reshape", "relu"] or _ops(c) == ["relu", "reshape"]
    _same(g, c)


def test_a_pad_of_zero_widths_goes():
    f = B(2, 3, 4)
    g = f.build(f("relu", f("pad", f.x, pads=(0,) * 6)))
    assert _ops(canonicalize(g)) == ["relu"]


def test_slices_over_distinct_axes_are_one_slice():
    """PyTorch's x[:, 0::2, 1::2] is two slices, TF's strided slice one."""
    f = B(2, 8, 8, 3)
    first = f("slice", f.x, axes=(1,), starts=(0,), ends=(8,), steps=(2,))
    g = f.build(f("slice", first, axes=(2,), starts=(1,), ends=(8,), steps=(2,)))
    c = canonicalize(g)
    assert _ops(c) == ["slice"] and c.nodes[0].attrs["axes"] == (1, 2)
    assert c.nodes[0].attrs["starts"] == (0, 1)
    _same(g, c)
    f = B(2, 8)  # the same axis twice: a slice of a slice, left as written
    first = f("slice", f.x, axes=(1,), starts=(1,), ends=(8,), steps=(2,))
    g = f.build(f("slice", first, axes=(1,), starts=(1,), ends=(4,), steps=(1,)))
    assert _ops(canonicalize(g)) == ["slice", "slice"]


def test_a_slice_that_keeps_every_element_in_order_is_the_identity_and_a_reversal_stays():
    """T5's ``bias[:, :, -T:]`` over T positions, as an unoptimized ONNX export writes it."""
    f = B(2, 3)
    g = f.build(f("tanh", f("slice", f.x, axes=(1,), starts=(0,), ends=(3,), steps=(1,))))
    assert _ops(canonicalize(g)) == ["tanh"]
    f = B(2, 3)
    g = f.build(f("tanh", f("slice", f.x, axes=(1,), starts=(2,), ends=(-4,), steps=(-1,))))
    assert "slice" in _ops(canonicalize(g))


def _mask_graph(view: str, cast_first: bool, shape: tuple[int, ...], shared: bool = False):
    f = B(2, 3)
    mask = f.b.add("greater", [f.x, f.c(0.0)], {}, shape=(2, 3), dtype="bool")

    def cast(v):
        return f.b.add("cast", [v], {"dtype": "float32"}, shape=v.shape, dtype="float32")

    def laid(v):
        return f.b.add(view, [v], {"shape": shape}, shape=shape, dtype=v.dtype)

    if shared:  # the view is read by something else too
        shown = laid(mask)
        return f.build(f("add", cast(shown), cast(f.b.add("logical_not", [shown], {},
                                                          shape=shape, dtype="bool"))))
    return f.build(f("relu", laid(cast(mask)) if cast_first else cast(laid(mask))))


@pytest.mark.parametrize("view", ["reshape", "expand"])
def test_a_cast_of_a_viewed_boolean_comes_before_the_view(view: str):
    """PyTorch's ``mask.unsqueeze(-1).to(dtype)`` against TF's ``expand_dims(cast(mask))``:
    one order, the cast first; a view that something else reads too is left alone."""
    shape = (2, 3, 1) if view == "reshape" else (4, 2, 3)
    forms = []
    for cast_first in (False, True):
        g = _mask_graph(view, cast_first, shape)
        c = canonicalize(g)
        _same(g, c)
        forms.append(_ops(c))
    assert forms[0] == forms[1] and forms[0].index("cast") < forms[0].index(view)
    assert _ops(canonicalize(_mask_graph(view, False, shape, shared=True)))[1] == view


def test_a_product_of_a_value_with_itself_is_its_square():
    """GroupViT and SwiftFormer square as ``x.pow(2)`` in PyTorch and ``x * x`` in TF."""
    forms = []
    for g in (B(2, 3), B(2, 3)):
        x = g.x
        square = g("mul", x, x) if not forms else g("pow", x, g.c(2.0))
        graph = g.build(g("relu", square))
        c = canonicalize(graph)
        _same(graph, c)
        forms.append(_ops(c))
    assert forms[0] == forms[1] == ["pow", "relu"]
    f = B(2, 3)  # two different operands stay a product
    assert _ops(canonicalize(f.build(f("mul", f.x, f("relu", f.x))))) == ["relu", "mul"]


def test_axes_of_one_inserted_then_transposed_are_inserted_after_the_transpose():
    """TF's Funnel moves its pooled ``[B, D, T]`` to ``[B, 1, T, D]`` through ``[B, D, 1,
    T]``; PyTorch's transposes to ``[B, T, D]``: the transpose first, then the axis of one,
    which the reshape dropping it again cancels."""
    f = B(2, 3, 4)
    moved = f("transpose", f("reshape", f.x, shape=(2, 3, 1, 4)), perm=(0, 2, 3, 1))
    g = f.build(f("tanh", f("reshape", moved, shape=(2, 4, 3))))
    c = canonicalize(g)
    assert _ops(c) == ["tanh", "transpose"], _ops(c)  # (sunk below the tanh)
    assert c.nodes[1].attrs["perm"] == (0, 2, 1)
    _same(g, c)


def test_flips_of_flips_and_of_transposes_cancel():
    """Flax's ``ConvTranspose(transpose_kernel=True)``: its kernel's spatial axes flipped
    one by one, its features swapped, and the axes flipped again: only the transpose."""
    f = B(3, 3, 2, 4)
    h = f("flip", f("flip", f.x, axes=(0,)), axes=(1,))
    h = f("flip", f("transpose", h, perm=(3, 2, 0, 1)), axes=(2, 3))
    g = f.build(f("tanh", h))
    c = canonicalize(g)
    assert _ops(c) == ["tanh", "transpose"], _ops(c)
    _same(g, c)
    o = B(3, 3, 2, 4)
    once = o.build(o("tanh", o("flip", o.x, axes=(0, 1))))
    assert _ops(canonicalize(once)) == ["flip", "tanh"]
