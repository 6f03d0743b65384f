"""The JAX runner: canonical nodes executed with jax.numpy, jax.lax and jax.nn kernels.

Each entry of the op table is a plain module-level function with the signature and meaning
of the op's NumPy reference in ``specgraph.ops``, written with the calls a JAX model makes
(``jax.nn.gelu``, ``lax.conv_general_dilated``, ``lax.reduce_window``,
``jax.nn.dot_product_attention``...). The functions use nothing but ``jax``, ``jnp``, ``lax``,
``math``, ``np`` and the private helpers of this module, so one can be copied with its helpers
into a standalone script. Canonical layouts are JAX's defaults for ``lax`` convolutions (NCHW
inputs, OIHW kernels); padding pairs are (begin, end) per spatial axis.
"""

from __future__ import annotations

import contextlib
import functools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specgraph.ir import Node
from specgraph.numeric.runner import FLOAT, Context, OpFn, Pullback, Runner, RunnerError

__all__ = ["JaxRunner"]

# --- elementwise ---------------------------------------------------------------------------


def _add(a, b):
    return jnp.add(a, b)


def _sub(a, b):
    return jnp.subtract(a, b)


def _mul(a, b):
    return jnp.multiply(a, b)


def _div(a, b, rounding=None):
    if rounding == "floor":
        return jnp.floor_divide(a, b)
    if rounding == "trunc":
        dtype = jnp.result_type(a, b)
        if jnp.issubdtype(dtype, jnp.integer):  # lax.div rounds integers toward zero
            return lax.div(*jnp.broadcast_arrays(jnp.asarray(a, dtype), jnp.asarray(b, dtype)))
        return jnp.trunc(jnp.true_divide(a, b))
    return jnp.true_divide(a, b)


def _pow(a, b):
    return jnp.power(a, b)


def _maximum(a, b):
    return jnp.maximum(a, b)


def _minimum(a, b):
    return jnp.minimum(a, b)


def _neg(x):
    return jnp.negative(x)


def _exp(x):
    return jnp.exp(x)


def _log(x):
    return jnp.log(x)


def _sqrt(x):
    return jnp.sqrt(x)


def _rsqrt(x):
    return lax.rsqrt(x)


def _reciprocal(x):
    return jnp.reciprocal(jnp.asarray(x, jnp.result_type(x, float)))


def _abs(x):
    return jnp.abs(x)


def _erf(x):
    return lax.erf(x)


def _erfc(x):
    return lax.erfc(x)


def _sin(x):
    return jnp.sin(x)


def _cos(x):
    return jnp.cos(x)


def _floor(x):
    return jnp.floor(x)


def _ceil(x):
    return jnp.ceil(x)


def _sign(x):
    return jnp.sign(x)


def _identity(x):
    return jnp.asarray(x)


def _logical_not(x):
    return jnp.logical_not(x)


def _equal(a, b):
    return jnp.equal(a, b)


def _not_equal(a, b):
    return jnp.not_equal(a, b)


def _less(a, b):
    return jnp.less(a, b)


def _less_equal(a, b):
    return jnp.less_equal(a, b)


def _greater(a, b):
    return jnp.greater(a, b)


def _greater_equal(a, b):
    return jnp.greater_equal(a, b)


def _logical_and(a, b):
    return jnp.logical_and(a, b)


def _logical_or(a, b):
    return jnp.logical_or(a, b)


def _where(cond, a, b):
    return jnp.where(jnp.asarray(cond, bool), a, b)


def _clip(x, min=None, max=None):  # noqa: A002 (the reference's names)
    return jnp.clip(x, min=min, max=max)


def _cast(x, dtype):
    return jnp.asarray(x).astype(dtype)


# --- activations ---------------------------------------------------------------------------


def _relu(x):
    return jax.nn.relu(x)


def _gelu(x, approximate="none"):
    return jax.nn.gelu(x, approximate=approximate == "tanh")


def _sigmoid(x):
    return jax.nn.sigmoid(x)


def _tanh(x):
    return jnp.tanh(x)


def _silu(x):
    return jax.nn.silu(x)


def _softplus(x, beta=1.0, threshold=20.0):
    return jnp.where(beta * x > threshold, x, jax.nn.softplus(beta * x) / beta)


