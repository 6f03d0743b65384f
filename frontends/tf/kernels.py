"""TensorFlow kernels: every canonical op as the TensorFlow calls a Keras model ends up making
(the table ``KERNELS``).

This table is the inverse of the frontend's converter table (``ops``, ``shape_ops``): those map
TF ops onto canonical ops, these map each canonical op back onto TensorFlow's public functions
in the canonical conventions (channels-first, linear weight ``[in, out]``, conv weight
``[out, in/groups, *k]``, padding all begins then all ends). Each entry is a plain module-level
function with the signature and meaning of the op's NumPy reference in ``specgraph.ops``. It
uses nothing but ``tf``, ``math``, ``np`` and the functions of its own module, so the repro
exporter can copy it with what it calls into a standalone script. Padding, convolution and
pooling live in ``kernels_spatial``.
"""

from __future__ import annotations

import math

import numpy as np

from specgraph.frontends.tf.kernels_spatial import SPATIAL_KERNELS
from specgraph.frontends.tf.quiet import quiet_native
from specgraph.numeric.runner import OpFn

# TensorFlow's C++ logging writes to the terminal while it starts: imported quietly first; the
# plain import then binds ``tf`` at top level, which is where a repro script copies it from
with quiet_native():
    import tensorflow  # noqa: F401
import tensorflow as tf  # noqa: E402

__all__ = ["KERNELS"]

# --- helpers ---------------------------------------------------------------------------------


def _rank(x):
    return len(x.shape)


def _common(*xs):
    """The inputs in one dtype: the first floating one, else int64 if any is an integer."""
    dtypes = [x.dtype for x in xs]
    if all(d == dtypes[0] for d in dtypes):
        return xs
    floats = [d for d in dtypes if d.is_floating]
    target = floats[0] if floats else tf.int64
    return tuple(x if x.dtype == target else tf.cast(x, target) for x in xs)


def _moments(x, axes):
    """Mean and biased variance over ``axes``, kept; float16/bfloat16 statistics in float32,
    as Keras computes them."""
    low = x.dtype in (tf.float16, tf.bfloat16)
    mean, var = tf.nn.moments(tf.cast(x, tf.float32) if low else x, axes, keepdims=True)
    return (tf.cast(mean, x.dtype), tf.cast(var, x.dtype)) if low else (mean, var)


def _channel(p, rank):
    """A per-channel parameter shaped to broadcast over axis 1 of a rank-``rank`` tensor."""
    return tf.reshape(p, [1, -1, *([1] * (rank - 2))])


def _all_axes(x, axes):
    return list(range(_rank(x))) if axes is None else list(axes)


def _arg(x, axis, keepdims, pick):
    """argmax/argmin as int64, the first NaN winning as in NumPy."""
    out = pick(x, axis=axis, output_type=tf.int64)
    if x.dtype.is_floating:
        nan = tf.math.is_nan(x)
        first = tf.math.argmax(tf.cast(nan, tf.int32), axis=axis, output_type=tf.int64)
        out = tf.where(tf.reduce_any(nan, axis=axis), first, out)
    return tf.expand_dims(out, axis) if keepdims else out


def _floor_divide(a, b):
    """Python's float ``//`` (``1.0 // 0.1 == 9``), from the exact remainder as NumPy and
    PyTorch compute it, where floor(a / b) would round the quotient up first."""
    q = (a - tf.math.floormod(a, b)) / b
    f = tf.math.floor(q)
    return tf.where(q - f > 0.5, f + 1, f)


def _trunc(q):
    return tf.where(q < 0, tf.math.ceil(q), tf.math.floor(q))


# --- elementwise -----------------------------------------------------------------------------


def add(a, b):
    a, b = _common(a, b)
    return tf.math.add(a, b)


def sub(a, b):
    a, b = _common(a, b)
    return tf.math.subtract(a, b)


def mul(a, b):
    a, b = _common(a, b)
    return tf.math.multiply(a, b)


