"""Values at float32's underflow: XLA (and TensorFlow) flush subnormal results to zero,
PyTorch keeps them, so an activation that shrinks to nothing (HF MobileViT's, block by block,
with its initial weights) parts there by more than its own scale on two sides that are both
as right as float32 permits. Such values are compared to within ``UNDERFLOW`` and named in a
note; values of any normal scale keep their tolerance relative to it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specgraph.numeric.stats import UNDERFLOW, Tolerance, measure

TOL = Tolerance(2e-5, 2e-5)


def test_subnormal_values_against_flushed_zeros_agree_and_say_why() -> None:
    kept = np.random.default_rng(0).uniform(1e-39, 4e-39, (64, 48)).astype(np.float32)
    flushed = np.zeros_like(kept)
    for a, b in ((kept, flushed), (flushed, kept)):
        st = measure(a, b, TOL)
        assert not st.diverges and st.underflow
    # float64 has no such floor: 1e-39 is a number like any other there
    assert measure(kept.astype(np.float64), flushed.astype(np.float64), TOL).diverges


@pytest.mark.parametrize("scale", [1.0, 1e-12, 1e-20])
def test_a_wrong_element_of_any_normal_scale_still_parts(scale: float) -> None:
    a = (scale * np.random.default_rng(1).standard_normal((64, 48))).astype(np.float32)
    b = a.copy()
    b[3, 7] *= 1.1
    st = measure(a, b, TOL)
    assert st.diverges and not st.underflow
    assert not measure(a, a.copy(), TOL).underflow


def test_an_absolute_tolerance_asked_for_is_kept() -> None:
    a = np.full((8,), 3e-39, np.float32)
    st = measure(a, np.zeros_like(a), Tolerance(0.0, 1e-40, absolute=True))
    assert st.diverges and not st.underflow
    assert UNDERFLOW > 1e-38 * 1e3  # well above float32's subnormals, far below any activation


MODELS = '''
import numpy as np

SCALES = (1e-20, 1e-19, 0.5)  # the second layer's products are subnormal


def torch_model():
    import torch

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16),
                            torch.nn.Linear(16, 4))
    with torch.no_grad():
        for layer, s in zip(m, SCALES):
            layer.weight.mul_(s)
            layer.bias.zero_()
    return m, (torch.from_numpy(_x()),)


def _x():
    return np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)


def flax_model():
    import jax
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(4)(nn.Dense(16)(nn.Dense(16)(x)))

    m = Net()
    return m, m.init(jax.random.PRNGKey(0), _x()), (_x(),)
'''


def test_pytorch_keeping_subnormals_and_jax_flushing_them_agree(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    from specgraph.cli import main

    path = tmp_path / "shrinking.py"
    path.write_text(MODELS)
    assert main(["diff", f"{path}:torch_model", f"{path}:flax_model", "--format",
                 "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["findings"] == []
    (note,) = [n for n in report["numeric"]["notes"] if "underflow" in n]
    assert "Dense_1" in note and "not reported as divergences" in note
