"""PyTorch kernels: every canonical op as the PyTorch calls a model makes (the table ``KERNELS``).

This table is the inverse of the frontend's converter table (``ops``, ``shape_ops``): those map
ATen ops onto canonical ops, these map each canonical op back onto PyTorch's public functions
(``F.linear``, ``F.scaled_dot_product_attention``...), so a kernel the model dispatches to is the
kernel the runner dispatches to. Each entry is a plain module-level function with the signature
and meaning of the op's NumPy reference in ``specgraph.ops``. It uses nothing but ``torch``,
``F``, ``math``, ``np`` and the private helpers of its own module, so the repro exporter can copy
it with its helpers into a standalone script. Padding, convolution and pooling live in
``kernels_spatial``.

Canonical conventions (``specgraph/ops/layers.py``) that PyTorch spells differently: linear
weights are ``[in, out]`` (``F.linear`` takes their transpose).
"""

from __future__ import annotations

import math

import numpy as np  # noqa: F401  (repro scripts copy these imports and load data with np)
import torch
import torch.nn.functional as F

from specgraph.frontends.torch.kernels_spatial import SPATIAL_KERNELS
from specgraph.numeric.runner import OpFn

__all__ = ["KERNELS"]

# -- helpers ---------------------------------------------------------------------------------


def _slice_axis(x, axis, start, end, step):
    """x[start:end:step] along one axis, Python's rules (PyTorch has no negative steps)."""
    n = x.shape[axis]
    first, stop, step = slice(start, end, step).indices(n)
    count = len(range(first, stop, step))
    if step < 0:
        x, first, step = torch.flip(x, (axis,)), n - 1 - first, -step
    index = [slice(None)] * x.ndim
    index[axis] = slice(first, first + (count - 1) * step + 1, step) if count else slice(0, 0)
    return x[tuple(index)]