def div(a, b, rounding=None):
    a, b = _common(a, b)
    if rounding is None:
        return tf.math.truediv(a, b)  # integers divide into float64
    if a.dtype.is_integer:
        return tf.math.floordiv(a, b) if rounding == "floor" else tf.truncatediv(a, b)
    return _floor_divide(a, b) if rounding == "floor" else _trunc(tf.math.truediv(a, b))


def pow_(a, b):
    a, b = _common(a, b)
    return tf.math.pow(a, b)


def maximum(a, b):
    a, b = _common(a, b)
    return tf.math.maximum(a, b)


def minimum(a, b):
    a, b = _common(a, b)
    return tf.math.minimum(a, b)


def neg(x):
    return tf.math.negative(x)


def exp(x):
    return tf.math.exp(x)


def log(x):
    return tf.math.log(x)


def sqrt(x):
    return tf.math.sqrt(x)


def rsqrt(x):
    return tf.math.rsqrt(x)


def reciprocal(x):
    return tf.math.reciprocal(x)


def abs_(x):
    return tf.math.abs(x)


def erf(x):
    return tf.math.erf(x)


def erfc(x):
    return tf.math.erfc(x)


def sin(x):
    return tf.math.sin(x)


def cos(x):
    return tf.math.cos(x)


def floor(x):
    return tf.math.floor(x)


def ceil(x):
    return tf.math.ceil(x)


def sign(x):
    return tf.math.sign(x)


def identity(x):
    return tf.identity(x)


def logical_not(x):
    return tf.math.logical_not(tf.cast(x, tf.bool))


def logical_and(a, b):
    return tf.math.logical_and(tf.cast(a, tf.bool), tf.cast(b, tf.bool))


def logical_or(a, b):
    return tf.math.logical_or(tf.cast(a, tf.bool), tf.cast(b, tf.bool))


def equal(a, b):
    a, b = _common(a, b)
    return tf.math.equal(a, b)


def not_equal(a, b):
    a, b = _common(a, b)
    return tf.math.not_equal(a, b)


def less(a, b):
    a, b = _common(a, b)
    return tf.math.less(a, b)


def less_equal(a, b):
    a, b = _common(a, b)
    return tf.math.less_equal(a, b)


def greater(a, b):
    a, b = _common(a, b)
    return tf.math.greater(a, b)


def greater_equal(a, b):
    a, b = _common(a, b)
    return tf.math.greater_equal(a, b)


def prelu(x, slope):
    x, slope = _common(x, slope)
    return tf.where(x >= 0, x, slope * x)


def where(cond, a, b):
    a, b = _common(a, b)
    return tf.where(tf.cast(cond, tf.bool), a, b)


def clip(x, min=None, max=None):
    if min is not None and max is not None:
        return tf.clip_by_value(x, tf.cast(min, x.dtype), tf.cast(max, x.dtype))
    if min is not None:
        x = tf.math.maximum(x, tf.cast(min, x.dtype))
    if max is not None:
        x = tf.math.minimum(x, tf.cast(max, x.dtype))
    return x


def cast(x, dtype):
    return tf.cast(x, tf.as_dtype(dtype))


# --- activations -----------------------------------------------------------------------------


def relu(x):
    return tf.nn.relu(x)


def gelu(x, approximate="none"):
    return tf.nn.gelu(x, approximate=approximate == "tanh")


def sigmoid(x):
    return tf.math.sigmoid(x)


def tanh(x):
    return tf.math.tanh(x)


def silu(x):
    return tf.nn.silu(x)


def softplus(x, beta=1.0, threshold=20.0):
    bx = x if beta == 1.0 else x * beta
    soft = tf.math.softplus(bx) if beta == 1.0 else tf.math.softplus(bx) / beta
    return tf.where(bx > threshold, x, soft)


def leaky_relu(x, alpha=0.01):
    return tf.nn.leaky_relu(x, alpha=alpha)


def elu(x, alpha=1.0):
    y = tf.nn.elu(x)
    return y if alpha == 1.0 else tf.where(x > 0, y, alpha * y)


