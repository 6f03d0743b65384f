"""The numbers from the models' own programs, PyTorch against Flax: a LayerNorm on raw
sensor readings (mean near 1013, spread 0.4).

Flax's ``nn.LayerNorm`` computes the variance as E[x²]−E[x]² by default
(``use_fast_variance=True``); in float32 on these inputs that cancels catastrophically.
Canonicalization raises both to ``layer_norm``, so the replay, running the runner's own layer
norm on both sides, sees nothing the structure does not; the models' own programs show the
divergence at the layer norm, blamed on Flax with each side's error against fp64. With
``use_fast_variance=False`` the two agree over twenty seeds: the layer is ill-conditioned on
these inputs, and both sides keep the error float32 allows it.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")

from specgraph.cli import main  # noqa: E402

MODELS = '''
import numpy as np


def _inputs():
    return (1013.0 + 0.4 * np.random.default_rng(0).standard_normal((8, 48))).astype(np.float32)


def torch_model():
    import torch

    class Sensor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(48, eps=1e-6)  # Flax's default eps
            self.fc1 = torch.nn.Linear(48, 32)
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(self.norm(x))))

    torch.manual_seed(0)
    return Sensor(), (torch.from_numpy(_inputs()),)


def _flax(fast):
    import jax
    import flax.linen as nn

    class Sensor(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm(use_fast_variance=fast, name="norm")(x)
            return nn.Dense(4, name="fc2")(nn.relu(nn.Dense(32, name="fc1")(h)))

    x = _inputs()
    model = Sensor()
    return model, model.init(jax.random.PRNGKey(0), x), (x,)


def flax_fast():
    return _flax(True)


def flax_two_pass():
    return _flax(False)
'''


@pytest.fixture
def sensor(tmp_path):
    path = tmp_path / "sensor.py"
    path.write_text(MODELS)
    return path


def _findings(capsys):
    return json.loads(capsys.readouterr().out)["findings"]


def test_flax_fast_variance_is_blamed_with_both_errors_against_fp64(sensor, capsys):
    pair = [f"{sensor}:torch_model", f"{sensor}:flax_fast", "--format", "json"]
    assert main(["diff", *pair, "--native"]) == 1
    (finding,) = _findings(capsys)
    assert (finding["code"], finding["op"], finding["blame"]) == (
        "numeric-divergence", "layer_norm", "rhs")
    assert finding["rhs"]["scope"] == "norm"
    assert "rhs (jax) leaves the fp64 reference" in finding["message"]
    assert "error against fp64: lhs" in finding["message"]


def test_flax_two_pass_layer_norm_agrees_over_twenty_seeds(sensor, capsys):
    assert main(["diff", f"{sensor}:torch_model", f"{sensor}:flax_two_pass", "--native",
                 "--seed", "0-19", "--format", "json"]) == 0
    assert _findings(capsys) == []
