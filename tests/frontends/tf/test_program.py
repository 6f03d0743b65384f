"""A TensorFlow model's own program: its concrete function's graph run again, observed.

The invariant: with nothing observed, what the program gives is exactly what the concrete
function gives when called (and within float32 rounding what the model gives called
eagerly); each observed value is the canonical value it is recorded for, in its shape and
(within float32 rounding) in the fp64 reference's numbers; its gradients are TensorFlow's
(``tf.GradientTape``); the weights it is given are the weights it runs with, the model's own
variables untouched. Then, through the CLI with ``--native``: a Keras model against itself
agrees, eager and compiled by XLA, and so do the PyTorch/Keras golden pairs.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402

from specgraph.cli import main  # noqa: E402
from specgraph.frontends import tf as tf_frontend  # noqa: E402
from specgraph.frontends.tf.convert import flatten_named  # noqa: E402
from specgraph.frontends.tf.tracer import _call, _is_keras  # noqa: E402
from specgraph.interpreter import run  # noqa: E402
from specgraph.numeric import program as prog  # noqa: E402
from specgraph.numeric.runner import Context, RunnerError  # noqa: E402
from specgraph.passes import canonicalize_model  # noqa: E402
from tests.zoo.keras_models import MODELS as ZOO  # noqa: E402


def _layer_norm_far_from_zero():
    """LayerNormalization of inputs with mean ~1013 and spread 0.4: the variance is tiny
    next to the mean, so any other way of computing it rounds differently."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.LayerNormalization(name="ln"),
                              keras.layers.Dense(4, name="head")], name="ln_offset")
    x = 1013.0 + 0.4 * np.random.default_rng(0).standard_normal((3, 64))
    return model, (x.astype(np.float32),)


def _silu_mlp():
    """Keras' silu is tf.nn.silu, whose gradient is a tf.custom_gradient."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="silu",
                                                                    name="fc1"),
                              keras.layers.Dense(3, name="fc2")], name="silu_mlp")
    return model, (np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32),)


def _grouped_conv():
    """A grouped convolution, which Keras runs as a call of a tf.function compiled by XLA
    (TensorFlow's CPU kernels have none)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6, 6, 4)),
                              keras.layers.Conv2D(6, 3, groups=2, name="conv"),
                              keras.layers.GlobalAveragePooling2D(name="gap")], name="grouped")
    return model, (np.random.default_rng(0).standard_normal((2, 6, 6, 4)).astype(np.float32),)


class _Inner(tf.Module):
    def __init__(self) -> None:
        super().__init__(name="inner")
        self.w = tf.Variable(np.random.default_rng(0).standard_normal((5, 4)), dtype=tf.float32)

    @tf.function
    def __call__(self, x):
        return tf.nn.tanh(tf.matmul(x, self.w))


class _Outer(tf.Module):
    """A tf.Module calling another's tf.function: a StatefulPartitionedCall in its graph."""

    def __init__(self) -> None:
        super().__init__(name="outer")
        self.inner = _Inner()
        self.v = tf.Variable(np.random.default_rng(1).standard_normal((4, 2)), dtype=tf.float32)

    @tf.function(input_signature=[tf.TensorSpec((3, 5), tf.float32)])
    def __call__(self, x):
        return tf.matmul(self.inner(x) * 2.0, self.v)


def _nested_module():
    return _Outer(), (np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32),)


MODELS = {**ZOO, "ln_offset": _layer_norm_far_from_zero, "nested_module": _nested_module,
          "silu_mlp": _silu_mlp, "grouped_conv": _grouped_conv}


def _own_call(model, inputs) -> dict[str, np.ndarray]:
    """The model called eagerly (Keras with ``training=False``), outputs by name."""
    args = tuple(tf.nest.map_structure(tf.convert_to_tensor, inputs))
    return {name: np.asarray(t) for name, t in
            flatten_named(_call(model, args, _is_keras(model)), "")}


