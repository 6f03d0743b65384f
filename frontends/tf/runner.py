"""TensorFlow runner: canonical nodes executed one by one on TensorFlow's own kernels."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from specgraph.frontends.tf.tracer import _quiet_native
from specgraph.ir import Node
from specgraph.numeric.runner import FLOAT, Context, OpFn, Pullback, Runner, RunnerError

with _quiet_native():
    import tensorflow as tf

__all__ = ["TfRunner"]


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


def _last(x):
    """Channels-first to channels-last."""
    return tf.transpose(x, [0, *range(2, _rank(x)), 1])


def _first(x):
    """Channels-last back to channels-first."""
    r = _rank(x)
    return tf.transpose(x, [0, r - 1, *range(1, r - 1)])


def _pad_spatial(x, padding, value=0.0):
    """Channels-last x padded on each spatial axis (``padding``: begins, then ends)."""
    rank = len(padding) // 2
    if not any(padding):
        return x
    widths = [[0, 0], *([padding[i], padding[rank + i]] for i in range(rank)), [0, 0]]
    return tf.pad(x, widths, constant_values=tf.cast(value, x.dtype))


def _crop_spatial(x, sizes):
    """Channels-last x cut to the first ``sizes`` positions of each spatial axis."""
    if list(x.shape[1:-1]) == list(sizes):
        return x
    return x[(slice(None), *(slice(0, s) for s in sizes), slice(None))]


def _format(rank):
    """The channels-last data format of a rank-``rank`` convolution or pool (spelled out:
    TF's eager gradients of 3-D convolutions and pools read it back)."""
    return "N" + "DHW"[3 - rank:] + "C"


def _on_gpu(x):
    return "GPU" in (getattr(x, "device", "") or "")


def _conv_valid(x, w, stride, dilation):
    """One unpadded convolution of channels-last x with w ``[*k, in, out]``."""
    if all(s == 1 for s in stride) or all(d == 1 for d in dilation):
        return tf.nn.convolution(x, w, strides=list(stride), padding="VALID",
                                 data_format=_format(len(stride)), dilations=list(dilation))
    # tf.nn.convolution refuses strides with dilations; the kernels themselves take both
    rank = len(stride)
    strides, dilations = [1, *stride, 1], [1, *dilation, 1]
    if rank == 1:
        return tf.nn.conv1d(x, w, stride=strides, padding="VALID", dilations=dilations)
    if rank == 2:
        return tf.nn.conv2d(x, w, strides=strides, padding="VALID", dilations=dilations)
    return tf.nn.conv3d(x, w, strides=strides, padding="VALID", dilations=dilations)


def _depthwise(x, weight, stride, dilation, groups):
    """Whether tf.nn.depthwise_conv2d computes this conv (one group per input channel)."""
    return (len(stride) == 2 and groups == x.shape[-1] and weight.shape[1] == 1
            and stride[0] == stride[1]
            and (all(s == 1 for s in stride) or all(d == 1 for d in dilation)))


def _pool_geometry(shape, kernel, stride, padding, dilation, ceil_mode):
    """Output sizes, and the padding (begins, ends) whose VALID windows cover them."""
    rank = len(kernel)
    outs, ends = [], []
    for i in range(rank):
        size, k, s, d = shape[2 + i], kernel[i], stride[i], dilation[i]
        pb, pe = padding[i], padding[rank + i]
        span = size + pb + pe - d * (k - 1) - 1
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + pb:
            out -= 1  # the last window must start inside the input or the begin padding
        outs.append(out)
        ends.append(max(pe, (out - 1) * s + d * (k - 1) + 1 - size - pb))
    return outs, [*padding[:rank], *ends]


def _pool_valid(x, kind, kernel, stride, dilation):
    """MAX or AVG over unpadded windows of channels-last x."""
    if all(d == 1 for d in dilation):
        pool = tf.nn.max_pool if kind == "MAX" else tf.nn.avg_pool
        return pool(x, ksize=list(kernel), strides=list(stride), padding="VALID",
                    data_format=_format(len(kernel)))
    # TF pools with dilation at stride 1 only: every window, then every stride-th one
    y = tf.nn.pool(x, list(kernel), kind, strides=[1] * len(kernel), padding="VALID",
                   data_format=_format(len(kernel)), dilations=list(dilation))
    return y[(slice(None), *(slice(None, None, s) for s in stride), slice(None))]


def _avg_counts(shape, kernel, stride, padding, dilation, count_include_pad, outs):
    """How many taps each average divides by (explicit padding counted if asked)."""
    rank = len(kernel)
    counts = np.ones(outs)
    for i in range(rank):
        size, k, d, pb, pe = shape[2 + i], kernel[i], dilation[i], padding[i], padding[rank + i]
        starts = np.arange(outs[i]) * stride[i] - pb
        if count_include_pad:
            ends = np.minimum(starts + d * (k - 1) + 1, size + pe)
            cnt = (ends - starts + d - 1) // d
        else:
            taps = starts[:, None] + d * np.arange(k)[None, :]
            cnt = ((taps >= 0) & (taps < size)).sum(axis=1)
        view = [1] * rank
        view[i] = outs[i]
        counts = counts * cnt.reshape(view)
    return counts


def _adaptive(x, output_size, reduce):
    """PyTorch's adaptive bins, one spatial axis after the other (the bins are a grid)."""
    rank = len(output_size)
    if all(o == 1 for o in output_size):
        return reduce(x, axis=list(range(2, 2 + rank)), keepdims=True)
    for i, o in enumerate(output_size):
        axis, size = 2 + i, x.shape[2 + i]
        if o == size:
            continue
        parts = []
        for j in range(o):
            index = [slice(None)] * _rank(x)
            index[axis] = slice(math.floor(j * size / o), math.ceil((j + 1) * size / o))
            parts.append(reduce(x[tuple(index)], axis=axis, keepdims=True))
        x = tf.concat(parts, axis)
    return x


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


def _edge_pad(x, widths):
    """x padded by repeating its edge values (NumPy's ``edge``)."""
    for axis, (b, e) in enumerate(widths):
        if b or e:
            size = x.shape[axis]
            x = tf.gather(x, np.clip(np.arange(-b, size + e), 0, size - 1), axis=axis)
    return x


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


def pad(x, pads, mode="constant", value=0.0):
    rank = _rank(x)
    begins, ends = pads[:rank], pads[rank:]
    if any(p < 0 for p in pads):
        x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                    for i, (b, e) in enumerate(zip(begins, ends)))]
    widths = [[max(b, 0), max(e, 0)] for b, e in zip(begins, ends)]
    if mode == "edge":
        return _edge_pad(x, widths)
    if mode == "reflect":
        return tf.pad(x, widths, mode="REFLECT")
    return tf.pad(x, widths, constant_values=tf.cast(value, x.dtype))


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


