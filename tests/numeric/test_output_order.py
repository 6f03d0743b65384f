"""Two programs may give their outputs in different orders: a PyTorch model returns a dict
in the order it builds it, JAX flattens a dict by sorted keys (an HF T5's logits and encoder
states came out in opposite places in PyTorch and TensorFlow). Each rhs output is held
against the lhs output of its name and shape, the loss reads the outputs both sides have,
and an output without a counterpart is a note, not a crash."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from specgraph.cli import main  # noqa: E402

MODELS = '''
import numpy as np

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 8)).astype(np.float32)
W1 = (0.3 * RNG.standard_normal((8, 16))).astype(np.float32)
W2 = (0.3 * RNG.standard_normal((16, 4))).astype(np.float32)


def torch_model():
    import torch

    class Net(torch.nn.Module):
        def __init__(self, extra=False):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.from_numpy(W1))
            self.w2 = torch.nn.Parameter(torch.from_numpy(W2))

        def forward(self, x):
            hidden = torch.tanh(x @ self.w1)
            return {"zlogits": hidden @ self.w2, "hidden": hidden}

    return Net(), (torch.from_numpy(X),)


def torch_more():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.from_numpy(W1))
            self.w2 = torch.nn.Parameter(torch.from_numpy(W2))

        def forward(self, x):
            hidden = torch.tanh(x @ self.w1)
            return {"zlogits": hidden @ self.w2, "hidden": hidden, "pooled": hidden.mean(1)}

    return Net(), (torch.from_numpy(X),)


def jax_model():
    import jax.numpy as jnp

    def apply(p, x):
        hidden = jnp.tanh(x @ p["w1"])
        return {"zlogits": hidden @ p["w2"], "hidden": hidden}  # flattened: hidden first

    return apply, {"w1": W1, "w2": W2}, (X,)
'''


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "order_models.py"
    path.write_text(MODELS)
    return path


def test_outputs_in_another_order_are_paired_by_name_and_shape(models, capsys):
    assert main(["diff", f"{models}:torch_model", f"{models}:jax_model", "--native",
                 "--seed", "0-1", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["findings"] == []
    numbers = json.dumps(report)
    assert "zlogits" in numbers and "hidden" in numbers


def test_an_output_the_other_side_lacks_is_a_note(models, capsys):
    code = main(["diff", f"{models}:torch_more", f"{models}:jax_model", "--numeric-only",
                 "--native", "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    notes = [n for n in json.loads(out)["numeric"]["notes"] if "no rhs output" in n]
    assert len(notes) == 1 and "pooled" in notes[0] and "left out of the loss" in notes[0]