@functools.cache
def _traced(name: str):
    model, inputs = MODELS[name]()
    raw = tf_frontend.trace(model, inputs, reference=name)
    return model, inputs, raw, canonicalize_model(raw)


def _observe(traced, keys=(), cotangents=None, weights=None, mode="eager"):
    weights = prog.native_weights(traced, traced.weights if weights is None else weights,
                                  traced.param_shapes)
    cts = None if cotangents is None else prog.native_cotangents(traced, cotangents)
    return traced.program.observe(weights, prog.native_inputs(traced, traced.inputs), keys,
                                  cts, Context(mode=mode))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_program_gives_exactly_what_its_concrete_function_gives(name):
    model, inputs, raw, traced = _traced(name)
    obs = _observe(traced)
    assert set(obs.outputs) == set(raw.outputs) == set(traced.graph.output_names)
    own = _own_call(model, inputs)
    for key, want in raw.outputs.items():  # TensorFlow calling the concrete function
        assert np.array_equal(obs.outputs[key], want), key  # bit for bit
        np.testing.assert_allclose(obs.outputs[key], own[key], rtol=1e-5,
                                   atol=1e-6 * max(1.0, np.abs(own[key]).max()))
    computed = {v for node in traced.graph.nodes for v in node.outputs}
    named = [v for v in traced.graph.natives if v in computed]
    assert len(named) >= len(traced.graph.nodes) // 2  # most layers are observable
    keys = {n.key for n in traced.graph.natives.values()}
    seen = _observe(traced, keys)
    for v, native in traced.graph.natives.items():
        if native.key in seen.values:
            assert native.canonical(seen.values[native.key]).shape == v.shape, native
    reference = {}  # the canonical graph in fp64: each observed value is the one it names
    run(traced.graph, traced.inputs, traced.weights,
        on_node=lambda node, outs: reference.update(zip(node.outputs, outs)))
    for v, want in reference.items():
        native = traced.graph.natives.get(v)
        if native is not None and native.key in seen.values:
            got = np.asarray(native.canonical(seen.values[native.key]), np.float64)
            want = np.asarray(want, np.float64)  # integer and boolean values are observed too
            assert np.abs(got - want).max(initial=0.0) <= \
                1e-3 * max(1.0, np.abs(want).max(initial=0.0)), native
    floating = [v for v in named if v.dtype.startswith("float")
                and isinstance(traced.graph.natives[v].key, str)]
    assert all(traced.graph.natives[v].key in seen.values for v in floating)


def test_values_inside_called_functions_are_named_by_the_calls_and_skipped():
    *_, traced = _traced("nested_module")
    keys = {n.key for n in traced.graph.natives.values()}
    assert ("StatefulPartitionedCall", "MatMul:0") in keys  # the inner module's matmul
    assert {"StatefulPartitionedCall:0", "MatMul:0"} <= keys
    obs = _observe(traced, keys)
    assert set(obs.values) == {k for k in keys if isinstance(k, str)}


def _cotangent(traced, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(v.shape).astype(np.float32)
            for name, v in zip(traced.graph.output_names, traced.graph.outputs)}


def _assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_gradients_are_gradient_tapes():
    model, (x,), _, traced = _traced("mlp")
    g = traced.graph
    last = g.nodes[-1]
    key = g.natives[last.inputs[0]].key  # what the last layer reads: fc2's activation
    output = g.natives[g.outputs[0]].key
    ct = _cotangent(traced)
    obs = _observe(traced, {key, output}, ct)
    head = model.get_layer("fc3")
    with tf.GradientTape(persistent=True) as tape:
        x = tf.constant(x)
        tape.watch(x)
        h = model.get_layer("fc2")(model.get_layer("fc1")(x))
        tape.watch(h)
        y = head(h)
    (out,) = ct.values()
    _assert_close(obs.grads[key], tape.gradient(y, h, output_gradients=out).numpy())
    (name,) = g.input_names
    _assert_close(obs.input_grads[name], tape.gradient(y, x, output_gradients=out).numpy())
    assert obs.single_reader == {key}  # fc3's matmul alone reads it; the output the caller
    assert set(obs.param_grads) == set(traced.graph.params)
    for v in model.trainable_variables:
        name = v.path.replace("/", ".").removeprefix("mlp.")  # the model's name dropped
        _assert_close(obs.param_grads[name], tape.gradient(y, v, output_gradients=out).numpy())


