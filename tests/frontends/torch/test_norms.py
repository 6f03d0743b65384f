"""``torch.linalg.vector_norm`` (``Tensor.norm``) is written out as the formula it
computes, so it canonicalizes with the hand-written forms: √Σx² for p = 2, Σ|x|, max |x|,
(Σ|x|^p)^(1/p)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from specgraph.frontends import torch as torch_frontend
from specgraph.graph_nx import isomorphic
from specgraph.interpreter import run
from specgraph.passes import canonicalize


class _Norm(nn.Module):
    def __init__(self, how) -> None:
        super().__init__()
        self.how = how

    def forward(self, x):
        if self.how == "written":
            return x.pow(2).sum(dim=(1, 2), keepdim=True).sqrt()
        if self.how == "norm":
            return x.norm(dim=(1, 2), keepdim=True)
        return torch.linalg.vector_norm(x, ord=self.how, dim=-1)


def _trace(how):
    traced = torch_frontend.trace(_Norm(how), (torch.randn(2, 3, 4),))
    assert "opaque" not in [n.op for n in traced.graph.nodes]
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5)
    return traced


def test_the_two_norm_is_the_square_root_of_the_sum_of_squares() -> None:
    torch.manual_seed(0)
    assert isomorphic(canonicalize(_trace("norm").graph), canonicalize(_trace("written").graph))


@pytest.mark.parametrize("order", [1, 3, math.inf, -math.inf])
def test_other_orders_are_faithful(order) -> None:
    torch.manual_seed(0)
    _trace(order)
