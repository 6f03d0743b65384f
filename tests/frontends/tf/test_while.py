"""TF's ``While`` loops of a known trip count are unrolled, with the TensorLists around them:
Keras' recurrent layers trace with no opaque op and compute what the model computes; a loop
whose trip count depends on the data, or passes the limit, stays one opaque op."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402

from specgraph.check import compare  # noqa: E402
from specgraph.frontends import tf as tf_frontend  # noqa: E402
from specgraph.frontends.tf.loops import UNROLL_LIMIT  # noqa: E402
from specgraph.interpreter import run  # noqa: E402

B, T, C, H = 2, 5, 3, 4
X = np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32)


def _model(layer, x: np.ndarray = X):
    """A functional Keras model of ``layer`` on inputs shaped as ``x``, with seeded weights
    (``layer`` a callable made after the seed)."""
    keras.utils.set_random_seed(0)
    inp = keras.Input(x.shape[1:], batch_size=x.shape[0])
    return keras.Model(inp, layer()(inp))


def _opaque(traced) -> list[str]:
    return [n.attrs["target"] for n in traced.graph.nodes if n.op == "opaque"]


def _check_faithful(model, traced, tol: float = 1e-5) -> None:
    """No opaque op; the reference interpreter on the graph computes what ``model(x)`` does."""
    assert not _opaque(traced)
    got = run(traced.graph, traced.inputs, traced.weights)
    want = model(X)
    wants = dict(zip(traced.graph.output_names,
                     want if isinstance(want, (list, tuple)) else [want]))
    for key, value in wants.items():
        value = np.asarray(value)
        np.testing.assert_allclose(got[key], value, rtol=tol, atol=tol * np.abs(value).max())


RECURRENT = {"LSTM": keras.layers.LSTM, "GRU": keras.layers.GRU,
             "SimpleRNN": keras.layers.SimpleRNN}


@pytest.mark.parametrize("sequences", [True, False], ids=["sequences", "last"])
@pytest.mark.parametrize("kind", sorted(RECURRENT))
def test_a_keras_recurrent_layer_is_unrolled_and_faithful(kind: str, sequences: bool) -> None:
    model = _model(lambda: RECURRENT[kind](H, return_sequences=sequences))
    traced = tf_frontend.trace(model, (X,), reference=kind)
    _check_faithful(model, traced)
    # one step per time step, and not the step Keras computes before the loop for shapes
    matmuls = [n for n in traced.graph.nodes if n.op == "matmul"]
    assert len(matmuls) == 2 * T
    # values made in the steps stand for no native value (one op there runs every step);
    # the stacked outputs after the loop do
    keys = [str(native.key) for native in traced.graph.natives.values()]
    assert not [k for k in keys if "/while" in k]
    assert [k for k in keys if k.endswith("TensorListStack:0")]


def test_a_keras_lstm_and_the_same_lstm_unrolled_by_keras_are_equivalent() -> None:
    lhs = tf_frontend.trace(_model(lambda: keras.layers.LSTM(H, return_sequences=True)),
                            (X,), reference="loop")
    rhs = tf_frontend.trace(
        _model(lambda: keras.layers.LSTM(H, return_sequences=True, unroll=True)),
        (X,), reference="unrolled")
    report = compare(lhs, rhs)
    assert report.equivalent, [f.message for f in report.findings]
    assert report.numeric is not None and not report.numeric.notes
    assert report.numeric.outputs["output"].max_abs < 1e-6
    assert sorted(k.split(".", 1)[1] for k in report.numeric.gradients) == \
        ["lstm_cell.bias", "lstm_cell.kernel", "lstm_cell.recurrent_kernel"]
    assert all(s.max_rel < 1e-4 for s in report.numeric.gradients.values())


def test_a_hard_sigmoid_recurrent_activation_is_found_and_confirmed() -> None:
    lhs = tf_frontend.trace(_model(lambda: keras.layers.LSTM(H)), (X,), reference="sigmoid")
    rhs = tf_frontend.trace(_model(lambda: keras.layers.LSTM(
        H, recurrent_activation="hard_sigmoid")), (X,), reference="hard_sigmoid")
    report = compare(lhs, rhs)
    assert not report.equivalent
    (finding,) = [f for f in report.findings if f.code == "op-mismatch"]
    assert "sigmoid" in finding.message and "hardsigmoid" in finding.message
    assert "the numbers confirm it" in finding.message


@pytest.mark.parametrize("name", ["stacked", "bidirectional", "go_backwards"])
def test_stacked_bidirectional_and_backwards_lstms_are_faithful(name: str) -> None:
    def stacked():
        first = keras.layers.LSTM(H, return_sequences=True)
        second = keras.layers.LSTM(H)
        return lambda x: second(first(x))

    layers = {
        "stacked": stacked,
        "bidirectional": lambda: keras.layers.Bidirectional(
            keras.layers.LSTM(H, return_sequences=True)),
        "go_backwards": lambda: keras.layers.LSTM(H, go_backwards=True, return_sequences=True),
    }
    model = _model(layers[name])
    traced = tf_frontend.trace(model, (X,), reference=name)
    _check_faithful(model, traced)


@pytest.mark.parametrize("name", ["return_state", "masking", "stateful"])
def test_lstm_variants_that_wrap_the_loop_are_faithful(name: str) -> None:
    def masked():
        mask, lstm = keras.layers.Masking(), keras.layers.LSTM(H)
        return lambda x: lstm(mask(x))

    layers = {"return_state": lambda: keras.layers.LSTM(H, return_state=True),
              "masking": masked, "stateful": lambda: keras.layers.LSTM(H, stateful=True)}
    model = _model(layers[name])
    traced = tf_frontend.trace(model, (X,), reference=name)
    _check_faithful(model, traced)


class Loop(tf.Module):
    """``h = tanh(h @ w)`` in a ``tf.while_loop``, ``steps`` times or, ``until_large``,
    until the state's largest value passes 0.5 (a trip count the data decides)."""

    def __init__(self, steps: int, until_large: bool = False) -> None:
        super().__init__()
        self.steps, self.until_large = steps, until_large
        rng = np.random.default_rng(1)
        self.w = tf.Variable(rng.standard_normal((C, C)).astype(np.float32))

    def __call__(self, x):
        def cond(i, h):
            more = i < self.steps
            return tf.logical_and(more, tf.reduce_max(h) < 0.5) if self.until_large else more

        _, h = tf.while_loop(cond, lambda i, h: (i + 1, tf.tanh(h @ self.w)),
                             (tf.constant(0), x))
        return h


