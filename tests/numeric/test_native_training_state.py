"""What a training step trains, in each side's own program: a linen model's ``batch_stats``
and an NNX ``BatchStat`` are updated by the step, not differentiated, as PyTorch's
BatchNorm buffers are; so a PyTorch CNN against its Flax port in eval mode agrees without a
note per running statistic. Parameters one side really freezes (``stop_gradient``) while the
other trains them are one finding (training differs), not one per parameter."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("flax")

from specgraph.cli import main  # noqa: E402

MODELS = '''
import numpy as np

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
CONV = (0.3 * RNG.standard_normal((4, 3, 3, 3))).astype(np.float32)
SCALE, SHIFT = (1 + 0.1 * RNG.standard_normal(4)).astype(np.float32), \\
    (0.1 * RNG.standard_normal(4)).astype(np.float32)
MEAN, VAR = (0.1 * RNG.standard_normal(4)).astype(np.float32), \\
    (1 + 0.2 * RNG.random(4)).astype(np.float32)
HEAD = (0.3 * RNG.standard_normal((3, 4))).astype(np.float32)
TABLES = [(0.5 * RNG.standard_normal((4, 4))).astype(np.float32) for _ in range(3)]
X = RNG.standard_normal((2, 4)).astype(np.float32)


def torch_cnn():
    import torch

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(4)
            self.head = torch.nn.Linear(4, 3, bias=False)

        def forward(self, x):
            return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))

    m = CNN()
    with torch.no_grad():
        m.conv.weight.copy_(torch.from_numpy(CONV))
        m.bn.weight.copy_(torch.from_numpy(SCALE))
        m.bn.bias.copy_(torch.from_numpy(SHIFT))
        m.bn.running_mean.copy_(torch.from_numpy(MEAN))
        m.bn.running_var.copy_(torch.from_numpy(VAR))
        m.head.weight.copy_(torch.from_numpy(HEAD))
    return m.eval(), (torch.from_numpy(IMAGE),)


def linen_cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(4, (3, 3), padding=1, use_bias=False, name="conv")(x)
            h = nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=1e-5,
                             name="bn")(h)
            return nn.Dense(3, use_bias=False, name="head")(nn.relu(h).mean(axis=(1, 2)))

    variables = {"params": {"conv": {"kernel": CONV.transpose(2, 3, 1, 0)},
                            "bn": {"scale": SCALE, "bias": SHIFT},
                            "head": {"kernel": HEAD.T}},
                 "batch_stats": {"bn": {"mean": MEAN, "var": VAR}}}
    return CNN(), variables, (IMAGE.transpose(0, 2, 3, 1),)


def keras_cnn():
    import keras

    inputs = keras.Input((8, 8, 3), batch_size=2)
    h = keras.layers.Conv2D(4, 3, padding="same", use_bias=False, name="conv")(inputs)
    h = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="bn")(h)
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(h))
    out = keras.layers.Dense(3, use_bias=False, name="head")(h)
    model = keras.Model(inputs, out)
    model.get_layer("conv").set_weights([CONV.transpose(2, 3, 1, 0)])
    model.get_layer("bn").set_weights([SCALE, SHIFT, MEAN, VAR])
    model.get_layer("head").set_weights([HEAD.T])
    return model, (IMAGE.transpose(0, 2, 3, 1),)


def torch_tables():
    import torch

    class Tables(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t0, self.t1, self.t2 = (torch.nn.Parameter(torch.from_numpy(t))
                                         for t in TABLES)

        def forward(self, x):
            return torch.tanh(x @ self.t0 + x @ self.t1 + x @ self.t2)

    return Tables(), (torch.from_numpy(X),)


def jax_tables():
    import jax
    import jax.numpy as jnp

    def apply(p, x):  # two of the three tables frozen
        sg = jax.lax.stop_gradient
        return jnp.tanh(x @ sg(p["t0"]) + x @ sg(p["t1"]) + x @ p["t2"])

    return apply, {f"t{i}": t for i, t in enumerate(TABLES)}, (X,)
'''


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "state_models.py"
    path.write_text(MODELS)
    return path


def _report(capsys):
    return json.loads(capsys.readouterr().out)


def test_batch_norm_running_statistics_are_not_trained_on_either_side(models, capsys):
    assert main(["diff", f"{models}:torch_cnn", f"{models}:linen_cnn", "--native",
                 "--format", "json"]) == 0
    report = _report(capsys)
    assert report["findings"] == []
    notes = json.dumps(report)
    assert "no gradient" not in notes
    assert "running_mean" not in notes and "batch_stats" not in notes


def test_keras_moving_statistics_get_no_gradient_as_pytorchs_buffers_get_none(models, capsys):
    """TensorFlow's program differentiated every variable it reads, a BatchNorm's moving
    mean and variance too (non-trainable), so PyTorch against Keras noted "lhs's program
    gives 2 parameters (running_var, running_mean) no gradient ... while rhs's trains
    them" (HF's GroupViT). A training step trains neither."""
    pytest.importorskip("tensorflow")
    for a, b in (("torch_cnn", "keras_cnn"), ("keras_cnn", "torch_cnn")):
        assert main(["diff", f"{models}:{a}", f"{models}:{b}", "--native",
                     "--format", "json"]) == 0
        report = _report(capsys)
        assert report["findings"] == []
        assert "no gradient" not in json.dumps(report)


