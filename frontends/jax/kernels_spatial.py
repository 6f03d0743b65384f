"""JAX kernels for the ops that carry canonical padding: pad, convolutions and pooling.

Part of the JAX kernel table (``kernels.KERNELS``), the inverse of the frontend's converter
table; the same rules hold: module-level functions with the meaning of the op's NumPy
reference, using only ``jax``, ``jnp``, ``lax``, ``math``, ``np`` and this module's private
helpers, so the repro exporter can copy one with its helpers into a standalone script.
Canonical layouts are JAX's defaults for ``lax`` convolutions (NCHW inputs, OIHW kernels);
padding pairs are (begin, end) per spatial axis.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from specgraph.numeric.runner import OpFn

__all__ = ["SPATIAL_KERNELS"]

# --- padding, convolution ------------------------------------------------------------------


def _pad(x, pads, mode="constant", value=0.0):
    rank = jnp.ndim(x)
    begins, ends = pads[:rank], pads[rank:]
    x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                for i, (b, e) in enumerate(zip(begins, ends)))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return jnp.pad(x, widths, mode="constant", constant_values=value)
    return jnp.pad(x, widths, mode=mode)


def _bias_add(y, b):
    """``y`` plus a per-channel bias over axis 1 (``b`` None: ``y`` unchanged)."""
    return y if b is None else y + jnp.reshape(b, (1, -1) + (1,) * (y.ndim - 2))


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


# --- pooling -------------------------------------------------------------------------------


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


def _resize(x, axes, sizes, mode, coordinates, steps, cubic_coeff=-0.75, exclude_outside=False,
            antialias=False):
    """Each axis of ``axes`` times its interpolation matrix."""
    for axis, size, step in zip(axes, sizes, steps):
        w = jnp.asarray(_resize_weights(x.shape[axis], size, mode, coordinates, step,
                                        cubic_coeff, exclude_outside, antialias), x.dtype)
        x = jnp.moveaxis(jnp.tensordot(w, jnp.moveaxis(x, axis, 0), axes=(1, 0)), 0, axis)
    return x


SPATIAL_KERNELS: dict[str, OpFn] = {
    "pad": _pad, "conv": _conv, "conv_transpose": _conv_transpose, "max_pool": _max_pool,
    "avg_pool": _avg_pool, "adaptive_avg_pool": _adaptive_avg_pool,
    "adaptive_max_pool": _adaptive_max_pool, "resize": _resize,
}
