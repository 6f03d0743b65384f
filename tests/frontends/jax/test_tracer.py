"""JAX / Flax frontend behaviour: names, layouts, scopes, sources, shortcuts, odd ops, errors."""

from __future__ import annotations

import inspect

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

from specgraph.errors import FactoryError, TraceError
from specgraph.frontends import jax as jax_frontend
from specgraph.interpreter import run
from tests.zoo import jax_models
from tests.zoo.jax_models import MODELS, trace

X = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)


def _check_faithful(traced, tol: float = 1e-5) -> None:
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_allclose(got[key], want, rtol=tol, atol=tol * np.abs(want).max())


def _ops(traced) -> list[str]:
    return [n.op for n in traced.graph.nodes]


def test_params_are_named_by_key_path() -> None:
    assert list(trace("mlp/jax").graph.params) == ["fc1.bias", "fc1.kernel", "fc2.bias",
                                                   "fc2.kernel", "fc3.bias", "fc3.kernel"]
    linen = trace("cnn/linen").graph.params
    assert {"params.conv1.kernel", "params.bn1.scale", "batch_stats.bn1.mean",
            "batch_stats.bn2.var"} <= set(linen)
    nnx_params = trace("preln/nnx").graph.params
    assert {"attn.query.kernel", "attn.out.bias", "ln1.scale", "mlp2.kernel"} <= set(nnx_params)
    assert nnx_params["attn.query.kernel"].shape == (16, 4, 4)


def _conv1_kernel(name: str) -> tuple[str, np.ndarray]:
    """The graph name of the first conv kernel of zoo model ``name`` and its HWIO value."""
    factory = MODELS[name]()
    if name == "cnn/jax":
        return "conv1.kernel", np.asarray(factory[1]["conv1"]["kernel"])
    if name == "cnn/linen":
        return "params.conv1.kernel", np.asarray(factory[1]["params"]["conv1"]["kernel"])
    return "conv1.kernel", np.asarray(factory[0].conv1.kernel[...])


@pytest.mark.parametrize("name", ["cnn/jax", "cnn/linen", "cnn/nnx"])
def test_conv_kernels_are_stored_in_canonical_oihw_layout(name: str) -> None:
    traced = trace(name)
    key, hwio = _conv1_kernel(name)
    np.testing.assert_array_equal(traced.weights[key], np.transpose(hwio, (3, 2, 0, 1)))
    assert traced.graph.params[key].shape == (8, 3, 3, 3)
    conv = next(n for n in traced.graph.nodes if n.op == "conv")
    assert conv.inputs[1] is traced.graph.params[key]  # no transpose left on the weight
    assert conv.attrs["padding"] == (1, 1, 1, 1)
    assert [n.op for n in traced.graph.nodes][:3] == ["transpose", "conv", "transpose"]
    pools = {n.op: n.attrs for n in traced.graph.nodes if n.op.endswith("_pool")}
    assert pools["max_pool"]["kernel"] == pools["avg_pool"]["kernel"] == (2, 2)
    assert pools["avg_pool"]["divisor"] is None  # Flax's sum / 4 became one avg_pool


def test_linen_scopes_are_module_paths_and_sources_user_lines() -> None:
    traced = trace("cnn/linen")
    assert {"conv1", "bn1", "conv2", "bn2", "head"} <= {n.scope for n in traced.graph.nodes}
    relu = next(n for n in traced.graph.nodes if n.op == "relu")
    assert relu.scope == ""  # a function called in the model's own __call__
    lines, start = inspect.getsourcelines(jax_models.LinenCNN.__call__)
    conv1_line = start + next(i for i, line in enumerate(lines) if '"conv1"' in line)
    conv = next(n for n in traced.graph.nodes if n.op == "conv")
    assert (conv.scope, conv.origin) == ("conv1", "conv_general_dilated")
    assert conv.source == f"tests/zoo/jax_models.py:{conv1_line}"


def test_nnx_scopes_are_attribute_paths_and_the_module_is_left_alone() -> None:
    module, inputs = MODELS["preln/nnx"]()
    before = {path: type(node) for path, node in nnx.iter_graph(module)}
    traced = jax_frontend.trace_nnx(module, inputs, reference="preln/nnx")
    scopes = {n.scope for n in traced.graph.nodes}
    assert {"ln1", "attn", "attn.query", "attn.key", "attn.value", "attn.out", "ln2",
            "mlp1", "mlp2"} <= scopes
    assert {path: type(node) for path, node in nnx.iter_graph(module)} == before
    assert type(module.attn.query) is nnx.LinearGeneral


def test_named_scopes_of_plain_functions() -> None:
    traced = trace("mlp/jax")
    assert [n.scope for n in traced.graph.nodes if n.op == "matmul"] == ["fc1", "fc2", "fc3"]
    assert next(n for n in traced.graph.nodes if n.op == "relu").scope == "fc1"


