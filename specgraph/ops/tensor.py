"""Shape and data-movement ops, tensor creation, and matmul."""

from __future__ import annotations

import numpy as np

from specgraph.ops._sym import call
from specgraph.ops.dtypes import DTYPE_NAMES, numpy_dtype
from specgraph.ops.registry import Attr, op


@op("matmul", ("a", "b"), equation=lambda a, b: a * b, category="layer", onnx="MatMul")
def matmul(a, b):
    """Batched matrix product with NumPy broadcasting (a·b)."""
    return np.matmul(a, b)


@op("einsum", ("*xs",),
    attrs={"equation": Attr("str", doc="NumPy einsum subscripts, e.g. 'bij,bjk->bik'")},
    equation=lambda *xs, equation: call("einsum", *xs, eq=equation), category="layer",
    onnx="Einsum")
def einsum(*xs, equation):
    """Tensor contraction by NumPy einsum subscripts (explicit output, no ellipsis)."""
    return np.einsum(equation, *xs, optimize=True)


@op("reshape", attrs={"shape": Attr("ints", doc="the full static output shape")},
    equation=lambda x, shape: call("reshape", x, shape=shape), category="shape", onnx="Reshape")
def reshape(x, shape):
    """x with a new shape, same elements in row-major order."""
    return np.reshape(x, shape)


@op("transpose", attrs={"perm": Attr("ints", doc="output axis i is input axis perm[i]")},
    equation=lambda x, perm: call("transpose", x, perm=perm), category="shape",
    onnx="Transpose")
def transpose(x, perm):
    """Axes permuted."""
    return np.transpose(x, perm)


@op("concat", ("*xs",), attrs={"axis": Attr("int")},
    equation=lambda *xs, axis: call("concat", *xs, axis=axis), category="shape", onnx="Concat")
def concat(*xs, axis):
    """Inputs joined along ``axis``."""
    return np.concatenate(xs, axis=axis)


@op("split", attrs={"axis": Attr("int"), "sizes": Attr("ints", doc="size of each output")},
    equation=None, category="shape", onnx="Split", outputs=-1)
def split(x, axis, sizes):
    """x cut into consecutive pieces of ``sizes`` along ``axis``."""
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


@op(
    "slice",
    attrs={
        "axes": Attr("ints"),
        "starts": Attr("ints"),
        "ends": Attr("ints", doc="exclusive, clamped to the dimension"),
        "steps": Attr("ints"),
    },
    equation=lambda x, **a: call("slice", x, **a),
    category="shape",
    onnx="Slice",
)
def slice_(x, axes, starts, ends, steps):
    """x[start:end:step] on each of ``axes``."""
    index = [slice(None)] * np.ndim(x)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(start, end, step)
    return np.asarray(x)[tuple(index)]


@op("gather", ("x", "indices"), attrs={"axis": Attr("int")},
    equation=lambda x, i, axis: call("gather", x, i, axis=axis), category="shape",
    onnx="Gather")
def gather(x, indices, axis):
    """Entries of x at integer ``indices`` along ``axis`` (negative indices count from the end)."""
    return np.take(x, np.asarray(indices, dtype=np.int64), axis=axis)


@op("squeeze", attrs={"axes": Attr("ints")},
    equation=lambda x, axes: call("squeeze", x, axes=axes), category="shape", onnx="Squeeze")
def squeeze(x, axes):
    """x without the size-1 ``axes``."""
    return np.squeeze(x, axis=tuple(axes))


@op("unsqueeze", attrs={"axes": Attr("ints", doc="axes of the output that are new")},
    equation=lambda x, axes: call("unsqueeze", x, axes=axes), category="shape",
    onnx="Unsqueeze")
def unsqueeze(x, axes):
    """x with new size-1 axes."""
    return np.expand_dims(x, tuple(axes))


@op("expand", attrs={"shape": Attr("ints")},
    equation=lambda x, shape: call("expand", x, shape=shape), category="shape", onnx="Expand")
def expand(x, shape):
    """x broadcast to ``shape``."""
    return np.broadcast_to(x, tuple(shape)).copy()


@op("tile", attrs={"repeats": Attr("ints")},
    equation=lambda x, repeats: call("tile", x, repeats=repeats), category="shape",
    onnx="Tile")
def tile(x, repeats):
    """x repeated ``repeats[i]`` times along axis i."""
    return np.tile(x, tuple(repeats))


@op("flip", attrs={"axes": Attr("ints")},
    equation=lambda x, axes: call("flip", x, axes=axes), category="shape")
def flip(x, axes):
    """x reversed along ``axes``."""
    return np.flip(x, axis=tuple(axes))


@op(
    "pad",
    attrs={
        "pads": Attr("ints", doc="begin of each axis, then end of each axis (ONNX order)"),
        "mode": Attr("str", "constant", choices=("constant", "reflect", "edge")),
        "value": Attr("float", 0.0),
    },
    equation=lambda x, pads, mode, value: call("pad", x, pads=pads, mode=mode),
    category="shape",
    onnx="Pad",
)
def pad(x, pads, mode="constant", value=0.0):
    """x padded per side; negative pads crop."""
    x = np.asarray(x)
    rank = x.ndim
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in
                 enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=mode)


@op("trilu", attrs={"upper": Attr("bool"), "k": Attr("int", 0)},
    equation=lambda x, upper, k: call("triu" if upper else "tril", x, k=k or None),
    category="shape", onnx="Trilu")
def trilu(x, upper, k=0):
    """Upper (triu) or lower (tril) triangle of the last two axes, the rest zero."""
    return np.triu(x, k) if upper else np.tril(x, k)


@op(
    "full",
    (),
    attrs={"shape": Attr("ints"), "value": Attr("float"), "dtype": Attr("str", choices=DTYPE_NAMES)},
    equation=lambda shape, value, dtype: call("full", shape=shape, value=value),
    category="source",
    onnx="ConstantOfShape",
)
def full(shape, value, dtype):
    """A tensor of ``shape`` filled with ``value``."""
    return np.full(tuple(shape), value, dtype=numpy_dtype(dtype))


@op(
    "arange",
    (),
    attrs={
        "start": Attr("float"),
        "limit": Attr("float"),
        "delta": Attr("float", 1.0),
        "dtype": Attr("str", choices=DTYPE_NAMES),
    },
    equation=lambda start, limit, delta, dtype: call("arange", start=start, limit=limit),
    category="source",
    onnx="Range",
)
def arange(start, limit, delta=1.0, dtype="int64"):
    """start, start + delta, ... below limit."""
    return np.arange(start, limit, delta).astype(numpy_dtype(dtype))
