"""Normalize pooling and global reductions: ceil_mode and count_include_pad where they
cannot change the result, global pools (adaptive ones, and Flax's ``avg_pool`` whose one
window covers the whole input) as means or maxima over the spatial axes, a sum divided by
its count as a mean, a keepdims reduction followed by a reshape that drops those axes as
one reduction, a reduction of a reshape that only inserts size-1 axes as the reduction
of its input, and spatial axes a pool's window covers one element of as channels.

Requires: a verified graph. Ensures: exact rewrites only (a whole-window pool proved on
random values as the raising rules are).
"""

from __future__ import annotations

import numpy as np

from specgraph.ir import Graph, Node
from specgraph.ops.layers import _pool_out
from specgraph.passes.regions import agrees, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["NormalizePoolsPass"]


def _pool(rw: Rewriter, node: Node) -> bool:
    attrs = dict(node.attrs)
    x = node.inputs[0]
    rank = len(attrs["kernel"])
    pads = attrs["padding"]
    changed = False
    if attrs["ceil_mode"]:
        floor = tuple(_pool_out(x.shape[2 + i], attrs["kernel"][i], attrs["stride"][i],
                                pads[i], pads[rank + i], attrs["dilation"][i], False)
                      for i in range(rank))
        if floor == node.outputs[0].shape[2:]:
            attrs["ceil_mode"] = False
            changed = True
        elif _overhang_as_padding(node, attrs):
            changed = True
    if node.op == "avg_pool" and not any(attrs["padding"]) and not attrs["count_include_pad"]:
        attrs["count_include_pad"] = True
        changed = True
    if not changed:
        return False
    rw.replace(node.outputs[0], rw.emit(node.op, [x], attrs, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _overhang_as_padding(node: Node, attrs: dict) -> bool:
    """A pool whose ``ceil_mode`` adds a last window running past the input: the same
    pool with that overhang as padding at the end and ``ceil_mode`` off (in ``attrs``),
    where the two agree: a max pool (padding never wins), and an average whose divisor
    counts only the input's own elements there (count_include_pad off, or no padding of
    its own: PyTorch divides a window by its elements within the input and padding, the
    overhang left out). Keras' and Flax's ``same`` pools are written so; PyTorch's
    ``ceil_mode=True`` of kernel 3, stride 2 on 8×8 is the same pool."""
    x, out = node.inputs[0], node.outputs[0]
    rank, pads = len(attrs["kernel"]), attrs["padding"]
    if node.op == "avg_pool" and (attrs.get("divisor") is not None or (
            attrs["count_include_pad"] and any(pads))):
        return False
    if node.op not in ("avg_pool", "max_pool"):
        return False
    ends = list(pads[rank:])
    for i in range(rank):
        k, st, d = attrs["kernel"][i], attrs["stride"][i], attrs["dilation"][i]
        need = (out.shape[2 + i] - 1) * st + d * (k - 1) + 1 - (x.shape[2 + i] + pads[i]
                                                               + pads[rank + i])
        ends[i] += max(0, need)
    if tuple(_pool_out(x.shape[2 + i], attrs["kernel"][i], attrs["stride"][i], pads[i],
                       ends[i], attrs["dilation"][i], False)
             for i in range(rank)) != out.shape[2:]:
        return False
    attrs["padding"] = tuple(pads[:rank]) + tuple(ends)
    attrs["ceil_mode"] = False
    if node.op == "avg_pool":
        attrs["count_include_pad"] = False
    return True


def _whole_window(rw: Rewriter, node: Node) -> bool:
    """A pool whose one window covers the whole unpadded input (or more: HF's EfficientNet
    pools its 2x2 map with a 1280-wide ceil-mode window, which counts what it reads): a
    mean (or maximum) over the spatial axes, kept as a 1×1 map."""
    x, out = node.inputs[0], node.outputs[0]
    attrs = node.attrs
    divisor = attrs["divisor"] if node.op == "avg_pool" else None
    if (any(k < n for k, n in zip(attrs["kernel"], x.shape[2:])) or any(attrs["padding"])
            or any(s != 1 for s in out.shape[2:]) or any(d != 1 for d in attrs["dilation"])
            or divisor not in (None, int(np.prod(x.shape[2:])))):
        return False
    axes = tuple(range(2, x.rank))
    reduce = np.mean if node.op == "avg_pool" else np.max
    rw.keep(node)  # the region's root must be visible to the region walk
    nodes = region(rw, out, [x])
    if nodes is None or not agrees(rw, nodes, out, [x],
                                   lambda env: reduce(env[x], axis=axes, keepdims=True),
                                   claim=("whole-window-pool", node.op)):
        return True
    op = "reduce_mean" if node.op == "avg_pool" else "reduce_max"
    rw.replace(out, rw.emit(op, [x], {"axes": axes, "keepdims": True}, like=node,
                            shape=out.shape))
    return True


def _global_pool(rw: Rewriter, node: Node) -> bool:
    if any(s != 1 for s in node.attrs["output_size"]):
        return False
    x = node.inputs[0]
    op = "reduce_mean" if node.op == "adaptive_avg_pool" else "reduce_max"
    out = rw.emit(op, [x], {"axes": tuple(range(2, x.rank)), "keepdims": True}, like=node,
                  shape=node.outputs[0].shape)
    rw.replace(node.outputs[0], out)
    return True


def _reduce_then_reshape(rw: Rewriter, node: Node) -> bool:
    """A reduction then a reshape that only drops, or puts back, the reduced axes."""
    inner = rw.producer(node.inputs[0])
    if inner is None or not inner.op.startswith("reduce_"):
        return False
    if rw.uses(node.inputs[0]) != 1:
        return False
    source = inner.inputs[0]
    axes = inner.attrs["axes"] or tuple(range(source.rank))
    dropped = tuple(s for i, s in enumerate(source.shape) if i not in axes)
    kept = tuple(1 if i in axes else s for i, s in enumerate(source.shape))
    shape = node.outputs[0].shape
    if shape not in (dropped, kept) or inner.attrs["keepdims"] == (shape == kept):
        return False
    attrs = {**inner.attrs, "keepdims": shape == kept}
    rw.replace(node.outputs[0], rw.emit(inner.op, [source], attrs, like=inner, shape=shape))
    return True


def _unit_axes_before_reduce(rw: Rewriter, node: Node) -> bool:
    """A reduction of a reshape that only inserts size-1 axes (TF's 1-D global pool of
    [N, L, C] as a 2-D mean over [N, 1, L, C]) is the reduction of the reshape's input,
    reshaped."""
    r = rw.producer(node.inputs[0])
    if r is None or r.op != "reshape" or rw.uses(node.inputs[0]) != 1:
        return False
    x, y, out = r.inputs[0], r.outputs[0], node.outputs[0]
    mapping: list[int | None] = []
    for size in y.shape:
        i = len([m for m in mapping if m is not None])
        if i < x.rank and x.shape[i] == size:
            mapping.append(i)
        elif size == 1:
            mapping.append(None)
        else:
            return False
    if len([m for m in mapping if m is not None]) != x.rank or x.rank == y.rank:
        return False
    axes = node.attrs["axes"] if node.attrs["axes"] is not None else tuple(range(y.rank))
    if any(mapping[a] is None for a in axes):
        return False
    new_axes = tuple(sorted(mapping[a] for a in axes))
    keep = node.attrs["keepdims"]
    shape = tuple(1 if i in new_axes else s for i, s in enumerate(x.shape)) if keep else \
        tuple(s for i, s in enumerate(x.shape) if i not in new_axes)
    reduced = rw.emit(node.op, [x], {**node.attrs, "axes": new_axes}, like=node, shape=shape)
    if shape != out.shape:
        reduced = rw.emit("reshape", [reduced], {"shape": out.shape}, like=node,
                          shape=out.shape)
    rw.replace(out, reduced)
    return True


def _sum_over_count(rw: Rewriter, node: Node) -> bool:
    """reduce_sum(x)/N or reduce_sum(x)·(1/N), N the number of summed elements: a mean."""
    total, other = node.inputs
    if node.attrs.get("rounding"):
        return False
    inner = rw.producer(total)
    c = rw.scalar(other)
    if inner is None or inner.op != "reduce_sum" or c is None or rw.uses(total) != 1:
        return False
    source = inner.inputs[0]
    axes = inner.attrs["axes"] or tuple(range(source.rank))
    count = 1
    for a in axes:
        count *= source.shape[a]
    n = c if node.op == "div" else 1.0 / c if c else 0.0
    if abs(n - count) > 1e-6 * count:
        return False
    rw.replace(node.outputs[0], rw.emit("reduce_mean", [source], dict(inner.attrs), like=inner,
                                        shape=node.outputs[0].shape))
    return True


def _trivial_axes(rw: Rewriter, node: Node) -> bool:
    """A pool whose window along some spatial axes is one element (kernel 1, stride 1, no
    padding) pools along the others alone: those axes join the channels, as many pools of
    the rest (PyTorch's Funnel pools ``[B, 1, T, D]`` with a (2, 1) window where TF's
    ``avg_pool1d`` pools ``[B, D, T]``, written as a 2-D pool of ``[B, D, 1, T]``)."""
    x, attrs = node.inputs[0], dict(node.attrs)
    rank = len(attrs["kernel"])
    pads = attrs["padding"]
    trivial = [i for i in range(rank) if attrs["kernel"][i] == 1 and attrs["stride"][i] == 1
               and pads[i] == 0 and pads[rank + i] == 0]
    keep = [i for i in range(rank) if i not in trivial]
    if not trivial or not keep or x.rank != rank + 2:
        return False
    perm = (0, 1, *(2 + i for i in trivial), *(2 + i for i in keep))
    moved = tuple(x.shape[p] for p in perm)
    xt = x if perm == tuple(range(x.rank)) else rw.emit(
        "transpose", [x], {"perm": perm}, like=node, shape=moved)
    lead = moved[:2 + len(trivial)]
    merged_shape = (moved[0], int(np.prod(moved[1:2 + len(trivial)])), *moved[2 + len(trivial):])
    merged = rw.emit("reshape", [xt], {"shape": merged_shape}, like=node, shape=merged_shape)
    for key in ("kernel", "stride", "dilation"):
        attrs[key] = tuple(attrs[key][i] for i in keep)
    attrs["padding"] = tuple(pads[i] for i in keep) + tuple(pads[rank + i] for i in keep)
    out = node.outputs[0]
    pooled_shape = merged_shape[:2] + tuple(out.shape[2 + i] for i in keep)
    pooled = rw.emit(node.op, [merged], attrs, like=node, shape=pooled_shape)
    back_shape = lead + pooled_shape[2:]
    back = rw.emit("reshape", [pooled], {"shape": back_shape}, like=node, shape=back_shape)
    inverse = tuple(int(i) for i in np.argsort(perm))
    rw.replace(out, back if perm == tuple(range(x.rank)) else rw.emit(
        "transpose", [back], {"perm": inverse}, like=node, shape=out.shape))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op in ("div", "mul") and len(node.inputs) == 2:
        return _sum_over_count(rw, node)
    if node.op in ("max_pool", "avg_pool"):
        return _whole_window(rw, node) or _pool(rw, node) or _trivial_axes(rw, node)
    if node.op in ("adaptive_avg_pool", "adaptive_max_pool"):
        return _global_pool(rw, node)
    if node.op == "reshape":
        return _reduce_then_reshape(rw, node)
    if node.op.startswith("reduce_"):
        return _unit_axes_before_reduce(rw, node)
    return False


class NormalizePoolsPass:
    """See the module docstring."""

    name = "normalize-pools"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