def test_library_functions_that_are_canonical_ops_become_them() -> None:
    def apply(p, x):
        h = jax.nn.relu(x @ p)
        return (jax.nn.gelu(h), nn.gelu(h, approximate=False), jax.nn.softmax(h, axis=0),
                jax.nn.log_softmax(h), jax.nn.silu(h), jax.nn.leaky_relu(h, 0.2),
                jax.nn.sigmoid(h), jax.nn.relu6(h), jnp.tril(h, -1))

    traced = jax_frontend.trace(apply, X.T @ X, (X,))
    attrs = [(n.op, dict(n.attrs)) for n in traced.graph.nodes if n.op != "matmul"]
    assert attrs == [("relu", {}), ("gelu", {"approximate": "tanh"}),
                     ("gelu", {"approximate": "none"}), ("softmax", {"axis": 0}),
                     ("log_softmax", {"axis": 1}), ("silu", {}), ("leaky_relu", {"alpha": 0.2}),
                     ("sigmoid", {}), ("clip", {"max": 6.0, "min": 0.0}),
                     ("trilu", {"k": -1, "upper": False})]
    assert traced.graph.nodes[1].origin == "jax.nn.relu"
    _check_faithful(traced)


def test_flax_attention_becomes_one_attention_node() -> None:
    traced = trace("preln/nnx")
    (att,) = [n for n in traced.graph.nodes if n.op == "attention"]
    assert att.attrs["scale"] == pytest.approx(0.5) and att.attrs["causal"] is False
    assert att.scope == "attn" and att.origin == "jax.nn.dot_product_attention"
    (softmax,) = [n for n in trace("preln/linen").graph.nodes if n.op == "softmax"]
    assert softmax.attrs["axis"] == 3


@jax.custom_jvp
def relu(x):  # the name of a canonical op on a function that computes something else
    return jnp.abs(x) * 2


relu.defjvps(lambda g, ans, x: g * 2 * jnp.sign(x))


@jax.custom_vjp
def clipped(x):
    return jnp.clip(x, -1.0, 1.0) * 3


clipped.defvjp(lambda x: (clipped(x), None), lambda _, g: (g,))


def test_a_lookalike_name_is_no_shortcut_and_custom_vjp_is_inlined() -> None:
    traced = jax_frontend.trace(lambda p, x: clipped(relu(x) - p), np.float32(1.5), (X,))
    assert _ops(traced) == ["abs", "mul", "sub", "clip", "mul"]
    _check_faithful(traced)


def test_unknown_primitive_becomes_opaque_with_its_name() -> None:
    traced = jax_frontend.trace(lambda p, x: jnp.tanh(lax.erf_inv(jnp.tanh(x)) * p),
                                np.float32(2.0), (X,))
    assert _ops(traced) == ["tanh", "opaque", "mul", "tanh"]
    opaque = traced.graph.nodes[1]
    assert opaque.attrs["target"] == "erf_inv" and opaque.outputs[0].shape == (3, 8)


def test_unknown_primitive_on_known_inputs_is_run_by_jax() -> None:
    """Flax's wav2vec2 builds its feature mask from an all-ones attention mask with ``rem``
    and ``scatter``: run on known inputs, they are constants, not opaque nodes."""
    def masked(p, x):
        lengths = jnp.ones((3, 16), jnp.int32).sum(-1)
        last = lax.rem(lengths - 1, 8)
        mask = jnp.zeros((3, 8), jnp.int32).at[jnp.arange(3), last].set(1)
        return jnp.where(jnp.flip(jnp.cumsum(jnp.flip(mask, 1), 1), 1)[:, :, None] > 0,
                         x.reshape(3, 8, 1) * p, 0.0)
    traced = jax_frontend.trace(masked, np.float32(2.0), (np.arange(24.0, dtype=np.float32),))
    assert "opaque" not in _ops(traced)
    _check_faithful(traced)


