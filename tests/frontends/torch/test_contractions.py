"""PyTorch's einsum and tensordot become the canonical einsum (explicit output, no
ellipsis), which the interpreter and the torch runner both execute."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from specgraph.frontends import torch as torch_frontend
from specgraph.frontends._common.einsum import explicit_einsum, tensordot_equation
from specgraph.interpreter import run


def _faithful(module: nn.Module, *inputs: torch.Tensor):
    traced = torch_frontend.trace(module, inputs)
    assert not [n.origin for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-5)
    return traced


class _Einsum(nn.Module):
    def __init__(self, equation: str) -> None:
        super().__init__()
        self.equation = equation

    def forward(self, a, b):
        return torch.einsum(self.equation, a, b)


@pytest.mark.parametrize(("equation", "shapes", "want"), [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)], "bhqd,bhkd->bhqk"),
    ("...qd,...kd->...qk", [(2, 3, 5, 4), (2, 3, 6, 4)], "abqd,abkd->abqk"),
    ("bij,bjk", [(2, 5, 4), (2, 4, 6)], "bij,bjk->ik"),  # b used twice: summed
    ("...ij,jk", [(3, 5, 4), (4, 6)], "aij,jk->aik"),
])
def test_einsum_spells_out_its_output_and_ellipsis(equation: str, shapes, want: str) -> None:
    torch.manual_seed(0)
    traced = _faithful(_Einsum(equation), *(torch.randn(*s) for s in shapes))
    (node,) = [n for n in traced.graph.nodes if n.op == "einsum"]
    assert node.attrs["equation"] == want


class _Tensordot(nn.Module):
    def __init__(self, dims) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(6, 8))
        self.dims = dims

    def forward(self, x):
        return torch.tensordot(x, self.weight, dims=self.dims)


@pytest.mark.parametrize("dims", [([2], [1]), ([-1], [-1])])
def test_tensordot_is_an_einsum_of_its_contracted_axes(dims) -> None:
    traced = _faithful(_Tensordot(dims), torch.randn(2, 5, 8))
    (node,) = [n for n in traced.graph.nodes if n.op == "einsum"]
    assert node.attrs["equation"] == "abc,dc->abd"


@pytest.mark.parametrize(("equation", "shapes"), [
    ("...j,jk", [(2, 3, 4), (4, 5)]),
    ("ij...,jk", [(4, 4, 2), (4, 5)]),
    ("Bij,jk", [(2, 3, 4), (4, 5)]),
    ("i...j,...jk->...ik", [(3, 2, 4), (2, 4, 5)]),
])
def test_explicit_equations_compute_what_numpy_reads_in_the_original(equation, shapes) -> None:
    rng = np.random.default_rng(0)
    operands = [rng.standard_normal(s) for s in shapes]
    explicit = explicit_einsum(equation, [len(s) for s in shapes])
    assert "..." not in explicit and "->" in explicit
    np.testing.assert_allclose(np.einsum(explicit, *operands), np.einsum(equation, *operands))


def test_tensordot_equation_keeps_the_free_axes_in_order() -> None:
    a, b = np.ones((2, 3)), np.arange(24.0).reshape(4, 2, 3)
    equation = tensordot_equation(2, 3, [0, 1], [1, 2])
    assert equation == "ab,cab->c"
    np.testing.assert_array_equal(np.einsum(equation, a, b),
                                  np.tensordot(a, b, axes=([0, 1], [1, 2])))
