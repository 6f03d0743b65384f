"""A spec's ``equation:`` held against what the implementation computes for its statement."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy

from specgraph.spec.algebra import call, mean, normalize, same, unknown

SPEC = """\
dims: {B: 2, T: 4}
hyper: {d: 8, eps: 1e-5}
inputs: {x: "B T d"}
layers:
  - {name: proj, linear: x, out: d}
  - name: norm
    layer_norm: proj
    eps: eps
    equation: "(x - mean(x)) / sqrt(var(x) + eps) * gamma + beta"
  - {name: head, linear: norm, out: d}
"""

MODELS = """\
import torch
from torch import nn


class Norm(nn.Module):
    def __init__(self, std):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8) * 1.5)
        self.bias = nn.Parameter(torch.zeros(8) + 0.1)
        self.std = std

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        if self.std:
            return (x - mean) / (x.std(-1, keepdim=True, unbiased=False) + 1e-5) * self.weight + self.bias
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class Net(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.proj, self.norm, self.head = nn.Linear(8, 8), norm, nn.Linear(8, 8)

    def forward(self, x):
        return self.head(self.norm(self.proj(x)))


def _make(norm):
    torch.manual_seed(0)
    return Net(norm), (torch.randn(2, 4, 8),)


def layer_norm():
    return _make(nn.LayerNorm(8, eps=1e-5))


def by_hand():
    return _make(Norm(False))


def std_eps():
    return _make(Norm(True))
"""


def test_the_variance_is_one_term_however_it_is_written() -> None:
    x, w, eps = sympy.Symbol("x"), sympy.Symbol("weight"), sympy.Rational(1, 10**5)
    centred = x - mean(x)
    spec = normalize(centred / sympy.sqrt(call("var", x) + eps) * w)
    assert same(spec, normalize(centred / sympy.sqrt(mean(centred**2) + eps) * w))
    assert same(spec, normalize(centred / sympy.sqrt(mean(x**2) - mean(x)**2 + eps) * w))
    assert not same(spec, normalize(centred / (sympy.sqrt(call("var", x)) + eps) * w))
    assert not same(spec, normalize(centred / sympy.sqrt(call("var", x) + 10 * eps) * w))


def test_products_of_tensors_keep_their_order() -> None:
    q, k, v = sympy.symbols("q k v", commutative=False)
    spec = normalize(call("softmax", q * call("transpose", k)) * v, commutative=False)
    assert same(spec, normalize(call("softmax", q * call("transpose", k)) * v, False))
    assert not same(spec, normalize(call("softmax", k * call("transpose", q)) * v, False))
    assert unknown(normalize(call("rotate", q), False)) == ["rotate"]


@pytest.fixture
def layer_norm_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "ln.spec.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "ln_torch.py").write_text(MODELS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_layer_norm_equation_passes_the_layer_norm_and_fails_std_plus_eps(
        layer_norm_spec, capsys) -> None:
    from specgraph.cli import main

    assert main(["check", "ln_torch.py:layer_norm", "--spec", "ln.spec.yaml"]) == 0
    assert main(["check", "ln_torch.py:by_hand", "--spec", "ln.spec.yaml", "--no-numeric"]) \
        == 0
    capsys.readouterr()
    assert main(["check", "ln_torch.py:std_eps", "--spec", "ln.spec.yaml"]) == 1
    out = capsys.readouterr().out
    assert ("[equation-mismatch] the spec's equation for norm is "
            "β + γ*(x - mean(x))/√(1e-05 + var(x)), but the implementation computes "
            "β + γ*(x - mean(x))/(1e-05 + √(var(x))) there") in out
    assert "spec: ln.spec.yaml:9:5" in out and "implementation: ln_torch.py:15" in out
    assert "op-mismatch" not in out  # the equation says what the ops' difference is
