"""A JAX script that reproduces one layer's divergence alone (``--repro``)."""

from __future__ import annotations

from specgraph.frontends.jax.runner import JaxRunner
from specgraph.numeric.repro import ScriptWriter

__all__ = ["write"]

LOAD = "jnp.asarray(x)"
FETCH = "np.asarray(t, dtype=np.float64)"
BACKWARD = '''    slots = [i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating)]

    def f(*floats):
        full = list(xs)
        for i, v in zip(slots, floats):
            full[i] = v
        outs = fn(*full, **ATTRS)
        return outs if isinstance(outs, tuple) else (outs,)

    outs, pullback = jax.vjp(f, *[xs[i] for i in slots])
    cts = tuple(jnp.zeros_like(o) if g is None else to_framework(g).astype(o.dtype)
                for o, g in zip(outs, grads))
    got = dict(zip(slots, pullback(cts)))
    grads_in = [got.get(i) for i in range(len(xs))]'''

COMPILE = '''import functools


def fn(*xs, **attrs):
    return jax.jit(functools.partial(_eager, **attrs))(*xs)'''


write = ScriptWriter("jax", JaxRunner.ops, load=LOAD, fetch=FETCH, backward=BACKWARD,
                     compile=COMPILE)
