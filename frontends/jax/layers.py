"""JAX convolution and window-reduction primitives -> canonical conv / conv_transpose / pools.

Canonical layers are channels-first: a convolution in any layout (Flax's NHWC / HWIO) becomes
transpose(to NCHW) -> conv -> transpose(back), with a parameter kernel converted to the
canonical [out, in/groups, *kernel] layout at the boundary (its weights are stored that way).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.frontends._common.converter import inverse_perm
from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends.jax.walk import LayoutHint

__all__ = ["CONVERTERS", "PARAM_LAYOUTS"]

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def _to_layout(cx: Any, x: Any, perm: tuple[int, ...]) -> Any:
    """``transpose(x, perm)``, or ``x`` itself for the identity permutation."""
    if perm == tuple(range(len(perm))):
        return x
    shape = tuple(x.shape[p] for p in perm)
    return cx.emit("transpose", [x], {"perm": perm}, out=(shape, x.dtype))


def _from_canonical(cx: Any, y: Any, perm: tuple[int, ...]) -> Any:
    """The equation's output from its channels-first version ``y`` (``perm``: the native
    axis of each canonical axis)."""
    back = inverse_perm(perm)
    if back == tuple(range(len(back))):
        return y
    return cx.emit("transpose", [y], {"perm": back})


def _kernel_layout(eqn: Any) -> dict[int, tuple[int, ...]]:
    """The canonical layout of the kernel operand: [out, in/groups, *kernel] for a conv,
    [in, out, *kernel] for the transposed conv an input dilation makes."""
    rhs_spec = tuple(int(a) for a in eqn.params["dimension_numbers"][1])
    if all(int(d) == 1 for d in eqn.params["lhs_dilation"]):
        return {1: rhs_spec}
    return {1: (rhs_spec[1], rhs_spec[0], *rhs_spec[2:])}


PARAM_LAYOUTS: dict[str, LayoutHint] = {"conv_general_dilated": _kernel_layout}


@_reg("conv_general_dilated")
def _conv(cx: Any, eqn: Any) -> Any:
    p = eqn.params
    lhs, rhs = eqn.invars
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = (tuple(int(a) for a in s) for s in dn)
    pads = [tuple(int(v) for v in pair) for pair in p["padding"]]
    if int(p["batch_group_count"]) != 1 or any(lo < 0 or hi < 0 for lo, hi in pads):
        return cx.opaque()
    shape, dtype = cx.out()
    canonical_out = (tuple(shape[a] for a in out_spec), dtype)
    x = _to_layout(cx, cx.value(lhs), lhs_spec)
    attrs = {"stride": tuple(int(s) for s in p["window_strides"]),
             "dilation": tuple(int(d) for d in p["rhs_dilation"]),
             "groups": int(p["feature_group_count"]), "bias": False}
    if all(int(d) == 1 for d in p["lhs_dilation"]):
        weight = cx.weight(rhs, rhs_spec)
        attrs["padding"] = tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads)
        y = cx.emit("conv", [x, weight], attrs, out=canonical_out)
    else:
        y = _conv_transpose(cx, eqn, x, rhs, rhs_spec, pads, attrs, canonical_out)
        if y is None:
            return cx.opaque()
    return _from_canonical(cx, y, out_spec)


def _conv_transpose(cx: Any, eqn: Any, x: Any, rhs: Any, rhs_spec: tuple[int, ...],
                    pads: list[tuple[int, int]], attrs: dict[str, Any], out: Any) -> Any:
    """A convolution of the input dilated by ``lhs_dilation`` is a transposed convolution
    with stride ``lhs_dilation``, the kernel flipped and its in/out axes swapped."""
    if attrs["groups"] != 1:
        return None
    kernel = [int(rhs.aval.shape[a]) for a in rhs_spec[2:]]
    dilation = attrs["dilation"]
    begins = [d * (k - 1) - lo for (lo, _), k, d in zip(pads, kernel, dilation)]
    ends = [d * (k - 1) - hi for (_, hi), k, d in zip(pads, kernel, dilation)]
    if any(v < 0 for v in (*begins, *ends)):
        return None
    weight = cx.weight(rhs, (rhs_spec[1], rhs_spec[0], *rhs_spec[2:]))
    spatial = tuple(range(2, 2 + len(kernel)))
    weight = cx.emit("flip", [weight], {"axes": spatial}, out=(weight.shape, weight.dtype))
    ct = {**attrs, "stride": tuple(int(s) for s in eqn.params["lhs_dilation"]),
          "padding": tuple(begins) + tuple(ends), "output_padding": (0,) * len(kernel)}
    if any(int(s) != 1 for s in eqn.params["window_strides"]):
        return None
    return cx.emit("conv_transpose", [x, weight], ct, out=out)


def _pool_layout(window: list[int], strides: list[int],
                 pads: list[tuple[int, int]]) -> tuple[int, ...] | None:
    """The permutation to channels-first for a window reduction: NHWC when the first and
    last axes are untouched (Flax's layout), NCHW when the first two are; else None."""
    rank = len(window)
    touched = {a for a in range(rank)
               if window[a] != 1 or strides[a] != 1 or pads[a] != (0, 0)}
    if rank >= 3 and not touched & {0, rank - 1}:
        return (0, rank - 1, *range(1, rank - 1))
    if rank >= 3 and not touched & {0, 1}:
        return tuple(range(rank))
    return None


def _pool_attrs(eqn: Any, perm: tuple[int, ...]) -> dict[str, Any] | None:
    p = eqn.params
    if any(int(d) != 1 for d in p["base_dilation"]):
        return None
    spatial = perm[2:]
    pads = [tuple(int(v) for v in p["padding"][a]) for a in spatial]
    return {"kernel": tuple(int(p["window_dimensions"][a]) for a in spatial),
            "stride": tuple(int(p["window_strides"][a]) for a in spatial),
            "padding": tuple(lo for lo, _ in pads) + tuple(hi for _, hi in pads),
            "dilation": tuple(int(p["window_dilation"][a]) for a in spatial),
            "ceil_mode": False}


def _pool(cx: Any, eqn: Any) -> tuple[Any, tuple[int, ...], dict[str, Any]] | None:
    p = eqn.params
    pads = [tuple(int(v) for v in pair) for pair in p["padding"]]
    perm = _pool_layout([int(w) for w in p["window_dimensions"]],
                        [int(s) for s in p["window_strides"]], pads)
    attrs = _pool_attrs(eqn, perm) if perm is not None else None
    if attrs is None or any(v < 0 for v in attrs["padding"]):
        return None
    return _to_layout(cx, cx.value(eqn.invars[0]), perm), perm, attrs


@_reg("reduce_window_max")
def _max_pool(cx: Any, eqn: Any) -> Any:
    pooled = _pool(cx, eqn)
    if pooled is None:
        return cx.opaque()
    x, perm, attrs = pooled
    shape, dtype = cx.out()
    y = cx.emit("max_pool", [x], attrs, out=(tuple(shape[a] for a in perm), dtype))
    return _from_canonical(cx, y, perm)


@_reg("reduce_window_sum")
def _sum_pool(cx: Any, eqn: Any) -> Any:
    """Flax's avg_pool is a window sum divided by the window size: the two become one
    ``avg_pool``; a window sum alone is an ``avg_pool`` with divisor 1."""
    pooled = _pool(cx, eqn)
    if pooled is None:
        return cx.opaque()
    x, perm, attrs = pooled
    shape, dtype = cx.out()
    count = int(np.prod(attrs["kernel"]))
    fused = _divided_by(cx, eqn.outvars[0], count)
    attrs = {**attrs, "count_include_pad": True, "divisor": None if fused else 1}
    y = cx.emit("avg_pool", [x], attrs, out=(tuple(shape[a] for a in perm), dtype))
    out = _from_canonical(cx, y, perm)
    if fused:
        cx.fuse_next(out)
    return out


def _divided_by(cx: Any, var: Any, count: int) -> bool:
    """Whether the next equation divides ``var`` (read nowhere else) by ``count``."""
    nxt = cx.next_eqn()
    if nxt is None or nxt.primitive.name != "div" or nxt.invars[0] is not var:
        return False
    divisor = cx.known(nxt.invars[1])
    return (divisor is not None and divisor.size == 1 and float(divisor) == count
            and cx.uses(var) == 1 and nxt.outvars[0].aval.shape == var.aval.shape)
