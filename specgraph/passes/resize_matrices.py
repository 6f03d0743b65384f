"""Resizes written as products with interpolation matrices are ``resize``.

``jax.image.resize`` in ``linear`` or ``cubic`` mode contracts each resized axis with a
constant ``[in, out]`` matrix of interpolation weights (``jnp.einsum``), where PyTorch's
``interpolate``, TF's ``resize`` and ONNX's ``Resize`` are one op. A product of a value with a
constant matrix along one axis is the resize of that axis when the matrix holds the weights
of one (linear or Keys' cubic, half-pixel coordinates, antialiased or not: JAX's own
conventions, checked against ``resize_weights``); consecutive resizes of other axes, alike
otherwise, are one resize of all of them (separable: the same numbers, summed in another
order). A matrix no resize makes stays a product.

Requires: a verified graph, constants folded. Ensures: no einsum or matmul contracts one
axis with a resize's weight matrix; no resize reads a resize of other axes alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops.layers import resize_attrs, resize_weights
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseResizeMatricesPass"]

# (mode, Keys' a, taps outside weigh 0) JAX's kernels use; each also tried antialiased
_KERNELS = (("linear", -0.75, False), ("cubic", -0.5, True))


def _contraction(node: Node, rw: Rewriter) -> tuple[Value, np.ndarray, int, str, str] | None:
    """An einsum of a value with a constant matrix along one of its axes: (the value, the
    matrix as [in, out], the axis, the value's letters with the axis's output letter in its
    place, the output's letters)."""
    if len(node.inputs) != 2 or "->" not in node.attrs.get("equation", "") or \
            "." in node.attrs["equation"]:
        return None
    ins, out = node.attrs["equation"].replace(" ", "").split("->")
    terms = ins.split(",")
    if len(terms) != 2:
        return None
    for slot in (0, 1):
        w = rw.constant_value(node.inputs[slot])
        x, sw, sx = node.inputs[1 - slot], terms[slot], terms[1 - slot]
        if w is None or np.ndim(w) != 2 or len(set(sw)) != 2 or len(set(sx)) != len(sx):
            continue
        contracted = [c for c in sw if c in sx and c not in out]
        made = [c for c in sw if c not in sx and c in out]
        if len(contracted) != 1 or len(made) != 1 or \
                sorted(out) != sorted(sx.replace(contracted[0], made[0])):
            continue
        matrix = np.asarray(w, np.float64)
        if sw.index(contracted[0]) == 1:
            matrix = matrix.T
        return x, matrix, sx.index(contracted[0]), sx.replace(contracted[0], made[0]), out
    return None


def _product(node: Node, rw: Rewriter) -> tuple[Value, np.ndarray, int] | None:
    """A matmul of a value with a constant matrix (JAX traces the contraction of the last
    axis so): (the value, the matrix as [in, out], the axis contracted)."""
    a, b = node.inputs
    w = rw.constant_value(b)
    if w is not None and np.ndim(w) == 2 and a.rank >= 1 and rw.constant_value(a) is None:
        return a, np.asarray(w, np.float64), a.rank - 1
    w = rw.constant_value(a)
    if w is not None and np.ndim(w) == 2 and b.rank >= 2 and rw.constant_value(b) is None:
        return b, np.asarray(w, np.float64).T, b.rank - 2
    return None


def _resize_of(matrix: np.ndarray, shape: tuple[int, ...], axis: int) -> dict[str, Any] | None:
    """The attributes of the resize whose weights along ``axis`` are ``matrix``, if any."""
    n_in, n_out = matrix.shape
    if n_in != shape[axis] or n_in < 2 or n_out < 2 or \
            not np.allclose(matrix.sum(axis=0), 1.0, rtol=0, atol=1e-4):
        return None  # each output position's weights sum to one
    step = n_in / n_out
    scale = float(np.max(np.abs(matrix), initial=0.0))
    for mode, coeff, outside in _KERNELS:
        for antialias in (True, False):
            want = resize_weights(n_in, n_out, mode, "half_pixel", float(np.float32(step)),
                                  coeff, outside, antialias).T
            if np.allclose(matrix, want, rtol=0, atol=1e-5 * max(scale, 1.0)):
                return resize_attrs(shape, (axis,), (n_out,), mode, "half_pixel", (step,),
                                    coeff, outside, antialias)
    return None


def _resized(x: Value, matrix: np.ndarray, axis: int) -> tuple[int, ...]:
    """``x``'s shape with ``axis`` resized to the matrix's outputs."""
    return tuple(matrix.shape[1] if k == axis else n for k, n in enumerate(x.shape))


def _einsum(rw: Rewriter, node: Node) -> bool:
    found = _contraction(node, rw)
    if found is None:
        return False
    x, matrix, axis, placed, out_letters = found
    attrs = _resize_of(matrix, x.shape, axis)
    if attrs is None:
        return False
    y = rw.emit("resize", [x], attrs, like=node, shape=_resized(x, matrix, axis))
    perm = tuple(placed.index(c) for c in out_letters)
    if perm != tuple(range(len(perm))):
        y = rw.emit("transpose", [y], {"perm": perm}, like=node, shape=node.outputs[0].shape)
    rw.replace(node.outputs[0], y)
    return True


_ALIKE = ("mode", "coordinates", "cubic_coeff", "exclude_outside", "antialias")


def _resizes(rw: Rewriter, node: Node) -> bool:
    """resize(resize(x, A), B), A and B other axes, alike otherwise: one resize of both."""
    inner = rw.producer(node.inputs[0])
    if inner is None or inner.op != "resize" or rw.uses(node.inputs[0]) != 1 or \
            any(inner.attrs[k] != node.attrs[k] for k in _ALIKE) or \
            set(inner.attrs["axes"]) & set(node.attrs["axes"]):
        return False
    moved = sorted(zip((*inner.attrs["axes"], *node.attrs["axes"]),
                       (*inner.attrs["sizes"], *node.attrs["sizes"]),
                       (*inner.attrs["steps"], *node.attrs["steps"])))
    attrs = {**node.attrs, "axes": tuple(a for a, _, _ in moved),
             "sizes": tuple(n for _, n, _ in moved), "steps": tuple(s for _, _, s in moved)}
    out = node.outputs[0]
    rw.replace(out, rw.emit("resize", [inner.inputs[0]], attrs, like=node, shape=out.shape))
    return True


def _matmul(rw: Rewriter, node: Node) -> bool:
    found = _product(node, rw) if len(node.inputs) == 2 else None
    if found is None:
        return False
    x, matrix, axis = found
    attrs = _resize_of(matrix, x.shape, axis)
    if attrs is None or node.outputs[0].shape != _resized(x, matrix, axis):
        return False
    rw.replace(node.outputs[0], rw.emit("resize", [x], attrs, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "einsum":
        return _einsum(rw, node)
    if node.op == "matmul":
        return _matmul(rw, node)
    if node.op == "resize":
        return _resizes(rw, node)
    return False


class RaiseResizeMatricesPass:
    """See the module docstring."""

    name = "raise-resize-matrices"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