def _leaky_relu(x, alpha=0.01):
    return jax.nn.leaky_relu(x, negative_slope=alpha)


def _elu(x, alpha=1.0):
    return jax.nn.elu(x, alpha=alpha)


def _hardswish(x):
    return jax.nn.hard_swish(x)


def _hardsigmoid(x, alpha=1.0 / 6.0, beta=0.5):
    return jnp.clip(alpha * x + beta, 0.0, 1.0)


def _mish(x):
    return jax.nn.mish(x)


def _softmax(x, axis):
    return jax.nn.softmax(x, axis=axis)


def _log_softmax(x, axis):
    return jax.nn.log_softmax(x, axis=axis)


def _dropout(x, p=0.5):
    return jnp.asarray(x)


# --- reductions ----------------------------------------------------------------------------


def _reduce_sum(x, axes=None, keepdims=False):
    return jnp.sum(x, axis=axes, keepdims=keepdims)


def _reduce_mean(x, axes=None, keepdims=False):
    return jnp.mean(x, axis=axes, keepdims=keepdims)


def _reduce_max(x, axes=None, keepdims=False):
    return jnp.max(x, axis=axes, keepdims=keepdims)


def _reduce_min(x, axes=None, keepdims=False):
    return jnp.min(x, axis=axes, keepdims=keepdims)


def _reduce_prod(x, axes=None, keepdims=False):
    return jnp.prod(x, axis=axes, keepdims=keepdims)


def _reduce_var(x, axes=None, keepdims=False, correction=1):
    return jnp.var(x, axis=axes, keepdims=keepdims, ddof=correction)


def _argmax(x, axis, keepdims=False):
    return jnp.argmax(x, axis=axis, keepdims=keepdims)


def _argmin(x, axis, keepdims=False):
    return jnp.argmin(x, axis=axis, keepdims=keepdims)


def _cumsum(x, axis):
    return jnp.cumsum(x, axis=axis)


# --- shape, data movement, sources ---------------------------------------------------------


def _matmul(a, b):
    return jnp.matmul(a, b)


def _einsum(*xs, equation):
    return jnp.einsum(equation, *xs)


def _reshape(x, shape):
    return jnp.reshape(x, shape)


def _transpose(x, perm):
    return jnp.transpose(x, perm)


def _concat(*xs, axis):
    return jnp.concatenate(xs, axis=axis)


def _split(x, axis, sizes):
    return tuple(jnp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


def _slice(x, axes, starts, ends, steps):
    index = [slice(None)] * jnp.ndim(x)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(start, end, step)
    return x[tuple(index)]


def _gather(x, indices, axis):
    return jnp.take(x, indices, axis=axis)


def _squeeze(x, axes):
    return jnp.squeeze(x, axis=tuple(axes))


def _unsqueeze(x, axes):
    return jnp.expand_dims(x, tuple(axes))


def _expand(x, shape):
    return jnp.broadcast_to(x, tuple(shape))


def _tile(x, repeats):
    return jnp.tile(x, tuple(repeats))


def _flip(x, axes):
    return jnp.flip(x, axis=tuple(axes))


def _pad(x, pads, mode="constant", value=0.0):
    rank = jnp.ndim(x)
    begins, ends = pads[:rank], pads[rank:]
    x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                for i, (b, e) in enumerate(zip(begins, ends)))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return jnp.pad(x, widths, mode="constant", constant_values=value)
    return jnp.pad(x, widths, mode=mode)


def _trilu(x, upper, k=0):
    return jnp.triu(x, k) if upper else jnp.tril(x, k)


def _full(shape, value, dtype):
    return jnp.full(tuple(shape), value, dtype=dtype)


def _arange(start, limit, delta=1.0, dtype="int32"):
    if jnp.issubdtype(dtype, jnp.integer) and all(float(v).is_integer()
                                                  for v in (start, limit, delta)):
        return jnp.arange(int(start), int(limit), int(delta), dtype=dtype)
    return jnp.arange(start, limit, delta).astype(dtype)


# --- layers --------------------------------------------------------------------------------


def _bias_add(y, b):
    """``y`` plus a per-channel bias over axis 1 (``b`` None: ``y`` unchanged)."""
    return y if b is None else y + jnp.reshape(b, (1, -1) + (1,) * (y.ndim - 2))


