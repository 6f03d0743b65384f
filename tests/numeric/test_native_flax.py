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


ATTENTION = '''
import numpy as np

D, T = 32, 16


def _inputs():
    return np.random.default_rng(0).standard_normal((2, T, D)).astype(np.float32)


def torch_model():
    import torch

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(D, D) for _ in range(3))
            self.out = torch.nn.Linear(D, D)

        def forward(self, x):
            q, k, v = self.q(x), self.k(x), self.v(x)
            w = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1)
            return self.out(w @ v)

    torch.manual_seed(0)
    m = Attention()
    with torch.no_grad():
        m.v.bias.fill_(30.0)  # every value row shares a large offset
    return m, (torch.from_numpy(_inputs()),)


def flax_model():
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            q, k, v = (nn.Dense(D, name=n)(x) for n in ("q", "k", "v"))
            w = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / D ** 0.5, axis=-1)
            return nn.Dense(D, name="out")(w @ v)

    x = _inputs()
    model = Attention()
    return model, model.init(jax.random.PRNGKey(0), x), (x,)
'''


def test_a_gradient_that_cancels_is_judged_against_the_one_that_reached_its_reader(tmp_path):
    """Values sharing a large offset make the gradient reaching the keys cancel to a small
    fraction of the one reaching the attention. The program gives that gradient whole, and
    it is judged as the attention's share of it would be: against the size of the gradient
    that reached the attention. So the attention is not re-run to clear rounding, and no note
    about it is written. The key projection's own input gradient is still re-run and cleared:
    its floor is one step, not carried further up."""
    from specgraph.check import compare
    from specgraph.numeric.options import NumericOptions

    path = tmp_path / "attention.py"
    path.write_text(ATTENTION)
    report = compare(f"{path}:torch_model", f"{path}:flax_model", mode="numbers",
                     options=NumericOptions(seeds=(0, 1, 2)))
    assert report.equivalent, [f.message for f in report.findings]
    notes = report.numeric.notes
    assert not [n for n in notes if n.startswith("gradients of attention")], notes
    assert [n for n in notes if n.startswith("gradients of linear at k")], notes
