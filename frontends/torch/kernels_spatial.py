"""PyTorch kernels for the ops that carry canonical padding: pad, convolutions and pooling.

Part of the PyTorch kernel table (``kernels.KERNELS``), the inverse of the frontend's converter
table; the same rules hold: module-level functions with the meaning of the op's NumPy
reference, using only ``torch``, ``F``, ``math``, ``np`` and this module's private helpers, so
the repro exporter can copy one with its helpers into a standalone script.

Canonical padding lists every begin, then every end: ``F.pad`` wants last axis first, and
PyTorch's layers only pad symmetrically, so asymmetric padding goes through ``F.pad``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from specgraph.numeric.runner import OpFn

__all__ = ["SPATIAL_KERNELS"]

# -- helpers ---------------------------------------------------------------------------------


def _torch_pads(padding):
    """Canonical pads (all begins, then all ends) in ``F.pad``'s order (last axis first)."""
    n = len(padding) // 2
    return tuple(p for i in reversed(range(n)) for p in (padding[i], padding[n + i]))


def _symmetric(padding):
    n = len(padding) // 2
    return tuple(padding[:n]) == tuple(padding[n:])


def _pad_modes(x, begins, ends, mode):
    """Reflect or edge padding of any axes; ``F.pad`` pads at most the last three."""
    padded = [i for i in range(x.ndim) if begins[i] or ends[i]]
    if not padded:
        return x
    torch_mode = "replicate" if mode == "edge" else mode
    if x.ndim - padded[0] > 3:
        for i in padded:
            y = F.pad(x.movedim(i, -1).reshape(-1, x.shape[i]).unsqueeze(1),
                      (begins[i], ends[i]), mode=torch_mode)
            moved = x.movedim(i, -1).shape[:-1]
            x = y.reshape(*moved, y.shape[-1]).movedim(-1, i)
        return x
    first = padded[0]
    flat = x.reshape(-1, *x.shape[first:])
    widths = tuple(w for i in reversed(range(first, x.ndim)) for w in (begins[i], ends[i]))
    y = F.pad(flat, widths, mode=torch_mode)
    return y.reshape(*x.shape[:first], *y.shape[1:])


def _pool_out(size, k, s, pb, pe, d, ceil_mode):
    """Output length of a pooling window sweep (the canonical ceil-mode rule)."""
    span = size + pb + pe - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1  # the last window must start inside the input or the begin padding
    return out


def _pool_outs(x, kernel, stride, padding, dilation, ceil_mode):
    rank = len(kernel)
    return [_pool_out(x.shape[2 + i], kernel[i], stride[i], padding[i], padding[rank + i],
                      dilation[i], ceil_mode) for i in range(rank)]


def _native_pool_padding(kernel, padding):
    """Whether PyTorch's pooling takes the padding itself: symmetric, at most half a kernel."""
    rank = len(kernel)
    return _symmetric(padding) and all(padding[i] <= kernel[i] // 2 for i in range(rank))


def _crop_spatial(y, outs):
    return y[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]


def _window_sums(x, kernel, stride, padding, dilation, outs):
    """Sum over every pooling window (zero padding), by a ones-kernel depthwise convolution."""
    rank = len(kernel)
    ends = [max(padding[rank + i], (outs[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1)
                + 1 - x.shape[2 + i] - padding[i]) for i in range(rank)]
    padded = F.pad(x, _torch_pads([*padding[:rank], *ends]))
    flat = padded.reshape(-1, 1, *padded.shape[2:])
    ones = torch.ones((1, 1, *kernel), dtype=x.dtype, device=x.device)
    sums = getattr(F, f"conv{rank}d")(flat, ones, None, stride, 0, dilation)
    return _crop_spatial(sums, outs).reshape(*x.shape[:2], *outs)


def _pool_counts(sizes, kernel, stride, padding, dilation, outs, count_include_pad):
    """The divisor of every average-pooling window, as the canonical reference counts it."""
    rank = len(kernel)
    counts = np.ones((1,) * rank)
    for i in range(rank):
        size, pb, pe = sizes[i], padding[i], padding[rank + i]
        starts = np.arange(outs[i]) * stride[i] - pb
        if count_include_pad:
            ends = np.minimum(starts + dilation[i] * (kernel[i] - 1) + 1, size + pe)
            cnt = (ends - starts + dilation[i] - 1) // dilation[i]
        else:
            taps = starts[:, None] + dilation[i] * np.arange(kernel[i])[None, :]
            cnt = ((taps >= 0) & (taps < size)).sum(axis=1)
        shape = [1] * rank
        shape[i] = outs[i]
        counts = counts * cnt.reshape(shape)
    return counts


# -- padding, convolution, pooling -----------------------------------------------------------


def pad(x, pads, mode="constant", value=0.0):
    rank = x.ndim
    begins, ends = pads[:rank], pads[rank:]
    x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                for i, (b, e) in enumerate(zip(begins, ends)))]
    begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if mode == "constant":
        return F.pad(x, _torch_pads([*begins, *ends]), value=value)
    return _pad_modes(x, begins, ends, mode)