@pytest.mark.parametrize("name", ["silu_mlp", "grouped_conv"])
def test_parameter_gradients_are_gradient_tapes(name):
    model, (x,), _, traced = _traced(name)
    ct = _cotangent(traced)
    obs = _observe(traced, (), ct)
    with tf.GradientTape(persistent=True) as tape:
        y = model(tf.constant(x), training=False)
    (out,) = ct.values()
    assert set(obs.param_grads) == set(traced.graph.params)
    for v in model.trainable_variables:
        name = v.path.split("/", 1)[1].replace("/", ".")  # the model's name dropped
        _assert_close(obs.param_grads[name], tape.gradient(y, v, output_gradients=out).numpy())


def test_a_custom_gradient_is_named_in_the_programs_notes():
    *_, traced = _traced("silu_mlp")  # its gradient: TensorFlow's of silu's forward ops
    (note,) = traced.program.notes
    assert "1 tf.custom_gradient op(s)" in note and "fc1" in note
    assert _traced("mlp")[3].program.notes == ()


def test_gradients_reach_through_called_functions():
    model, (x,), _, traced = _traced("nested_module")
    ct = _cotangent(traced)
    obs = _observe(traced, {"StatefulPartitionedCall:0"}, ct)
    with tf.GradientTape(persistent=True) as tape:
        h = model.inner(tf.constant(x))
        y = model(tf.constant(x))
    (out,) = ct.values()
    assert set(obs.param_grads) == {"inner.w", "v"}
    _assert_close(obs.param_grads["inner.w"],
                  tape.gradient(y, model.inner.w, output_gradients=out).numpy())
    _assert_close(obs.param_grads["v"], tape.gradient(y, model.v, output_gradients=out).numpy())
    assert obs.grads["StatefulPartitionedCall:0"].shape == h.shape


@pytest.mark.parametrize("name", ["cnn", "tf_keras_text", "tf_module"])
def test_given_weights_are_the_weights_it_runs_with(name):
    model, inputs = MODELS[name]()
    raw = tf_frontend.trace(model, inputs, reference=name)
    traced = canonicalize_model(raw)
    obs = _observe(traced, weights={k: v * 2 for k, v in traced.weights.items()})
    again = _observe(traced)
    for key, want in raw.outputs.items():  # the model's own variables are untouched
        assert np.array_equal(again.outputs[key], want), key
    for v in model.variables:
        v.assign(v.numpy() * 2)
    doubled = tf_frontend.trace(model, inputs, reference=name).outputs
    for key, want in doubled.items():  # its concrete function, on doubled variables
        assert np.array_equal(obs.outputs[key], want), key


def test_compiled_runs_the_function_through_xla():
    model, inputs, raw, traced = _traced("cnn")
    keys = {n.key for n in traced.graph.natives.values()}
    obs = _observe(traced, keys, _cotangent(traced), mode="compiled")
    for key, want in raw.outputs.items():
        _assert_close(obs.outputs[key], want)
    eager = _observe(traced, keys, _cotangent(traced))
    assert set(obs.values) == set(eager.values) and set(obs.grads) == set(eager.grads)
    for name, grad in eager.param_grads.items():
        np.testing.assert_allclose(obs.param_grads[name], grad, rtol=1e-4,
                                   atol=1e-5 * np.abs(grad).max())


def test_other_precisions_are_refused():
    *_, traced = _traced("mlp")
    weights = prog.native_weights(traced, traced.weights, traced.param_shapes)
    with pytest.raises(RunnerError, match="float32 only"):
        traced.program.observe(weights, traced.inputs, (), None, Context(dtype="bfloat16"))


