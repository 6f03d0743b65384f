"""The JAX model's own program (``JaxProgram``): its outputs are the model's, bit for bit;
the values it observes are the graph's values at their natives; its gradients are JAX's,
custom rules included; and a Flax LayerNorm's own formula is what runs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specgraph.frontends import jax as jax_frontend
from specgraph.frontends.jax.tracer import leaves_with_names
from specgraph.interpreter import run
from specgraph.model import TracedModel
from specgraph.numeric.program import native_weights
from specgraph.numeric.runner import Context, RunnerError
from specgraph.passes.boundary import canonicalize_model
from tests.zoo.jax_models import MODELS

EAGER, COMPILED = Context(device="cpu"), Context(device="cpu", mode="compiled")


@dataclass
class Case:
    """A traced model with the function, parameters and inputs it was traced from."""

    traced: TracedModel
    apply: Callable[..., Any]
    params: Any
    inputs: tuple[Any, ...]

    def own(self, params: Any = None) -> dict[str, np.ndarray]:
        """The model's outputs by graph output name, run eagerly (no jit)."""
        return _named(self.apply(self.params if params is None else params, *self.inputs))

    def weights(self, scale: float = 1.0) -> dict[str, np.ndarray]:
        """The traced graph's weights, back in the program's layouts."""
        t = self.traced
        return native_weights(t, {k: w * scale for k, w in t.weights.items()}, t.param_shapes)

    def leaves(self, tree: Any = None) -> dict[str, Any]:
        return dict(leaves_with_names(self.params if tree is None else tree, "", bare="params"))


def _named(out: Any) -> dict[str, np.ndarray]:
    return {name: np.asarray(a) for name, a in leaves_with_names(out, "")}


def _zoo(name: str) -> Case:
    factory = MODELS[name]()
    if name.endswith("/jax"):
        apply, params, inputs = factory
        traced = jax_frontend.trace(apply, params, inputs, reference=name)
    else:
        module, params, inputs = factory
        apply = module.apply
        traced = jax_frontend.trace_linen(module, params, inputs, reference=name)
    return Case(traced, apply, params, tuple(inputs))


# --- models built here -------------------------------------------------------------------
class NormedHead(nn.Module):
    """Dense, LayerNorm (Flax's fast or two-pass variance), Dense."""

    fast: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Dense(16, name="inner")(x)
        h = nn.LayerNorm(use_fast_variance=self.fast, name="norm")(h)
        return nn.Dense(4, name="head")(h)


def _normed(fast: bool, x: np.ndarray | None = None) -> Case:
    module = NormedHead(fast)
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32) if x is None else x
    variables = module.init(jax.random.key(0), x)
    traced = jax_frontend.trace_linen(module, variables, (x,), reference=f"normed/{fast}")
    return Case(traced, module.apply, variables, (x,))


@jax.custom_jvp
def _doubled(x: jax.Array) -> jax.Array:
    return jnp.sin(x) * 2.0


@_doubled.defjvp
def _doubled_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return _doubled(x), 3.0 * jnp.cos(x) * t  # not the body's derivative: the rule counts


@jax.custom_vjp
def _clipped(x: jax.Array) -> jax.Array:
    return jnp.tanh(x) + 0.5 * x


def _clipped_fwd(x: jax.Array) -> tuple:
    return _clipped(x), x


def _clipped_bwd(x: jax.Array, g: jax.Array) -> tuple:
    return (0.25 * g,)


_clipped.defvjp(_clipped_fwd, _clipped_bwd)


@jax.jit
def _block(w: jax.Array, h: jax.Array) -> jax.Array:
    return jnp.cos(h @ w) * 1.5


def _calls() -> Case:
    """A jit body called twice, a custom_jvp and a custom_vjp function of the user's."""
    rng = np.random.default_rng(2)
    params = {"w1": rng.standard_normal((6, 6)).astype(np.float32),
              "w2": rng.standard_normal((6, 6)).astype(np.float32),
              "out": rng.standard_normal((6, 3)).astype(np.float32)}
    x = rng.standard_normal((4, 6)).astype(np.float32)

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        h = _block(p["w1"], x)
        h = _clipped(_doubled(_block(p["w2"], h)))
        return h @ p["out"]

    return Case(jax_frontend.trace(apply, params, (x,), reference="calls"), apply, params,
                (x,))