def _stats_gradient(x, mean, var, w, eps):
    """Zero in value; carries the gradient of inference batch norm with respect to its
    statistics, which ``F.batch_norm`` treats as non-differentiable buffers."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x.detach() - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * w.detach().reshape(shape)
    return y - y.detach()


# -- elementwise -----------------------------------------------------------------------------


def add(a, b):
    return torch.add(a, b)


def sub(a, b):
    return torch.sub(a, b)


def mul(a, b):
    return torch.mul(a, b)


def div(a, b, rounding=None):
    return torch.div(a, b, rounding_mode=rounding)


def pow_(a, b):
    return torch.pow(a, b)


def maximum(a, b):
    return torch.maximum(a, b)


def minimum(a, b):
    return torch.minimum(a, b)


def neg(x):
    return torch.neg(x)


def exp(x):
    return torch.exp(x)


def log(x):
    return torch.log(x)


def sqrt(x):
    return torch.sqrt(x)


def rsqrt(x):
    return torch.rsqrt(x)


def reciprocal(x):
    return torch.reciprocal(x)


def abs_(x):
    return torch.abs(x)


def erf(x):
    return torch.erf(x)


def erfc(x):
    return torch.erfc(x)


def sin(x):
    return torch.sin(x)


def cos(x):
    return torch.cos(x)


def floor(x):
    return torch.floor(x)


def ceil(x):
    return torch.ceil(x)


def sign(x):
    return torch.sign(x)


def identity(x):
    return x.clone()


def logical_not(x):
    return torch.logical_not(x)


def equal(a, b):
    return torch.eq(a, b)


def not_equal(a, b):
    return torch.ne(a, b)


def less(a, b):
    return torch.lt(a, b)


def less_equal(a, b):
    return torch.le(a, b)


def greater(a, b):
    return torch.gt(a, b)


def greater_equal(a, b):
    return torch.ge(a, b)


def logical_and(a, b):
    return torch.logical_and(a, b)


def logical_or(a, b):
    return torch.logical_or(a, b)


def prelu(x, slope):
    return torch.where(x >= 0, x, slope * x)


def where(cond, a, b):
    return torch.where(cond if cond.dtype == torch.bool else cond != 0, a, b)


def clip(x, min=None, max=None):
    if min is None and max is None:
        return x.clone()
    return torch.clamp(x, min, max)


def cast(x, dtype):
    return x.to(getattr(torch, dtype))


# -- activations -----------------------------------------------------------------------------


def relu(x):
    return F.relu(x)


def gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


def sigmoid(x):
    return torch.sigmoid(x)


def tanh(x):
    return torch.tanh(x)


def silu(x):
    return F.silu(x)


def softplus(x, beta=1.0, threshold=20.0):
    return F.softplus(x, beta=beta, threshold=threshold)


def leaky_relu(x, alpha=0.01):
    return F.leaky_relu(x, alpha)


def elu(x, alpha=1.0):
    return F.elu(x, alpha)


def hardswish(x):
    return F.hardswish(x)


def hardsigmoid(x, alpha=1.0 / 6.0, beta=0.5):
    if math.isclose(alpha, 1.0 / 6.0) and beta == 0.5:
        return F.hardsigmoid(x)
    return torch.clamp(alpha * x + beta, 0.0, 1.0)


def mish(x):
    return F.mish(x)


def softmax(x, axis):
    return F.softmax(x, dim=axis)


def log_softmax(x, axis):
    return F.log_softmax(x, dim=axis)


def dropout(x, p=0.5):
    return F.dropout(x, p, training=False)


# -- reductions ------------------------------------------------------------------------------


def reduce_sum(x, axes=None, keepdims=False):
    return torch.sum(x, dim=axes, keepdim=keepdims)


def reduce_mean(x, axes=None, keepdims=False):
    x = x if x.is_floating_point() else x.double()
    return torch.mean(x, dim=axes, keepdim=keepdims)


def reduce_max(x, axes=None, keepdims=False):
    return torch.amax(x, dim=() if axes is None else axes, keepdim=keepdims)


def reduce_min(x, axes=None, keepdims=False):
    return torch.amin(x, dim=() if axes is None else axes, keepdim=keepdims)


def reduce_prod(x, axes=None, keepdims=False):
    if axes is None:
        out = torch.prod(x)
        return out.reshape((1,) * x.ndim) if keepdims else out
    for axis in sorted(axes, reverse=True):
        x = torch.prod(x, axis, keepdim=keepdims)
    return x


def reduce_var(x, axes=None, keepdims=False, correction=1):
    return torch.var(x, dim=axes, correction=correction, keepdim=keepdims)


def argmax(x, axis, keepdims=False):
    return torch.argmax(x, dim=axis, keepdim=keepdims)


def argmin(x, axis, keepdims=False):
    return torch.argmin(x, dim=axis, keepdim=keepdims)


def argsort(x, axis, descending=False):
    return torch.argsort(x, dim=axis, descending=descending, stable=True)


def cumsum(x, axis):
    return torch.cumsum(x, dim=axis)


# -- shape, data movement, sources -----------------------------------------------------------


def matmul(a, b):
    return torch.matmul(a, b)


def einsum(*xs, equation):
    return torch.einsum(equation, *xs)


def reshape(x, shape):
    return torch.reshape(x, tuple(shape))


def transpose(x, perm):
    return torch.permute(x, tuple(perm))


def concat(*xs, axis):
    return torch.cat(xs, dim=axis)


def split(x, axis, sizes):
    return tuple(torch.split(x, list(sizes), dim=axis))


def slice_(x, axes, starts, ends, steps):
    for axis, start, end, step in zip(axes, starts, ends, steps):
        x = _slice_axis(x, axis, start, end, step)
    return x


def gather(x, indices, axis):
    return x[(slice(None),) * axis + (indices.long(),)]


def squeeze(x, axes):
    return torch.squeeze(x, tuple(axes))


def unsqueeze(x, axes):
    for axis in sorted(axes):
        x = torch.unsqueeze(x, axis)
    return x


def expand(x, shape):
    return x.expand(tuple(shape))


def tile(x, repeats):
    return torch.tile(x, tuple(repeats))


def flip(x, axes):
    return torch.flip(x, tuple(axes))


def trilu(x, upper, k=0):
    return torch.triu(x, k) if upper else torch.tril(x, k)


def full(shape, value, dtype):
    return torch.full(tuple(shape), value, dtype=getattr(torch, dtype))


def arange(start, limit, delta=1.0, dtype="int64"):
    target = getattr(torch, dtype)
    if target.is_floating_point:
        return torch.arange(start, limit, delta, dtype=target)
    # the canonical range counts in floats and then converts, as NumPy does
    return torch.arange(start, limit, delta, dtype=torch.float64).to(target)


# -- layers ----------------------------------------------------------------------------------


def linear(x, weight, b=None, bias=True):
    return F.linear(x, weight.T, b)


def embedding(indices, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False):
    if max_norm is not None:  # PyTorch renormalizes the weight in place: a copy's
        with torch.no_grad():
            renormed = weight.detach().clone()
            torch.embedding_renorm_(renormed, indices, max_norm, norm_type)
        weight = weight + (renormed - weight).detach()  # the gradient is the lookup's
    return F.embedding(indices, weight, padding_idx=padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq)


def batch_norm(x, mean, var, *wb, eps=1e-5, momentum=0.1, scale=True, bias=True):
    w = wb[0] if scale else None
    b = wb[-1] if bias else None
    if w is None and b is not None and x.is_cuda:
        # PyTorch 2.11's CUDA backward of batch_norm with a bias and no weight fails
        # ("tensor does not have a device"); a weight of ones is the same forward, bit for bit
        w = torch.ones_like(b).detach()
    y = F.batch_norm(x, mean.detach(), var.detach(), w, b, training=False, momentum=momentum,
                     eps=eps)
    if torch.is_grad_enabled() and (mean.requires_grad or var.requires_grad):
        y = y + _stats_gradient(x, mean, var, w, eps)
    return y


def layer_norm(x, *wb, axis, eps=1e-5, scale=True, bias=True):
    shape = tuple(x.shape[axis:])
    w = wb[0].reshape(shape) if scale else None
    b = wb[-1].reshape(shape) if bias else None
    return F.layer_norm(x, shape, w, b, eps)


def group_norm(x, *wb, num_groups, eps=1e-5, scale=True, bias=True):
    w = wb[0].reshape(-1) if scale else None
    b = wb[-1].reshape(-1) if bias else None
    return F.group_norm(x, num_groups, w, b, eps)


def rms_norm(x, *w, axis, eps, scale=True):
    shape = tuple(x.shape[axis:])
    return F.rms_norm(x, shape, w[0].reshape(shape) if scale else None, eps=eps)


def weight_norm(v, g, axes):
    kept = [d for d in range(v.ndim) if d not in axes]
    if len(kept) == 1:  # PyTorch's own weight norm, over every axis but dim
        return torch._weight_norm(v, g, kept[0])
    return g * v / torch.sqrt(torch.sum(v * v, dim=tuple(axes), keepdim=True))


def attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(q.dtype)
    if causal and mask is not None:  # PyTorch takes a mask or is_causal, not both
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        mask = mask & keep if mask.dtype == torch.bool else torch.where(keep, mask, -math.inf)
        causal = False
    gqa = q.ndim >= 3 and k.shape[-3] != q.shape[-3]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                         scale=scale, enable_gqa=gqa)
    if mask is not None and mask.dtype != torch.bool:
        # SDPA gives zeros where an additive mask blocks a whole row; its softmax gives NaN
        empty = torch.isneginf(mask).all(dim=-1, keepdim=True)
        out = torch.where(empty, torch.full((), math.nan, dtype=out.dtype, device=out.device),
                          out)
    return out


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rotary_embedding(x, theta, dim, layout="half", axis=1, factor=1.0):
    """As HF's Llama (rotate_half) and GPT-J (every two) write it: the angles in float32
    (float64 for a float64 input), cos and sin cast to the input's dtype."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    steps = torch.arange(0, dim, 2, dtype=torch.int64, device=x.device).to(work)
    inv_freq = 1.0 / (theta ** (steps / dim))
    if factor != 1.0:  # linear scaling: HF divides the frequencies by the factor
        inv_freq = inv_freq / factor
    positions = torch.arange(x.shape[axis], dtype=torch.int64, device=x.device).to(work)
    freqs = torch.outer(positions, inv_freq)
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = torch.repeat_interleave(freqs, 2, dim=-1)
    shape = [1] * x.ndim
    shape[axis], shape[-1] = x.shape[axis], dim
    cos, sin = emb.cos().to(x.dtype).reshape(shape), emb.sin().to(x.dtype).reshape(shape)
    rot, rest = x[..., :dim], x[..., dim:]
    turned = _rotate_half(rot) if layout == "half" else _rotate_every_two(rot)
    return torch.cat((rot * cos + turned * sin, rest), dim=-1)