def _awkward(p, x, ids):
    """Primitives the zoo models do not use, each checked against JAX by the interpreter."""
    y = lax.cumsum(x, axis=1, reverse=True) + jnp.arange(8.0) - jnp.expm1(x) * jnp.log1p(x * x)
    y = jnp.where(x > 0, jnp.clip(y, -2.0, 2.0), lax.erfc(x)) ** 3 + jnp.square(x)
    a, b = jnp.split(y, [3], axis=1)
    z = jnp.concatenate([jnp.pad(b, ((0, 0), (1, 0))), a[:, :0:-1]], axis=1)
    z = z + lax.dynamic_slice(y, (0, 2), (3, 6))[:, :1] + jnp.take(x, ids, axis=1).sum(1)[:, None]
    w = jnp.einsum("bi,ij,bj->b", x, p["w"], z)[:, None] * x[ids[0]]
    img = x.reshape(1, 3, 8, 1) * p["img"]
    img = lax.conv_general_dilated(img, p["dw"], (1, 1), "SAME", rhs_dilation=(2, 2),
                                   feature_group_count=2,
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    up = nn.ConvTranspose(3, (3, 3), strides=(2, 2)).apply({"params": p["up"]}, img)
    pooled = nn.avg_pool(up, (3, 3), padding="SAME").sum(axis=(1, 2, 3))
    return {"w": w, "pooled": pooled, "argmax": jnp.argmax(z, axis=1), "z": z[:, -1]}


def test_assorted_primitives_are_faithful() -> None:
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((8, 8)).astype(np.float32),
              "img": np.ones((1, 1, 1, 2), np.float32),
              "dw": rng.standard_normal((3, 3, 1, 2)).astype(np.float32),
              "up": {"kernel": rng.standard_normal((3, 3, 2, 3)).astype(np.float32),
                     "bias": rng.standard_normal(3).astype(np.float32)}}
    ids = np.array([2, 0, 7], np.int32)
    traced = jax_frontend.trace(_awkward, params, (X, ids), reference="awkward")
    assert "opaque" not in _ops(traced)
    assert {"conv", "conv_transpose", "avg_pool", "einsum", "gather", "cumsum", "arange",
            "flip", "pad", "split", "argmax"} <= set(_ops(traced))
    assert traced.graph.input_names == ("x", "ids")
    assert traced.graph.output_names == ("argmax", "pooled", "w", "z")
    _check_faithful(traced)


def test_pytree_inputs_static_leaves_and_dict_outputs() -> None:
    def apply(p, batch, scale):
        h = batch["x"] @ p["w"] * scale["factor"]
        return {"logits": h, "features": [h.sum(-1), batch["y"] * 2]}

    traced = jax_frontend.trace(apply, {"w": np.ones((8, 2), np.float32)},
                                ({"x": X, "y": X[:, :2]}, {"factor": 3.0}))
    assert traced.graph.input_names == ("batch.x", "batch.y")
    assert traced.graph.output_names == ("features.0", "features.1", "logits")
    _check_faithful(traced)


def test_outputs_are_computed_when_first_read() -> None:
    calls = []

    def apply(p, x):
        calls.append(1)
        return jnp.tanh(x * p)

    traced = jax_frontend.trace(apply, np.float32(2.0), (X,))
    assert len(calls) == 1  # make_jaxpr only
    np.testing.assert_allclose(traced.outputs["output"], np.tanh(X * 2), rtol=1e-6)
    assert set(traced.outputs) == {"output"}


def test_xor_example_shows_the_forgotten_activation() -> None:
    from examples.xor import model_jax

    correct = jax_frontend.trace(*model_jax.correct())
    forgot = jax_frontend.trace(*model_jax.forgot_activation())
    assert [(n.op, n.scope) for n in correct.graph.nodes][:5] == [
        ("matmul", "hidden"), ("reshape", "hidden"), ("add", "hidden"), ("relu", "act"),
        ("matmul", "head")]
    assert "relu" not in _ops(forgot)
    assert set(correct.outputs) == {"xor_logit", "regression"}
    assert list(correct.graph.params) == ["head.bias", "head.kernel", "hidden.bias",
                                          "hidden.kernel"]
    _check_faithful(correct)


def _branchy(p, x):
    if x.sum() > 0:
        return x * p
    return x


def test_errors_are_one_sentence_naming_the_model() -> None:
    with pytest.raises(TraceError, match=r"^m\.py:f: jax\.make_jaxpr could not trace the "
                                         r"model: .*jnp\.where or jax\.lax\.cond"):
        jax_frontend.trace(_branchy, np.float32(1.0), (X,), reference="m.py:f")
    with pytest.raises(TraceError, match=r"^m\.py:f: the model raised TypeError while JAX "
                                         r"traced it"):
        jax_frontend.trace(lambda p, x: x @ p, np.ones((3, 3), np.float32), (X, X),
                           reference="m.py:f")
    with pytest.raises(FactoryError, match=r"^m\.py:f: parameter 'cfg\.act' is a str, not an "
                                           r"array; params must be a pytree"):
        jax_frontend.trace(lambda p, x: x, {"cfg": {"act": "relu"}}, (X,), reference="m.py:f")
    with pytest.raises(FactoryError, match=r"^m\.py:f: example_inputs must be a tuple of "
                                           r"arrays .*return \(apply_fn, params, \(x, \.\.\.\)\)"):
        jax_frontend.trace(lambda p, x: x, {}, [X], reference="m.py:f")
    with pytest.raises(FactoryError, match=r"^m\.py:f: expected a flax\.linen\.Module first"):
        jax_frontend.trace_linen(lambda p, x: x, {}, (X,), reference="m.py:f")
    with pytest.raises(FactoryError, match=r"^m\.py:f: expected a flax\.nnx\.Module first"):
        jax_frontend.trace_nnx(jax_models.LinenMLP(), (X,), reference="m.py:f")
