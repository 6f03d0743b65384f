"""The PyTorch runner: canonical nodes executed one at a time on PyTorch's own kernels.

Each entry of the op table is a plain module-level function with the signature and meaning
of the op's NumPy reference in ``specgraph.ops``, written with the public calls a user's model
makes (``F.linear``, ``F.conv2d``, ``F.scaled_dot_product_attention``...), so a kernel the
model dispatches to is the kernel the runner dispatches to. The functions use nothing but
``torch``, ``F``, ``math``, ``np`` and the private helpers of this module, so one can be copied
with its helpers into a standalone script.

Canonical conventions (``specgraph/ops/layers.py``) that PyTorch spells differently: linear
weights are ``[in, out]`` (``F.linear`` takes their transpose); padding lists every begin,
then every end (``F.pad`` wants last axis first, and PyTorch's layers only pad symmetrically,
so asymmetric padding goes through ``F.pad``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specgraph.ir import Node
from specgraph.numeric.runner import FLOAT, Context, Pullback, Runner, RunnerError

__all__ = ["TorchRunner"]

STORAGE = ("float32", "bfloat16", "float16", "float64")
DTYPES = (*STORAGE, "int64", "int32", "int16", "int8", "uint8", "bool")

# -- helpers ---------------------------------------------------------------------------------


def _torch_pads(padding):
    """Canonical pads (all begins, then all ends) in ``F.pad``'s order (last axis first)."""
    n = len(padding) // 2
    return tuple(p for i in reversed(range(n)) for p in (padding[i], padding[n + i]))


def _symmetric(padding):
    n = len(padding) // 2
    return tuple(padding[:n]) == tuple(padding[n:])


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


def pad(x, pads, mode="constant", value=0.0):
    rank = x.ndim
    begins, ends = pads[:rank], pads[rank:]
    x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                for i, (b, e) in enumerate(zip(begins, ends)))]
    begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if mode == "constant":
        return F.pad(x, _torch_pads([*begins, *ends]), value=value)
    return _pad_modes(x, begins, ends, mode)


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


def embedding(indices, weight, padding_idx=None):
    return F.embedding(indices, weight, padding_idx=padding_idx)


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


def batch_norm(x, mean, var, *wb, eps=1e-5, momentum=0.1, scale=True, bias=True):
    w = wb[0] if scale else None
    b = wb[-1] if bias else None
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


def attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(q.dtype)
    if causal and mask is not None:  # PyTorch takes a mask or is_causal, not both
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        mask = mask & keep if mask.dtype == torch.bool else torch.where(keep, mask, -math.inf)
        causal = False
    gqa = q.ndim >= 3 and k.shape[-3] != q.shape[-3]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                          scale=scale, enable_gqa=gqa)


OPS = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow_, "maximum": maximum,
    "minimum": minimum, "neg": neg, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "reciprocal": reciprocal, "abs": abs_, "erf": erf, "erfc": erfc, "sin": sin, "cos": cos,
    "floor": floor, "ceil": ceil, "sign": sign, "identity": identity,
    "logical_not": logical_not, "equal": equal, "not_equal": not_equal, "less": less,
    "less_equal": less_equal, "greater": greater, "greater_equal": greater_equal,
    "logical_and": logical_and, "logical_or": logical_or, "where": where, "clip": clip,
    "cast": cast,
    "relu": relu, "gelu": gelu, "sigmoid": sigmoid, "tanh": tanh, "silu": silu,
    "softplus": softplus, "leaky_relu": leaky_relu, "elu": elu, "hardswish": hardswish,
    "hardsigmoid": hardsigmoid, "mish": mish, "softmax": softmax,
    "log_softmax": log_softmax, "dropout": dropout,
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "reduce_max": reduce_max,
    "reduce_min": reduce_min, "reduce_prod": reduce_prod, "reduce_var": reduce_var,
    "argmax": argmax, "argmin": argmin, "cumsum": cumsum,
    "matmul": matmul, "einsum": einsum, "reshape": reshape, "transpose": transpose,
    "concat": concat, "split": split, "slice": slice_, "gather": gather, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "expand": expand, "tile": tile, "flip": flip, "pad": pad,
    "trilu": trilu, "full": full, "arange": arange,
    "linear": linear, "embedding": embedding, "conv": conv, "conv_transpose": conv_transpose,
    "max_pool": max_pool, "avg_pool": avg_pool, "adaptive_avg_pool": adaptive_avg_pool,
    "adaptive_max_pool": adaptive_max_pool, "batch_norm": batch_norm,
    "layer_norm": layer_norm, "group_norm": group_norm, "rms_norm": rms_norm,
    "attention": attention,
}

# -- the runner ------------------------------------------------------------------------------


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RunnerError("the torch runner was asked for cuda, but this PyTorch sees no CUDA "
                          "device; pass --device cpu or install a CUDA build of PyTorch")
    if device not in ("cpu", "cuda"):
        raise RunnerError(f"the torch runner runs on cpu or cuda, not {device!r}")
    return device