KERNELS: dict[str, OpFn] = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow_, "maximum": maximum,
    "minimum": minimum, "neg": neg, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "abs": abs_, "erf": erf, "erfc": erfc, "sin": sin, "cos": cos,
    "floor": floor, "ceil": ceil, "sign": sign, "identity": identity,
    "logical_not": logical_not, "equal": equal, "not_equal": not_equal, "less": less,
    "less_equal": less_equal, "greater": greater, "greater_equal": greater_equal,
    "logical_and": logical_and, "logical_or": logical_or, "where": where, "prelu": prelu,
    "clip": clip, "cast": cast,
    "relu": relu, "gelu": gelu, "sigmoid": sigmoid, "tanh": tanh, "silu": silu,
    "softplus": softplus, "leaky_relu": leaky_relu, "elu": elu, "hardswish": hardswish,
    "hardsigmoid": hardsigmoid, "mish": mish, "softmax": softmax,
    "log_softmax": log_softmax, "dropout": dropout,
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "reduce_max": reduce_max,
    "reduce_min": reduce_min, "reduce_prod": reduce_prod, "reduce_var": reduce_var,
    "argmax": argmax, "argmin": argmin, "argsort": argsort, "cumsum": cumsum,
    "matmul": matmul, "einsum": einsum, "reshape": reshape, "transpose": transpose,
    "concat": concat, "split": split, "slice": slice_, "gather": gather, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "expand": expand, "tile": tile, "flip": flip,
    "trilu": trilu, "full": full, "arange": arange,
    "linear": linear, "embedding": embedding, "batch_norm": batch_norm,
    "layer_norm": layer_norm, "group_norm": group_norm, "rms_norm": rms_norm,
    "weight_norm": weight_norm, "attention": attention, "rotary_embedding": rotary_embedding,
    **SPATIAL_KERNELS,
}