def conv(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True):
    """Channels-last convolution; groups run one by one on the CPU (TF's grouped kernels
    are the GPU's), or as tf.nn.depthwise_conv2d where that computes the conv."""
    rank = len(stride)
    y = _pad_spatial(_last(x), padding)
    if _depthwise(y, weight, stride, dilation, groups):
        w = tf.reshape(weight, [groups, -1, *weight.shape[2:]])  # [in, multiplier, kh, kw]
        out = tf.nn.depthwise_conv2d(y, tf.transpose(w, [2, 3, 0, 1]),
                                     strides=[1, stride[0], stride[1], 1], padding="VALID",
                                     dilations=list(dilation))
    else:
        w = tf.transpose(weight, [*range(2, rank + 2), 1, 0])  # [*k, in/groups, out]
        if groups == 1 or _on_gpu(y):
            out = _conv_valid(y, w, stride, dilation)
        else:
            out = tf.concat([_conv_valid(a, k, stride, dilation) for a, k in
                             zip(tf.split(y, groups, axis=-1), tf.split(w, groups, axis=-1))],
                            axis=-1)
    if b is not None:
        out = tf.nn.bias_add(out, b)
    return _first(out)


def conv_transpose(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True,
                   output_padding=()):
    """tf.nn.conv_transpose group by group over the full (uncropped) output, then
    ``output_padding`` zeros at the end and the padding cropped off."""
    rank = len(stride)
    y = _last(x)
    kernel = weight.shape[2:]
    full_size = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
                 for i in range(rank)]
    w = tf.transpose(weight, [*range(2, rank + 2), 1, 0])  # [*k, out/groups, in]
    parts = [tf.nn.conv_transpose(a, k, output_shape=[x.shape[0], *full_size, k.shape[-2]],
                                  strides=list(stride), padding="VALID",
                                  dilations=list(dilation))
             for a, k in zip(tf.split(y, groups, axis=-1), tf.split(w, groups, axis=-1))]
    out = parts[0] if groups == 1 else tf.concat(parts, axis=-1)
    if any(output_padding):
        out = tf.pad(out, [[0, 0], *([0, p] for p in output_padding), [0, 0]])
    ends = [full_size[i] + output_padding[i] - padding[rank + i] for i in range(rank)]
    out = out[(slice(None), *(slice(padding[i], ends[i]) for i in range(rank)), slice(None))]
    if b is not None:
        out = tf.nn.bias_add(out, b)
    return _first(out)


def max_pool(x, kernel, stride, padding, dilation, ceil_mode=False):
    outs, pads = _pool_geometry(x.shape, kernel, stride, padding, dilation, ceil_mode)
    y = _pad_spatial(_last(x), pads, -math.inf)
    return _first(_crop_spatial(_pool_valid(y, "MAX", kernel, stride, dilation), outs))


def avg_pool(x, kernel, stride, padding, dilation, ceil_mode=False, count_include_pad=True,
             divisor=None):
    """tf.nn.avg_pool over zero-padded windows (a mean over all k taps), rescaled to the
    canonical divisor where that differs."""
    outs, pads = _pool_geometry(x.shape, kernel, stride, padding, dilation, ceil_mode)
    y = _pad_spatial(_last(x), pads)
    y = _crop_spatial(_pool_valid(y, "AVG", kernel, stride, dilation), outs)
    counts = (np.full(outs, float(divisor)) if divisor is not None else
              _avg_counts(x.shape, kernel, stride, padding, dilation, count_include_pad, outs))
    rescale = math.prod(kernel) / counts
    if np.all(rescale == 1.0):
        return _first(y)
    return _first(y * tf.constant(rescale[..., None], dtype=y.dtype))


