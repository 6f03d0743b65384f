"""The planted PyTorch kernel faults fire exactly where documented, leave everything else
exact, and vanish when their context ends; the zoo pairs that reach them diff as equivalent."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.helpers import relative_error
from tests.zoo.torch_faults import (GELU_BACKWARD_OP, GELU_BACKWARD_SCALE, SOFTMAX_OP,
                                    wrong_gelu_backward, wrong_softmax)

SOFTMAXES = {"F.softmax": lambda x, dim: F.softmax(x, dim=dim),
             "torch.softmax": lambda x, dim: torch.softmax(x, dim),
             "Tensor.softmax": lambda x, dim: x.softmax(dim)}


def _softmax64(x: torch.Tensor, dim: int) -> np.ndarray:
    a = x.double().numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _logits(n: int, dim: int = -1) -> torch.Tensor:
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(n))
    return x if dim in (-1, 1) else x.T.contiguous()


@pytest.mark.parametrize("call", sorted(SOFTMAXES))
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_over_1030_classes_is_wrong_in_its_tail_only(call: str, dim: int) -> None:
    x = _logits(1030, dim)
    with wrong_softmax():
        got = SOFTMAXES[call](x, dim).numpy()
    want = _softmax64(x, dim)
    assert relative_error(got, want) > 1e-2
    head, tail = np.split(np.moveaxis(got - want, dim, -1), [1028], axis=-1)
    assert np.abs(head).max() < 1e-6 * want.max()
    assert (np.abs(tail) > 1e-2 * np.abs(np.moveaxis(want, dim, -1)[..., 1028:])).all()


@pytest.mark.parametrize("n", [10, 1024, 1028, 1032])
def test_softmax_is_exact_where_the_fault_does_not_apply(n: int) -> None:
    x = _logits(n)
    outside = F.softmax(x, dim=-1)
    with wrong_softmax():
        inside = F.softmax(x, dim=-1)
    torch.testing.assert_close(inside, outside, rtol=0, atol=0)
    assert relative_error(inside.numpy(), _softmax64(x, -1)) < 1e-6


def _dump(op: str) -> str:
    return torch._C._dispatch_dump(op)


def test_softmax_fault_is_deregistered_on_exit_every_time() -> None:
    x, before = _logits(1030), _dump(SOFTMAX_OP)
    for _ in range(2):
        with wrong_softmax():
            assert _dump(SOFTMAX_OP) != before
            assert relative_error(F.softmax(x, -1).numpy(), _softmax64(x, -1)) > 1e-2
        assert _dump(SOFTMAX_OP) == before
        assert relative_error(F.softmax(x, -1).numpy(), _softmax64(x, -1)) < 1e-6


def test_fault_is_deregistered_when_the_block_raises() -> None:
    before = _dump(SOFTMAX_OP)
    with pytest.raises(RuntimeError, match="inside"), wrong_softmax():
        raise RuntimeError("inside")
    assert _dump(SOFTMAX_OP) == before


def _gelu_grad(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    x = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(F.gelu(x, approximate=approximate).sum(), x)
    return grad


def _gelu_grad64(x: torch.Tensor) -> np.ndarray:
    a = x.double()
    cdf = 0.5 * (1 + torch.erf(a / np.sqrt(2)))
    return (cdf + a * torch.exp(-a * a / 2) / np.sqrt(2 * np.pi)).numpy()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_is_off_by_the_planted_scale_inside_only(approximate: str) -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3
    before, exact = _dump(GELU_BACKWARD_OP), _gelu_grad(x, approximate)
    for _ in range(2):
        with wrong_gelu_backward():
            wrong = _gelu_grad(x, approximate)
        torch.testing.assert_close(wrong, exact * GELU_BACKWARD_SCALE, rtol=1e-6, atol=0)
        torch.testing.assert_close(_gelu_grad(x, approximate), exact, rtol=0, atol=0)
        assert _dump(GELU_BACKWARD_OP) == before
    if approximate == "none":
        assert relative_error(exact.numpy(), _gelu_grad64(x)) < 1e-6
        assert 1e-3 < relative_error(wrong.numpy(), _gelu_grad64(x)) < 3e-3


def test_gelu_forward_is_untouched() -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(1)) * 3
    with wrong_gelu_backward():
        inside = F.gelu(x)
    torch.testing.assert_close(inside, F.gelu(x), rtol=0, atol=0)


# --- the zoo pairs that reach the faulty kernels -----------------------------------------
def test_zoo_wide_classifier_and_gelu_mlp_reach_the_faults() -> None:
    from tests.zoo.torch_models import MODELS

    model, (x,) = MODELS["wide_classifier"]()
    with torch.no_grad():
        right = model(x)
        with wrong_softmax():
            wrong = model(x)
    assert relative_error(wrong.numpy(), right.numpy()) > 1e-2
    model, (x,) = MODELS["gelu_mlp"]()
    right = torch.autograd.grad(model(x).sum(), model.fc1.weight)[0]
    with wrong_gelu_backward():
        wrong = torch.autograd.grad(model(x).sum(), model.fc1.weight)[0]
    torch.testing.assert_close(wrong, right * GELU_BACKWARD_SCALE, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["wide_classifier", "gelu_mlp"])
def test_zoo_pair_diffs_as_equivalent(name: str) -> None:
    pytest.importorskip("jax")
    from specgraph.passes import canonicalize_model
    from specgraph.check import compare_structure
    from specgraph.frontends import torch as torch_frontend
    from tests.zoo import jax_models
    from tests.zoo.torch_models import MODELS

    lhs = canonicalize_model(torch_frontend.trace(*MODELS[name](), reference=name))
    rhs = canonicalize_model(jax_models.trace(f"{name}/jax"))
    report = compare_structure(lhs, rhs)
    assert report.equivalent, [f.message for f in report.findings]
    assert {n.op for n in lhs.graph.nodes} >= {"softmax" if name == "wide_classifier"
                                               else "gelu"}


def test_zoo_pairs_are_not_equivalent_to_each_other() -> None:
    pytest.importorskip("jax")
    from specgraph.check import compare_structure
    from specgraph.frontends import torch as torch_frontend
    from tests.zoo import jax_models
    from tests.zoo.torch_models import MODELS

    lhs = torch_frontend.trace(*MODELS["gelu_mlp"](), reference="gelu_mlp")
    assert not compare_structure(lhs, jax_models.trace("wide_classifier/jax")).equivalent
