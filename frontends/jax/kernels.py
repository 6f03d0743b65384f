"""JAX kernels: every canonical op as the jax.numpy, lax and jax.nn calls a JAX model makes
(the table ``KERNELS``).

This table is the inverse of the frontend's converter table (``ops``, ``shape_ops``,
``layers``): those map JAX primitives onto canonical ops, these map each canonical op back
onto JAX's public functions (``jax.nn.gelu``, ``jax.nn.dot_product_attention``...). Each entry
is a plain module-level function with the signature and meaning of the op's NumPy reference
in ``specgraph.ops``. It uses nothing but ``jax``, ``jnp``, ``lax``, ``math``, ``np`` and the
private helpers of its own module, so the repro exporter can copy it with its helpers into a
standalone script. Padding, convolution and pooling live in ``kernels_spatial``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specgraph.frontends.jax.kernels_spatial import SPATIAL_KERNELS
from specgraph.numeric.runner import OpFn

__all__ = ["KERNELS"]

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


def _prelu(x, slope):
    return jnp.where(x >= 0, x, slope * x)


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


def _argsort(x, axis, descending=False):
    return jnp.argsort(x, axis=axis, stable=True, descending=descending)


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


def _linear(x, weight, b=None, bias=True):
    y = jnp.matmul(x, weight)
    return y if b is None else y + b


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


def _weight_norm(v, g, axes):
    return g * v / jnp.linalg.norm(v, axis=tuple(axes), keepdims=True)


def _embedding(indices, weight, padding_idx=None, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False):  # (PyTorch's alone: no port has it)
    if padding_idx is not None:  # that row gets no gradient
        row = jnp.arange(weight.shape[0])[:, None] == padding_idx % weight.shape[0]
        weight = jnp.where(row, lax.stop_gradient(weight), weight)
    rows = jnp.take(weight, indices, axis=0)
    if max_norm is None:
        return rows
    kept = lax.stop_gradient(rows)
    norm = jnp.sum(jnp.abs(kept) ** norm_type, axis=-1, keepdims=True) ** (1.0 / norm_type)
    scale = jnp.where(norm > max_norm, max_norm / (norm + 1e-7), jnp.ones_like(norm))
    return rows + lax.stop_gradient(rows * scale - rows)  # the gradient is the lookup's


def _attention_written_out(q, k, v, mask, scale, causal):
    """softmax(scale·q·kᵀ + mask)·v over [..., L, E], k/v heads repeated for grouped q."""
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = jnp.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = jnp.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * scale
    if causal:
        keep = jnp.tril(jnp.ones(scores.shape[-2:], dtype=bool))
        scores = jnp.where(keep, scores, -jnp.inf)
    if mask is not None and mask.dtype == jnp.bool_:
        rows = _kept_rows(mask, scores.shape, causal)
        scores = jnp.where(rows, jnp.where(mask, scores, -jnp.inf), 0.0)
        return jnp.matmul(jnp.where(rows, jax.nn.softmax(scores, axis=-1), 0.0), v)
    if mask is not None:
        scores = scores + mask
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def _kept_rows(mask, shape, causal):
    """Whether each query row of scores ``shape`` [..., L, S] keeps a key under the boolean
    ``mask`` (and causality): a row that keeps none gives zeros."""
    keep = mask & jnp.ones(shape, dtype=bool)
    if causal:
        keep = keep & jnp.tril(jnp.ones(shape[-2:], dtype=bool))
    return jnp.any(keep, axis=-1, keepdims=True)


def _attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    # jax.nn.dot_product_attention takes [B, T, N, H] with one head size for q, k and v
    fits = (q.ndim == 4 and k.ndim == 4 and k.shape == v.shape and q.shape[0] == k.shape[0]
            and q.shape[-1] == k.shape[-1] and (mask is None or mask.ndim <= 4))
    if not fits:
        return _attention_written_out(q, k, v, mask, scale, causal)
    boolean = mask is not None and mask.dtype == jnp.bool_
    out = jnp.swapaxes(jax.nn.dot_product_attention(
        jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2),
        bias=None if boolean else mask, mask=mask if boolean else None, scale=scale,
        is_causal=causal), 1, 2)
    if boolean:  # it averages a row that keeps no key; the op gives zeros
        out = jnp.where(_kept_rows(mask, q.shape[:-1] + k.shape[-2:-1], causal), out, 0.0)
    return out


def _rotate_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def _rotate_every_two(x):
    return jnp.stack((-x[..., 1::2], x[..., ::2]), axis=-1).reshape(x.shape)


def _rotary_embedding(x, theta, dim, layout="half", axis=1, factor=1.0):
    """As HF's Flax Llama (rotate_half) and GPT-J (every two) write it, with the angles
    computed in float32 (float64 for a float64 input), cos and sin in the input's dtype."""
    work = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    inv_freq = 1.0 / (theta ** (jnp.arange(0, dim, 2).astype(work) / dim))
    if factor != 1.0:  # linear scaling: HF divides the frequencies by the factor
        inv_freq = inv_freq / factor
    freqs = jnp.outer(jnp.arange(x.shape[axis]).astype(work), inv_freq)
    emb = (jnp.concatenate((freqs, freqs), axis=-1) if layout == "half"
           else jnp.repeat(freqs, 2, axis=-1))
    shape = [1] * x.ndim
    shape[axis], shape[-1] = x.shape[axis], dim
    cos = jnp.cos(emb).astype(x.dtype).reshape(shape)
    sin = jnp.sin(emb).astype(x.dtype).reshape(shape)
    rot, rest = x[..., :dim], x[..., dim:]
    turned = _rotate_half(rot) if layout == "half" else _rotate_every_two(rot)
    return jnp.concatenate((rot * cos + turned * sin, rest), axis=-1)