class Heads(nn.Module):
    """Self-attention with its heads split by ``DenseGeneral`` projections and merged by the
    output's: the program has no value of the canonical projections (each is its
    ``(batch, time, heads, dim)`` output with the heads merged by a reshape)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        q, k, v = (nn.DenseGeneral((4, 8), name=name)(x) for name in ("query", "key", "value"))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(8.0).astype(x.dtype)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        return nn.DenseGeneral(32, axis=(-2, -1), name="out")(mixed)


def _heads() -> Case:
    module = Heads()
    x = np.random.default_rng(4).standard_normal((2, 6, 32)).astype(np.float32)
    variables = module.init(jax.random.key(0), x)
    traced = jax_frontend.trace_linen(module, variables, (x,), reference="heads")
    return Case(traced, module.apply, variables, (x,))


def _bert() -> Case:
    pytest.importorskip("transformers")
    from tests.zoo import hf_bert

    apply, params, inputs = hf_bert.flax()
    traced = jax_frontend.trace(apply, params, inputs, reference="bert")
    return Case(traced, apply, params, tuple(inputs))


FACTORIES: dict[str, Callable[[], Case]] = {
    **{name: functools.partial(_zoo, name)
       for name in ("mlp/jax", "mlp/linen", "cnn/linen", "preln/linen")},
    "normed/fast": functools.partial(_normed, True),
    "normed/two_pass": functools.partial(_normed, False),
    "calls/jax": _calls,
    "heads/linen": _heads,
    "bert/flax": _bert,
}
HEADED = ["mlp/jax", "mlp/linen", "cnn/linen", "preln/linen", "normed/fast"]
# HF's Flax BERT: building and tracing it takes 15 s here, running it eagerly as long again
BERT = pytest.param("bert/flax", marks=pytest.mark.slow)
ALL = [*(name for name in FACTORIES if name != "bert/flax"), BERT]


@functools.cache
def case(name: str) -> Case:
    return FACTORIES[name]()


def _all_keys(traced: TracedModel) -> set[Any]:
    return {n.key for n in traced.graph.natives.values()}


def _cotangents(c: Case, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(a.shape).astype(np.float32)
            for k, a in c.traced.outputs.items() if a.dtype.kind == "f"}


# --- the program's outputs are the model's --------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_eager_outputs_are_the_models_own_bit_for_bit(name: str) -> None:
    c = case(name)
    obs = c.traced.program.observe(c.weights(), c.traced.inputs, (), None, EAGER)
    want = c.own()
    assert set(obs.outputs) == set(want)
    for key, array in want.items():
        np.testing.assert_array_equal(obs.outputs[key], array, err_msg=key, strict=True)


@pytest.mark.parametrize("name", ALL)
def test_compiled_outputs_are_the_jitted_models(name: str) -> None:
    c = case(name)
    obs = c.traced.program.observe(c.weights(), c.traced.inputs, (), None, COMPILED)
    for key, array in _named(jax.jit(c.apply)(c.params, *c.inputs)).items():
        np.testing.assert_array_equal(obs.outputs[key], array, err_msg=key, strict=True)


@pytest.mark.parametrize("name", ["mlp/jax", "cnn/linen", "preln/linen", "calls/jax"])
def test_doubled_weights_give_the_doubled_models_outputs(name: str) -> None:
    c = case(name)
    obs = c.traced.program.observe(c.weights(2.0), c.traced.inputs, (), None, EAGER)
    doubled = jax.tree_util.tree_map(lambda a: a * 2, c.params)
    for key, array in c.own(doubled).items():
        np.testing.assert_array_equal(obs.outputs[key], array, err_msg=key)


@pytest.mark.parametrize("name", ["cnn/linen", "preln/linen", BERT])
def test_weights_go_back_to_the_programs_layouts(name: str) -> None:
    """``param_layouts`` undone on the graph's weights (raw and canonical) gives the
    model's own arrays (conv kernels stored OIHW, DenseGeneral kernels folded)."""
    c = case(name)
    own = c.leaves()
    for traced in (c.traced, canonicalize_model(c.traced)):
        back = native_weights(traced, traced.weights, traced.param_shapes)
        for key, array in back.items():
            np.testing.assert_array_equal(array, np.asarray(own[key]), err_msg=key)


