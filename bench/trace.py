"""Tracing cost: specgraph's trace of a 12-layer transformer against the framework's own
tracer (torch.export, jax.make_jaxpr, get_concrete_function), measured side by side.

    python -m bench.trace [--layers 12] [--width 256] [--repeat 7]

Prints one line per framework and, last, ``trace: <fw> R.RR, ...`` with each ratio
(specgraph time / framework tracer time, the median over alternating rounds; the target is
at most 1.5). specgraph's time includes the framework's tracer, so a ratio of 1.2 means the
conversion into the IR costs a fifth of the tracer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _paired(native: Callable[[], object], ours: Callable[[], object], repeat: int
            ) -> tuple[float, float, float]:
    """Median times of both and the median of per-round ratios, the two run alternately so
    that load on a shared machine hits both alike."""
    t_native, t_ours, ratios = [], [], []
    for _ in range(repeat):
        a, b = _timed(native), _timed(ours)
        t_native.append(a)
        t_ours.append(b)
        ratios.append(b / a)
    return statistics.median(t_native), statistics.median(t_ours), statistics.median(ratios)


def torch_case(layers: int, width: int) -> tuple[Callable[[], object], Callable[[], object]]:
    import torch
    import torch.nn as nn

    from specgraph.frontends import torch as frontend

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True,
                                       norm_first=True, activation="gelu")
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    x = (torch.randn(2, 64, width),)
    return (lambda: torch.export.export(model, x)), (lambda: frontend.trace(model, x))


def jax_case(layers: int, width: int) -> tuple[Callable[[], object], Callable[[], object]]:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from specgraph.frontends import jax as frontend

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=8)(h, h)
            h = nn.Dense(4 * width)(nn.LayerNorm()(x))
            return x + nn.Dense(width)(nn.gelu(h))

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(layers):
                x = Block()(x)
            return x

    model = Encoder()
    x = jnp.ones((2, 64, width))
    variables = model.init(jax.random.PRNGKey(0), x)
    return (lambda: jax.make_jaxpr(model.apply)(variables, x)), (
        lambda: frontend.trace_linen(model, variables, (x,)))


def jax_plain_case(layers: int, width: int) -> tuple[Callable[[], object],
                                                     Callable[[], object]]:
    import jax
    import jax.numpy as jnp

    from specgraph.frontends import jax as frontend

    def layer_norm(x, g, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * g + b

    def block(p, x):
        t, d, h = x.shape[1], x.shape[2], 8
        y = layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = (jnp.dot(y, p[n]).reshape(-1, t, h, d // h) for n in ("wq", "wk", "wv"))
        a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // h), axis=-1)
        x = x + jnp.dot(jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(-1, t, d), p["wo"])
        y = layer_norm(x, p["ln2_g"], p["ln2_b"])
        return x + jnp.dot(jax.nn.gelu(jnp.dot(y, p["w1"]) + p["b1"]), p["w2"]) + p["b2"]

    def apply_fn(params, x):
        for p in params:
            x = block(p, x)
        return x

    rng = jax.random.PRNGKey(0)
    shapes = {"ln1_g": (width,), "ln1_b": (width,), "wq": (width, width), "wk": (width, width),
              "wv": (width, width), "wo": (width, width), "ln2_g": (width,),
              "ln2_b": (width,), "w1": (width, 4 * width), "b1": (4 * width,),
              "w2": (4 * width, width), "b2": (width,)}
    params = [{n: jax.random.normal(rng, s) * 0.02 for n, s in shapes.items()}
              for _ in range(layers)]
    x = jnp.ones((2, 64, width))
    # a fresh function object each round: make_jaxpr caches traces per function, and a
    # user's first trace is a cold one
    return (lambda: jax.make_jaxpr(lambda p, y: apply_fn(p, y))(params, x)), (
        lambda: frontend.trace(lambda p, y: apply_fn(p, y), params, (x,)))


def tf_case(layers: int, width: int) -> tuple[Callable[[], object], Callable[[], object]]:
    import keras
    import tensorflow as tf

    from specgraph.frontends import tf as frontend

    inputs = keras.Input((64, width), batch_size=2)
    x = inputs
    for _ in range(layers):
        h = keras.layers.LayerNormalization(epsilon=1e-5)(x)
        x = x + keras.layers.MultiHeadAttention(8, width // 8)(h, h)
        h = keras.layers.Dense(4 * width, activation="gelu")(
            keras.layers.LayerNormalization(epsilon=1e-5)(x))
        x = x + keras.layers.Dense(width)(h)
    model = keras.Model(inputs, x)
    data = (tf.ones((2, 64, width)),)
    spec = tf.TensorSpec((2, 64, width), tf.float32)

    def native():
        return tf.function(lambda a: model(a, training=False)).get_concrete_function(spec)

    return native, (lambda: frontend.trace(model, data))


CASES = {"torch": torch_case, "jax": jax_case, "jax-plain": jax_plain_case,
         "tf": tf_case}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    ratios = []
    for name, case in CASES.items():
        try:
            native, ours = case(args.layers, args.width)
        except ImportError as err:
            print(f"{name}: skipped ({err})")
            continue
        native()  # warm up both (imports, caches)
        ours()
        t_native, t_ours, ratio = _paired(native, ours, args.repeat)
        ratios.append(f"{name} {ratio:.2f}")
        print(f"{name}: framework tracer {t_native:.3f} s, specgraph trace {t_ours:.3f} s, "
              f"ratio {ratio:.2f} ({args.layers} layers, width {args.width})")
    print("trace: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