KERNELS: dict[str, OpFn] = {
    "add": _add, "sub": _sub, "mul": _mul, "div": _div, "pow": _pow, "maximum": _maximum,
    "minimum": _minimum, "neg": _neg, "exp": _exp, "log": _log, "sqrt": _sqrt,
    "rsqrt": _rsqrt, "reciprocal": _reciprocal, "abs": _abs, "erf": _erf, "erfc": _erfc,
    "sin": _sin, "cos": _cos, "floor": _floor, "ceil": _ceil, "sign": _sign,
    "identity": _identity, "logical_not": _logical_not, "equal": _equal,
    "not_equal": _not_equal, "less": _less, "less_equal": _less_equal, "greater": _greater,
    "greater_equal": _greater_equal, "logical_and": _logical_and, "logical_or": _logical_or,
    "where": _where, "prelu": _prelu, "clip": _clip, "cast": _cast,
    "relu": _relu, "gelu": _gelu, "sigmoid": _sigmoid, "tanh": _tanh, "silu": _silu,
    "softplus": _softplus, "leaky_relu": _leaky_relu, "elu": _elu, "hardswish": _hardswish,
    "hardsigmoid": _hardsigmoid, "mish": _mish, "softmax": _softmax,
    "log_softmax": _log_softmax, "dropout": _dropout,
    "reduce_sum": _reduce_sum, "reduce_mean": _reduce_mean, "reduce_max": _reduce_max,
    "reduce_min": _reduce_min, "reduce_prod": _reduce_prod, "reduce_var": _reduce_var,
    "argmax": _argmax, "argmin": _argmin, "argsort": _argsort, "cumsum": _cumsum,
    "matmul": _matmul, "einsum": _einsum, "reshape": _reshape, "transpose": _transpose,
    "concat": _concat, "split": _split, "slice": _slice, "gather": _gather,
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "expand": _expand, "tile": _tile,
    "flip": _flip, "trilu": _trilu, "full": _full, "arange": _arange,
    "linear": _linear, "batch_norm": _batch_norm, "layer_norm": _layer_norm,
    "group_norm": _group_norm, "rms_norm": _rms_norm, "weight_norm": _weight_norm,
    "embedding": _embedding,
    "attention": _attention, "rotary_embedding": _rotary_embedding,
    **SPATIAL_KERNELS,
}