# --- observed values --------------------------------------------------------------------
def _reference_values(traced: TracedModel) -> dict[Any, np.ndarray]:
    values: dict[Any, np.ndarray] = {}

    def capture(node: Any, outs: tuple) -> None:
        values.update(zip(node.outputs, outs))

    run(traced.graph, traced.inputs, traced.weights, on_node=capture)
    return values


@pytest.mark.parametrize("name", ["mlp/jax", "mlp/linen", "cnn/linen", "preln/linen",
                                  "normed/two_pass", "calls/jax", "heads/linen", BERT])
def test_observed_values_are_the_graphs_values_at_their_natives(name: str) -> None:
    c = case(name)
    for traced in (c.traced, canonicalize_model(c.traced)):
        g = traced.graph
        obs = traced.program.observe(c.weights(), c.traced.inputs, _all_keys(traced), None,
                                     EAGER)
        reference = _reference_values(traced)
        seen = 0
        for v, native in g.natives.items():
            if native.key not in obs.values:
                continue
            got = native.canonical(obs.values[native.key])
            assert got.shape == v.shape, (v, native)
            if v in reference:
                want = reference[v]
                np.testing.assert_allclose(got, want, rtol=1e-4,
                                           atol=1e-4 * max(1.0, float(np.abs(want).max())),
                                           err_msg=f"{g.producer(v)} at {native}")
                seen += 1
        assert seen >= len(g.nodes) // 2
        for out_name, v in zip(g.output_names, g.outputs):
            native = g.natives[v]
            layout = traced.output_layouts.get(out_name)
            want = obs.outputs[out_name]
            if layout is not None:
                want = np.transpose(want, np.argsort(layout))
            np.testing.assert_array_equal(native.canonical(obs.values[native.key]), want)


def test_heads_split_and_merged_by_reshapes_are_observed_in_the_program() -> None:
    """Every layer's output of the canonical graph stands for a value of the program, the
    projections' through the reshape that splits their heads: the numbers compared there
    are the program's own, not a kernel's recomputation."""
    c = case("heads/linen")
    g = canonicalize_model(c.traced).graph
    layers = [n for n in g.nodes if n.op in ("linear", "attention")]
    assert [n.op for n in layers].count("attention") == 1 and len(layers) == 5
    for node in layers:
        assert node.outputs[0] in g.natives, node
    for node in layers[:3]:  # the projections: DenseGeneral's (2, 6, 4, 8), heads merged
        native = g.natives[node.outputs[0]]
        assert native.shape == (2, 6, 32) and native.perm is None


def test_canonical_layers_keep_the_key_of_their_region() -> None:
    """A Flax LayerNorm is raised to one ``layer_norm``; its output is the region's."""
    c = case("normed/fast")
    g = canonicalize_model(c.traced).graph
    (norm,) = [n for n in g.nodes if n.op == "layer_norm"]
    native = g.natives[norm.outputs[0]]
    assert native.key in _all_keys(c.traced)


def test_keys_name_occurrences_in_call_bodies() -> None:
    """One jit body called twice gives two keys per value inside it; values inside custom
    rules are observed too, without gradients."""
    c = case("calls/jax")
    keys = _all_keys(c.traced)
    nested = sorted(k for k in keys if len(k) > 2)
    assert len({k[0] for k in nested}) >= 3  # two jit calls, a custom_jvp, a custom_vjp
    obs = c.traced.program.observe(c.weights(), c.traced.inputs, keys, _cotangents(c), EAGER)
    assert keys == set(obs.values)
    jaxpr = c.traced.program.closed.jaxpr
    calls = {k[0]: jaxpr.eqns[k[0]].primitive.name for k in nested}
    for k in nested:
        sealed = calls[k[0]].startswith("custom")
        assert (k in obs.grads) is not sealed, (k, calls[k[0]])
    firsts = [k for k in nested if calls[k[0]] == "jit"]
    by_call: dict[int, list] = {}
    for k in firsts:
        by_call.setdefault(k[0], []).append(k)
    a, b = (sorted(v) for v in by_call.values())
    assert [k[1:] for k in a] == [k[1:] for k in b]
    assert not np.array_equal(obs.values[a[0]], obs.values[b[0]])


