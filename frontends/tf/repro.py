"""A TensorFlow script that reproduces one layer's divergence alone (``--repro``)."""

from __future__ import annotations

from specgraph.frontends.tf.runner import TfRunner
from specgraph.numeric.repro import ScriptWriter

__all__ = ["write"]

LOAD = "tf.constant(x)"
FETCH = "np.asarray(t.numpy(), dtype=np.float64)"
BACKWARD = '''    floats = [x for x in xs if x.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        outs = fn(*xs, **ATTRS)
        outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    got = iter(tape.gradient([o for o, _ in pairs], floats,
                             output_gradients=[to_framework(g) for _, g in pairs]))
    grads_in = [next(got) if x.dtype.is_floating else None for x in xs]'''

COMPILE = '''def fn(*xs, **attrs):
    return tf.function(lambda *a: _eager(*a, **attrs), jit_compile=True)(*xs)'''


write = ScriptWriter("tf", TfRunner.ops, load=LOAD, fetch=FETCH, backward=BACKWARD,
                     compile=COMPILE)
