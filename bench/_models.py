"""Benchmark-size model pairs, PyTorch and Flax linen, built in code on one set of weights.

Two pairs, each the same network written twice so that specgraph's structural diff finds
them equivalent:

* ``bert``: a BERT-base encoder (12 post-LN layers, d_model 768, 12 heads, FFN 3072, exact
  GELU, LayerNorm eps 1e-12; token embedding + learned position embedding + LayerNorm) on
  token ids of shape (2, 128); it returns the last hidden states (2, 128, 768).
* ``resnet50``: a ResNet-50 (bottlenecks [3, 4, 6, 3], widths 64..2048, stride on the 3x3
  conv as torchvision's v1.5, BatchNorm in eval mode with eps 1e-5, max-pool stem, global
  average pool, 1000-way linear head) on images (2, 3, 128, 128) (NHWC for Flax); it
  returns the logits (2, 1000).

Weights are drawn once with NumPy from a fixed seed, by PyTorch parameter name and layout,
and loaded into both frameworks (Flax gets them transposed), so the two sides compute the
same function; inputs are the same arrays too. ``TORCH[name]()`` returns ``(module,
inputs)`` for ``specgraph.frontends.torch.tracer``; ``JAX[name]()`` returns ``(module,
variables, inputs)`` for ``specgraph.frontends.jax.trace_linen``. ``torch_step`` and
``jax_step`` build the plain framework forward + backward of ``sum(output * R)`` (R fixed
and random), the baseline a numeric comparison is timed against.

    python -m bench._models [--models bert,resnet50] [--repeat 3]

prints, per pair, trace + canonicalize + diff times, node counts, the verdict, how far the
two frameworks' outputs are apart, and the forward + backward timings.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --- configuration -----------------------------------------------------------------------
VOCAB, MAX_LEN, D, HEADS, FFN, LAYERS, LN_EPS = 30522, 512, 768, 12, 3072, 12, 1e-12
BATCH, SEQ = 2, 128
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)
EXPANSION, CLASSES, BN_EPS, IMAGE = 4, 1000, 1e-5, 128
SEED = 0


# --- weights: one NumPy dict in PyTorch names and layouts ----------------------------------
def _bert_shapes() -> Iterator[tuple[str, tuple[int, ...]]]:
    yield "tok.weight", (VOCAB, D)
    yield "pos", (MAX_LEN, D)
    yield from (("ln.weight", (D,)), ("ln.bias", (D,)))
    for i in range(LAYERS):
        p = f"layers.{i}."
        for name in ("q", "k", "v", "out"):
            yield from ((f"{p}attn.{name}.weight", (D, D)), (f"{p}attn.{name}.bias", (D,)))
        yield from ((f"{p}fc1.weight", (FFN, D)), (f"{p}fc1.bias", (FFN,)),
                    (f"{p}fc2.weight", (D, FFN)), (f"{p}fc2.bias", (D,)))
        for ln in ("ln1", "ln2"):
            yield from ((f"{p}{ln}.weight", (D,)), (f"{p}{ln}.bias", (D,)))


def _resnet_blocks() -> Iterator[tuple[str, int, int, int]]:
    """(name, input channels, width, stride) of every bottleneck, in order."""
    c_in = 64
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for j in range(blocks):
            yield f"layer{stage}.{j}", c_in, width, stride if j == 0 else 1
            c_in = width * EXPANSION


def _bn_shapes(name: str, c: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    for field in ("weight", "bias", "running_mean", "running_var"):
        yield f"{name}.{field}", (c,)


def _resnet_shapes() -> Iterator[tuple[str, tuple[int, ...]]]:
    yield "conv1.weight", (64, 3, 7, 7)
    yield from _bn_shapes("bn1", 64)
    for name, c_in, width, stride in _resnet_blocks():
        yield f"{name}.conv1.weight", (width, c_in, 1, 1)
        yield from _bn_shapes(f"{name}.bn1", width)
        yield f"{name}.conv2.weight", (width, width, 3, 3)
        yield from _bn_shapes(f"{name}.bn2", width)
        yield f"{name}.conv3.weight", (width * EXPANSION, width, 1, 1)
        yield from _bn_shapes(f"{name}.bn3", width * EXPANSION)
        if stride != 1 or c_in != width * EXPANSION:
            yield f"{name}.downsample.0.weight", (width * EXPANSION, c_in, 1, 1)
            yield from _bn_shapes(f"{name}.downsample.1", width * EXPANSION)
    yield from (("fc.weight", (CLASSES, 2048)), ("fc.bias", (CLASSES,)))


def _draw(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values that keep activations of order one: matrices scaled by fan-in (He for convs,
    which ReLU follows), norm scales near one, small shifts, variances in [0.5, 1.5)."""
    noise = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith("running_var"):
        return 0.5 + rng.random(shape, dtype=np.float32)
    if len(shape) == 1 and name.endswith(".weight"):
        # a residual branch's last BatchNorm starts small, so the sum of 16 blocks stays
        # of order one instead of doubling its variance at every block
        return (1 + 0.1 * noise) * np.float32(0.25 if name.endswith("bn3.weight") else 1)
    if len(shape) == 1:
        return 0.1 * noise
    if name in ("tok.weight", "pos"):
        return noise
    fan_in = int(np.prod(shape[1:]))
    return noise * np.float32((2.0 if len(shape) == 4 else 1.0) / fan_in) ** 0.5