def hardswish(x):
    return x * tf.nn.relu6(x + 3.0) / 6.0


def hardsigmoid(x, alpha=1.0 / 6.0, beta=0.5):
    return tf.clip_by_value(alpha * x + beta, tf.cast(0.0, x.dtype), tf.cast(1.0, x.dtype))


def mish(x):
    return x * tf.math.tanh(tf.math.softplus(x))


def softmax(x, axis):
    return tf.nn.softmax(x, axis=axis)


def log_softmax(x, axis):
    return tf.nn.log_softmax(x, axis=axis)


def dropout(x, p=0.5):
    return tf.identity(x)


# --- reductions ------------------------------------------------------------------------------


def reduce_sum(x, axes=None, keepdims=False):
    return tf.math.reduce_sum(x, axis=_all_axes(x, axes), keepdims=keepdims)


def reduce_mean(x, axes=None, keepdims=False):
    return tf.math.reduce_mean(x, axis=_all_axes(x, axes), keepdims=keepdims)


def reduce_max(x, axes=None, keepdims=False):
    return tf.math.reduce_max(x, axis=_all_axes(x, axes), keepdims=keepdims)


def reduce_min(x, axes=None, keepdims=False):
    return tf.math.reduce_min(x, axis=_all_axes(x, axes), keepdims=keepdims)


def reduce_prod(x, axes=None, keepdims=False):
    return tf.math.reduce_prod(x, axis=_all_axes(x, axes), keepdims=keepdims)


def reduce_var(x, axes=None, keepdims=False, correction=1):
    axis = _all_axes(x, axes)
    var = tf.math.reduce_variance(x, axis=axis, keepdims=keepdims)
    if correction == 0:
        return var
    n = math.prod(x.shape[a] for a in axis)
    return var * n / (n - correction)


def argmax(x, axis, keepdims=False):
    return _arg(x, axis, keepdims, tf.math.argmax)


def argmin(x, axis, keepdims=False):
    return _arg(x, axis, keepdims, tf.math.argmin)


def argsort(x, axis, descending=False):
    return tf.cast(tf.argsort(x, axis=axis, stable=True,
                              direction="DESCENDING" if descending else "ASCENDING"), tf.int64)


def cumsum(x, axis):
    return tf.math.cumsum(x, axis=axis)


# --- shape, data movement, sources -----------------------------------------------------------


def matmul(a, b):
    a, b = _common(a, b)
    vec_a, vec_b = _rank(a) == 1, _rank(b) == 1
    out = tf.linalg.matmul(tf.expand_dims(a, 0) if vec_a else a,
                           tf.expand_dims(b, -1) if vec_b else b)
    if vec_a:
        out = tf.squeeze(out, -2)
    return tf.squeeze(out, -1) if vec_b else out


def einsum(*xs, equation):
    return tf.einsum(equation, *_common(*xs))


def reshape(x, shape):
    return tf.reshape(x, list(shape))


def transpose(x, perm):
    return tf.transpose(x, list(perm))


def concat(*xs, axis):
    return tf.concat(list(_common(*xs)), axis=axis)


def split(x, axis, sizes):
    return tuple(tf.split(x, list(sizes), axis=axis))


def slice_(x, axes, starts, ends, steps):
    index = [slice(None)] * _rank(x)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(start, end, step)
    return x[tuple(index)]


def gather(x, indices, axis):
    indices = tf.where(indices < 0, indices + x.shape[axis], indices)
    return tf.gather(x, indices, axis=axis)


def squeeze(x, axes):
    return tf.squeeze(x, axis=list(axes))


def unsqueeze(x, axes):
    out_rank = _rank(x) + len(axes)
    for axis in sorted(a % out_rank for a in axes):
        x = tf.expand_dims(x, axis)
    return x


def expand(x, shape):
    return tf.broadcast_to(x, list(shape))