_KERNEL_ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _compile(fn: Any, attrs: dict[str, Any], op: str) -> Any:
    """``fn`` with ``attrs`` bound, through ``torch.compile``, under a code object of its own.

    Dynamo keeps compiled graphs, and counts recompilations against its limit, per code
    object; past the limit it runs the function eagerly without a word. A fresh code object
    per op, attributes and input types compiles once (once more for the gradient mode), so
    no graph is ever left uncompiled however many layers a model has.
    """

    def bound(*inputs: Any) -> Any:
        return fn(*inputs, **attrs)

    bound.__code__ = bound.__code__.replace(co_name=op, co_qualname=f"torch_runner.{op}")
    return torch.compile(bound, dynamic=False)


_PROGRAMS: dict[Any, Any] = {}  # compiled per op, attributes (and shapes)


class TorchRunner(Runner):
    """Canonical nodes on PyTorch kernels, eager or each op through ``torch.compile``.

    In compiled mode each op, with its attributes and input shapes and dtypes, is compiled
    once (``dynamic=False``) and cached; the forward runs under ``torch.no_grad``, ``vjp``
    under ``torch.enable_grad``.

    TF32 is process-wide state in PyTorch: a ``tf32`` context turns it on for matmuls and
    cuDNN convolutions, any other context turns it off; the runner sets it when created and
    again before every forward and backward, so two runners of one process (one per side)
    each run under their own setting.
    """

    framework = "torch"
    differentiable = True
    ops = OPS

    def __init__(self, context: Context) -> None:
        if context.storage not in STORAGE:
            raise RunnerError(f"the torch runner stores floats as one of {', '.join(STORAGE)}, "
                              f"not {context.storage!r}")
        device = _resolve_device(context.device)
        super().__init__(replace(context, device=device))
        self.device = torch.device(device)
        self.storage = getattr(torch, context.storage)
        self._compiled = _PROGRAMS  # shared by every runner of the process
        self._set_precision()

    def _set_precision(self) -> None:
        # the legacy switches keep the legacy and the fp32_precision views consistent
        tf32 = self.context.dtype == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    # --- tensors -------------------------------------------------------------------------
    def _dtype(self, dtype: str) -> torch.dtype:
        if dtype in FLOAT:
            return self.storage
        if dtype not in DTYPES:
            raise RunnerError(f"the torch runner has no tensors of dtype {dtype!r}")
        return getattr(torch, dtype)

    def put(self, array: np.ndarray, dtype: str) -> torch.Tensor:
        a = np.asarray(array)
        if a.dtype.kind not in "biuf":  # bfloat16 from ml_dtypes and the like
            a = a.astype(np.float32)
        if not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a)  # torch shares memory only with writable, contiguous arrays
        return torch.from_numpy(a).to(self.device, self._dtype(dtype))

    def fetch(self, tensor: Any) -> np.ndarray:
        if not isinstance(tensor, torch.Tensor):
            return np.asarray(tensor)
        t = tensor.detach()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.cpu().numpy()

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- ops -----------------------------------------------------------------------------
    def _callable(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
        """The function to call for ``node`` and the keyword attributes to call it with."""
        fn = self._fn(node)
        attrs = dict(node.attrs)
        if attrs.get("dtype") in FLOAT:  # floating targets (cast, full, arange): storage
            attrs["dtype"] = self.context.storage
        if self.context.mode != "compiled":
            return fn, attrs
        key = (node.op, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())),
               tuple((tuple(x.shape), x.dtype) for x in inputs))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = _compile(fn, attrs, node.op)
        return compiled, {}

    def _call(self, node: Node, inputs: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        fn, attrs = self._callable(node, inputs)
        try:
            out = fn(*inputs, **attrs)
        except _KERNEL_ERRORS as err:
            raise self._failure(node, "", err) from err
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        # outputs in the graph's dtypes: floats in the storage dtype, integers as declared
        declared = [self._dtype(v.dtype) for v in node.outputs]
        return tuple(o.to(self.device, declared[i]) if i < len(declared) else o
                     for i, o in enumerate(outs))

    def _failure(self, node: Node, what: str, err: Exception) -> RunnerError:
        text = str(err).strip()
        first = text.splitlines()[0] if text else type(err).__name__
        return RunnerError(f"PyTorch failed on the {what}{node.describe()} "
                           f"({self.context.describe()}): {first}")

    def run(self, node: Node, inputs: Sequence[Any]) -> tuple[Any, ...]:
        self._set_precision()
        with torch.no_grad():
            return self._call(node, inputs)

    def vjp(self, node: Node, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], Pullback]:
        """Outputs of ``node`` and a pullback; the pullback may be called more than once."""
        self._set_precision()
        leaves = [x.detach().requires_grad_() if _differentiable(x) else x for x in inputs]
        with torch.enable_grad():
            outs = self._call(node, leaves)

        def pullback(cts: Sequence[Any]) -> tuple[Any, ...]:
            pairs = [(o, ct.to(o.dtype)) for o, ct in zip(outs, cts)
                     if ct is not None and o.is_floating_point() and o.requires_grad]
            wrt = [i for i, x in enumerate(leaves) if _differentiable(x)]
            grads: list[Any] = [None] * len(leaves)
            if not pairs or not wrt:
                return tuple(grads)
            self._set_precision()
            try:
                found = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wrt],
                                            [ct for _, ct in pairs], retain_graph=True,
                                            allow_unused=True)
            except _KERNEL_ERRORS as err:
                raise self._failure(node, "backward of ", err) from err
            for i, g in zip(wrt, found):
                grads[i] = g
            return tuple(grads)

        return tuple(o.detach() for o in outs), pullback


def _differentiable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()
