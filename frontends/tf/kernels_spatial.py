"""TensorFlow kernels for the ops that carry canonical padding: pad, convolutions and pooling.

Part of the TensorFlow kernel table (``kernels.KERNELS``), the inverse of the frontend's
converter table; the same rules hold: module-level functions with the meaning of the op's
NumPy reference, using only ``tf``, ``math``, ``np`` and this module's own functions, so the
repro exporter can copy one with what it calls into a standalone script.

Convolutions and pools run channels-last (transposed in and out, kernels as
``[*k, in, out]``) on ``VALID`` windows after an explicit ``tf.pad``, so asymmetric and
ceil-mode padding need no ``SAME`` guesswork.
"""

from __future__ import annotations

import math

import numpy as np

from specgraph.frontends.tf.quiet import quiet_native
from specgraph.numeric.runner import OpFn

# TensorFlow's C++ logging writes to the terminal while it starts: imported quietly first; the
# plain import then binds ``tf`` at top level, which is where a repro script copies it from
with quiet_native():
    import tensorflow  # noqa: F401
import tensorflow as tf  # noqa: E402

__all__ = ["SPATIAL_KERNELS"]

# --- helpers ---------------------------------------------------------------------------------


def _last(x):
    """Channels-first to channels-last."""
    return tf.transpose(x, [0, *range(2, len(x.shape)), 1])


def _first(x):
    """Channels-last back to channels-first."""
    r = len(x.shape)
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
            index = [slice(None)] * len(x.shape)
            index[axis] = slice(math.floor(j * size / o), math.ceil((j + 1) * size / o))
            parts.append(reduce(x[tuple(index)], axis=axis, keepdims=True))
        x = tf.concat(parts, axis)
    return x


def _edge_pad(x, widths):
    """x padded by repeating its edge values (NumPy's ``edge``)."""
    for axis, (b, e) in enumerate(widths):
        if b or e:
            size = x.shape[axis]
            x = tf.gather(x, np.clip(np.arange(-b, size + e), 0, size - 1), axis=axis)
    return x


# --- padding, convolution, pooling -----------------------------------------------------------


def pad(x, pads, mode="constant", value=0.0):
    rank = len(x.shape)
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


def _resize_weights(n_in, n_out, mode, coordinates, step, cubic_coeff, exclude_outside,
                    antialias):
    """The [n_out, n_in] interpolation matrix of one axis of ``resize`` (NumPy, float64)."""
    o = np.arange(n_out, dtype=np.float64)
    if coordinates == "align_corners":
        x = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    elif coordinates == "asymmetric":
        x = o * step
    else:
        x = (o + 0.5) * step - 0.5
        if coordinates == "pytorch_half_pixel" and n_out == 1:
            x = np.zeros(n_out)

    def keys(d):
        a, d = cubic_coeff, np.abs(d)
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return np.where(d <= 1, near, np.where(d < 2, far, 0.0))

    w = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if antialias and step > 1:
        support = (1.0 if mode == "linear" else 2.0) * step
        for i in range(n_out):
            taps = np.arange(math.floor(x[i] - support) + 1, math.ceil(x[i] + support))
            d = np.abs(taps - x[i]) / step
            k = np.maximum(1 - d, 0) if mode == "linear" else keys(d)
            keep = (taps >= 0) & (taps < n_in)
            if k[keep].sum() != 0:
                w[i, taps[keep]] += k[keep] / k[keep].sum()
    elif mode == "linear":
        x = np.clip(x, 0, n_in - 1)
        lo = np.floor(x).astype(np.int64)
        np.add.at(w, (rows, lo), 1 - (x - lo))
        np.add.at(w, (rows, np.minimum(lo + 1, n_in - 1)), x - lo)
    else:
        base = np.floor(x).astype(np.int64)
        for offset in (-1, 0, 1, 2):
            taps = base + offset
            k = keys(x - taps)
            if exclude_outside:
                k = np.where((taps >= 0) & (taps < n_in), k, 0.0)
            np.add.at(w, (rows, np.clip(taps, 0, n_in - 1)), k)
        if exclude_outside:
            w = w / w.sum(axis=1, keepdims=True)
    return w


def resize(x, axes, sizes, mode, coordinates, steps, cubic_coeff=-0.75, exclude_outside=False,
           antialias=False):
    """Each axis of ``axes`` times its interpolation matrix."""
    for axis, size, step in zip(axes, sizes, steps):
        w = tf.constant(_resize_weights(int(x.shape[axis]), size, mode, coordinates, step,
                                        cubic_coeff, exclude_outside, antialias), x.dtype)
        perm = [axis] + [i for i in range(len(x.shape)) if i != axis]
        y = tf.tensordot(w, tf.transpose(x, perm), axes=[[1], [0]])
        x = tf.transpose(y, [perm.index(i) for i in range(len(perm))])
    return x


SPATIAL_KERNELS: dict[str, OpFn] = {
    "pad": pad, "conv": conv, "conv_transpose": conv_transpose, "max_pool": max_pool,
    "avg_pool": avg_pool, "adaptive_avg_pool": adaptive_avg_pool,
    "adaptive_max_pool": adaptive_max_pool, "resize": resize,
}