def _linear(x, weight, b=None, bias=True):
    y = jnp.matmul(x, weight)
    return y if b is None else y + b


def _conv(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True):
    rank = weight.ndim - 2
    y = lax.conv_general_dilated(
        x, weight, window_strides=stride, padding=list(zip(padding[:rank], padding[rank:])),
        rhs_dilation=dilation, feature_group_count=groups)
    return _bias_add(y, b)


def _conv_transpose(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True,
                    output_padding=()):
    # the gradient of a convolution: dilate the input by the stride and convolve with the
    # flipped kernel, its in/out axes swapped within each group
    rank = weight.ndim - 2
    c, og, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    w = jnp.reshape(weight, (groups, c // groups, og, *kernel))
    w = jnp.reshape(jnp.swapaxes(w, 1, 2), (groups * og, c // groups, *kernel))
    w = jnp.flip(w, axis=tuple(range(2, 2 + rank)))
    span = [dilation[i] * (kernel[i] - 1) for i in range(rank)]
    pads = [(span[i] - padding[i], span[i] - padding[rank + i] + output_padding[i])
            for i in range(rank)]
    y = lax.conv_general_dilated(
        x, w, window_strides=(1,) * rank, padding=pads, lhs_dilation=stride,
        rhs_dilation=dilation, feature_group_count=groups)
    return _bias_add(y, b)


def _pool_geometry(sizes, kernel, stride, padding, dilation, ceil_mode):
    """Per spatial axis: the (begin, end) padding that makes every window exist (ceil mode
    adds end padding) and the number of output positions."""
    rank = len(kernel)
    pads, outs = [], []
    for i in range(rank):
        size, pb, pe = sizes[i], padding[i], padding[rank + i]
        extent = dilation[i] * (kernel[i] - 1) + 1
        span = size + pb + pe - extent
        out = (-(-span // stride[i]) if ceil_mode else span // stride[i]) + 1
        if ceil_mode and (out - 1) * stride[i] >= size + pb:
            out -= 1  # the last window must start inside the input or the begin padding
        extra = max(0, (out - 1) * stride[i] + extent - (size + pb + pe))
        pads.append((pb, pe + extra))
        outs.append(out)
    return pads, outs


def _pool_sum(x, init, reducer, kernel, stride, pads, dilation, outs):
    """``lax.reduce_window`` over the spatial axes of ``x`` [N, C, *S], cut to ``outs``."""
    y = lax.reduce_window(
        x, np.array(init, x.dtype), reducer, window_dimensions=(1, 1, *kernel),
        window_strides=(1, 1, *stride), padding=((0, 0), (0, 0), *pads),
        window_dilation=(1, 1, *dilation))
    return y[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]


def _max_pool_taps(x, kernel, stride, pads, dilation, outs):
    """Maximum over the window taps, one strided slice of the padded input per kernel
    position (JAX has no gradient for lax.reduce_window's max with window dilation)."""
    x = jnp.pad(x, ((0, 0), (0, 0), *pads), constant_values=-np.inf)
    rank = len(kernel)
    taps = []
    for offset in np.ndindex(*kernel):
        start = (0, 0, *(offset[i] * dilation[i] for i in range(rank)))
        limit = x.shape[:2] + tuple(start[2 + i] + (outs[i] - 1) * stride[i] + 1
                                    for i in range(rank))
        taps.append(lax.slice(x, start, limit, (1, 1, *stride)))
    return jnp.max(jnp.stack(taps), axis=0)


def _max_pool(x, kernel, stride, padding, dilation, ceil_mode=False):
    pads, outs = _pool_geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    if any(d != 1 for d in dilation):
        return _max_pool_taps(x, kernel, stride, pads, dilation, outs)
    return _pool_sum(x, -np.inf, lax.max, kernel, stride, pads, dilation, outs)


def _avg_pool(x, kernel, stride, padding, dilation, ceil_mode=False, count_include_pad=True,
              divisor=None):
    rank = len(kernel)
    pads, outs = _pool_geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    total = _pool_sum(x, 0.0, lax.add, kernel, stride, pads, dilation, outs)
    if divisor is not None:
        return total / divisor
    # the divisor of each window: its taps on the input, and on explicit padding if counted
    ones = jnp.ones((1, 1, *x.shape[2:]), x.dtype)
    if count_include_pad:
        explicit = [(padding[i], padding[rank + i]) for i in range(rank)]
        ones = jnp.pad(ones, ((0, 0), (0, 0), *explicit), constant_values=1)
        pads = [(0, pe - padding[rank + i]) for i, (_, pe) in enumerate(pads)]
    counts = _pool_sum(ones, 0.0, lax.add, kernel, stride, pads, dilation, outs)
    return total / counts


def _adaptive_pool(x, output_size, reduce):
    """PyTorch's adaptive bins [floor(i·S/O), ceil((i+1)·S/O)), one spatial axis at a time
    (a bin is a box, so its mean or max reduces axis by axis)."""
    for i, out in enumerate(output_size):
        axis, size = 2 + i, x.shape[2 + i]
        bins = [(math.floor(j * size / out), math.ceil((j + 1) * size / out))
                for j in range(out)]
        x = jnp.concatenate([reduce(lax.slice_in_dim(x, lo, hi, axis=axis), axis=axis,
                                    keepdims=True) for lo, hi in bins], axis=axis)
    return x


def _adaptive_avg_pool(x, output_size):
    return _adaptive_pool(x, output_size, jnp.mean)


def _adaptive_max_pool(x, output_size):
    return _adaptive_pool(x, output_size, jnp.max)


def _normalize(x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes``, statistics in at least float32 (as Flax)."""
    y = jnp.asarray(x, jnp.promote_types(x.dtype, jnp.float32))
    mean = jnp.mean(y, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(y - mean), axis=axes, keepdims=True)
    return ((y - mean) * lax.rsqrt(var + eps)).astype(x.dtype)


def _affine(y, w, b, shape):
    if w is not None:
        y = y * jnp.reshape(w, shape)
    if b is not None:
        y = y + jnp.reshape(b, shape)
    return y


def _batch_norm(x, mean, var, *wb, eps=1e-5, momentum=0.1, scale=True, bias=True):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - jnp.reshape(mean, shape)) * lax.rsqrt(jnp.reshape(var, shape) + eps)
    return _affine(y, wb[0] if scale else None, wb[-1] if bias else None, shape)


def _layer_norm(x, *wb, axis, eps=1e-5, scale=True, bias=True):
    y = _normalize(x, tuple(range(axis, x.ndim)), eps)
    return _affine(y, wb[0] if scale else None, wb[-1] if bias else None, x.shape[axis:])


def _group_norm(x, *wb, num_groups, eps=1e-5, scale=True, bias=True):
    n, c = x.shape[:2]
    y = jnp.reshape(_normalize(jnp.reshape(x, (n, num_groups, -1)), (2,), eps), x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return _affine(y, wb[0] if scale else None, wb[-1] if bias else None, shape)


def _rms_norm(x, *w, axis, eps, scale=True):
    y = jnp.asarray(x, jnp.promote_types(x.dtype, jnp.float32))
    ms = jnp.mean(jnp.square(y), axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = (y * lax.rsqrt(ms + eps)).astype(x.dtype)
    return y * w[0] if scale else y


def _embedding(indices, weight, padding_idx=None):
    if padding_idx is not None:  # that row gets no gradient
        row = jnp.arange(weight.shape[0])[:, None] == padding_idx % weight.shape[0]
        weight = jnp.where(row, lax.stop_gradient(weight), weight)
    return jnp.take(weight, indices, axis=0)


def _attention_written_out(q, k, v, mask, scale, causal):
    """softmax(scale·q·kᵀ + mask)·v over [..., L, E], k/v heads repeated for grouped q."""
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = jnp.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = jnp.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * scale
    if causal:
        keep = jnp.tril(jnp.ones(scores.shape[-2:], dtype=bool))
        scores = jnp.where(keep, scores, -jnp.inf)
    if mask is not None:
        scores = (jnp.where(mask, scores, -jnp.inf) if mask.dtype == jnp.bool_
                  else scores + mask)
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def _attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    # jax.nn.dot_product_attention takes [B, T, N, H] with one head size for q, k and v
    fits = (q.ndim == 4 and k.ndim == 4 and k.shape == v.shape and q.shape[0] == k.shape[0]
            and q.shape[-1] == k.shape[-1] and (mask is None or mask.ndim <= 4))
    if not fits:
        return _attention_written_out(q, k, v, mask, scale, causal)
    boolean = mask is not None and mask.dtype == jnp.bool_
    out = jax.nn.dot_product_attention(
        jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2),
        bias=None if boolean else mask, mask=mask if boolean else None, scale=scale,
        is_causal=causal)
    return jnp.swapaxes(out, 1, 2)


OPS: dict[str, OpFn] = {
    "add": _add, "sub": _sub, "mul": _mul, "div": _div, "pow": _pow, "maximum": _maximum,
    "minimum": _minimum, "neg": _neg, "exp": _exp, "log": _log, "sqrt": _sqrt,
    "rsqrt": _rsqrt, "reciprocal": _reciprocal, "abs": _abs, "erf": _erf, "erfc": _erfc,
    "sin": _sin, "cos": _cos, "floor": _floor, "ceil": _ceil, "sign": _sign,
    "identity": _identity, "logical_not": _logical_not, "equal": _equal,
    "not_equal": _not_equal, "less": _less, "less_equal": _less_equal, "greater": _greater,
    "greater_equal": _greater_equal, "logical_and": _logical_and, "logical_or": _logical_or,
    "where": _where, "clip": _clip, "cast": _cast,
    "relu": _relu, "gelu": _gelu, "sigmoid": _sigmoid, "tanh": _tanh, "silu": _silu,
    "softplus": _softplus, "leaky_relu": _leaky_relu, "elu": _elu, "hardswish": _hardswish,
    "hardsigmoid": _hardsigmoid, "mish": _mish, "softmax": _softmax,
    "log_softmax": _log_softmax, "dropout": _dropout,
    "reduce_sum": _reduce_sum, "reduce_mean": _reduce_mean, "reduce_max": _reduce_max,
    "reduce_min": _reduce_min, "reduce_prod": _reduce_prod, "reduce_var": _reduce_var,
    "argmax": _argmax, "argmin": _argmin, "cumsum": _cumsum,
    "matmul": _matmul, "einsum": _einsum, "reshape": _reshape, "transpose": _transpose,
    "concat": _concat, "split": _split, "slice": _slice, "gather": _gather,
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "expand": _expand, "tile": _tile,
    "flip": _flip, "pad": _pad, "trilu": _trilu, "full": _full, "arange": _arange,
    "linear": _linear, "conv": _conv, "conv_transpose": _conv_transpose,
    "max_pool": _max_pool, "avg_pool": _avg_pool, "adaptive_avg_pool": _adaptive_avg_pool,
    "adaptive_max_pool": _adaptive_max_pool, "batch_norm": _batch_norm,
    "layer_norm": _layer_norm, "group_norm": _group_norm, "rms_norm": _rms_norm,
    "embedding": _embedding, "attention": _attention,
}

# --- the runner ----------------------------------------------------------------------------

# jax.default_matmul_precision per Context.dtype: JAX's default on GPUs is TF32
_MATMUL_PRECISION = {"float32": "highest", "tf32": "tensorfloat32", "bfloat16": "default",
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
    ops: ClassVar[dict[str, OpFn]] = OPS

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.device = self._resolve_device(context.device)
        # compiled programs are shared by every runner of the process: a second comparison
        # (another seed, another pair) reuses them instead of compiling again
        self._compiled = _PROGRAMS
        self._wide: dict[int, weakref.ref] = {}  # ids of int32 tensors that are int64 values
        self._last: Any = None

    @staticmethod
    def _resolve_device(device: str) -> Any:
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

    def _scope(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(jax.default_device(self.device))
        stack.enter_context(jax.default_matmul_precision(_MATMUL_PRECISION[self.context.dtype]))
        return stack

    # --- tensors -------------------------------------------------------------------------
    def device_dtype(self, dtype: str) -> np.dtype:
        """The dtype a value of graph ``dtype`` has on the device."""
        if dtype in FLOAT:
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
        float_out = tuple(i for i, v in enumerate(node.outputs) if v.dtype in FLOAT)
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