def tile(x, repeats):
    repeats = list(repeats)
    rank = _rank(x)
    if len(repeats) > rank:
        x = tf.reshape(x, [1] * (len(repeats) - rank) + list(x.shape))
    repeats = [1] * (_rank(x) - len(repeats)) + repeats
    return tf.tile(x, repeats)


def flip(x, axes):
    return tf.reverse(x, axis=list(axes))


def trilu(x, upper, k=0):
    ones = np.ones(x.shape[-2:], dtype=bool)
    keep = np.triu(ones, k) if upper else np.tril(ones, k)
    return tf.where(tf.constant(keep), x, tf.zeros_like(x))


def full(shape, value, dtype):
    return tf.fill(list(shape), tf.cast(tf.constant(value, tf.float64), tf.as_dtype(dtype)))


def arange(start, limit, delta=1.0, dtype="int64"):
    return tf.cast(tf.range(start, limit, delta, dtype=tf.float64), tf.as_dtype(dtype))


# --- layers ----------------------------------------------------------------------------------


def linear(x, weight, b=None, bias=True):
    out = matmul(x, weight)
    return out if b is None else out + b


def batch_norm(x, mean, var, *wb, eps=1e-5, momentum=0.1, scale=True, bias=True):
    r = _rank(x)
    return tf.nn.batch_normalization(
        x, _channel(mean, r), _channel(var, r), _channel(wb[-1], r) if bias else None,
        _channel(wb[0], r) if scale else None, eps)


def layer_norm(x, *wb, axis, eps=1e-5, scale=True, bias=True):
    mean, var = _moments(x, list(range(axis, _rank(x))))
    return tf.nn.batch_normalization(x, mean, var, wb[-1] if bias else None,
                                     wb[0] if scale else None, eps)


def group_norm(x, *wb, num_groups, eps=1e-5, scale=True, bias=True):
    r = _rank(x)
    g = tf.reshape(x, [x.shape[0], num_groups, -1])
    mean, var = _moments(g, [2])
    y = tf.reshape(tf.nn.batch_normalization(g, mean, var, None, None, eps), tf.shape(x))
    if scale:
        y = y * _channel(wb[0], r)
    return y + _channel(wb[-1], r) if bias else y


def rms_norm(x, *w, axis, eps, scale=True):
    axes = list(range(axis, _rank(x)))
    y = x * tf.math.rsqrt(tf.math.reduce_mean(tf.math.square(x), axis=axes, keepdims=True) + eps)
    return y * w[0] if scale else y


def weight_norm(v, g, axes):
    return tf.nn.l2_normalize(v, axis=list(axes)) * g


def embedding(indices, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False):  # (PyTorch's alone: no port has it)
    if padding_idx is not None:  # that row gets no gradient
        row = tf.range(weight.shape[0])[:, None] == padding_idx % weight.shape[0]
        weight = tf.where(row, tf.stop_gradient(weight), weight)
    rows = tf.gather(weight, indices)
    if max_norm is None:
        return rows
    kept = tf.stop_gradient(rows)
    norm = tf.reduce_sum(tf.abs(kept) ** norm_type, axis=-1, keepdims=True) ** (1.0 / norm_type)
    scale = tf.where(norm > max_norm, max_norm / (norm + 1e-7), tf.ones_like(norm))
    return rows + tf.stop_gradient(rows * scale - rows)  # the gradient is the lookup's


def attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    if _rank(q) >= 3 and k.shape[-3] != q.shape[-3]:
        k = tf.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = tf.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scores = tf.linalg.matmul(q, k, transpose_b=True) * scale
    blocked = tf.constant(-math.inf, dtype=scores.dtype)
    tril = tf.constant(np.tril(np.ones(scores.shape[-2:], dtype=bool)))
    if causal:
        scores = tf.where(tril, scores, blocked)
    rows = None
    if mask is not None and mask.dtype == tf.bool:  # a row keeping no key gives zeros
        keep = tf.logical_and(mask, tril) if causal else mask
        rows = tf.reduce_any(keep & tf.ones_like(scores, dtype=tf.bool), axis=-1,
                             keepdims=True)
        scores = tf.where(rows, tf.where(mask, scores, blocked), tf.zeros_like(scores))
    elif mask is not None:
        scores = scores + tf.cast(mask, scores.dtype)
    weights = tf.nn.softmax(scores, axis=-1)
    if rows is not None:
        weights = tf.where(rows, weights, tf.zeros_like(weights))
    return tf.linalg.matmul(weights, v)