def conv(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True):
    rank = weight.ndim - 2
    if _symmetric(padding):
        pad = tuple(padding[:rank])
    else:
        x, pad = F.pad(x, _torch_pads(padding)), 0
    return getattr(F, f"conv{rank}d")(x, weight, b, stride, pad, dilation, groups)


def conv_transpose(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True,
                   output_padding=()):
    rank = weight.ndim - 2
    symmetric = _symmetric(padding)
    pad = tuple(padding[:rank]) if symmetric else 0
    y = getattr(F, f"conv_transpose{rank}d")(x, weight, b, stride, pad, output_padding,
                                             groups, dilation)
    if symmetric:
        return y
    return y[(slice(None), slice(None)) + tuple(
        slice(padding[i], y.shape[2 + i] - padding[rank + i]) for i in range(rank))]


def max_pool(x, kernel, stride, padding, dilation, ceil_mode=False):
    rank = len(kernel)
    pool = getattr(F, f"max_pool{rank}d")
    if _native_pool_padding(kernel, padding):
        return pool(x, kernel, stride, tuple(padding[:rank]), dilation, ceil_mode)
    outs = _pool_outs(x, kernel, stride, padding, dilation, ceil_mode)
    y = pool(F.pad(x, _torch_pads(padding), value=-math.inf), kernel, stride, 0, dilation,
             ceil_mode)
    return _crop_spatial(y, outs)


def avg_pool(x, kernel, stride, padding, dilation, ceil_mode=False, count_include_pad=True,
             divisor=None):
    rank = len(kernel)
    if (all(d == 1 for d in dilation) and _native_pool_padding(kernel, padding)
            and (divisor is None or rank > 1)):
        extra = {} if rank == 1 else {"divisor_override": divisor}
        return getattr(F, f"avg_pool{rank}d")(x, kernel, stride, tuple(padding[:rank]),
                                              ceil_mode, count_include_pad, **extra)
    # dilation, asymmetric or wide padding: window sums over the canonical counts
    outs = _pool_outs(x, kernel, stride, padding, dilation, ceil_mode)
    total = _window_sums(x, kernel, stride, padding, dilation, outs)
    if divisor is not None:
        return total / divisor
    counts = _pool_counts(x.shape[2:], kernel, stride, padding, dilation, outs,
                          count_include_pad)
    return total / torch.as_tensor(counts, dtype=total.dtype, device=total.device)


def adaptive_avg_pool(x, output_size):
    return getattr(F, f"adaptive_avg_pool{len(output_size)}d")(x, tuple(output_size))


def adaptive_max_pool(x, output_size):
    return getattr(F, f"adaptive_max_pool{len(output_size)}d")(x, tuple(output_size))


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
        w = torch.as_tensor(_resize_weights(x.shape[axis], size, mode, coordinates, step,
                                            cubic_coeff, exclude_outside, antialias),
                            dtype=x.dtype, device=x.device)
        x = torch.movedim(torch.tensordot(w, torch.movedim(x, axis, 0), dims=([1], [0])),
                          0, axis)
    return x


SPATIAL_KERNELS: dict[str, OpFn] = {
    "pad": pad, "conv": conv, "conv_transpose": conv_transpose, "max_pool": max_pool,
    "avg_pool": avg_pool, "adaptive_avg_pool": adaptive_avg_pool,
    "adaptive_max_pool": adaptive_max_pool, "resize": resize,
}