@functools.cache
def weights(name: str) -> dict[str, np.ndarray]:
    """The model's weights by PyTorch name and layout (``bert`` or ``resnet50``)."""
    shapes = {"bert": _bert_shapes, "resnet50": _resnet_shapes}[name]()
    rng = np.random.default_rng(SEED)
    return {key: _draw(key, shape, rng) for key, shape in shapes}


@functools.cache
def inputs(name: str) -> np.ndarray:
    """The example input: token ids (2, 128) or images (2, 3, 128, 128), NCHW."""
    rng = np.random.default_rng(SEED + 1)
    if name == "bert":
        return rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int64)
    return rng.standard_normal((BATCH, 3, IMAGE, IMAGE), dtype=np.float32)


def cotangent(shape: tuple[int, ...]) -> np.ndarray:
    """The fixed random R of the loss ``sum(output * R)`` (same values on both sides)."""
    return np.random.default_rng(SEED + 2).standard_normal(shape, dtype=np.float32)


# --- PyTorch ------------------------------------------------------------------------------
class SelfAttention(nn.Module):
    """Multi-head self-attention with separate q, k, v and output projections."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, HEADS, D // HEADS).transpose(1, 2)
                   for proj in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, t, D))


class BertLayer(nn.Module):
    """Post-LN: x = LN(x + attention(x)); x = LN(x + fc2(gelu(fc1(x))))."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = SelfAttention()
        self.ln1 = nn.LayerNorm(D, eps=LN_EPS)
        self.fc1 = nn.Linear(D, FFN)
        self.fc2 = nn.Linear(FFN, D)
        self.ln2 = nn.LayerNorm(D, eps=LN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    """BERT-base encoder: token + learned position embeddings, LayerNorm, 12 layers."""

    def __init__(self, layers: int = LAYERS) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(MAX_LEN, D))
        self.ln = nn.LayerNorm(D, eps=LN_EPS)
        self.layers = nn.ModuleList(BertLayer() for _ in range(layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # the position rows get their batch axis explicitly, on both sides: JAX's implicit
        # rank promotion traces as a reshape, PyTorch's broadcasting as nothing
        x = self.ln(self.tok(ids) + self.pos[: ids.shape[1]].unsqueeze(0))
        for layer in self.layers:
            x = layer(x)
        return x


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand, each with BatchNorm; residual."""

    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = width * EXPANSION
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out, eps=BN_EPS)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(c_out, eps=BN_EPS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + skip)


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=BN_EPS)
        blocks: dict[str, list[nn.Module]] = {}
        for name, c_in, width, stride in _resnet_blocks():
            blocks.setdefault(name.split(".")[0], []).append(Bottleneck(c_in, width, stride))
        for stage, layers in blocks.items():
            setattr(self, stage, nn.Sequential(*layers))
        self.fc = nn.Linear(2048, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        for stage in ("layer1", "layer2", "layer3", "layer4"):
            h = getattr(self, stage)(h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def _loaded(module: nn.Module, name: str) -> nn.Module:
    state = module.state_dict()
    drawn = weights(name)
    missing = {k for k in state if not k.endswith("num_batches_tracked")} ^ set(drawn)
    assert not missing, f"{name}: weights and module disagree on {sorted(missing)[:5]}"
    with torch.no_grad():
        for key, value in drawn.items():
            state[key].copy_(torch.from_numpy(value))
    return module.eval()


def torch_bert() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The PyTorch BERT-base encoder and its token ids (2, 128)."""
    return _loaded(Bert(), "bert"), (torch.from_numpy(inputs("bert")),)


def torch_resnet50() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The PyTorch ResNet-50 and its images (2, 3, 128, 128)."""
    return _loaded(ResNet50(), "resnet50"), (torch.from_numpy(inputs("resnet50")),)


def torch_step(module: nn.Module, example: tuple[torch.Tensor, ...], device: str = "cpu"
               ) -> Callable[[], tuple[torch.Tensor, list[torch.Tensor]]]:
    """``step()``: eager forward, ``loss = sum(out * R)``, backward; returns the loss and
    the parameters' gradients (BatchNorm statistics are buffers and get none), after the
    device has finished (so that the call can be timed).

    Args:
        module: a model from ``TORCH`` (moved to ``device``).
        example: its inputs.
        device: ``cpu`` or ``cuda``.
    """
    module = module.to(device)
    example = tuple(x.to(device) for x in example)
    with torch.no_grad():
        shape = tuple(module(*example).shape)
    r = torch.from_numpy(cotangent(shape)).to(device)
    params = [p for p in module.parameters() if p.requires_grad]
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss = (module(*example) * r).sum()
        grads = list(torch.autograd.grad(loss, params))
        sync()
        return loss.detach(), grads

    return step


# --- Flax linen ---------------------------------------------------------------------------
class LinenBertLayer(fnn.Module):
    @fnn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = fnn.LayerNorm(epsilon=LN_EPS, name="ln1")(
            x + fnn.MultiHeadDotProductAttention(HEADS, name="attn")(x, x))
        h = fnn.gelu(fnn.Dense(FFN, name="fc1")(x), approximate=False)
        return fnn.LayerNorm(epsilon=LN_EPS, name="ln2")(x + fnn.Dense(D, name="fc2")(h))


class LinenBert(fnn.Module):
    layers: int = LAYERS

    @fnn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        pos = self.param("pos", fnn.initializers.zeros, (MAX_LEN, D))
        x = fnn.Embed(VOCAB, D, name="tok")(ids) + pos[: ids.shape[1]][None]
        x = fnn.LayerNorm(epsilon=LN_EPS, name="ln")(x)
        for i in range(self.layers):
            x = LinenBertLayer(name=f"layers_{i}")(x)
        return x


def _conv(features: int, k: int, stride: int, name: str) -> fnn.Conv:
    # explicit symmetric padding, as PyTorch's padding=k // 2 (Flax's "SAME" is not it for
    # strided convolutions on even sizes)
    return fnn.Conv(features, (k, k), strides=stride, padding=[(k // 2, k // 2)] * 2,
                    use_bias=False, name=name)


def _bn(name: str) -> fnn.BatchNorm:
    return fnn.BatchNorm(use_running_average=True, epsilon=BN_EPS, name=name)


class LinenBottleneck(fnn.Module):
    c_in: int
    width: int
    stride: int

    @fnn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c_out = self.width * EXPANSION
        skip = x
        if self.stride != 1 or self.c_in != c_out:
            skip = _bn("downsample_bn")(_conv(c_out, 1, self.stride, "downsample_conv")(x))
        h = fnn.relu(_bn("bn1")(_conv(self.width, 1, 1, "conv1")(x)))
        h = fnn.relu(_bn("bn2")(_conv(self.width, 3, self.stride, "conv2")(h)))
        return fnn.relu(_bn("bn3")(_conv(c_out, 1, 1, "conv3")(h)) + skip)


class LinenResNet50(fnn.Module):
    @fnn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = fnn.relu(_bn("bn1")(_conv(64, 7, 2, "conv1")(x)))
        h = fnn.max_pool(h, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for name, c_in, width, stride in _resnet_blocks():
            h = LinenBottleneck(c_in, width, stride, name=name.replace(".", "_"))(h)
        return fnn.Dense(CLASSES, name="fc")(h.mean(axis=(1, 2)))


# PyTorch module path -> Flax module path (pieces that differ)
_LINEN_NAMES = {"attn.q": "attn.query", "attn.k": "attn.key", "attn.v": "attn.value",
                "downsample.0": "downsample_conv", "downsample.1": "downsample_bn"}


def _linen_entry(key: str, value: np.ndarray) -> tuple[str, tuple[str, ...], np.ndarray]:
    """(collection, Flax path, value in Flax layout) of PyTorch weight ``key``."""
    module, _, field = key.rpartition(".")
    for old, new in _LINEN_NAMES.items():
        module = module.replace(old, new)
    parts = module.split(".")
    path = [f"{a}_{b}" if b.isdigit() else a for a, b in zip(parts, parts[1:] + [""])
            if not a.isdigit()] if module else []
    attention = module.startswith("layers") and ".attn." in f"{module}."
    if field in ("running_mean", "running_var"):
        return "batch_stats", (*path, field[len("running_"):]), value
    if not module:  # the position table
        return "params", (field,), value
    if value.ndim == 4:
        return "params", (*path, "kernel"), value.transpose(2, 3, 1, 0)
    if module == "tok":
        return "params", (*path, "embedding"), value
    if value.ndim == 2:
        kernel = value.T
        if attention and path[-1] == "out":
            kernel = kernel.reshape(HEADS, D // HEADS, D)
        elif attention:
            kernel = kernel.reshape(D, HEADS, D // HEADS)
        return "params", (*path, "kernel"), kernel
    if field == "weight":
        return "params", (*path, "scale"), value
    if attention and path[-1] != "out":
        value = value.reshape(HEADS, D // HEADS)
    return "params", (*path, "bias"), value


def _linen_variables(name: str) -> dict[str, Any]:
    variables: dict[str, Any] = {}
    for key, value in weights(name).items():
        collection, path, array = _linen_entry(key, value)
        node = variables.setdefault(collection, {})
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = jnp.asarray(array)
    return variables


def _check_tree(module: fnn.Module, variables: dict[str, Any], x: np.ndarray) -> None:
    want = jax.eval_shape(module.init, jax.random.key(0), x)
    got = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), variables)
    assert jax.tree_util.tree_structure(want) == jax.tree_util.tree_structure(got)
    assert jax.tree_util.tree_leaves(want) == jax.tree_util.tree_leaves(got)


def jax_bert() -> tuple[fnn.Module, dict[str, Any], tuple[np.ndarray]]:
    """The Flax linen BERT-base encoder, its variables and its token ids (2, 128)."""
    module, ids = LinenBert(), inputs("bert").astype(np.int32)
    variables = _linen_variables("bert")
    _check_tree(module, variables, ids)
    return module, variables, (ids,)


def jax_resnet50() -> tuple[fnn.Module, dict[str, Any], tuple[np.ndarray]]:
    """The Flax linen ResNet-50, its variables and its images (2, 128, 128, 3), NHWC."""
    module, image = LinenResNet50(), inputs("resnet50").transpose(0, 2, 3, 1)
    variables = _linen_variables("resnet50")
    _check_tree(module, variables, image)
    return module, variables, (image,)


def jax_step(module: fnn.Module, variables: dict[str, Any], example: tuple[np.ndarray, ...],
             jit: bool = True) -> Callable[[], tuple[jax.Array, Any]]:
    """``step()``: ``jax.jit(jax.value_and_grad(loss))`` of ``loss = sum(out * R)`` with
    respect to the ``params`` collection (BatchNorm statistics are held fixed), on JAX's
    default device, blocked until ready; the first call compiles. ``jit=False``: the same
    step op by op, as JAX runs it without ``jax.jit``."""
    shape = jax.eval_shape(module.apply, variables, *example).shape
    r = jnp.asarray(cotangent(tuple(shape)))
    rest = {k: v for k, v in variables.items() if k != "params"}

    def loss(params: Any) -> jax.Array:
        return jnp.sum(module.apply({"params": params, **rest}, *example) * r)

    grad = jax.value_and_grad(loss)
    if jit:
        grad = jax.jit(grad)
    return lambda: jax.block_until_ready(grad(variables["params"]))


TORCH: dict[str, Callable[[], tuple]] = {"bert": torch_bert, "resnet50": torch_resnet50}
JAX: dict[str, Callable[[], tuple]] = {"bert": jax_bert, "resnet50": jax_resnet50}


# --- report ---------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def structure(name: str) -> dict[str, Any]:
    """Trace, canonicalize and diff the pair ``name``: seconds, node counts, the verdict and
    the relative difference of the two frameworks' outputs."""
    from specgraph.passes import canonicalize_model
    from specgraph.check import compare_structure
    from specgraph.frontends import jax as jax_frontend
    from specgraph.frontends import torch as torch_frontend

    figures: dict[str, Any] = {}
    sides = {"torch": (TORCH[name], torch_frontend.trace),
             "jax": (JAX[name], jax_frontend.trace_linen)}
    canonical = {}
    for side, (factory, trace) in sides.items():
        figures[f"{side} build s"], built = _timed(factory)
        figures[f"{side} trace s"], traced = _timed(lambda: trace(*built, reference=side))
        figures[f"{side} canonicalize s"], canonical[side] = _timed(
            lambda: canonicalize_model(traced))
        figures[f"{side} nodes"] = f"{len(traced.graph)} -> {len(canonical[side].graph)}"
    figures["diff s"], report = _timed(lambda: compare_structure(canonical["torch"],
                                                                 canonical["jax"]))
    figures["equivalent"] = report.equivalent
    lhs, rhs = (np.asarray(next(iter(canonical[s].outputs.values()))) for s in sides)
    figures["output rel diff"] = float(np.abs(lhs - rhs).max() / np.abs(lhs).max())
    return figures


def steps(name: str, repeat: int) -> dict[str, float]:
    """Seconds of one forward + backward in eager PyTorch and in jitted JAX (median of
    ``repeat``; JAX's first call, which compiles, separately)."""
    torch_step_fn = torch_step(*TORCH[name]())
    jax_step_fn = jax_step(*JAX[name]())
    figures = {"torch warm-up s": _timed(torch_step_fn)[0],
               "jax compile + first s": _timed(jax_step_fn)[0]}
    figures["torch fwd+bwd s"] = statistics.median(_timed(torch_step_fn)[0]
                                                   for _ in range(repeat))
    figures["jax fwd+bwd s"] = statistics.median(_timed(jax_step_fn)[0] for _ in range(repeat))
    return figures


def _say(name: str, figures: dict[str, Any]) -> None:
    shown = (f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())
    print(f"{name}: " + ", ".join(shown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax "
          f"{jax.__version__} ({jax.default_backend()})")
    for name in args.models.split(","):
        _say(name, structure(name))
        _say(name, steps(name, args.repeat))


if __name__ == "__main__":
    main()
