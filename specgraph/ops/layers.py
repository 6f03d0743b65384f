"""Layer ops: linear, convolutions, pooling, normalizations, embedding, rotary position
embedding and attention.

Conventions (frontends convert to these at the boundary):
    * tensors are channels-first (N, C, *spatial);
    * linear weight is ``[in, out]``; conv weight ``[out, in/groups, *kernel]``; transposed
      conv weight ``[in, out/groups, *kernel]``;
    * ``padding`` lists the begin of every spatial axis, then the end (ONNX ``pads`` order);
    * ``eps`` is added to the variance under the square root: ``(x - μ) / sqrt(σ² + eps)``;
    * ``momentum`` is PyTorch's: ``running = (1 - momentum)·running + momentum·batch``
      (Keras' momentum is ``1 - momentum``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from specgraph.ops._sym import call, plus
from specgraph.ops.activations import _softmax
from specgraph.ops.registry import Attr, op


def _bias_eq(expr, b):
    return expr if b is None else plus(expr, b)


@op(
    "linear",
    ("x", "weight", "bias?bias"),
    attrs={"bias": Attr("bool", True)},
    equation=lambda x, w, b=None, bias=True: _bias_eq(x * w, b),
    category="layer",
    onnx="Gemm",
    params=("weight", "bias"),
)
def linear(x, weight, b=None, bias=True):
    """x·W + b over the last axis, W of shape [in, out]."""
    out = np.matmul(x, weight)
    return out if b is None else out + b


_CONV_ATTRS = {
    "stride": Attr("ints"),
    "padding": Attr("ints", doc="begin of each spatial axis, then end"),
    "dilation": Attr("ints"),
    "groups": Attr("int", 1),
    "bias": Attr("bool", True),
}


def _conv_eq(name):
    def rule(x, w, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True, **_):
        shown = {
            "stride": stride if any(s != 1 for s in stride) else None,
            "pad": padding if any(padding) else None,
            "dilation": dilation if any(d != 1 for d in dilation) else None,
            "groups": groups if groups != 1 else None,
        }
        return _bias_eq(call(f"{name}{len(stride)}d", x, w, **shown), b)

    return rule


def _pad_spatial(x, padding, value=0.0):
    rank = x.ndim - 2
    widths = [(0, 0), (0, 0)] + [(padding[i], padding[rank + i]) for i in range(rank)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def _windows(x, kernel, stride, dilation):
    """View of x [N, C, *S] as [N, C, *out, *kernel] windows."""
    rank = len(kernel)
    extent = [dilation[i] * (kernel[i] - 1) + 1 for i in range(rank)]
    win = sliding_window_view(x, extent, axis=tuple(range(2, 2 + rank)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, None, s) for s in stride)
    index += tuple(slice(None, None, d) for d in dilation)
    return win[index]


@op(
    "conv",
    ("x", "weight", "bias?bias"),
    attrs=_CONV_ATTRS,
    equation=_conv_eq("conv"),
    category="layer",
    onnx="Conv",
    params=("weight", "bias"),
)
def conv(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True):
    """Cross-correlation of x [N, C, *S] with W [O, C/groups, *K], plus bias."""
    x = _pad_spatial(np.asarray(x), padding)
    rank = weight.ndim - 2
    win = _windows(x, weight.shape[2:], stride, dilation)  # N, C, *out, *K
    n, c = win.shape[:2]
    out_sp = win.shape[2 : 2 + rank]
    o = weight.shape[0]
    win = win.reshape(n, groups, c // groups, *out_sp, *weight.shape[2:])
    w = weight.reshape(groups, o // groups, c // groups, *weight.shape[2:])
    sp = "".join(chr(ord("p") + i) for i in range(rank))
    ks = "".join(chr(ord("h") + i) for i in range(rank))
    out = np.einsum(f"ngc{sp}{ks},goc{ks}->ngo{sp}", win, w, optimize=True)
    out = out.reshape(n, o, *out_sp)
    if b is not None:
        out = out + b.reshape(1, -1, *([1] * rank))
    return out


@op(
    "conv_transpose",
    ("x", "weight", "bias?bias"),
    attrs={**_CONV_ATTRS, "output_padding": Attr("ints", doc="extra size at the end")},
    equation=_conv_eq("conv_transpose"),
    category="layer",
    onnx="ConvTranspose",
    params=("weight", "bias"),
)
def conv_transpose(x, weight, b=None, stride=(), padding=(), dilation=(), groups=1, bias=True,
                   output_padding=()):
    """Transposed convolution of x [N, C, *S] with W [C, O/groups, *K]."""
    x = np.asarray(x)
    rank = weight.ndim - 2
    n, c = x.shape[:2]
    og = weight.shape[1]
    kernel = weight.shape[2:]
    in_sp = x.shape[2:]
    full = [(in_sp[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + output_padding[i]
            for i in range(rank)]
    out = np.zeros((n, groups, og, *full), dtype=np.result_type(x, weight))
    xg = x.reshape(n, groups, c // groups, *in_sp)
    wg = weight.reshape(groups, c // groups, og, *kernel)
    sp = "".join(chr(ord("p") + i) for i in range(rank))
    for kpos in itertools.product(*(range(k) for k in kernel)):
        contrib = np.einsum(f"ngc{sp},gco->ngo{sp}", xg, wg[(slice(None),) * 3 + kpos])
        index = tuple(
            slice(kpos[i] * dilation[i], kpos[i] * dilation[i] + (in_sp[i] - 1) * stride[i] + 1,
                  stride[i])
            for i in range(rank)
        )
        out[(slice(None),) * 3 + index] += contrib
    crop = tuple(slice(padding[i], full[i] - padding[rank + i]) for i in range(rank))
    out = out[(slice(None),) * 3 + crop].reshape(n, groups * og, *[s.stop - s.start for s in crop])
    if b is not None:
        out = out + b.reshape(1, -1, *([1] * rank))
    return out


def _pool_out(size, k, s, pb, pe, d, ceil_mode):
    span = size + pb + pe - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1  # the last window must start inside the input or the begin padding
    return out


_POOL_ATTRS = {
    "kernel": Attr("ints"),
    "stride": Attr("ints"),
    "padding": Attr("ints", doc="begin of each spatial axis, then end"),
    "dilation": Attr("ints"),
    "ceil_mode": Attr("bool", False),
}


def _pool_prepare(x, kernel, stride, padding, dilation, ceil_mode, fill):
    rank = len(kernel)
    outs = [_pool_out(x.shape[2 + i], kernel[i], stride[i], padding[i], padding[rank + i],
                      dilation[i], ceil_mode) for i in range(rank)]
    # one window along an axis reads no more taps than the padded input holds (HF's
    # EfficientNet pools a 2x2 map with a 1280-wide ceil-mode window)
    kernel = [min(kernel[i], -(-(x.shape[2 + i] + padding[i] + padding[rank + i])
                               // dilation[i])) if outs[i] == 1 else kernel[i]
              for i in range(rank)]
    # extra end padding so that ceil-mode windows exist
    extra = [max(0, (outs[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
                 - (x.shape[2 + i] + padding[i] + padding[rank + i])) for i in range(rank)]
    pads = list(padding[:rank]) + [padding[rank + i] + extra[i] for i in range(rank)]
    win = _windows(_pad_spatial(x, pads, fill), kernel, stride, dilation)
    index = (slice(None), slice(None)) + tuple(slice(0, o) for o in outs)
    return win[index], outs


def _pool_eq(name):
    def rule(x, kernel, stride, padding, **attrs):
        return call(f"{name}{len(kernel)}d", x, kernel=kernel,
                    stride=stride if tuple(stride) != tuple(kernel) else None,
                    pad=padding if any(padding) else None)

    return rule


@op("max_pool", attrs=_POOL_ATTRS, equation=_pool_eq("max_pool"), category="layer",
    onnx="MaxPool")
def max_pool(x, kernel, stride, padding, dilation, ceil_mode=False):
    """Maximum over each window (padding counts as -inf; for integers, as the lowest one:
    TF's Funnel pools its int32 attention mask)."""
    x = np.asarray(x)
    lowest = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else (
        False if x.dtype.kind == "b" else -np.inf)
    win, _ = _pool_prepare(x, kernel, stride, padding, dilation, ceil_mode, lowest)
    rank = len(kernel)
    return win.max(axis=tuple(range(-rank, 0)))


@op(
    "avg_pool",
    attrs={**_POOL_ATTRS, "count_include_pad": Attr("bool", True),
           "divisor": Attr("int", None, optional=True, doc="fixed divisor, if any")},
    equation=_pool_eq("avg_pool"),
    category="layer",
    onnx="AveragePool",
)
def avg_pool(x, kernel, stride, padding, dilation, ceil_mode=False, count_include_pad=True,
             divisor=None):
    """Mean over each window; the divisor counts explicit padding if ``count_include_pad``."""
    x = np.asarray(x)
    rank = len(kernel)
    win, outs = _pool_prepare(x, kernel, stride, padding, dilation, ceil_mode, 0.0)
    total = win.sum(axis=tuple(range(-rank, 0)))
    if divisor is not None:
        return total / divisor
    counts = np.ones((1,) * (2 + rank))
    for i in range(rank):
        size, pb, pe = x.shape[2 + i], padding[i], padding[rank + i]
        starts = np.arange(outs[i]) * stride[i] - pb
        ends = np.minimum(starts + dilation[i] * (kernel[i] - 1) + 1, size + pe)
        if count_include_pad:
            cnt = (ends - starts + dilation[i] - 1) // dilation[i]
        else:
            taps = starts[:, None] + dilation[i] * np.arange(kernel[i])[None, :]
            cnt = ((taps >= 0) & (taps < size)).sum(axis=1)
        shape = [1] * (2 + rank)
        shape[2 + i] = outs[i]
        counts = counts * cnt.reshape(shape)
    return total / counts


_RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _resize_eq(x, axes, sizes, mode, coordinates, **attrs):
    shown = {k: v for k, v in attrs.items() if k == "cubic_coeff" and mode == "cubic"}
    return call(f"resize_{mode}", x, size=sizes, coords=coordinates, **shown)


@op(
    "resize",
    attrs={
        "axes": Attr("ints", doc="the axes resized"),
        "sizes": Attr("ints", doc="their sizes after"),
        "mode": Attr("str", choices=("linear", "cubic"),
                     doc="linear: two taps per axis; cubic: four, Keys' kernel"),
        "coordinates": Attr("str", "half_pixel", choices=_RESIZE_COORDINATES,
                            doc="the input coordinate of output position o (ONNX's names): "
                                "half_pixel (o + ½)·s − ½, pytorch_half_pixel the same but 0 "
                                "for a size of 1, align_corners o·(in − 1)/(out − 1), "
                                "asymmetric o·s"),
        "steps": Attr("floats", doc="s per axis: the input distance of two output positions "
                                    "(in/out, or the inverse of a scale factor given)"),
        "cubic_coeff": Attr("float", -0.75, doc="Keys' a (PyTorch's -0.75; TF's -0.5)"),
        "exclude_outside": Attr("bool", False,
                                doc="taps outside the input weigh 0 and the rest are "
                                    "renormalized (TF's half-pixel bicubic), instead of "
                                    "reading the edge"),
        "antialias": Attr("bool", False,
                          doc="downsampling widens the kernel by in/out (a low-pass filter)"),
    },
    equation=_resize_eq,
    category="layer",
    onnx="Resize",
)
def resize(x, axes, sizes, mode, coordinates, steps, cubic_coeff=-0.75, exclude_outside=False,
           antialias=False):
    """Separable interpolation: along each of ``axes`` the output is a weighted sum of input
    positions near the coordinate ``coordinates`` maps each output position to."""
    y = np.asarray(x, dtype=np.float64)
    for axis, size, step in zip(axes, sizes, steps):
        w = resize_weights(y.shape[axis], size, mode, coordinates, step, cubic_coeff,
                           exclude_outside, antialias)
        y = np.moveaxis(np.tensordot(w, np.moveaxis(y, axis, 0), axes=(1, 0)), 0, axis)
    return y


def resize_attrs(shape, axes, sizes, mode, coordinates, steps, cubic_coeff=-0.75,
                 exclude_outside=False, antialias=False):
    """The attributes of a ``resize`` of a value of ``shape``, in one form for every way of
    writing the same resize: an axis kept at its size with a step of 1 is no axis of it;
    ``pytorch_half_pixel`` is ``half_pixel`` where no size is 1; what only cubic reads, and
    an antialias that only downsampling feels, take their defaults where they change
    nothing; aligned corners read no step (the sizes' ratio stands there). Steps are
    float32's (the kernels compute them so). None: nothing is resized."""
    if coordinates == "align_corners":  # which reads no step: the sizes' ratio stands
        steps = [int(shape[a]) / int(n) for a, n in zip(axes, sizes)]
    kept = [(a, int(n), float(np.float32(s))) for a, n, s in zip(axes, sizes, steps)
            if not (int(shape[a]) == int(n) and float(np.float32(s)) == 1.0)]
    if not kept:
        return None
    if coordinates == "pytorch_half_pixel" and all(n > 1 for _, n, _ in kept):
        coordinates = "half_pixel"
    cubic = mode == "cubic"
    return {"axes": tuple(a for a, _, _ in kept), "sizes": tuple(n for _, n, _ in kept),
            "mode": mode, "coordinates": coordinates, "steps": tuple(s for _, _, s in kept),
            "cubic_coeff": float(cubic_coeff) if cubic else -0.75,
            "exclude_outside": bool(exclude_outside) and cubic,
            "antialias": bool(antialias) and any(s > 1 for _, _, s in kept)}


def resize_weights(n_in, n_out, mode, coordinates, step, cubic_coeff=-0.75,
                   exclude_outside=False, antialias=False):
    """The [n_out, n_in] matrix of one axis of ``resize`` (float64)."""
    o = np.arange(n_out, dtype=np.float64)
    if coordinates == "align_corners":
        x = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    elif coordinates == "asymmetric":
        x = o * step
    else:
        x = (o + 0.5) * step - 0.5
        if coordinates == "pytorch_half_pixel" and n_out == 1:
            x = np.zeros(n_out)
    w = np.zeros((n_out, n_in))
    if antialias and step > 1:  # the kernel stretched by the step, over every tap it covers
        support = (1.0 if mode == "linear" else 2.0) * step
        for i in range(n_out):
            center = x[i]
            taps = np.arange(math.floor(center - support) + 1, math.ceil(center + support))
            d = np.abs(taps - center) / step
            k = np.maximum(1 - d, 0) if mode == "linear" else _keys(d, cubic_coeff)
            keep = (taps >= 0) & (taps < n_in)
            k, taps = k[keep], taps[keep]
            if k.sum() != 0:
                w[i, taps] += k / k.sum()
        return w
    if mode == "linear":
        x = np.clip(x, 0, n_in - 1)
        lo = np.floor(x).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        t = x - lo
        np.add.at(w, (np.arange(n_out), lo), 1 - t)
        np.add.at(w, (np.arange(n_out), hi), t)
        return w
    base = np.floor(x).astype(np.int64)
    t = x - base
    for offset in (-1, 0, 1, 2):
        taps = base + offset
        k = _keys(np.abs(t - offset), cubic_coeff)
        if exclude_outside:
            k = np.where((taps >= 0) & (taps < n_in), k, 0.0)
        np.add.at(w, (np.arange(n_out), np.clip(taps, 0, n_in - 1)), k)
    if exclude_outside:
        w = w / w.sum(axis=1, keepdims=True)
    return w


def _keys(d, a):
    """Keys' cubic convolution kernel at distances ``d`` (|d| < 2), coefficient ``a``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _adaptive(x, output_size, reduce):
    x = np.asarray(x)
    rank = len(output_size)
    in_sp = x.shape[2:]
    bins = []
    for i in range(rank):
        o, s = output_size[i], in_sp[i]
        bins.append([(math.floor(j * s / o), math.ceil((j + 1) * s / o)) for j in range(o)])
    out = np.empty(x.shape[:2] + tuple(output_size), dtype=x.dtype)
    for idx in itertools.product(*(range(o) for o in output_size)):
        region = tuple(slice(*bins[i][idx[i]]) for i in range(rank))
        block = x[(slice(None), slice(None)) + region]
        out[(slice(None), slice(None)) + idx] = reduce(block, axis=tuple(range(2, 2 + rank)))
    return out


@op("adaptive_avg_pool", attrs={"output_size": Attr("ints")},
    equation=lambda x, output_size: call("adaptive_avg_pool", x, out=output_size),
    category="layer", onnx="GlobalAveragePool")
def adaptive_avg_pool(x, output_size):
    """Mean over PyTorch's adaptive bins [floor(i·S/O), ceil((i+1)·S/O))."""
    return _adaptive(x, output_size, np.mean)


@op("adaptive_max_pool", attrs={"output_size": Attr("ints")},
    equation=lambda x, output_size: call("adaptive_max_pool", x, out=output_size),
    category="layer", onnx="GlobalMaxPool")
def adaptive_max_pool(x, output_size):
    """Maximum over PyTorch's adaptive bins."""
    return _adaptive(x, output_size, np.max)


def _affine(y, w, b, shape):
    if w is not None:
        y = y * np.reshape(w, shape)
    if b is not None:
        y = y + np.reshape(b, shape)
    return y


def _norm_eq(name):
    def rule(x, *params, eps, **attrs):
        shown = {k: v for k, v in attrs.items() if k in ("axis", "num_groups")}
        return call(name, x, *params, eps=eps, **shown)

    return rule


@op(
    "batch_norm",
    ("x", "mean", "var", "weight?scale", "bias?bias"),
    attrs={
        "eps": Attr("float", 1e-5),
        "momentum": Attr("float", 0.1, doc="PyTorch convention (Keras: 1 - momentum)",
                         affects="training: the running statistics"),
        "scale": Attr("bool", True),
        "bias": Attr("bool", True),
    },
    equation=_norm_eq("batch_norm"),
    category="layer",
    onnx="BatchNormalization",
    params=("mean", "var", "weight", "bias"),
)
def batch_norm(x, mean, var, *wb, eps=1e-5, momentum=0.1, scale=True, bias=True):
    """Inference batch norm over axis 1: (x - μ) / sqrt(σ² + eps)·γ + β."""
    x = np.asarray(x)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    w = wb[0] if scale else None
    b = wb[-1] if bias else None
    y = (x - np.reshape(mean, shape)) / np.sqrt(np.reshape(var, shape) + eps)
    return _affine(y, w, b, shape)


@op(
    "layer_norm",
    ("x", "weight?scale", "bias?bias"),
    attrs={
        "axis": Attr("int", doc="first normalized axis (non-negative); all after it too"),
        "eps": Attr("float", 1e-5),
        "scale": Attr("bool", True),
        "bias": Attr("bool", True),
    },
    equation=_norm_eq("layer_norm"),
    category="layer",
    onnx="LayerNormalization",
    params=("weight", "bias"),
)
def layer_norm(x, *wb, axis, eps=1e-5, scale=True, bias=True):
    """(x - mean) / sqrt(var + eps)·γ + β over the axes from ``axis`` on (biased variance)."""
    x = np.asarray(x)
    axes = tuple(range(axis, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    w = wb[0] if scale else None
    b = wb[-1] if bias else None
    return _affine(y, w, b, x.shape[axis:])


@op(
    "group_norm",
    ("x", "weight?scale", "bias?bias"),
    attrs={
        "num_groups": Attr("int"),
        "eps": Attr("float", 1e-5),
        "scale": Attr("bool", True),
        "bias": Attr("bool", True),
    },
    equation=_norm_eq("group_norm"),
    category="layer",
    onnx="GroupNormalization",
    params=("weight", "bias"),
)
def group_norm(x, *wb, num_groups, eps=1e-5, scale=True, bias=True):
    """Normalization over groups of channels (and all spatial positions), per-channel γ, β."""
    x = np.asarray(x)
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    mu = g.mean(axis=2, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    w = wb[0] if scale else None
    b = wb[-1] if bias else None
    return _affine(y, w, b, shape)


@op(
    "weight_norm",
    ("v", "g"),
    attrs={"axes": Attr("ints", doc="the axes of v each norm runs over (non-negative)")},
    equation=lambda v, g, axes: call("weight_norm", v, g, axes=axes),
    category="layer",
    params=("v", "g"),
)
def weight_norm(v, g, axes):
    """A weight-normalized weight g·v/‖v‖, the norm over ``axes`` (PyTorch's ``weight_norm``
    over every axis but ``dim``); g holds one gain per norm, size 1 along ``axes``."""
    v = np.asarray(v)
    norm = np.sqrt(np.sum(v * v, axis=tuple(axes), keepdims=True))
    return np.reshape(g, norm.shape) * v / norm


@op(
    "rms_norm",
    ("x", "weight?scale"),
    attrs={
        "axis": Attr("int", doc="first normalized axis (non-negative)"),
        "eps": Attr("float", doc="resolved to a number (PyTorch's None is finfo(dtype).eps)"),
        "scale": Attr("bool", True),
    },
    equation=_norm_eq("rms_norm"),
    category="layer",
    onnx="RMSNormalization",
    params=("weight",),
)
def rms_norm(x, *w, axis, eps, scale=True):
    """x / sqrt(mean(x²) + eps)·γ over the axes from ``axis`` on."""
    x = np.asarray(x)
    axes = tuple(range(axis, x.ndim))
    y = x / np.sqrt((x**2).mean(axis=axes, keepdims=True) + eps)
    return y * w[0] if scale else y


@op(
    "embedding",
    ("indices", "weight"),
    attrs={"padding_idx": Attr("int", None, optional=True, doc="row with no gradient",
                               affects="training: the padding row's gradient"),
           "max_norm": Attr("float", None, optional=True,
                            doc="rows looked up are scaled down to this norm where longer "
                                "(PyTorch's max_norm, which renormalizes the weight in place, "
                                "outside autograd: the gradient is the lookup's)"),
           "norm_type": Attr("float", 2.0, doc="the p of max_norm's p-norm"),
           "scale_grad_by_freq": Attr("bool", False, doc="each row's gradient divided by "
                                      "how often the batch looks it up",
                                      affects="training: the rows' gradients")},
    equation=lambda i, w, padding_idx=None, max_norm=None, norm_type=2.0,
    scale_grad_by_freq=False: call(
        "embed", i, w, **({} if max_norm is None else {"max_norm": max_norm})),
    category="layer",
    onnx="Gather",
    params=("weight",),
)
def embedding(indices, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False):
    """Rows of W [num, dim] at integer ``indices``; with ``max_norm``, each row whose
    ``norm_type``-norm exceeds it scaled by max_norm / (norm + 1e-7), as PyTorch does."""
    rows = np.take(weight, np.asarray(indices, dtype=np.int64), axis=0)
    if max_norm is None:
        return rows
    norm = np.sum(np.abs(rows) ** norm_type, axis=-1, keepdims=True) ** (1.0 / norm_type)
    return rows * np.where(norm > max_norm, max_norm / (norm + 1e-7), 1.0)


def rotary_tables(length: int, theta: float, dim: int, dtype=np.float64, factor: float = 1.0):
    """cos and sin of (position / factor)·theta^(-2i/dim), [length, dim/2]: the angles every
    rotary position embedding turns its pairs by (positions 0, 1, ... ``length`` - 1)."""
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim) / factor
    angles = np.outer(np.arange(length, dtype=np.float64), inv_freq).astype(dtype)
    return np.cos(angles), np.sin(angles)


def _rotary_eq(x, theta, dim, layout="half", axis=1, factor=1.0):
    if factor != 1.0:
        return call("rope", x, theta=theta, dim=dim, layout=layout, axis=axis, factor=factor)
    return call("rope", x, theta=theta, dim=dim, layout=layout, axis=axis)


@op(
    "rotary_embedding",
    ("x",),
    attrs={
        "theta": Attr("float", doc="frequency base: pair i turns by position·theta^(-2i/dim)"),
        "dim": Attr("int", doc="features rotated, the first ones of the last axis (even); "
                                "the rest pass through"),
        "layout": Attr("str", "half", choices=("half", "interleaved"),
                       doc="which features pair: i with i + dim/2 (rotate_half), or 2i with "
                           "2i + 1 (interleaved, a complex multiply)"),
        "axis": Attr("int", doc="the position axis (non-negative, not the last): element t "
                                "along it is at position t"),
        "factor": Attr("float", 1.0, doc="linear position scaling: positions are divided by "
                                         "it (HF's rope_scaling of type linear)"),
    },
    equation=_rotary_eq,
    category="layer",
    onnx="RotaryEmbedding",
)
def rotary_embedding(x, theta, dim, layout="half", axis=1, factor=1.0):
    """Each pair (a, b) of the first ``dim`` features at position t turned by angle
    (t / factor)·ωᵢ, ωᵢ = theta^(-2i/dim): (a·cos - b·sin, b·cos + a·sin); the other
    features as they are."""
    x = np.asarray(x)
    if not 0 <= axis < x.ndim - 1 or dim % 2 or not 0 < dim <= x.shape[-1]:
        raise ValueError(f"rotary_embedding: axis {axis} and dim {dim} do not fit a "
                         f"{x.shape} input")
    cos, sin = rotary_tables(x.shape[axis], theta, dim, factor=factor)
    shape = [1] * x.ndim
    shape[axis], shape[-1] = x.shape[axis], dim // 2
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    rot, rest = x[..., :dim], x[..., dim:]
    if layout == "half":
        a, b = rot[..., : dim // 2], rot[..., dim // 2:]
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
    ya, yb = a * cos - b * sin, b * cos + a * sin
    if layout == "half":
        y = np.concatenate([ya, yb], axis=-1)
    else:
        y = np.stack([ya, yb], axis=-1).reshape(rot.shape)
    out = np.concatenate([y, rest], axis=-1)
    return out.astype(x.dtype) if x.dtype.kind == "f" else out


def _attention_eq(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    shown = {"scale": scale, "causal": True if causal else None}
    args = (q, k, v) if mask is None else (q, k, v, mask)
    return call("attention", *args, **shown)


@op(
    "attention",
    ("q", "k", "v", "mask?has_mask"),
    attrs={
        "scale": Attr("float", doc="multiplies q·kᵀ; the usual 1/sqrt(head_dim) is explicit"),
        "causal": Attr("bool", False, doc="query i sees keys j <= i (top-left aligned)"),
        "has_mask": Attr("bool", False, doc="a mask input: boolean (True keeps; a query "
                         "row that keeps no key gives zeros, as PyTorch's SDPA) or additive"),
    },
    equation=_attention_eq,
    category="layer",
    onnx="Attention",
)
def attention(q, k, v, mask=None, scale=1.0, causal=False, has_mask=False):
    """softmax(scale·q·kᵀ + mask)·v over [..., L, E]; k/v heads repeat for grouped queries.
    With a boolean mask, a query that keeps no key gets zeros (PyTorch's SDPA, and the
    exported ``IsNaN``·``Where`` after its softmax); an additive mask of -inf gives NaN."""
    q, k, v = (np.asarray(t) for t in (q, k, v))
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = np.repeat(k, rep, axis=-3)
        v = np.repeat(v, rep, axis=-3)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    length, source = scores.shape[-2:]
    if causal:
        keep = np.tril(np.ones((length, source), dtype=bool))
        scores = np.where(keep, scores, -np.inf)
    rows = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == bool:
            keep = mask & np.ones(scores.shape, dtype=bool)
            if causal:
                keep = keep & np.tril(np.ones((length, source), dtype=bool))
            rows = np.any(keep, axis=-1, keepdims=True)
            scores = np.where(mask & rows, scores, -np.inf)  # an empty row: zeros, below
            scores = np.where(rows, scores, 0.0)
        else:
            scores = scores + mask
    with np.errstate(invalid="ignore"):  # a row an additive mask blocks: NaN, as softmax
        weights = _softmax(scores, -1)
    if rows is not None:
        weights = np.where(rows, weights, 0.0)
    return np.matmul(weights, v)