def adaptive_avg_pool(x, output_size):
    return _adaptive(x, output_size, tf.math.reduce_mean)


def adaptive_max_pool(x, output_size):
    return _adaptive(x, output_size, tf.math.reduce_max)


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


def embedding(indices, weight, padding_idx=None):
    return tf.gather(weight, indices)


def attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    if _rank(q) >= 3 and k.shape[-3] != q.shape[-3]:
        k = tf.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = tf.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scores = tf.linalg.matmul(q, k, transpose_b=True) * scale
    blocked = tf.constant(-math.inf, dtype=scores.dtype)
    if causal:
        keep = np.tril(np.ones(scores.shape[-2:], dtype=bool))
        scores = tf.where(tf.constant(keep), scores, blocked)
    if mask is not None:
        scores = (tf.where(mask, scores, blocked) if mask.dtype == tf.bool
                  else scores + tf.cast(mask, scores.dtype))
    return tf.linalg.matmul(tf.nn.softmax(scores, axis=-1), v)


OPS: dict[str, OpFn] = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow_, "maximum": maximum,
    "minimum": minimum, "neg": neg, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "abs": abs_, "erf": erf, "erfc": erfc, "sin": sin, "cos": cos,
    "floor": floor, "ceil": ceil, "sign": sign, "identity": identity,
    "logical_not": logical_not, "logical_and": logical_and, "logical_or": logical_or,
    "equal": equal, "not_equal": not_equal, "less": less, "less_equal": less_equal,
    "greater": greater, "greater_equal": greater_equal, "where": where, "clip": clip,
    "cast": cast,
    "relu": relu, "gelu": gelu, "sigmoid": sigmoid, "tanh": tanh, "silu": silu,
    "softplus": softplus, "leaky_relu": leaky_relu, "elu": elu, "hardswish": hardswish,
    "hardsigmoid": hardsigmoid, "mish": mish, "softmax": softmax, "log_softmax": log_softmax,
    "dropout": dropout,
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "reduce_max": reduce_max,
    "reduce_min": reduce_min, "reduce_prod": reduce_prod, "reduce_var": reduce_var,
    "argmax": argmax, "argmin": argmin, "cumsum": cumsum,
    "matmul": matmul, "einsum": einsum, "reshape": reshape, "transpose": transpose,
    "concat": concat, "split": split, "slice": slice_, "gather": gather, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "expand": expand, "tile": tile, "flip": flip, "pad": pad,
    "trilu": trilu, "full": full, "arange": arange,
    "linear": linear, "conv": conv, "conv_transpose": conv_transpose, "max_pool": max_pool,
    "avg_pool": avg_pool, "adaptive_avg_pool": adaptive_avg_pool,
    "adaptive_max_pool": adaptive_max_pool, "batch_norm": batch_norm,
    "layer_norm": layer_norm, "group_norm": group_norm, "rms_norm": rms_norm,
    "embedding": embedding, "attention": attention,
}


# --- the runner ------------------------------------------------------------------------------

_DEVICES = {"cpu": "/CPU:0", "cuda": "/GPU:0"}


def _xla_refused(err: tf.errors.OpError) -> bool:
    """Whether XLA refused to compile a graph (an op without an XLA kernel on the device)."""
    return "XLA" in (err.message or "") and "compile" in (err.message or "")


def _device_name(device: str) -> str:
    with _quiet_native():
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

    Each op function takes and returns tensors in the canonical conventions (channels-first,
    linear weight ``[in, out]``, conv weight ``[out, in/groups, *k]``, padding all begins then
    all ends) and calls the public functions a Keras model ends up calling: convolutions and
    pools run channels-last (transposed in and out, kernels as ``[*k, in, out]``) on
    ``VALID`` windows after an explicit ``tf.pad``, so asymmetric and ceil-mode padding need
    no ``SAME`` guesswork. Op functions are module-level ``def``s that use only ``tf``,
    ``math``, ``np`` and this module's private helpers.

    In ``compiled`` mode each (op, attributes) pair is wrapped once in
    ``tf.function(jit_compile=True)`` and cached; an op that XLA cannot compile on the device
    (its first call raises) is rewrapped with ``jit_compile=False`` and runs as a plain
    TensorFlow graph from then on; ``not_compiled`` names those ops. ``tf32`` turns TensorFloat-32 matmuls and convolutions on
    while this runner executes, ``float32`` turns them off.
    """

    framework = "tf"
    differentiable = True
    ops = OPS

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.device = _device_name(context.device)
        self._storage = tf.as_dtype(context.storage)
        self._compiled = _PROGRAMS  # shared by every runner of the process
        self.not_compiled: set[str] = set()

    # --- tensors -------------------------------------------------------------------------
    def _target(self, dtype: str) -> tf.DType:
        return self._storage if dtype in FLOAT else tf.as_dtype(dtype)

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