def test_a_loop_whose_trip_count_depends_on_the_data_stays_opaque() -> None:
    x = X[:, 0]
    traced = tf_frontend.trace(Loop(10, until_large=True), (x,), reference="until_large")
    assert _opaque(traced) == ["While"]
    assert "tanh" not in [n.op for n in traced.graph.nodes]


def test_a_loop_of_more_steps_than_the_limit_stays_opaque_with_no_step_left() -> None:
    x = X[:, 0]
    traced = tf_frontend.trace(Loop(UNROLL_LIMIT + 1), (x,), reference="long")
    assert _opaque(traced) == ["While"]
    assert [n.op for n in traced.graph.nodes] == ["opaque"]
    module = Loop(UNROLL_LIMIT)
    traced = tf_frontend.trace(module, (x,), reference="limit")
    assert not _opaque(traced)
    assert [n.op for n in traced.graph.nodes].count("tanh") == UNROLL_LIMIT
    got = run(traced.graph, traced.inputs, traced.weights)["output"]
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-5, atol=1e-6)


class Halving(tf.Module):
    """A loop that reads no variable (TF's ``StatelessWhile``): ``h = tanh(h / 2 + 1)``."""

    @tf.function
    def __call__(self, x):
        return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h / 2 + 1)),
                             (tf.constant(0), x))[1]


def test_a_stateless_while_of_a_known_trip_count_is_unrolled() -> None:
    x = X[:, 0]
    module = Halving()
    concrete = module.__call__.get_concrete_function(tf.TensorSpec(x.shape))
    assert "StatelessWhile" in [op.type for op in concrete.graph.get_operations()]
    traced = tf_frontend.trace(module, (x,), reference="halving")
    assert not _opaque(traced)
    assert [n.op for n in traced.graph.nodes].count("tanh") == 3
    got = run(traced.graph, traced.inputs, traced.weights)["output"]
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6)