# --- gradients -----------------------------------------------------------------------------
def _matmul_head(traced: TracedModel) -> tuple[Any, str]:
    """The graph value the last matmul reads and its weight's name."""
    g = traced.graph
    node = [n for n in g.nodes if n.op == "matmul"][-1]
    names = {v: k for k, v in g.params.items()}
    return node.inputs[0], names[node.inputs[1]]


@pytest.mark.parametrize("mode", [EAGER, COMPILED], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", HEADED)
def test_gradient_at_the_last_layers_input(name: str, mode: Context) -> None:
    """The gradient at the head's input is that of Σ<ct, head(h)>: ct @ kernelᵀ."""
    c = case(name)
    h, kernel = _matmul_head(c.traced)
    key = c.traced.graph.natives[h].key
    cts = _cotangents(c)
    obs = c.traced.program.observe(c.weights(), c.traced.inputs, {key}, cts, mode)
    w = jnp.asarray(c.leaves()[kernel])
    (ct,) = cts.values()
    _, pull = jax.vjp(lambda x: x @ w, jnp.asarray(obs.values[key]))
    (want,) = pull(jnp.asarray(ct))
    np.testing.assert_allclose(obs.grads[key], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [EAGER, COMPILED], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["mlp/jax", "mlp/linen", "cnn/linen", "preln/linen",
                                  "calls/jax", BERT])
def test_parameter_gradients_are_jaxs(name: str, mode: Context) -> None:
    """Σ<ct, apply(params, x)> differentiated by JAX, custom rules included."""
    c = case(name)
    cts = _cotangents(c)
    obs = c.traced.program.observe(c.weights(), c.traced.inputs, _all_keys(c.traced), cts,
                                   mode)

    def loss(params: Any) -> jax.Array:
        outs = dict(leaves_with_names(c.apply(params, *c.inputs), ""))
        return sum(jnp.vdot(cts[k], outs[k]) for k in cts)

    grads = dict(leaves_with_names(jax.jit(jax.grad(loss))(c.params), "", bare="params"))
    # every parameter a training step differentiates: a linen model's batch statistics
    # are updated by the step, not trained
    assert set(obs.param_grads) == {n for n in c.traced.graph.params
                                    if not n.startswith("batch_stats.")}
    scale = max(float(np.abs(g).max()) for g in grads.values())
    for key, g in obs.param_grads.items():  # (a gradient that is 0 in exact arithmetic,
        np.testing.assert_allclose(g, grads[key], rtol=2e-5,  # an attention key's bias', is
                                   atol=1e-6 * scale, err_msg=key)  # rounding noise)


@pytest.mark.parametrize("mode", [EAGER, COMPILED], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["cnn/linen", "preln/linen", "calls/jax", BERT])
def test_probes_leave_the_forward_as_it_is(name: str, mode: Context) -> None:
    """Eager: bit for bit. Compiled: the values observed become outputs of the XLA program
    and the backward shares its forward, so XLA fuses differently: a few ulps."""
    c = case(name)
    program, weights, inputs = c.traced.program, c.weights(), c.traced.inputs
    plain = program.observe(weights, inputs, (), None, mode)
    probed = program.observe(weights, inputs, _all_keys(c.traced), _cotangents(c), mode)
    for key, array in plain.outputs.items():
        if mode.mode == "eager":
            np.testing.assert_array_equal(probed.outputs[key], array, err_msg=key)
        else:
            np.testing.assert_allclose(probed.outputs[key], array, rtol=1e-6,
                                       atol=1e-6 * float(np.abs(array).max()), err_msg=key)


# --- the program's own formula ---------------------------------------------------------------
def test_fast_variance_layer_norm_is_what_runs() -> None:
    """Inputs of mean ~1013 and spread 0.4: Flax's E[x²]−E[x]² in float32 cancels, its
    two-pass variance does not; the observed layer's output shows which one ran."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    errors = {}
    for fast in (True, False):
        c = _normed(fast, x)
        traced = canonicalize_model(c.traced)
        g = traced.graph
        (norm,) = [n for n in g.nodes if n.op == "layer_norm"]
        inner = c.params["params"]["inner"]
        # the Dense before the norm makes the norm's inputs mean ~1013, spread 0.4
        inner = {"kernel": np.asarray(inner["kernel"]) * 0.4 / np.sqrt(8) / 0.6,
                 "bias": np.full_like(np.asarray(inner["bias"]), 1013.0)}
        params = {"params": {**c.params["params"], "inner": inner}}
        weights = native_weights(c.traced, {
            **c.traced.weights, "params.inner.kernel": inner["kernel"],
            "params.inner.bias": inner["bias"]}, c.traced.param_shapes)
        x_key = g.natives[norm.inputs[0]].key
        y_key = g.natives[norm.outputs[0]].key
        obs = traced.program.observe(weights, traced.inputs, {x_key, y_key}, None, EAGER)
        h = obs.values[x_key].astype(np.float64)
        assert abs(h.mean() - 1013) < 1 and 0.2 < h.std() < 0.8
        scale = np.asarray(params["params"]["norm"]["scale"], np.float64)
        bias = np.asarray(params["params"]["norm"]["bias"], np.float64)
        exact = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6)
        errors[fast] = float(np.abs(obs.values[y_key] - (exact * scale + bias)).max())
        np.testing.assert_array_equal(obs.outputs["output"], c.own(params)["output"])
    assert errors[False] < 1e-2
    assert errors[True] > 20 * errors[False], errors


def test_what_the_program_cannot_run_is_an_error() -> None:
    c = case("mlp/jax")
    program, weights, inputs = c.traced.program, c.weights(), c.traced.inputs
    with pytest.raises(RunnerError, match="bfloat16 is not supported yet"):
        program.observe(weights, inputs, (), None, Context(dtype="bfloat16"))
    with pytest.raises(RunnerError, match="needs inputs"):
        program.observe(weights, {}, (), None, EAGER)
    # a key that names no equation output (or one inside a cond's branch) is not observed
    obs = program.observe(weights, inputs, {(999, 0), ("x",), (0,)}, None, EAGER)
    assert obs.values == {}


def test_matmuls_left_at_the_default_precision_get_the_contexts_on_a_gpu() -> None:
    """JAX reads jax_default_matmul_precision when ``lax.dot_general`` is called, not when
    its equation is bound again: the program's matmuls and convolutions that leave the
    precision to the default (inside jit bodies and cond branches too) are given the
    context's, or a GPU would run them in TF32 under a float32 context."""
    from specgraph.frontends.jax.program import with_precision

    @jax.jit
    def inner(x, w):
        return jnp.tanh(x @ w)

    def f(x, w, k):
        y = inner(x, w)
        z = jax.lax.conv_general_dilated(y[None, None], k, (1, 1), "SAME")
        kept = jnp.dot(z[0, 0], w, precision=jax.lax.Precision.DEFAULT)  # the model's own
        return jax.lax.cond(True, lambda a: a @ w.T, lambda a: a, kept)

    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    k = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    closed = jax.make_jaxpr(f)(x, w, k)
    precise = with_precision(closed.jaxpr, jax.lax.Precision.HIGHEST)
    text = str(precise)
    assert "precision=None" not in text
    assert text.count("HIGHEST") == 2 * 3  # the jit body's, the convolution's, the branch's
    assert "DEFAULT" in text  # a precision the model states stays its own
    assert with_precision(precise, jax.lax.Precision.HIGHEST) is precise
    np.testing.assert_array_equal(jax.core.eval_jaxpr(precise, closed.consts, x, w, k)[0],
                                  f(x, w, k))


def test_weights_are_compared_bit_for_bit_in_any_two_layouts() -> None:
    """The check that a given weight is the program's own (then nothing is copied) holds
    for every pair of layouts, and a single element one ulp off in any place breaks it."""
    from specgraph.frontends.jax.program import _equal

    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = tuple(int(s) for s in rng.integers(1, 9, rng.integers(1, 5)))
        base = rng.standard_normal(shape).astype(np.float32)
        perm = rng.permutation(len(shape))
        other = np.ascontiguousarray(base.transpose(perm)).transpose(np.argsort(perm))
        piece = int(rng.integers(1, 64))
        assert _equal(other, base, piece) and _equal(base, other, piece)
        where = tuple(int(rng.integers(0, s)) for s in shape)
        off = base.copy()
        off[where] = np.nextafter(off[where], np.float32(np.inf))
        assert not _equal(other, off, piece) and not _equal(off, other, piece), (shape, where)


def test_weights_checked_while_the_other_side_runs_are_used_as_found(monkeypatch) -> None:
    """``prepare`` finds out, on a thread of its own, which given weights are the model's
    own; ``observe`` with those very arrays, or new views of them, uses what it found (the
    own arrays run, nothing is compared again, on every later seed and comparison too), and
    a weight one ulp off runs as given."""
    from specgraph.frontends.jax import program as jax_program

    c = case("cnn/linen")
    program = c.traced.program
    weights = c.weights()
    name = next(n for n in program.param_names if weights[n].size > 1)
    off = weights[name].copy()
    off.flat[0] = np.nextafter(off.flat[0], np.float32(np.inf))
    weights[name] = off
    compared: list[int] = []
    real = jax_program._equal
    monkeypatch.setattr(jax_program, "_equal",
                        lambda a, b, *rest: compared.append(1) or real(a, b, *rest))
    program.prepare(weights, EAGER)
    first = program.observe(weights, c.traced.inputs, (), None, EAGER)
    checked = len(compared)
    assert checked == len([n for n in program.param_names if n in weights])
    again = program.observe(weights, c.traced.inputs, (), None, EAGER)
    assert len(compared) == checked  # the same arrays: known already
    views = {k: w[...] for k, w in weights.items()}  # the next comparison's views of them
    program.observe(views, c.traced.inputs, (), None, EAGER)
    assert len(compared) == checked  # the same memory: known already
    other = next(n for n in program.param_names if n != name and weights[n].size > 1)
    fresh = {**weights, other: weights[other].copy()}
    program.observe(fresh, c.traced.inputs, (), None, EAGER)
    assert len(compared) == checked + 1  # new memory: found out
    # an edit the outputs show (one ulp of a weight may round away before them)
    fresh[other].flat[-1] = 2 * fresh[other].flat[-1] + np.float32(1)
    edited = program.observe(fresh, c.traced.inputs, (), None, EAGER)
    assert len(compared) == checked + 2  # the same memory edited in place: found out again
    assert any(not np.array_equal(edited.outputs[k], again.outputs[k]) for k in again.outputs)
    own = program.observe(c.weights(), c.traced.inputs, (), None, EAGER)
    assert len(compared) == 2 * checked + 2  # new arrays: found out again
    for key in own.outputs:
        np.testing.assert_array_equal(first.outputs[key], again.outputs[key], strict=True)
    changed = {name: off}
    params = {k: (changed[k] if k in changed else np.asarray(w))
              for k, w in c.weights().items()}
    want = program.observe(params, c.traced.inputs, (), None, EAGER)  # copies all
    for key in own.outputs:  # the weight one ulp off ran as given (whether or not the
        # outputs show an ulp of a running mean: here they round it away)
        np.testing.assert_array_equal(first.outputs[key], want.outputs[key], strict=True)


def test_a_weight_given_for_two_parameters_is_checked_against_each() -> None:
    """A tied weight on the other side is given for two parameters: it holds the first's
    bits and not the second's, and each parameter is judged by its own array."""
    c = case("cnn/linen")
    program = c.traced.program
    first, second = [own for own in program.param_arrays
                     if isinstance(own, jax.Array) and own.size > 1][:2]
    given = np.asarray(first).copy()
    assert program._holds_own(given, first)
    if given.shape == second.shape:
        assert not program._holds_own(given, second)
    assert not program._holds_own(given, jnp.zeros_like(first))
    assert program._holds_own(given, first)
