"""Reductions over axes (canonical axes are non-negative and sorted; ``None`` means all)."""

from __future__ import annotations

import numpy as np

from specgraph.ops._sym import call
from specgraph.ops.registry import Attr, op


def _axes(axes):
    return None if axes is None else tuple(axes)


_REDUCE_ATTRS = {
    "axes": Attr("ints", None, optional=True, doc="reduced axes, non-negative; none: all"),
    "keepdims": Attr("bool", False, doc="keep reduced axes as size 1"),
}


def _reduction(name, np_fn, onnx, doc):
    def reference(x, axes=None, keepdims=False):
        return np_fn(np.asarray(x), axis=_axes(axes), keepdims=keepdims)

    reference.__doc__ = doc
    op(
        name,
        attrs=_REDUCE_ATTRS,
        equation=lambda x, axes=None, keepdims=False: call(name, x, axes=axes),
        category="reduction",
        onnx=onnx,
    )(reference)


_reduction("reduce_sum", np.sum, "ReduceSum", "Sum over axes.")
_reduction("reduce_mean", np.mean, "ReduceMean", "Mean over axes.")
_reduction("reduce_max", np.max, "ReduceMax", "Maximum over axes.")
_reduction("reduce_min", np.min, "ReduceMin", "Minimum over axes.")
_reduction("reduce_prod", np.prod, "ReduceProd", "Product over axes.")


@op(
    "reduce_var",
    attrs={**_REDUCE_ATTRS, "correction": Attr("int", 1, doc="divide by N - correction")},
    equation=lambda x, axes=None, keepdims=False, correction=1: call(
        "var", x, axes=axes, correction=correction
    ),
    category="reduction",
)
def reduce_var(x, axes=None, keepdims=False, correction=1):
    """Variance over axes, dividing by N - correction."""
    return np.var(np.asarray(x), axis=_axes(axes), keepdims=keepdims, ddof=correction)


def _arg(name, np_fn, onnx):
    def reference(x, axis, keepdims=False):
        out = np_fn(np.asarray(x), axis=axis)
        return np.expand_dims(out, axis) if keepdims else out

    reference.__doc__ = f"Index of the {name[3:]} along an axis (int64)."
    op(
        name,
        attrs={"axis": Attr("int"), "keepdims": Attr("bool", False)},
        equation=lambda x, axis, keepdims=False: call(name, x, axis=axis),
        category="reduction",
        onnx=onnx,
    )(reference)


_arg("argmax", np.argmax, "ArgMax")
_arg("argmin", np.argmin, "ArgMin")


@op("argsort", attrs={"axis": Attr("int"), "descending": Attr("bool", False)},
    equation=lambda x, axis, descending=False: call(
        "argsort", x, axis=axis, **({"descending": True} if descending else {})),
    category="reduction", onnx="TopK")
def argsort(x, axis, descending=False):
    """Indices that sort along an axis, stably (equal values keep their order; int64)."""
    a = np.asarray(x)
    if not descending:
        return np.argsort(a, axis=axis, kind="stable").astype(np.int64)
    # stable and descending: sort the flipped axis ascending, stably (ties then come last
    # index first), and read that order backwards
    flipped = np.argsort(np.flip(a, axis), axis=axis, kind="stable")
    return (a.shape[axis] - 1 - np.flip(flipped, axis)).astype(np.int64)


@op("cumsum", attrs={"axis": Attr("int")},
    equation=lambda x, axis: call("cumsum", x, axis=axis), category="reduction", onnx="CumSum")
def cumsum(x, axis):
    """Cumulative sum along an axis."""
    return np.cumsum(np.asarray(x), axis=axis)