def test_flax_programs_differentiate_params_not_batch_statistics():
    import flax.linen as nn
    from flax import nnx

    from specgraph.frontends import jax as jax_frontend

    module = nn.BatchNorm(use_running_average=True)
    x = np.ones((2, 4), np.float32)
    linen = jax_frontend.trace_linen(module, module.init(__import__("jax").random.PRNGKey(0),
                                                         x), (x,))
    trained = {linen.program.param_names[i] for i in linen.program.trained}
    assert trained == {"params.bias", "params.scale"}

    class Net(nnx.Module):
        def __init__(self):
            self.fc = nnx.Linear(4, 4, rngs=nnx.Rngs(0))
            self.bn = nnx.BatchNorm(4, rngs=nnx.Rngs(0))

        def __call__(self, x):
            return self.bn(self.fc(x))

    traced = jax_frontend.trace_nnx(Net(), (x,))
    assert {traced.program.param_names[i] for i in traced.program.trained} == {
        "fc.kernel", "fc.bias", "bn.scale", "bn.bias"}
    assert {"bn.mean", "bn.var"} <= set(traced.graph.params)  # still weights, compared


def test_parameters_one_side_freezes_are_one_finding(models, capsys):
    """Training differs where one side freezes what the other trains, as with a padding
    row: one finding for all of them, not one per parameter."""
    assert main(["diff", f"{models}:torch_tables", f"{models}:jax_tables", "--native",
                 "--format", "json"]) == 1
    report = _report(capsys)
    (finding,) = report["findings"]
    assert finding["code"] == "gradient-divergence"
    assert finding["affects"] == "training: which parameters learn"
    message = finding["message"]
    assert message.startswith("rhs's program gives 2 parameters (")
    assert "t0" in message and "t1" in message and "t2" not in message
    assert "while lhs's trains them; the forward pass is the same, training differs" in message
    assert "no gradient" not in json.dumps(report["numeric"]["notes"])


def test_a_parameter_pytorch_freezes_is_frozen_in_its_program(tmp_path, capsys):
    """``requires_grad=False`` (Marian's sinusoidal position table in PyTorch, trained by
    its TF port) is what the PyTorch program runs: no gradient there, so against a port
    that trains the table the pair differs in training; frozen on both, it agrees."""
    path = tmp_path / "frozen.py"
    path.write_text(FROZEN)
    assert main(["diff", f"{path}:torch_frozen", f"{path}:jax_trained", "--format",
                 "json"]) == 1
    (finding,) = _report(capsys)["findings"]
    assert finding["code"] == "gradient-divergence" and "table" in finding["message"]
    assert finding["message"].startswith("lhs's program gives parameter")
    assert main(["diff", f"{path}:torch_frozen", f"{path}:jax_frozen", "--format",
                 "json"]) == 0


