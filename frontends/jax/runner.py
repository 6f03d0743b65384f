"""The JAX runner: canonical nodes executed with jax.numpy, jax.lax and jax.nn kernels.

The op table is ``kernels.KERNELS`` (each canonical op written with the calls a JAX model
makes); this module holds the plumbing around it: devices, int64 values without x64, the
matmul precision per context, and each layer as one XLA computation (eager: the forward keeps
its residuals for the backward; compiled: forward and backward each under ``jax.jit``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from specgraph.frontends.jax.kernels import KERNELS
from specgraph.ir import Node
from specgraph.numeric.runner import Context, OpFn, Pullback, Runner, RunnerError
from specgraph.ops.dtypes import FLOAT_DTYPES

__all__ = ["JaxRunner", "jax_device", "MATMUL_PRECISION"]

# jax.default_matmul_precision per Context.dtype: JAX's default on GPUs is TF32
MATMUL_PRECISION = {"float32": "highest", "tf32": "tensorfloat32", "bfloat16": "default",
                     "float16": "default"}


def _floating(tensor: Any) -> bool:
    return jnp.issubdtype(tensor.dtype, jnp.floating)


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


def _frozen(attrs: dict[str, Any]) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))


def _float_forward(fn: Callable[..., Any], inputs: Sequence[Any], float_in: Sequence[int],
                   dtypes: Sequence[Any], float_out: Sequence[int]) -> Callable[..., Any]:
    """``fn`` as a function of its floating inputs alone (the others held), returning its
    floating outputs and, as auxiliary data, all its outputs in their graph dtypes."""

    def forward(*floats: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        args = list(inputs)
        for i, value in zip(float_in, floats):
            args[i] = value
        outs = tuple(o.astype(d) for o, d in zip(_as_tuple(fn(*args)), dtypes))
        return tuple(outs[i] for i in float_out), outs

    return forward


class _ForwardProgram:
    """inputs -> (residuals, outputs) for jax.jit, where the residuals are the leaves of
    jax.vjp's VJP object (a pytree, so it crosses jit) minus the layer's own inputs: jit
    would copy an input it returns (a weight kept for the backward pass), so those leaves
    are left out and put back from the caller's arrays by ``pullback``. What goes where is
    recorded while jit traces, per input signature."""

    def __init__(self, fn: Callable[..., Any], float_in: tuple[int, ...], dtypes: tuple,
                 float_out: tuple[int, ...]) -> None:
        self.fn, self.float_in, self.dtypes, self.float_out = fn, float_in, dtypes, float_out
        self.layout: dict[tuple, tuple[Any, tuple[int, ...]]] = {}

    @staticmethod
    def signature(inputs: Sequence[Any]) -> tuple:
        return tuple((tuple(x.shape), str(x.dtype)) for x in inputs)

    def __call__(self, inputs: tuple[Any, ...]) -> tuple[list[Any], tuple[Any, ...]]:
        forward = _float_forward(self.fn, inputs, self.float_in, self.dtypes, self.float_out)
        _, pull, outs = jax.vjp(forward, *(inputs[i] for i in self.float_in), has_aux=True)
        leaves, treedef = jax.tree_util.tree_flatten(pull)
        which = tuple(next((i for i, x in enumerate(inputs) if leaf is x), -1)
                      for leaf in leaves)
        self.layout[self.signature(inputs)] = (treedef, which)
        return [leaf for leaf, w in zip(leaves, which) if w < 0], outs

    def pullback(self, inputs: Sequence[Any], kept: list[Any]) -> Any:
        """The VJP object again, its input leaves taken from ``inputs`` (not copies)."""
        treedef, which = self.layout[self.signature(inputs)]
        rest = iter(kept)
        return jax.tree_util.tree_unflatten(
            treedef, [inputs[w] if w >= 0 else next(rest) for w in which])


def _apply_pullback(pull: Any, cts: tuple[Any, ...]) -> tuple[Any, ...]:
    return pull(cts)


def _pullback_program(fn: Callable[..., Any], float_in: tuple[int, ...], dtypes: tuple,
                      float_out: tuple[int, ...]) -> Callable[..., Any]:
    """A function (inputs, cotangents of the floating outputs) -> input cotangents that
    recomputes the forward, for jax.jit."""

    def program(inputs: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        forward = _float_forward(fn, inputs, float_in, dtypes, float_out)
        _, pull, _ = jax.vjp(forward, *(inputs[i] for i in float_in), has_aux=True)
        return pull(cts)

    return program


_PROGRAMS: dict[Any, Any] = {}  # compiled per op, attributes (and shapes)


def jax_device(device: str) -> Any:
    """The JAX device for a context's ``device``: ``auto`` takes the first GPU if JAX has
    one, else the CPU.

    Raises:
        RunnerError: ``cuda`` asked for where JAX sees no GPU.
    """
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if device == "cpu" or (device == "auto" and not gpus):
        return jax.devices("cpu")[0]
    if not gpus:
        raise RunnerError("the JAX runner was asked for --device cuda but JAX sees no GPU; "
                          "install jax[cuda12] or pass --device cpu")
    return gpus[0]


class JaxRunner(Runner):
    """Runs canonical ops with JAX on the CPU or a GPU, eagerly or each op under jax.jit.

    JAX never runs a Python op by itself: op by op, it compiles each primitive on its own.
    Here each canonical layer is one XLA computation, compiled once per op and attributes:
    in eager mode its forward keeps the residuals its backward needs (JAX's VJP object
    crosses jit as a pytree); in compiled mode the backward is compiled with a recomputed
    forward, as a fused training step would run it.

    64-bit integers are stored as int32 unless ``jax_enable_x64`` is on; ``fetch`` hands
    them back as int64. Floating values are stored in the context's precision, and float32
    matmuls and convolutions run at full float32 precision (``tf32`` asks for TensorFloat-32).
    """

    framework: ClassVar[str] = "jax"
    differentiable: ClassVar[bool] = True
    ops: ClassVar[dict[str, OpFn]] = KERNELS

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.device = jax_device(context.device)
        # compiled programs are shared by every runner of the process: a second comparison
        # (another seed, another pair) reuses them instead of compiling again
        self._compiled = _PROGRAMS
        self._wide: dict[int, weakref.ref] = {}  # ids of int32 tensors that are int64 values
        self._last: Any = None

    def _scope(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(jax.default_device(self.device))
        stack.enter_context(jax.default_matmul_precision(MATMUL_PRECISION[self.context.dtype]))
        return stack

    # --- tensors -------------------------------------------------------------------------
    def device_dtype(self, dtype: str) -> np.dtype:
        """The dtype a value of graph ``dtype`` has on the device."""
        if dtype in FLOAT_DTYPES:
            return jnp.dtype(self.context.storage)
        return jax.dtypes.canonicalize_dtype(np.dtype(dtype))

    def _mark_wide(self, tensor: Any, dtype: str) -> None:
        if dtype == "int64" and tensor.dtype != np.int64:
            key, wide = id(tensor), self._wide
            wide[key] = weakref.ref(tensor, lambda _, k=key: wide.pop(k, None))

    def put(self, array: np.ndarray, dtype: str) -> Any:
        host = np.asarray(array)
        target = self.device_dtype(dtype)
        if target.kind == "i" and host.size and host.dtype.kind in "iu":
            info = np.iinfo(target)
            if host.min() < info.min or host.max() > info.max:
                raise RunnerError(
                    f"the JAX runner stores {dtype} values as {target.name} (jax_enable_x64 "
                    f"is off) and this input holds values beyond that range; set "
                    f"JAX_ENABLE_X64=1 or compare with --no-numeric")
        host = host.astype(target, copy=False)
        # XLA's CPU buffers may share host memory that is contiguous and 64-byte aligned
        # (PyTorch allocates so): weights moved from a PyTorch model are then not copied
        share = (self.device.platform == "cpu" and host.flags.c_contiguous
                 and host.ctypes.data % 64 == 0 and host.nbytes >= 1 << 16)
        tensor = jax.device_put(host, self.device, may_alias=True if share else None)
        self._mark_wide(tensor, dtype)
        return tensor

    def fetch(self, tensor: Any) -> np.ndarray:
        host = np.asarray(tensor)
        if host.dtype in (jnp.bfloat16, np.float16):
            return host.astype(np.float32)
        ref = self._wide.get(id(tensor))
        if ref is not None and ref() is tensor:
            return host.astype(np.int64)
        return host

    def add(self, a: Any, b: Any) -> Any:
        with self._scope():
            return jnp.add(a, b)

    def synchronize(self) -> None:
        if self._last is not None:
            jax.block_until_ready(self._last)

    # --- ops -----------------------------------------------------------------------------
    def _attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes, a ``dtype`` attribute made the device's dtype for it."""
        attrs = dict(node.attrs)
        if isinstance(attrs.get("dtype"), str):
            attrs["dtype"] = self.device_dtype(attrs["dtype"]).name
        return attrs

    def _callable(self, node: Node) -> Callable[..., Any]:
        """The op with its attributes bound, under jax.jit (cached per op and attributes;
        JAX compiles shapes itself)."""
        fn, attrs = self._fn(node), self._attrs(node)
        key = ("forward", node.op, _frozen(attrs))
        if key not in self._compiled:
            self._compiled[key] = jax.jit(functools.partial(fn, **attrs))
        return self._compiled[key]

    def _finish(self, node: Node, outs: tuple[Any, ...]) -> tuple[Any, ...]:
        """Outputs in the graph's dtypes (int64 values marked for ``fetch``)."""
        declared = [v.dtype for v in node.outputs]
        if len(declared) != len(outs):
            return outs
        outs = tuple(o.astype(self.device_dtype(d)) for o, d in zip(outs, declared))
        for o, d in zip(outs, declared):
            self._mark_wide(o, d)
        self._last = outs
        return outs

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        fn = self._callable(node)
        with self._scope():
            return self._finish(node, _as_tuple(fn(*inputs)))

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        inputs = tuple(inputs)
        float_in = tuple(i for i, x in enumerate(inputs) if _floating(x))
        dtypes = tuple(self.device_dtype(v.dtype) for v in node.outputs)
        float_out = tuple(i for i, v in enumerate(node.outputs) if v.dtype in FLOAT_DTYPES)
        if self.context.mode == "compiled":
            outs = self.run(node, inputs)
            pull = self._compiled_pullback(node, inputs, float_in, dtypes, float_out)
        else:
            program, forward, backward = self._layer_vjp(node, float_in, dtypes, float_out)
            with self._scope():
                kept, outs = forward(inputs)
            outs = self._finish(node, outs)

            def pull(flowing: tuple[Any, ...]) -> tuple[Any, ...]:
                return backward(program.pullback(inputs, kept), flowing)

        def pullback(cts: Sequence[Any]) -> tuple[Any, ...]:
            grads: list[Any] = [None] * len(inputs)
            if not float_in or not float_out:
                return tuple(grads)
            with self._scope():
                flowing = tuple(jnp.zeros(outs[i].shape, outs[i].dtype) if cts[i] is None
                                else jnp.asarray(cts[i]).astype(outs[i].dtype)
                                for i in float_out)
                for i, g in zip(float_in, pull(flowing)):
                    grads[i] = g
            self._last = grads
            return tuple(grads)

        return outs, pullback

    def _layer_vjp(self, node: Node, float_in: tuple[int, ...], dtypes: tuple,
                   float_out: tuple[int, ...]) -> tuple[Any, Callable[..., Any], Callable[..., Any]]:
        """The layer's forward program, that program under jit (keeping what its backward
        needs), and the backward, each one XLA computation cached per op and attributes."""
        attrs = self._attrs(node)
        key = ("vjp", node.op, _frozen(attrs), float_in, dtypes, float_out)
        if key not in self._compiled:
            fn = functools.partial(self._fn(node), **attrs)
            program = _ForwardProgram(fn, float_in, dtypes, float_out)
            self._compiled[key] = (program, jax.jit(program), jax.jit(_apply_pullback))
        return self._compiled[key]

    def _compiled_pullback(self, node: Node, inputs: tuple[Any, ...], float_in: tuple[int, ...],
                           dtypes: tuple, float_out: tuple[int, ...]) -> Callable[..., Any]:
        attrs = self._attrs(node)
        key = ("pullback", node.op, _frozen(attrs), float_in, dtypes, float_out)
        if key not in self._compiled:
            fn = functools.partial(self._fn(node), **attrs)
            self._compiled[key] = jax.jit(_pullback_program(fn, float_in, dtypes, float_out))
        program = self._compiled[key]
        return lambda cts: program(inputs, cts)
