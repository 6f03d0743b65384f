"""Tiny JAX, Flax linen and Flax NNX models built in code, the fixtures of the JAX tests.

Each of four models exists three times (``mlp/jax``, ``mlp/linen``, ``mlp/nnx``, ...) and
each factory returns what that framework's factory returns: ``(apply_fn, params, inputs)``,
``(module, variables, inputs)`` or ``(module, inputs)``. Weights are seeded and perturbed
away from their initial values (biases and batch-norm statistics are not zeros and ones).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from tests.zoo.mutations import mutations_of

D, HEADS = 16, 4


def _rand(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _filled(tree: Any, seed: int) -> Any:
    """Seeded values for a pytree of shapes (``jax.eval_shape`` of an init: running the
    initializers eagerly would compile JAX's random number generator, for seconds)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    out = []
    for i, (path, leaf) in enumerate(leaves):
        name, shape = jax.tree_util.keystr(path), tuple(leaf.shape)
        noise = _rand(seed + i, *shape)
        if "var" in name:
            value = 0.5 + np.abs(noise)
        elif "scale" in name:
            value = 1 + 0.1 * noise
        elif "mean" in name or "bias" in name:
            value = 0.2 * noise
        else:  # kernels and embedding tables
            value = noise * float(np.prod(shape[:-1])) ** -0.5
        out.append(jnp.asarray(value, dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def _dense(seed: int, d_in: int, d_out: int, bias: bool = True) -> dict[str, np.ndarray]:
    layer = {"kernel": _rand(seed, d_in, d_out, scale=d_in ** -0.5)}
    if bias:
        layer["bias"] = _rand(seed + 1, d_out, scale=0.1)
    return layer


def _apply_dense(p: dict[str, Any], x: jax.Array) -> jax.Array:
    y = x @ p["kernel"]
    return y + p["bias"] if "bias" in p else y


def _norm(p: dict[str, Any], x: jax.Array, eps: float) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def _ln(seed: int, d: int) -> dict[str, np.ndarray]:
    return {"scale": 1 + _rand(seed, d, scale=0.1), "bias": _rand(seed + 1, d, scale=0.1)}


MLP_X = _rand(100, 4, 6)
IMAGE = _rand(101, 2, 16, 16, 3)
TOKENS = _rand(102, 2, 5, D)
IDS = np.random.default_rng(103).integers(0, 50, size=(3, 7)).astype(np.int32)


# --- (a) MLP 6 -> 16 -> 16 -> 3 -------------------------------------------------------------
def mlp_jax() -> tuple:
    params = {"fc1": _dense(0, 6, 16), "fc2": _dense(2, 16, 16), "fc3": _dense(4, 16, 3)}

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        with jax.named_scope("fc1"):
            h = jax.nn.relu(_apply_dense(p["fc1"], x))
        with jax.named_scope("fc2"):
            h = jnp.tanh(_apply_dense(p["fc2"], h))
        with jax.named_scope("fc3"):
            return _apply_dense(p["fc3"], h)

    return apply, params, (MLP_X,)


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.relu(nn.Dense(16, name="fc1")(x))
        h = jnp.tanh(nn.Dense(16, name="fc2")(h))
        return nn.Dense(3, name="fc3")(h)


class NnxMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.fc1 = nnx.Linear(6, 16, rngs=rngs)
        self.fc2 = nnx.Linear(16, 16, rngs=rngs)
        self.fc3 = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc3(jnp.tanh(self.fc2(nnx.relu(self.fc1(x)))))


# --- (b) CNN with batch norm and pooling, NHWC ------------------------------------------------
def _bn(seed: int, c: int) -> dict[str, np.ndarray]:
    return {"scale": 1 + _rand(seed, c, scale=0.1), "bias": _rand(seed + 1, c, scale=0.1),
            "mean": _rand(seed + 2, c, scale=0.2), "var": 0.5 + np.abs(_rand(seed + 3, c))}


def _batch_norm(p: dict[str, Any], x: jax.Array, eps: float) -> jax.Array:
    return (x - p["mean"]) * lax.rsqrt(p["var"] + eps) * p["scale"] + p["bias"]


def _conv(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    return lax.conv_general_dilated(x, kernel, (stride, stride), ((1, 1), (1, 1)),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cnn_jax() -> tuple:
    params = {"conv1": {"kernel": _rand(10, 3, 3, 3, 8, scale=0.3), "bias": _rand(11, 8)},
              "bn1": _bn(12, 8), "conv2": {"kernel": _rand(16, 3, 3, 8, 12, scale=0.2)},
              "bn2": _bn(17, 12), "head": _dense(21, 12, 5)}

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        h = _conv(x, p["conv1"]["kernel"], 1) + p["conv1"]["bias"]
        h = jax.nn.relu(_batch_norm(p["bn1"], h, 1e-5))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(_batch_norm(p["bn2"], _conv(h, p["conv2"]["kernel"], 2), 1e-3))
        h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        return _apply_dense(p["head"], h.mean(axis=(1, 2)))

    return apply, params, (IMAGE,)


class LinenCNN(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Conv(8, (3, 3), padding=1, name="conv1")(x)
        h = nn.relu(nn.BatchNorm(use_running_average=True, momentum=0.9, name="bn1")(h))
        h = nn.max_pool(h, (2, 2), strides=(2, 2))
        h = nn.Conv(12, (3, 3), strides=2, padding=1, use_bias=False, name="conv2")(h)
        h = nn.relu(nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=1e-3,
                                    name="bn2")(h))
        h = nn.avg_pool(h, (2, 2), strides=(2, 2))
        return nn.Dense(5, name="head")(h.mean(axis=(1, 2)))


class NnxCNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(3, 8, (3, 3), padding=1, rngs=rngs)
        self.bn1 = nnx.BatchNorm(8, use_running_average=True, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(8, 12, (3, 3), strides=2, padding=1, use_bias=False, rngs=rngs)
        self.bn2 = nnx.BatchNorm(12, use_running_average=True, momentum=0.9, epsilon=1e-3,
                                 rngs=rngs)
        self.head = nnx.Linear(12, 5, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.max_pool(nnx.relu(self.bn1(self.conv1(x))), (2, 2), strides=(2, 2))
        h = nnx.relu(self.bn2(self.conv2(h)))
        h = nnx.avg_pool(h, (2, 2), strides=(2, 2))
        return self.head(h.mean(axis=(1, 2)))


# --- (c) pre-LN transformer block ---------------------------------------------------------
def preln_jax() -> tuple:
    params = {"ln1": _ln(30, D), "query": _dense(32, D, D), "key": _dense(34, D, D),
              "value": _dense(36, D, D), "out": _dense(38, D, D), "ln2": _ln(40, D),
              "mlp1": _dense(42, D, 4 * D), "mlp2": _dense(44, 4 * D, D)}

    def heads(t: jax.Array) -> jax.Array:
        b, s, _ = t.shape
        return t.reshape(b, s, HEADS, D // HEADS).transpose(0, 2, 1, 3)

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        h = _norm(p["ln1"], x, 1e-5)
        with jax.named_scope("attn"):
            q, k, v = (heads(_apply_dense(p[n], h)) for n in ("query", "key", "value"))
            att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // HEADS), axis=-1)
            a = (att @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            x = x + _apply_dense(p["out"], a)
        with jax.named_scope("mlp"):
            m = jax.nn.gelu(_apply_dense(p["mlp1"], _norm(p["ln2"], x, 1e-6)), approximate=False)
            return x + _apply_dense(p["mlp2"], m)

    return apply, params, (TOKENS,)


class LinenPreLN(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.LayerNorm(epsilon=1e-5, name="ln1")(x)
        x = x + nn.MultiHeadDotProductAttention(HEADS, name="attn")(h, h)
        h = nn.LayerNorm(epsilon=1e-6, name="ln2")(x)
        h = nn.gelu(nn.Dense(4 * D, name="mlp1")(h), approximate=False)
        return x + nn.Dense(D, name="mlp2")(h)


class NnxPreLN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.ln1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(HEADS, D, decode=False, keep_rngs=False,
                                          rngs=rngs)
        self.ln2 = nnx.LayerNorm(D, epsilon=1e-6, rngs=rngs)
        self.mlp1 = nnx.Linear(D, 4 * D, rngs=rngs)
        self.mlp2 = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp2(nnx.gelu(self.mlp1(self.ln2(x)), approximate=False))


# --- (d) embedding + classifier -----------------------------------------------------------
def embed_jax() -> tuple:
    params = {"embed": {"embedding": _rand(50, 50, 12)}, "norm": _ln(51, 12),
              "classifier": _dense(53, 12, 4)}

    def apply(p: dict[str, Any], ids: jax.Array) -> jax.Array:
        h = jnp.take(p["embed"]["embedding"], ids, axis=0).mean(axis=1)
        return jax.nn.log_softmax(_apply_dense(p["classifier"], _norm(p["norm"], h, 1e-5)))

    return apply, params, (IDS,)


class LinenEmbed(nn.Module):
    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        h = nn.Embed(50, 12, name="embed")(ids).mean(axis=1)
        h = nn.LayerNorm(epsilon=1e-5, name="norm")(h)
        return nn.log_softmax(nn.Dense(4, name="classifier")(h))


class NnxEmbed(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(50, 12, rngs=rngs)
        self.norm = nnx.LayerNorm(12, epsilon=1e-5, rngs=rngs)
        self.classifier = nnx.Linear(12, 4, rngs=rngs)

    def __call__(self, ids: jax.Array) -> jax.Array:
        return nnx.log_softmax(self.classifier(self.norm(self.embed(ids).mean(axis=1))))


# --- factories ----------------------------------------------------------------------------
def _linen(cls: type[nn.Module], x: np.ndarray, seed: int) -> Callable[[], tuple]:
    def factory() -> tuple:
        module = cls()
        shapes = jax.eval_shape(module.init, jax.random.key(seed), x)
        return module, _filled(shapes, seed), (x,)

    return factory


def _nnx(cls: type[nnx.Module], x: np.ndarray, seed: int) -> Callable[[], tuple]:
    def factory() -> tuple:
        graphdef, shapes = nnx.split(nnx.eval_shape(lambda: cls(nnx.Rngs(seed))))
        return nnx.merge(graphdef, _filled(shapes, seed)), (x,)

    return factory


MODELS: dict[str, Callable[[], tuple]] = {
    "mlp/jax": mlp_jax, "mlp/linen": _linen(LinenMLP, MLP_X, 1), "mlp/nnx": _nnx(NnxMLP, MLP_X, 2),
    "cnn/jax": cnn_jax, "cnn/linen": _linen(LinenCNN, IMAGE, 3), "cnn/nnx": _nnx(NnxCNN, IMAGE, 4),
    "preln/jax": preln_jax, "preln/linen": _linen(LinenPreLN, TOKENS, 5),
    "preln/nnx": _nnx(NnxPreLN, TOKENS, 6),
    "embed/jax": embed_jax, "embed/linen": _linen(LinenEmbed, IDS, 7),
    "embed/nnx": _nnx(NnxEmbed, IDS, 8),
}


def trace(name: str) -> Any:
    """Trace zoo model ``name`` with the frontend function its framework uses."""
    from specgraph.frontends import jax as jax_frontend

    function = {"jax": jax_frontend.trace, "linen": jax_frontend.trace_linen,
                "nnx": jax_frontend.trace_nnx}[name.split("/")[1]]
    return function(*MODELS[name](), reference=name)


# --- mutants: the plain-JAX CNN and pre-LN block with one planted difference each (the ----
# --- mutations are the table in tests/zoo/mutations.py) -------------------------------------
_NHWC = ("NHWC", "HWIO", "NHWC")


def _cnn_mutant(mutation: str | None) -> tuple:
    c1 = 10 if mutation == "hidden_size" else 8
    s1, s2 = (2, 1) if mutation == "stride_moved" else (1, 2)
    pad2 = ((0, 1), (0, 1)) if mutation == "asymmetric_padding" else ((1, 1), (1, 1))
    eps2 = 1e-5 if mutation == "eps" else 1e-3
    conv1 = {"kernel": _rand(10, 3, 3, 3, c1, scale=0.3)}
    if mutation != "missing_bias":
        conv1["bias"] = _rand(11, c1)
    bn2 = _ln(17, 12) if mutation == "batchnorm_to_layernorm" else _bn(17, 12)
    params = {"conv1": conv1, "bn1": _bn(12, c1),
              "conv2": {"kernel": _rand(16, 3, 3, c1, 12, scale=0.2)}, "bn2": bn2,
              "head": _dense(21, 12, 5)}

    def first_block(p: dict[str, Any], x: jax.Array) -> jax.Array:
        h = lax.conv_general_dilated(x, p["conv1"]["kernel"], (s1, s1), ((1, 1), (1, 1)),
                                     dimension_numbers=_NHWC)
        h = h + p["conv1"]["bias"] if "bias" in p["conv1"] else h
        if mutation == "swapped_layers":
            return _batch_norm(p["bn1"], jax.nn.relu(h), 1e-5)
        h = _batch_norm(p["bn1"], h, 1e-5)
        return h if mutation == "missing_activation" else jax.nn.relu(h)

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        h = first_block(p, x)
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = lax.conv_general_dilated(h, p["conv2"]["kernel"], (s2, s2), pad2,
                                     dimension_numbers=_NHWC)
        if mutation == "batchnorm_to_layernorm":
            h = jax.nn.relu(_norm(p["bn2"], h, 1e-3))
        else:
            h = jax.nn.relu(_batch_norm(p["bn2"], h, eps2))
        h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        return _apply_dense(p["head"], h.mean(axis=(1, 2)))

    return apply, params, (IMAGE,)


def _attention(p: dict[str, Any], h: jax.Array, mutation: str | None) -> jax.Array:
    n_heads = 2 if mutation == "num_heads" else HEADS
    b, s, _ = h.shape

    def heads(t: jax.Array) -> jax.Array:
        return t.reshape(b, s, n_heads, D // n_heads).transpose(0, 2, 1, 3)

    q, k, v = (heads(_apply_dense(p[n], h)) for n in ("query", "key", "value"))
    logits = q @ k.transpose(0, 1, 3, 2)
    if mutation != "missing_scale":
        logits = logits / np.sqrt(D // n_heads)
    if mutation == "causal":
        logits = jnp.where(np.tril(np.ones((s, s), bool)), logits,
                           jnp.finfo(logits.dtype).min)
    att = jax.nn.softmax(logits, axis=-2 if mutation == "softmax_axis" else -1)
    a = (att @ v).transpose(0, 2, 1, 3).reshape(h.shape)
    return _apply_dense(p["out"], a)


def _mlp(p: dict[str, Any], h: jax.Array, mutation: str | None) -> jax.Array:
    h = _apply_dense(p["mlp1"], h)
    if mutation != "missing_activation":
        h = jax.nn.gelu(h, approximate=mutation == "gelu_approximation")
    return _apply_dense(p["mlp2"], h)


def _preln_mutant(mutation: str | None) -> tuple:
    hidden = 48 if mutation == "hidden_size" else 4 * D
    eps1 = 1e-12 if mutation == "eps" else 1e-5
    params = {"ln1": _ln(30, D), "query": _dense(32, D, D, bias=mutation != "missing_bias"),
              "key": _dense(34, D, D), "value": _dense(36, D, D), "out": _dense(38, D, D),
              "ln2": _ln(40, D), "mlp1": _dense(42, D, hidden), "mlp2": _dense(44, hidden, D)}

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        if mutation == "post_ln":
            with jax.named_scope("attn"):
                x = _norm(p["ln1"], x + _attention(p, x, mutation), eps1)
            with jax.named_scope("mlp"):
                return _norm(p["ln2"], x + _mlp(p, x, mutation), 1e-6)
        h = _norm(p["ln1"], x, eps1)
        with jax.named_scope("attn"):
            a = _attention(p, h, mutation)
            x = a if mutation == "missing_residual" else x + a
        with jax.named_scope("mlp"):
            return x + _mlp(p, _norm(p["ln2"], x, 1e-6), mutation)

    return apply, params, (TOKENS,)


def mutant(model: str, mutation: str | None) -> tuple:
    """The plain-JAX golden ``model`` ("cnn" or "transformer_block") with ``mutation`` (a
    mutation of ``model`` in the table of tests/zoo/mutations.py, or None for the golden
    itself): ``(apply_fn, params, inputs)`` like ``cnn_jax``/``preln_jax``, with the same
    seeds."""
    names = [m.name for m in mutations_of(model)]  # KeyError for a model with no mutants
    if mutation is not None and mutation not in names:
        raise KeyError(f"no mutation {mutation!r} of {model!r}; use one of {names}")
    return (_cnn_mutant if model == "cnn" else _preln_mutant)(mutation)


# --- models that reach the kernels tests/zoo/torch_faults.py plants faults in (PyTorch) ---
WIDE_X = _rand(104, 4, 32)


def wide_classifier_jax() -> tuple:
    """Dense 32 -> 1030 then softmax over the classes (the pair of torch's
    ``wide_classifier``)."""
    params = {"head": _dense(60, 32, 1030)}

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        with jax.named_scope("head"):
            return jax.nn.softmax(_apply_dense(p["head"], x), axis=-1)

    return apply, params, (WIDE_X,)


def gelu_mlp_jax() -> tuple:
    """Dense 32 -> 64, exact GELU, dense 64 -> 16 (the pair of torch's ``gelu_mlp``)."""
    params = {"fc1": _dense(62, 32, 64), "fc2": _dense(64, 64, 16)}

    def apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
        with jax.named_scope("fc1"):
            h = jax.nn.gelu(_apply_dense(p["fc1"], x), approximate=False)
        with jax.named_scope("fc2"):
            return _apply_dense(p["fc2"], h)

    return apply, params, (WIDE_X,)


MODELS.update({"wide_classifier/jax": wide_classifier_jax, "gelu_mlp/jax": gelu_mlp_jax})