FROZEN = '''
import numpy as np
import torch

X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
TABLE = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
W = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.from_numpy(TABLE.copy()), requires_grad=False)
        self.w = torch.nn.Parameter(torch.from_numpy(W.copy()))

    def forward(self, x):
        return torch.tanh((x + self.table) @ self.w)


def torch_frozen():
    return Net(), (torch.from_numpy(X),)


def jax_trained():
    import jax.numpy as jnp

    def apply(p, x):
        return jnp.tanh((x + p["table"]) @ p["w"])

    return apply, {"table": TABLE, "w": W}, (X,)


def jax_frozen():
    import jax
    import jax.numpy as jnp

    def apply(p, x):
        return jnp.tanh((x + jax.lax.stop_gradient(p["table"])) @ p["w"])

    return apply, {"table": TABLE, "w": W}, (X,)
'''


def test_running_statistics_one_side_differentiates_are_a_note_not_a_finding():
    """The zoo's CNN: PyTorch's BatchNorm statistics are buffers, the plain JAX function
    takes them among its parameters and differentiates them. That is state against
    parameters, by design of each program: a note, and the pair agrees."""
    from specgraph.check import compare
    from tests.zoo import traced

    report = compare(traced.torch_model("cnn"), traced.jax_model("cnn/jax"), mode="numbers")
    assert report.equivalent, [f.message for f in report.findings]
    (note,) = [n for n in report.numeric.notes if "as state" in n]
    assert note.startswith("lhs's program holds 4 values of state (")
    assert "running_mean" in note and note.endswith(
        "while rhs's differentiates them as parameters: their gradients are not compared")


KERAS_FROZEN = '''
import numpy as np
import torch

X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
TABLE = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)


class Net(torch.nn.Module):
    def __init__(self, frozen):
        super().__init__()
        self.table = torch.nn.Parameter(torch.from_numpy(TABLE.copy()), requires_grad=not frozen)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x + self.table)


def torch_frozen():
    return Net(True), (torch.from_numpy(X),)


def torch_trained():
    return Net(False), (torch.from_numpy(X),)


def tf_frozen_layer():
    import tf_keras as keras

    class Table(keras.layers.Layer):
        def build(self, shape):
            self.table = self.add_weight("table", shape=TABLE.shape)  # trainable itself
            self.table.assign(TABLE)

        def call(self, x):
            return x + self.table

    class M(keras.Model):
        def __init__(self):
            super().__init__()
            self.pos = Table()
            self.pos.trainable = False  # as TF's Whisper freezes its encoder's table
            self.fc = keras.layers.Dense(4)

        def call(self, x):
            return self.fc(self.pos(x))

    m = M()
    m(X)
    return m, (X,)
'''


def test_a_keras_layer_set_untrainable_freezes_its_weights(tmp_path, capsys):
    """A Keras layer's ``trainable = False`` leaves its variables' own flags set: the
    model's trainable variables say what trains. Frozen on both sides it agrees; against
    a PyTorch table that trains, training differs."""
    pytest.importorskip("tf_keras")
    path = tmp_path / "keras_frozen.py"
    path.write_text(KERAS_FROZEN)
    assert main(["diff", f"{path}:torch_frozen", f"{path}:tf_frozen_layer", "--format",
                 "json"]) == 0
    capsys.readouterr()
    assert main(["diff", f"{path}:torch_trained", f"{path}:tf_frozen_layer", "--format",
                 "json"]) == 1
    (finding,) = _report(capsys)["findings"]
    assert finding["code"] == "gradient-divergence"
    assert finding["message"].startswith("rhs's program gives parameter")
