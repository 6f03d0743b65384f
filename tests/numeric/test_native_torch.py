"""The numbers from PyTorch models' own programs: the ExportedProgram run again, observed.

The invariant: what the program gives is exactly what ``module(*inputs)`` gives (eager),
and the gradients it observes are autograd's. Then, through the CLI with ``--native``: a
model against itself agrees, and the wrong gradient PyTorch 2.13's inductor computes for
``avg_pool2d(ceil_mode=True, count_include_pad=True)`` is caught at the pool and blamed on
the compiled side.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specgraph.cli import main  # noqa: E402
from specgraph.frontends.torch.tracer import _leaves_with_names, trace  # noqa: E402
from specgraph.numeric import program as prog  # noqa: E402
from specgraph.numeric.runner import Context  # noqa: E402
from specgraph.passes.boundary import canonicalize_model  # noqa: E402
from tests.zoo.torch_models import MODELS  # noqa: E402


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_program_gives_exactly_the_models_own_outputs(name):
    module, inputs = MODELS[name]()
    raw = trace(module, inputs, reference=name)
    traced = canonicalize_model(raw)
    keys = {n.key for n in traced.graph.natives.values()}
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    obs = traced.program.observe(weights, prog.native_inputs(traced, traced.inputs), keys,
                                 None, Context())
    # module(*inputs) run the way the check runs it: with autograd on (under no_grad,
    # nn.MultiheadAttention takes a fused inference path that rounds differently)
    with torch.enable_grad():
        result = module(*inputs)
    leaves = dict(_leaves_with_names(result, ""))
    assert set(obs.outputs) == set(raw.outputs)
    for key in raw.outputs:
        assert np.array_equal(obs.outputs[key], leaves[key].detach().numpy()), key  # bit for bit
    observed = 0
    for v, native in traced.graph.natives.items():
        if native.key in obs.values:
            assert native.canonical(obs.values[native.key]).shape == v.shape
            observed += 1
    assert observed >= len(traced.graph.nodes) // 2  # most layers are observable


@pytest.mark.parametrize("name", ["cnn", "transformer_block"])
def test_the_compiled_program_observes_what_eager_observes(name):
    """Compiled whole, the program is observed at the same values, each the buffer its
    readers read, with the same gradients there and at the parameters, to rounding: fusion
    changes the order of a few sums, not what is computed."""
    module, inputs = MODELS[name]()
    traced = canonicalize_model(trace(module, inputs, reference=name))
    g = traced.graph
    keys = {n.key for n in g.natives.values()}
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    feeds = prog.native_inputs(traced, traced.inputs)
    ct = {k: np.random.default_rng(1).standard_normal(v.shape).astype(np.float32)
          for k, v in zip(g.output_names, g.outputs)}
    eager = traced.program.observe(weights, feeds, keys, ct, Context())
    threads = torch.get_num_threads()  # one in a test worker: PyTorch 2.13's inductor on one
    torch.set_num_threads(max(2, threads))  # thread zeroes this CNN's gradients below its
    try:                                    # max pool (README: a bug found)
        compiled = traced.program.observe(weights, feeds, keys, ct, Context(mode="compiled"))
    finally:
        torch.set_num_threads(threads)
    assert set(compiled.values) == set(eager.values) and len(eager.values) >= 5
    assert set(compiled.grads) == set(eager.grads)
    assert set(compiled.param_grads) == set(eager.param_grads)

    def rms(x):
        return float(np.sqrt(np.mean(np.square(np.asarray(x), dtype=np.float64))))

    for kind in ("outputs", "values", "grads", "param_grads"):
        found = getattr(eager, kind)
        # a gradient zero in exact arithmetic (an attention key's bias) is rounding noise:
        # judged against the largest of its kind
        floor = max(map(rms, found.values()))
        for key, value in found.items():
            scale = max(rms(value), 1e-2 * floor)
            assert np.allclose(np.asarray(getattr(compiled, kind)[key]), np.asarray(value),
                               rtol=1e-4, atol=1e-5 * scale), f"{kind} {key}"


def test_observed_gradients_are_autograds():
    module, (x,) = MODELS["transformer_block"]()
    traced = canonicalize_model(trace(module, (x,), reference="block"))
    g = traced.graph
    last = g.nodes[-1]
    key = g.natives[last.inputs[0]].key  # the value the last layer reads
    ct = np.random.default_rng(0).standard_normal(g.outputs[0].shape).astype(np.float32)
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    obs = traced.program.observe(weights, {g.input_names[0]: x.numpy()}, {key}, {
        g.output_names[0]: ct}, Context())
    module.zero_grad()
    seen = {}
    handle = None
    for name, sub in module.named_modules():
        if name and last.scope == name:
            handle = sub.register_forward_pre_hook(
                lambda m, args: seen.setdefault("x", args[0]).retain_grad())
    out = module(x)
    out.backward(torch.from_numpy(ct))
    if handle is not None:
        handle.remove()
        assert np.allclose(obs.grads[key], seen["x"].grad.numpy(), rtol=1e-6, atol=1e-7)
    for name, p in module.named_parameters():
        if name in obs.param_grads:
            assert np.allclose(obs.param_grads[name], p.grad.numpy(), rtol=1e-6, atol=1e-7), name
    # substituted weights: the program runs with the weights it is given
    doubled = {k: v * 2 for k, v in weights.items()}
    obs2 = traced.program.observe(doubled, {g.input_names[0]: x.numpy()}, (), None, Context())
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(2)
        assert np.array_equal(obs2.outputs[g.output_names[0]], module(x).numpy())


def test_a_weight_is_copied_to_a_device_once_while_its_memory_is_given():
    """Off the CPU the program copies a weight once while views of the same memory are
    given (the comparison's seeds), hands each run its own tensor over that copy, copies
    anew for other memory or memory edited in place, and lets a copy go with its weight
    (run here on PyTorch's meta device, which copies no data: the same path as a GPU's)."""
    import gc

    module, inputs = MODELS["mlp"]()
    program = canonicalize_model(trace(module, inputs, reference="mlp")).program
    meta = torch.device("meta")
    own = np.arange(12, dtype=np.float32).reshape(3, 4)
    copies = program._copies
    first = program._on_device("w", own[:], meta)
    kept = copies.copy_of("w")
    second = program._on_device("w", own[:], meta)  # another view of the same memory
    assert copies.copy_of("w") is kept and first is not second
    first.requires_grad_(True)
    assert not second.requires_grad and not kept.requires_grad  # each run's own leaf
    elsewhere = own.T.copy().T
    program._on_device("w", elsewhere, meta)  # the same values elsewhere: copied
    assert copies.copy_of("w") is not kept
    kept = copies.copy_of("w")
    program._on_device("w", own[1:], meta)  # another part of the same memory: copied
    assert copies.copy_of("w") is not kept
    kept = copies.copy_of("w")
    own[2, 3] += 1  # edited in place (as a training step would): copied again
    program._on_device("w", own[1:], meta)
    assert copies.copy_of("w") is not kept
    del own
    gc.collect()
    assert "w" not in copies  # the weight gone, its copy goes (never the reverse)
    assert program._on_device("b", np.zeros(3, np.float32), torch.device("cpu")).device.type \
        == "cpu" and "b" not in copies  # on the CPU: the array itself


POOL = '''
import torch


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(3, stride=2, ceil_mode=True, count_include_pad=True)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def make():
    torch.manual_seed(0)
    return CNN(), (torch.randn(2, 3, 6, 6),)
'''


@pytest.fixture
def pool_model(tmp_path):
    path = tmp_path / "pool.py"
    path.write_text(POOL)
    return f"{path}:make"


def test_a_model_against_its_own_program_agrees(pool_model, capsys):
    assert main(["diff", pool_model, pool_model, "--native", "--seed", "0-2"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out


def test_inductors_wrong_avg_pool_gradient_is_caught_through_the_compiled_model(
        pool_model, capsys):
    import json

    code = main(["diff", pool_model, pool_model, "--native", "--rhs-context", "compiled",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (finding,) = report["findings"]
    assert finding["code"] == "gradient-divergence"
    assert finding["rhs"]["scope"] == "pool" and finding["blame"] == "rhs"
    forward = [layer["forward"]["max_abs"] for layer in report["numeric"]["layers"]]
    assert max(forward) == 0.0  # the forward agrees bit for bit


EMBEDDINGS = '''
import torch


class Embeddings(torch.nn.Module):
    """HF BERT's embeddings: e = tokens + types; e += positions; LayerNorm."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(50, 32)
        self.typ = torch.nn.Embedding(2, 32)
        self.pos = torch.nn.Embedding(8, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, ids):
        e = self.tok(ids) + self.typ(torch.zeros_like(ids))
        e += self.pos(torch.arange(ids.shape[1]))
        return self.head(self.ln(e))


def make():
    torch.manual_seed(0)
    return Embeddings().eval(), (torch.randint(1, 50, (2, 8)),)
'''


def test_a_value_written_in_place_later_is_observed_as_computed_in_the_compiled_program(
        tmp_path, capsys):
    """BERT's ``e = a + b; e += positions``: compiled, the observed sum was the buffer as
    the in-place add left it (the program's extra output is that buffer), a false
    numeric-divergence blamed on the compiled side against its own eager self."""
    path = tmp_path / "embeddings.py"
    path.write_text(EMBEDDINGS)
    model = f"{path}:make"
    assert main(["diff", model, model, "--rhs-context", "compiled"]) == 0, \
        capsys.readouterr().out[-2000:]
    assert "EQUIVALENT" in capsys.readouterr().out


@pytest.mark.slow
def test_inductors_zero_gradient_on_one_thread_is_caught(tmp_path):
    """PyTorch 2.13's inductor, on one CPU thread (``OMP_NUM_THREADS=1``), compiles the test
    zoo's CNN observed at its layers (a zero that requires a gradient added to each) into
    a backward that gives every gradient below its max pool as zero; on two threads it is
    right. Against its own eager self, compiled, one thread: a gradient-divergence at the
    max pool, blamed on the compiled side, the forward agreeing."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    model = tmp_path / "zoo_cnn.py"
    model.write_text("from tests.zoo.torch_models import MODELS\n\n\n"
                     "def make():\n    return MODELS['cnn']()\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "specgraph", "diff", f"{model}:make",
                           f"{model}:make", "--rhs-context", "compiled", "--format", "json"],
                          capture_output=True, text=True, env=env, cwd=root, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    (finding,) = report["findings"]
    assert finding["code"] == "gradient-divergence" and finding["op"] == "max_pool"
    assert finding["blame"] == "rhs"
    forward = [layer["forward"]["max_abs"] for layer in report["numeric"]["layers"]]
    assert max(forward) < 1e-5


def _peer_archs() -> list[str]:
    try:
        from bench.peer_models import ARCHS
    except ImportError:
        return []
    return sorted(name for name, arch in ARCHS.items() if "torch" in arch.classes)


@pytest.mark.parametrize("arch", _peer_archs())
def test_peer_models_programs_give_exactly_their_own_outputs(arch):
    """The invariant over HF transformers' PyTorch ports of the peer corpus (and Keras-sized
    ResNet50/ConvNeXt-T configs): every output bit for bit, every layer observed."""
    pytest.importorskip("transformers")
    import warnings

    from bench.peer_models import factory

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, inputs = factory(arch, "torch")()
        raw = trace(model, inputs, reference=arch)
        traced = canonicalize_model(raw)
        weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
        keys = {n.key for n in traced.graph.natives.values()}
        obs = traced.program.observe(weights, prog.native_inputs(traced, traced.inputs), keys,
                                     None, Context())
        args = [torch.as_tensor(a) if isinstance(a, np.ndarray) else a for a in inputs]
        with torch.enable_grad():
            own = dict(_leaves_with_names(model(*args), ""))
    for key in raw.outputs:
        assert np.array_equal(obs.outputs[key], own[key].detach().numpy()), key
    computed = {v for node in traced.graph.nodes for v in node.outputs}
    named = [v for v in traced.graph.natives if v in computed]
    assert len(named) >= 0.55 * len(traced.graph.nodes)
    floating = [v for v in named if v.dtype.startswith("float")]  # what gradients reach
    assert sum(traced.graph.natives[v].key in obs.values for v in floating) >= \
        0.9 * len(floating)


SENSOR = '''
import torch


class Sensor(torch.nn.Module):
    """Raw sensor readings near 1013 with a spread of 0.4: LayerNorm, then dense layers."""

    def __init__(self, fast=False, manual=False):
        super().__init__()
        self.norm = torch.nn.LayerNorm(48)
        self.fast, self.manual = fast, manual
        self.fc1 = torch.nn.Linear(48, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        if self.fast:  # the variance as E[x^2] - E[x]^2, as Flax's use_fast_variance does
            mean = x.mean(-1, keepdim=True)
            var = (x * x).mean(-1, keepdim=True) - mean * mean
            h = (x - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
        elif self.manual:  # two passes, written out: as accurate as float32 allows
            mean = x.mean(-1, keepdim=True)
            var = ((x - mean) ** 2).mean(-1, keepdim=True)
            h = (x - mean) / torch.sqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
        else:
            h = self.norm(x)
        return self.fc2(torch.relu(self.fc1(h)))


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (1013.0 + 0.4 * torch.randn(8, 48, generator=g),)


def two_pass():
    torch.manual_seed(0)
    return Sensor(), _inputs()


def fast():
    torch.manual_seed(0)
    return Sensor(fast=True), _inputs()


def manual():
    torch.manual_seed(0)
    return Sensor(manual=True), _inputs()
'''


@pytest.fixture
def sensor(tmp_path):
    path = tmp_path / "sensor.py"
    path.write_text(SENSOR)
    return path


def test_a_layer_norm_computed_as_e_x2_minus_e_x_squared_is_blamed_natively(sensor, capsys):
    """On readings near 1013 with a spread of 0.4, E[x²]−E[x]² in float32 cancels
    catastrophically. Canonicalization raises it to layer_norm, so the replay (the runner's
    own layer norm on both sides) cannot see it; the model's own program can."""
    import json

    pair = [f"{sensor}:two_pass", f"{sensor}:fast"]
    assert main(["diff", *pair, "--replay"]) == 0  # the replay computes its own layer norm
    capsys.readouterr()
    assert main(["diff", *pair, "--format", "json"]) == 1  # the program runs by default
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["code"], finding["op"], finding["blame"]) == (
        "numeric-divergence", "layer_norm", "rhs")
    assert "error against fp64: lhs" in finding["message"]


def test_two_accurate_layer_norms_on_an_ill_conditioned_input_agree(sensor, capsys):
    """Two-pass variances written two ways differ by more than the default tolerance on
    these inputs, but by no more than rounding the inputs to float32 moves the fp64
    reference: both are as accurate as float32 permits."""
    assert main(["diff", f"{sensor}:two_pass", f"{sensor}:manual", "--native",
                 "--seed", "0-3"]) == 0
    out = capsys.readouterr().out
    assert "within what float32 allows on these inputs" in out
    # one note for the layer over every seed, not one a seed
    assert out.count("within what float32 allows") == 1, out


TIES = '''
import torch
import torch.nn.functional as F


class Stem(torch.nn.Module):
    def __init__(self, zero_pad):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.zero_pad = zero_pad

    def forward(self, x):
        h = F.relu(self.conv(x))
        if self.zero_pad:  # the padding written out: zeros that tie with ReLU's zeros
            return F.max_pool2d(F.pad(h, (1, 1, 1, 1)), 3, 2)
        return F.max_pool2d(h, 3, 2, padding=1)


def padded():
    torch.manual_seed(0)
    return Stem(False), (torch.randn(2, 3, 8, 8),)


def zero_pad():
    torch.manual_seed(0)
    return Stem(True), (torch.randn(2, 3, 8, 8),)
'''


def test_max_pool_ties_are_a_note_not_a_gradient_divergence(tmp_path, capsys):
    """After a ReLU, zeros tie for a window's maximum (with the padding's zeros too): each
    program sends the gradient to another tied element. Both are as far from fp64; the
    layer has no derivative there."""
    path = tmp_path / "stem.py"
    path.write_text(TIES)
    assert main(["diff", f"{path}:padded", f"{path}:zero_pad", "--native"]) == 0
    assert "ties for the maximum" in capsys.readouterr().out
    # over several seeds, and several times in each: one note that says so
    assert main(["diff", f"{path}:padded", f"{path}:zero_pad", "--native", "--seed", "0-3"]) \
        == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines()
               if "ties for the maximum" in line]
    assert "times, seeds 0-3), each where its input ties for the maximum" in note


def test_a_kink_within_rounding_is_told_apart_from_one_far_off():
    """A ReLU's derivative jumps at 0: an input element within rounding of it may fall on
    either side in two programs (ResNet-50-sized pairs meet such elements), one far from
    every kink may not."""
    from specgraph.ir import GraphBuilder
    from specgraph.numeric.localize import _near_a_kink
    from specgraph.numeric.stats import Tolerance

    b = GraphBuilder()
    x = b.input("x", (4,), "float32")
    relu = b.add("relu", [x], shape=(4,), dtype="float32")
    clip = b.add("clip", [x], {"min": -1.0, "max": 6.0}, shape=(4,), dtype="float32")
    tanh = b.add("tanh", [x], shape=(4,), dtype="float32")
    b.output("y", b.add("add", [b.add("add", [relu, clip], shape=(4,), dtype="float32"), tanh],
                        shape=(4,), dtype="float32"))
    g = b.build()
    node = {n.op: n for n in g.nodes}
    tol = Tolerance(rtol=2e-5, atol=1e-6)
    near_zero = np.array([1.0, -2.0, 3e-7, 4.0])
    far = np.array([1.0, -2.0, 0.5, 4.0])
    assert _near_a_kink(node["relu"], near_zero, tol)
    assert not _near_a_kink(node["relu"], far, tol)
    assert _near_a_kink(node["clip"], np.array([6.0000001, 2.0, 3.0]), tol)
    assert not _near_a_kink(node["tanh"], near_zero, tol)  # smooth: no kink at all


def test_a_compiled_side_is_blamed_as_what_it_ran_and_skipped_seeds_are_said(
        pool_model, capsys, tmp_path):
    """A model against its own compiled self: "rhs (torch)" blamed one of two PyTorch
    programs without saying which; ``--seed 0-1`` stopped after seed 0 in silence; and the
    repro scripts ran the layer eagerly without a word that the compiler's fault may not
    show there (now the compiled side's script compiles the layer alone, and the note says
    that a fault of the whole program's fusion may still not show)."""
    import json

    code = main(["diff", pool_model, pool_model, "--rhs-context", "compiled", "--seed", "0-1",
                 "--format", "json", "--repro", str(tmp_path / "repro")])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (finding,) = report["findings"]
    assert "rhs (torch, cpu compiled float32) leaves the fp64 reference" in finding["message"]
    notes = report["numeric"]["notes"]
    assert "seed 1 not run: the check stops at the first seed that differs (seed 0)" in notes
    assert any("rhs's script compiles that layer alone" in n and "fusion across layers" in n
               for n in notes), notes


def test_the_compiled_sides_repro_runs_the_models_own_op_compiled_and_fails(
        pool_model, tmp_path, capsys):
    """``--repro`` of the inductor bug: the canonical pool (ceil mode written as explicit
    end padding over exact counts) is not the op the model called, so a script running
    specgraph's kernel, even compiled, passes. Each script runs the model's own
    ``aten.avg_pool2d`` call as its program made it: eagerly the gradient holds, compiled
    alone it is the wrong one, and that script exits 1: a bug report ready to file."""
    import subprocess
    import sys

    folder = tmp_path / "repro"
    code = main(["diff", pool_model, pool_model, "--native", "--rhs-context", "compiled",
                 "--repro", str(folder)])
    out = capsys.readouterr().out
    assert code == 1 and "the model's own op" in out, out
    eager, compiled = folder / "repro_torch.py", folder / "repro_torch_compiled.py"
    assert "torch.ops.aten.avg_pool2d.default" in compiled.read_text()
    assert "torch.compile(" in compiled.read_text()
    assert "torch.compile(" not in eager.read_text()
    ran = {path.name: subprocess.run([sys.executable, str(path)], capture_output=True,
                                     text=True, timeout=600)
           for path in (eager, compiled)}
    assert ran[eager.name].returncode == 0, ran[eager.name].stdout + ran[eager.name].stderr
    assert ran[compiled.name].returncode == 1, \
        ran[compiled.name].stdout + ran[compiled.name].stderr
    assert "relative error" in ran[compiled.name].stdout
