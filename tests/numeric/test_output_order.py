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
    notes = [n for n in json.loads(out)["numeric"]["notes"] if "no rhs counterpart" in n]
    assert len(notes) == 1 and "pooled" in notes[0] and "left out of the loss" in notes[0]


def _paired(lhs, rhs, values=None):
    """``PairedRun._rhs_output_names`` on outputs given as (name, shape) pairs; ``values``
    maps rhs output positions to the lhs output positions the alignment pairs them with."""
    from types import SimpleNamespace as NS

    from specgraph.numeric.paired import PairedRun

    class Out:
        def __init__(self, shape):
            self.shape = shape

    lo = [Out(shape) for _, shape in lhs]
    ro = [Out(shape) for _, shape in rhs]
    pairing = NS(lhs=NS(outputs=lo, output_names=tuple(n for n, _ in lhs)),
                 rhs=NS(outputs=ro, output_names=tuple(n for n, _ in rhs)),
                 values={ro[j]: lo[i] for j, i in (values or {}).items()})
    return [(name, lname) for name, _, lname in PairedRun._rhs_output_names(NS(p=pairing))]


def test_output_pairing_rules_in_order_and_each_lhs_output_once():
    same = (3, 4)
    # a name beats another output's place
    assert _paired([("a", same), ("b", same)], [("c", same), ("a", same)]) == [
        ("c", "b"), ("a", "a")]
    # one lhs value the alignment gives two rhs outputs: the second is paired otherwise
    assert _paired([("last", same), ("alias", same)], [("last", same), ("alias", same)],
                   values={0: 0, 1: 0}) == [("last", "last"), ("alias", "alias")]
    # the place, then the only output left of the shape; never a shape that differs
    assert _paired([("x", (2,)), ("y", (5,))], [("p", (5,)), ("q", (2,))]) == [
        ("p", "y"), ("q", "x")]
    assert _paired([("x", (2,))], [("x", (3,))]) == [("x", None)]


RESHAPED = '''
import numpy as np

X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)


def torch_model():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(W))

        def forward(self, x):
            return torch.tanh(x @ self.w)

    return Net(), (torch.from_numpy(X),)


def jax_model():
    import jax.numpy as jnp

    return (lambda p, x: jnp.tanh(x @ p["w"])[:, :, None]), {"w": W}, (X,)
'''


def test_when_no_output_pairs_no_gradient_is_compared(tmp_path, capsys):
    """An output of another shape has no counterpart: its value is not compared and the
    loss reads nothing, on either side (lhs's gradients once came from a loss rhs never
    got)."""
    path = tmp_path / "reshaped.py"
    path.write_text(RESHAPED)
    main(["diff", f"{path}:torch_model", f"{path}:jax_model", "--numeric-only", "--native",
          "--format", "json"])
    numeric = json.loads(capsys.readouterr().out)["numeric"]
    assert any("no rhs counterpart" in n for n in numeric["notes"])
    backward = [layer.get("backward") for layer in numeric.get("layers", [])]
    assert all(b is None or b["max_rel"] < 1e-4 for b in backward), backward
