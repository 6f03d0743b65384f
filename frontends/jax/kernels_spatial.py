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


SPATIAL_KERNELS: dict[str, OpFn] = {
    "pad": _pad, "conv": _conv, "conv_transpose": _conv_transpose, "max_pool": _max_pool,
    "avg_pool": _avg_pool, "adaptive_avg_pool": _adaptive_avg_pool,
    "adaptive_max_pool": _adaptive_max_pool,
}
