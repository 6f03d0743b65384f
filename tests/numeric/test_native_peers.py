"""The peer pairs ``--native`` once got wrong, and the two causes behind them.

Wav2Vec2's positional conv reads the feature projection through a transpose and the residual
adds the projection itself: in a channels-last program (TensorFlow, Flax) both graph values
stand for one native value, whose gradient holds both readers' shares, so it is the
gradient of the projection, not of the transposed copy the conv reads. Whisper's Flax
encoder adds its positional table under ``stop_gradient``: JAX's zero gradient there is
the absence of a gradient, not a value to hold against PyTorch's and TensorFlow's, which
train the table (a note says so).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from specgraph.cli import main  # noqa: E402
from specgraph.frontends import jax as jax_frontend  # noqa: E402
from specgraph.frontends.jax.reach import reaching  # noqa: E402
from specgraph.ir import GraphBuilder  # noqa: E402
from specgraph.numeric.engine import _own_gradients  # noqa: E402
from specgraph.numeric.program import native_inputs, native_weights  # noqa: E402
from specgraph.numeric.runner import Context  # noqa: E402
from specgraph.passes.boundary import canonicalize_model  # noqa: E402


# --- what a JAX gradient reaches ---------------------------------------------------------
def test_stop_gradient_and_integer_casts_cut_the_gradient_off():
    def f(w, x):
        frozen = jax.lax.stop_gradient(w * 2.0)
        counted = (x > 0).astype(jnp.int32).astype(jnp.float32)  # through integers
        return frozen + x * counted

    closed = jax.make_jaxpr(f)(np.ones(3, np.float32), np.ones(3, np.float32))
    found = reaching(closed.jaxpr)
    eqns = closed.jaxpr.eqns
    first = {}
    for i, e in enumerate(eqns):
        first.setdefault(e.primitive.name, i)
    assert found.inputs == [False, True]  # w only under stop_gradient
    assert (first["mul"], 0) not in found.keys  # w * 2.0, before the cut
    assert (first["stop_gradient"], 0) in found.keys  # after it: its reader's share
    assert (first["gt"], 0) not in found.keys  # a boolean
    casts = [i for i, e in enumerate(eqns) if e.primitive.name == "convert_element_type"]
    # to integers: cut; back to floats: a value the gradient reaches (it stops there)
    assert [(i, 0) in found.keys for i in casts] == [False, True]


def test_the_gradient_is_followed_into_call_bodies_by_key():
    @jax.jit
    def inner(w, x):
        return jax.lax.stop_gradient(w) * x, w * x

    closed = jax.make_jaxpr(lambda w, x: inner(w, x)[0])(1.0, 1.0)
    found = reaching(closed.jaxpr)
    (call,) = [i for i, e in enumerate(closed.jaxpr.eqns) if e.primitive.name in ("jit", "pjit")]
    body = closed.jaxpr.eqns[call].params["jaxpr"].jaxpr
    products = [i for i, e in enumerate(body.eqns) if e.primitive.name == "mul"]
    assert (call, products[0], 0) in found.keys  # the output used
    assert (call, products[1], 0) not in found.keys  # the output dropped
    assert found.inputs == [False, True]


def test_a_jax_program_gives_a_frozen_table_no_gradient_not_a_zero_one():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 4)).astype(np.float32),
              "table": rng.standard_normal((3, 4)).astype(np.float32)}
    x = rng.standard_normal((3, 4)).astype(np.float32)

    def apply(p, x):
        return jnp.tanh(x @ p["w"] + jax.lax.stop_gradient(p["table"]))

    traced = canonicalize_model(jax_frontend.trace(apply, params, (x,), reference="frozen"))
    g = traced.graph
    keys = {n.key for n in g.natives.values()}
    ct = {g.output_names[0]: np.ones(g.outputs[0].shape, np.float32)}
    obs = traced.program.observe(native_weights(traced, traced.weights, traced.param_shapes),
                                 native_inputs(traced, traced.inputs), keys, ct, Context())
    trained = set(obs.param_grads)
    assert any(name.endswith("w") for name in trained)
    assert not any(name.endswith("table") for name in trained)
    assert obs.grads and all(np.any(g != 0) for g in obs.grads.values())


# --- whose gradient the program's is -------------------------------------------------------
def _residual(read_through_transpose: bool):
    """x = relu(a); t = transpose(x) and x stand for one native value; a conv-like reader
    of t, and (``read_through_transpose`` False) a residual that reads x itself."""
    b = GraphBuilder()
    f32 = {"dtype": "float32"}
    a = b.input("a", (2, 3, 4), "float32")
    x = b.add("relu", [a], shape=(2, 3, 4), **f32)
    t = b.add("transpose", [x], {"perm": (0, 2, 1)}, shape=(2, 4, 3), **f32)
    y = b.add("neg", [t], shape=(2, 4, 3), **f32)
    out = b.add("transpose", [y], {"perm": (0, 2, 1)}, shape=(2, 3, 4), **f32)
    if not read_through_transpose:
        out = b.add("add", [x, out], shape=(2, 3, 4), **f32)
    b.output("y", out)
    b.native(x, "x")
    b.native(t, "x", (0, 2, 1))
    g = b.build()
    return g, x, t


def test_a_transposed_copy_read_beside_a_residual_does_not_own_the_native_gradient():
    g, x, t = _residual(read_through_transpose=False)
    natives = {v: n for v, n in g.natives.items() if v in (x, t)}
    assert _own_gradients(g, natives, {x, t}) == {x}


def test_a_transposed_copy_that_is_the_only_way_in_owns_it():
    g, x, t = _residual(read_through_transpose=True)
    natives = {v: n for v, n in g.natives.items() if v in (x, t)}
    assert _own_gradients(g, natives, {x, t}) == {x, t}


# --- the peer pairs --------------------------------------------------------------------------
def _frameworks() -> None:
    for name in ("transformers", "torch", "tensorflow", "flax"):
        pytest.importorskip(name)


FAST = [
    ("wav2vec2", "tf", "torch"),  # channels-last TF: pos_conv_embed's input and the residual
]
SLOW = [
    ("wav2vec2", "torch", "tf"),
    ("wav2vec2", "torch", "flax"),
    ("wav2vec2", "flax", "torch"),
    ("whisper", "torch", "flax"),  # PyTorch's padding row stays the one finding
    ("whisper", "flax", "torch"),
    ("whisper", "flax", "tf"),
    ("wav2vec2", "tf", "flax"),  # both channels-last: right before, and still
]


@pytest.mark.parametrize("pair", [*FAST, *(pytest.param(p, marks=pytest.mark.slow)
                                            for p in SLOW)], ids="-".join)
def test_peer_pair_gets_the_right_verdict_natively(pair):
    _frameworks()
    from bench.peers import expected, run_pair

    outcome = run_pair(*pair, ("--native",))
    assert outcome.kind == "right", (outcome.exit, sorted(outcome.found), outcome.detail)
    assert outcome.found == expected(*pair)


@pytest.mark.slow  # ~35 s on 2 cores (bench.peers runs the pair too)
def test_whisper_tf_freezes_its_position_table_as_flax_does(capsys):
    """TF's Whisper sets its encoder position layer ``trainable = False`` (each variable
    was made trainable); Flax reads the table under ``stop_gradient``: both freeze it. The
    model's trainable variables decide, not the variable's own flag: no finding."""
    _frameworks()
    models = "bench/peer_models.py"
    code = main(["diff", f"{models}:whisper_tf", f"{models}:whisper_flax", "--native",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["findings"]
    assert "embed_positions" not in json.dumps(report["numeric"]["notes"])
