"""TensorFlow runner: canonical nodes executed one by one on TensorFlow's own kernels.

The op table is ``kernels.KERNELS``; this module holds the plumbing around it: devices and
storage dtypes, putting and fetching tensors, gradients through ``tf.GradientTape``, the
TensorFloat-32 switch, and compiled mode (each op under ``tf.function(jit_compile=True)``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from specgraph.frontends.tf.kernels import KERNELS
from specgraph.frontends.tf.quiet import quiet_native
from specgraph.ir import Node
from specgraph.numeric.runner import Context, Pullback, Runner, RunnerError
from specgraph.ops.dtypes import FLOAT_DTYPES

with quiet_native():
    import tensorflow as tf

__all__ = ["TfRunner", "device_name"]

_DEVICES = {"cpu": "/CPU:0", "cuda": "/GPU:0"}


def _xla_refused(err: tf.errors.OpError) -> bool:
    """Whether XLA refused to compile a graph (an op without an XLA kernel on the device)."""
    return "XLA" in (err.message or "") and "compile" in (err.message or "")


def device_name(device: str) -> str:
    """The TensorFlow device for ``Context.device`` (``auto``: a GPU where there is one)."""
    with quiet_native():
        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if device == "auto":
        return _DEVICES["cuda" if has_gpu else "cpu"]
    if device not in _DEVICES:
        raise RunnerError(f"the tf runner knows no device {device!r}; pass --device cpu or cuda")
    if device == "cuda" and not has_gpu:
        raise RunnerError("the tf runner was asked for --device cuda but TensorFlow sees no "
                          "GPU here; pass --device cpu or install a CUDA build of TensorFlow")
    return _DEVICES[device]


_PROGRAMS: dict[Any, Any] = {}  # compiled per op, attributes (and shapes)


class TfRunner(Runner):
    """Canonical nodes on TensorFlow's kernels, eagerly under ``tf.device``.

    Each op function of ``kernels.KERNELS`` takes and returns tensors in the canonical
    conventions and calls the public functions a Keras model ends up calling.

    In ``compiled`` mode each (op, attributes) pair is wrapped once in
    ``tf.function(jit_compile=True)`` and cached; an op that XLA cannot compile on the device
    (its first call raises) is rewrapped with ``jit_compile=False`` and runs as a plain
    TensorFlow graph from then on; ``not_compiled`` names those ops. ``tf32`` turns
    TensorFloat-32 matmuls and convolutions on while this runner executes, ``float32`` turns
    them off.
    """

    framework = "tf"
    differentiable = True
    ops = KERNELS

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.device = device_name(context.device)
        self._storage = tf.as_dtype(context.storage)
        self._compiled = _PROGRAMS  # shared by every runner of the process
        self.not_compiled: set[str] = set()

    # --- tensors -------------------------------------------------------------------------
    def _target(self, dtype: str) -> tf.DType:
        return self._storage if dtype in FLOAT_DTYPES else tf.as_dtype(dtype)

    def put(self, array: np.ndarray, dtype: str) -> Any:
        target = self._target(dtype)
        with tf.device(self.device):
            tensor = tf.constant(np.asarray(array))
            return tf.identity(tensor) if tensor.dtype == target else tf.cast(tensor, target)

    def fetch(self, tensor: Any) -> np.ndarray:
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype in (tf.bfloat16, tf.float16):
            tensor = tf.cast(tensor, tf.float32)
        return tensor.numpy()

    def add(self, a: Any, b: Any) -> Any:
        with tf.device(self.device):
            return tf.math.add(tf.convert_to_tensor(a), tf.convert_to_tensor(b))

    def synchronize(self) -> None:
        if "GPU" in self.device:
            tf.test.experimental.sync_devices()

    # --- ops -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _scope(self, node: Node) -> Iterator[None]:
        tf32 = self.context.dtype == "tf32"
        if tf.config.experimental.tensor_float_32_execution_enabled() != tf32:
            tf.config.experimental.enable_tensor_float_32_execution(tf32)
        try:
            with tf.device(self.device):
                yield
        except tf.errors.OpError as err:
            reason = (err.message or type(err).__name__).strip().splitlines()[0]
            raise RunnerError(f"TensorFlow failed on {node.describe()} ({reason}); try "
                              "another --device or --dtype, or compare with --no-numeric"
                              ) from err

    def _call(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        fn = self._fn(node)
        if self.context.mode != "compiled":
            out = fn(*inputs, **node.attrs)
        else:
            key = (node.op, tuple(node.attrs.items()))
            compiled, jit = self._compiled.get(key) or (None, True)
            if compiled is None:
                compiled = tf.function(functools.partial(fn, **node.attrs), jit_compile=True)
                self._compiled[key] = (compiled, True)
            try:
                out = compiled(*inputs)
            except tf.errors.OpError as err:
                if not jit or not _xla_refused(err):
                    raise
                compiled = tf.function(functools.partial(fn, **node.attrs), jit_compile=False)
                self._compiled[key] = (compiled, False)
                self.not_compiled.add(node.op)
                out = compiled(*inputs)
        return self._declared(node, out if isinstance(out, (tuple, list)) else (out,))

    def _declared(self, node: Node, outs: Sequence[Any]) -> tuple[Any, ...]:
        """The outputs in the graph's declared dtypes (floating ones in the storage dtype)."""
        if len(outs) != len(node.outputs):
            raise RunnerError(f"the tf runner computed {len(outs)} outputs for "
                              f"{node.describe()}, which declares {len(node.outputs)}")
        return tuple(o if o.dtype == self._target(v.dtype) else tf.cast(o, self._target(v.dtype))
                     for o, v in zip(outs, node.outputs))

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        with self._scope(node):
            return self._call(node, inputs)

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        with self._scope(node):
            # fresh tensors, so an input passed twice gets a gradient per position
            xs = [tf.identity(x) for x in inputs]
            watched = [i for i, x in enumerate(xs) if x.dtype.is_floating]
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([xs[i] for i in watched])
                outs = self._call(node, xs)

        def pullback(cts: Sequence[Any]) -> tuple[Any, ...]:
            pairs = [(o, ct) for o, ct in zip(outs, cts)
                     if ct is not None and o.dtype.is_floating]
            grads: list[Any] = [None] * len(inputs)
            if not pairs or not watched:
                return tuple(grads)
            with self._scope(node):
                found = tape.gradient([o for o, _ in pairs], [xs[i] for i in watched],
                                      output_gradients=[tf.cast(ct, o.dtype) for o, ct in pairs],
                                      unconnected_gradients=tf.UnconnectedGradients.NONE)
                for i, g in zip(watched, found):
                    grads[i] = None if g is None else tf.convert_to_tensor(g)
            return tuple(grads)

        return outs, pullback