# --- real models ---------------------------------------------------------------------------
def _peer(name: str, framework: str):
    pytest.importorskip("transformers")
    from bench.peer_models import factory

    model, inputs = factory(name, framework)()
    raw = tf_frontend.trace(model, inputs, reference=name)
    return raw, canonicalize_model(raw)


@pytest.mark.parametrize(("name", "framework"), [
    ("bert", "tf"),  # HF transformers' TFBertModel, two narrow layers
    pytest.param("resnet50", "keras", marks=pytest.mark.slow),  # 32x32, weights=None
])
def test_real_models_programs_give_exactly_their_own_outputs_and_gradients(name, framework):
    raw, traced = _peer(name, framework)
    keys = {n.key for n in traced.graph.natives.values()}
    obs = _observe(traced)
    for key, want in raw.outputs.items():
        assert np.array_equal(obs.outputs[key], want), key
    seen = _observe(traced, keys, _cotangent(traced))
    computed = [v for node in traced.graph.nodes for v in node.outputs if v.dtype == "float32"]
    floating = [v for v in computed if v in traced.graph.natives]
    assert len(floating) >= 0.8 * len(computed)
    assert all(traced.graph.natives[v].key in seen.grads for v in floating)
    assert set(seen.param_grads) == set(traced.graph.params)


def _peer_archs() -> list[tuple[str, str]]:
    try:
        from bench.peer_models import ARCHS
    except ImportError:
        return []
    return [(name, fw) for name, arch in sorted(ARCHS.items()) for fw in sorted(arch.classes)
            if fw in ("tf", "keras")]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "framework"), _peer_archs())
def test_peer_models_programs_give_exactly_their_own_outputs(name, framework):
    """The invariant over HF transformers' TensorFlow ports of the peer corpus and Keras'
    ResNet50 and ConvNeXt-T: every output bit for bit, every float value named observed,
    gradients reaching the weights."""
    raw, traced = _peer(name, framework)
    obs = _observe(traced)
    for key, want in raw.outputs.items():
        assert np.array_equal(obs.outputs[key], want), key
    natives = traced.graph.natives
    seen = _observe(traced, {n.key for n in natives.values()}, _cotangent(traced))
    floating = [v for node in traced.graph.nodes for v in node.outputs
                if v.dtype == "float32" and v in natives]
    assert floating and all(natives[v].key in seen.values for v in floating)
    assert seen.grads and seen.param_grads


# --- through the CLI -----------------------------------------------------------------------
PAIRS = '''
from tests.zoo import keras_models, torch_models


def keras_cnn():
    return keras_models.MODELS["cnn"]()

'''


GOLDEN = {  # the golden pairs: (PyTorch zoo key, Keras zoo key)
    "mlp": ("mlp", "mlp"),
    "cnn": ("cnn", "cnn_golden"),
    "transformer_block": ("transformer_block", "preln_block"),
    "embedding_classifier": ("embedding_classifier", "embedding_classifier"),
}


@pytest.fixture
def factories(tmp_path):
    text = PAIRS + "".join(
        f"def torch_{g}():\n    return torch_models.MODELS[{t!r}]()\n\n\n"
        f"def keras_{g}():\n    return keras_models.MODELS[{k!r}]()\n\n\n"
        for g, (t, k) in GOLDEN.items())
    path = tmp_path / "pairs.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("context", ["eager", "compiled"])
def test_a_keras_model_against_its_own_program_agrees(factories, capsys, context):
    ref = f"{factories}:keras_cnn"
    assert main(["diff", ref, ref, "--native", "--rhs-context", context, "--seed", "0-1"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out


@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_golden_pairs_agree_on_their_own_programs(factories, capsys, golden):
    pytest.importorskip("torch")
    assert main(["diff", f"{factories}:torch_{golden}", f"{factories}:keras_{golden}",
                 "--native"]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out