def _rotate_half(x):
    x1, x2 = tf.split(x, 2, axis=-1)
    return tf.concat((-x2, x1), axis=-1)


def _rotate_every_two(x):
    return tf.reshape(tf.stack((-x[..., 1::2], x[..., ::2]), axis=-1), tf.shape(x))


def rotary_embedding(x, theta, dim, layout="half", axis=1, factor=1.0):
    """As HF's TF Mistral (rotate_half) and GPT-J (every two) write it, with the angles
    computed in float32 (float64 for a float64 input), cos and sin in the input's dtype."""
    work = tf.float64 if x.dtype == tf.float64 else tf.float32
    inv_freq = 1.0 / (theta ** (tf.cast(tf.range(0, dim, 2), work) / dim))
    if factor != 1.0:  # linear scaling: HF divides the frequencies by the factor
        inv_freq = inv_freq / factor
    freqs = tf.einsum("i,j->ij", tf.cast(tf.range(x.shape[axis]), work), inv_freq)
    emb = (tf.concat((freqs, freqs), axis=-1) if layout == "half"
           else tf.repeat(freqs, 2, axis=-1))
    shape = [1] * _rank(x)
    shape[axis], shape[-1] = x.shape[axis], dim
    cos = tf.reshape(tf.cast(tf.cos(emb), x.dtype), shape)
    sin = tf.reshape(tf.cast(tf.sin(emb), x.dtype), shape)
    rot, rest = x[..., :dim], x[..., dim:]
    turned = _rotate_half(rot) if layout == "half" else _rotate_every_two(rot)
    return tf.concat((rot * cos + turned * sin, rest), axis=-1)


KERNELS: dict[str, OpFn] = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow_, "maximum": maximum,
    "minimum": minimum, "neg": neg, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "abs": abs_, "erf": erf, "erfc": erfc, "sin": sin, "cos": cos,
    "floor": floor, "ceil": ceil, "sign": sign, "identity": identity,
    "logical_not": logical_not, "logical_and": logical_and, "logical_or": logical_or,
    "equal": equal, "not_equal": not_equal, "less": less, "less_equal": less_equal,
    "greater": greater, "greater_equal": greater_equal, "where": where, "prelu": prelu,
    "clip": clip, "cast": cast,
    "relu": relu, "gelu": gelu, "sigmoid": sigmoid, "tanh": tanh, "silu": silu,
    "softplus": softplus, "leaky_relu": leaky_relu, "elu": elu, "hardswish": hardswish,
    "hardsigmoid": hardsigmoid, "mish": mish, "softmax": softmax, "log_softmax": log_softmax,
    "dropout": dropout,
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "reduce_max": reduce_max,
    "reduce_min": reduce_min, "reduce_prod": reduce_prod, "reduce_var": reduce_var,
    "argmax": argmax, "argmin": argmin, "argsort": argsort, "cumsum": cumsum,
    "matmul": matmul, "einsum": einsum, "reshape": reshape, "transpose": transpose,
    "concat": concat, "split": split, "slice": slice_, "gather": gather, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "expand": expand, "tile": tile, "flip": flip,
    "trilu": trilu, "full": full, "arange": arange,
    "linear": linear, "batch_norm": batch_norm, "layer_norm": layer_norm,
    "group_norm": group_norm, "rms_norm": rms_norm, "weight_norm": weight_norm,
    "embedding": embedding,
    "attention": attention, "rotary_embedding": rotary_embedding,
    **SPATIAL_KERNELS,
}
