"""Drop no-ops: identities, inference dropout, same-type casts, same-shape reshapes and
expands, identity transposes, multiplications by one and additions of zero, reshapes that
only add leading size-1 axes for broadcasting elementwise ops and matrix products (NumPy's
implicit rank promotion, which JAX and TF write out and PyTorch does not; a transpose sinks
below such a reshape to reach them, and one that moves only size-1 axes of a reshape's
output, or of what a reshape alone reads next, joins the reshape; a norm between two
reshapes that regroup only its rows is the norm of the outer shape); squeeze/unsqueeze
become reshapes; chains of reshapes, of transposes or of slices (over distinct axes) become
one; zero pads go, as do slices that keep every element in order; tiles that only repeat
size-1 axes, with the reshapes around them, become one expand; an expand between reshapes
loses the axes of size one it leaves alone; a select on a constant condition that is the
same everywhere is the operand it picks; a softmax guarded against NaN (``where(s != s, 0,
s)``) is the softmax; a concat of one operand beside empty ones (an empty key cache) is that
operand, a concat of copies of a value of size one along its axis is that value expanded,
and one of a value between blocks of zeros is a pad; a gather of evenly spaced constant
indices is a slice; an elementwise op reads the source of an expand it broadcasts anyway; a
cast of a reshaped or expanded boolean comes first; x·x is pow(x, 2) and x^0.5 is √x; a
slice of a concat within one operand is a slice of it; an index made by argmax is not
wrapped (it is never negative), and one kept with its axis is reshaped; where(c, 1, 0) is c
cast; a minimum of a maximum with constant bounds is a clip; a root of a sum of squares
guarded by a constant takes the guard after the root (x·rsqrt(max(s, c)) is
x / max(√s, √c)); an activation between two reshapes comes before both, which then meet;
x != 0 is x cast to bool, logical ops read their operands so cast, and a cast of a boolean's
cast is one cast; a cast between integer types that holds every value its input can take
(a count of a boolean mask narrowed and widened again) goes.

Requires: a verified graph. Ensures: no node of the kinds above whose removal keeps the
computation identical (every rewrite here is exact, not approximate; the tile rewrite is
also proved on random values).
"""

from __future__ import annotations

from math import prod

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import FLOAT_DTYPES
from specgraph.passes.regions import agrees, layout_of, region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["DropIdentitiesPass"]


def _truth(rw: Rewriter, node: Node) -> bool:
    """Truth of numbers has one form, ``cast(x, bool)``: ``x != 0`` (JAX's
    ``jnp.logical_and`` of integers writes it) is that cast, and a logical op reading
    numbers (PyTorch's ``logical_and`` of integer masks records none) reads their cast."""
    if node.op == "not_equal":
        for x, zero in (node.inputs, node.inputs[::-1]):
            if x.dtype != "bool" and rw.scalar(zero) == 0.0 and \
                    x.shape == node.outputs[0].shape and rw.constant_value(x) is None:
                rw.replace(node.outputs[0], rw.emit("cast", [x], {"dtype": "bool"},
                                                    like=node, shape=x.shape, dtype="bool"))
                return True
        return False
    if not any(v.dtype != "bool" for v in node.inputs):
        return False
    inputs = [v if v.dtype == "bool" else rw.emit("cast", [v], {"dtype": "bool"}, like=node,
                                                   shape=v.shape, dtype="bool")
              for v in node.inputs]
    rw.replace(node.outputs[0], rw.emit(node.op, inputs, dict(node.attrs), like=node,
                                        shape=node.outputs[0].shape, dtype="bool"))
    return True


def _recast_truth(rw: Rewriter, node: Node) -> bool:
    """cast(cast(b, T1), T2) of a boolean b is cast(b, T2): 0 and 1 are exact in every
    type (PyTorch's ``one_hot`` is int64 and the model casts it to float again; JAX casts
    the comparison to float at once)."""
    inner = rw.producer(node.inputs[0])
    if inner is None or inner.op != "cast" or inner.inputs[0].dtype != "bool":
        return False
    b = inner.inputs[0]
    rw.replace(node.outputs[0], rw.emit("cast", [b], dict(node.attrs), like=node,
                                        shape=b.shape, dtype=node.outputs[0].dtype))
    return True


def _rule(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0] if node.inputs else None
    if node.op in ("not_equal", "logical_and", "logical_or", "logical_not") and \
            _truth(rw, node):
        return True
    if node.op in ("identity", "dropout"):
        rw.replace(node.outputs[0], x)
        return True
    if node.op == "cast" and x.dtype == node.attrs["dtype"]:
        rw.replace(node.outputs[0], x)
        return True
    if node.op == "cast" and _cast_first(rw, node):
        return True
    if node.op == "cast" and _exact_integer_cast(rw, node):
        return True
    if node.op == "cast" and _recast_truth(rw, node):
        return True
    if node.op in ("reshape", "expand") and x.shape == node.outputs[0].shape:
        rw.replace(node.outputs[0], x)
        return True
    if node.op == "reshape" and _reshape_through_unary(rw, node):
        return True
    if node.op == "pad" and not any(node.attrs["pads"]):
        rw.replace(node.outputs[0], x)
        return True
    if node.op == "slice" and x.shape == node.outputs[0].shape and \
            all(step == 1 for step in node.attrs["steps"]):
        rw.replace(node.outputs[0], x)  # every element, in order (T5's bias[:, :, -T:])
        return True
    if node.op == "slice" and (_slice_chain(rw, node) or _slice_of_concat(rw, node)):
        return True
    if node.op == "transpose":
        return _transpose(rw, node)
    if node.op == "flip" and _reversed_argsort(rw, node):
        return True
    if node.op == "flip":
        return _flip(rw, node)
    if node.op == "argsort":
        return _monotone_under_argsort(rw, node)
    if node.op in ("mul", "div", "add", "sub") and _neutral(rw, node):
        return True
    if node.op in ("mul", "div", "add", "sub") and _reshape_after_elementwise(rw, node):
        return True
    if node.op == "mul" and len(node.inputs) == 2 and node.inputs[0] is node.inputs[1] and \
            x.dtype in FLOAT_DTYPES:
        # x·x is x², as pow(x, 2) computes it (exactly: libraries square by one product)
        rw.replace(node.outputs[0], rw.emit("pow", [x, rw.constant(2.0, x.dtype)], like=node,
                                            shape=node.outputs[0].shape))
        return True
    if node.op in ("mul", "sqrt") and _guarded_root(rw, node):
        return True
    if node.op in ("minimum", "maximum") and _clip(rw, node):
        return True
    if node.op == "pow" and x.dtype in FLOAT_DTYPES and rw.scalar(node.inputs[1]) == 0.5:
        # x^0.5 is √x (PyTorch's ``x.norm(dim=…)`` against a port's sqrt(Σx²))
        rw.replace(node.outputs[0], rw.emit("sqrt", [x], like=node,
                                            shape=node.outputs[0].shape))
        return True
    if node.op == "where":
        return _constant_condition(rw, node) or _index_wrap(rw, node) or \
            _indicator(rw, node) or _nan_guarded_softmax(rw, node) or \
            _expand_broadcast(rw, node)
    if node.op in ("argmax", "argmin") and node.attrs["keepdims"]:
        # the index with its axis kept is the index reshaped (PyTorch's max(keepdim=True))
        out = node.outputs[0]
        shape = tuple(d for k, d in enumerate(out.shape) if k != node.attrs["axis"])
        index = rw.emit(node.op, [x], {"axis": node.attrs["axis"], "keepdims": False},
                        like=node, shape=shape)
        rw.replace(out, rw.emit("reshape", [index], {"shape": out.shape}, like=node,
                                shape=out.shape))
        return True
    if node.op in _BROADCASTING and (_expand_broadcast(rw, node) or
                                     _expand_later(rw, node)):
        return True
    if node.op == "gather" and (_only_entry(rw, node) or _gather_range(rw, node)):
        return True
    if node.op == "reshape" and (_batched_transpose(rw, node) or _select(rw, node) or
                                 _rank_promotion(rw, node) or _unit_axes_before(rw, node)
                                 or _norm_between_reshapes(rw, node)):
        return True
    if node.op == "concat" and (_one_nonempty(rw, node) or _copies(rw, node)
                                or _zeros_around(rw, node) or _pieces_reversed(rw, node)):
        return True
    if node.op == "split" and _split_of_concat(rw, node):
        return True
    if node.op in ("reshape", "tile") and _tile_as_expand(rw, node):
        return True
    if node.op == "expand" and _expand_without_unit_axes(rw, node):
        return True
    if node.op in ("reshape", "squeeze", "unsqueeze"):
        return _reshape_chain(rw, node) or (node.op == "reshape" and (
            _reshape_around_unary(rw, node) or _views_as_transpose(rw, node)))
    return False


_VIEWS = ("reshape", "expand", "tile")


def _split_of_concat(rw: Rewriter, node: Node) -> bool:
    """split(concat(a, b, ...), the same axis, their sizes): a, b, ... (Keras stacks a
    recurrent layer's steps and the next layer unstacks them again; PyTorch's stacked
    layers hand each step on)."""
    c = rw.producer(node.inputs[0])
    if c is None or c.op != "concat" or len(node.inputs) != 1:
        return False
    rank = node.inputs[0].rank
    if c.attrs["axis"] % rank != node.attrs["axis"] % rank or \
            tuple(v.shape for v in c.inputs) != tuple(v.shape for v in node.outputs):
        return False
    for out, piece in zip(node.outputs, c.inputs):
        rw.replace(out, piece)
    return True


def _views_as_transpose(rw: Rewriter, node: Node) -> bool:
    """A chain of three or more reshapes and transposes, ending at the reshape ``node``,
    that only permutes the axes of what it starts from: one transpose of it (axes of one
    added, moved and dropped again; PyTorch's Funnel pools ``[B, 1, T, D]`` and TF's
    ``[B, D, 1, T]``, both ``[B, D, T]`` moved)."""
    chain, v = [node], node.inputs[0]
    while len(chain) < 6 and (p := rw.producer(v)) is not None and \
            p.op in ("reshape", "transpose") and rw.uses(v) == 1:
        chain.insert(0, p)
        v = p.inputs[0]
    out = node.outputs[0]
    for start in range(len(chain) - 2):
        x = chain[start].inputs[0]
        if x.rank != out.rank or x.size != out.size:
            continue
        perm = layout_of(x, chain[start:])
        if perm is None or tuple(x.shape[p] for p in perm) != out.shape:
            continue
        rw.replace(out, x if perm == tuple(range(x.rank)) else rw.emit(
            "transpose", [x], {"perm": perm}, like=node, shape=out.shape))
        return True
    return False


def _flip(rw: Rewriter, node: Node) -> bool:
    """Flips in one form: none along axes of one, a flip of a flip one flip along the axes
    flipped once (none if no axis is), a flip of a transpose the flip of its input along the
    same axes, then the transpose (flips move toward the weights they read and meet there).
    Flax's ``ConvTranspose(transpose_kernel=True)`` flips its kernel's spatial axes one by
    one and swaps its features; a transposed conv flips them again: no flip at all."""
    x, out = node.inputs[0], node.outputs[0]
    axes = sorted({a % x.rank for a in node.attrs["axes"] if x.shape[a % x.rank] != 1})
    inner = rw.producer(x)
    single = inner is not None and rw.uses(x) == 1
    if single and inner.op == "flip":
        y = inner.inputs[0]
        axes = sorted(set(axes) ^ {a % y.rank for a in inner.attrs["axes"]
                                   if y.shape[a % y.rank] != 1})
        x = y
    elif single and inner.op == "transpose":
        perm = inner.attrs["perm"]
        y = inner.inputs[0]
        flipped = rw.emit("flip", [y], {"axes": tuple(sorted(perm[a] for a in axes))},
                          like=node, shape=y.shape) if axes else y
        rw.replace(out, rw.emit("transpose", [flipped], {"perm": perm}, like=inner,
                                shape=out.shape))
        return True
    elif tuple(axes) == tuple(node.attrs["axes"]):
        return False
    rw.replace(out, rw.emit("flip", [x], {"axes": tuple(axes)}, like=node, shape=out.shape)
               if axes else x)
    return True


def _guarded_root(rw: Rewriter, node: Node) -> bool:
    """A norm guarded against zero is one form: x·rsqrt(max(s, c)) is x / max(√s, √c), and
    √max(s, c) is max(√s, √c), where s sums (or averages) squares and c is a constant at
    or above zero. TF's ``l2_normalize`` guards the squared norm, PyTorch's ``F.normalize``
    the norm itself: the same clamp then reads 1e-6 against 1e-12 where it differs (exact
    in real arithmetic: the root is monotone and s is never negative)."""
    if node.op == "sqrt":
        guard = _guard(rw, node.inputs[0])
        if guard is None:
            return False
        rw.replace(node.outputs[0], _rooted(rw, node, *guard))
        return True
    for x, r in (node.inputs, node.inputs[::-1]) if len(node.inputs) == 2 else ():
        root = rw.producer(r)
        if root is None or root.op != "rsqrt" or rw.uses(r) != 1 or \
                (guard := _guard(rw, root.inputs[0])) is None:
            continue
        out = node.outputs[0]
        rw.replace(out, rw.emit("div", [x, _rooted(rw, root, *guard)], like=node,
                                shape=out.shape))
        return True
    return False


def _clip(rw: Rewriter, node: Node) -> bool:
    """A minimum of a maximum with constants (either way round, the lower bound below the
    upper) is a clip: PyTorch's ``clip(x, a, b)`` against TF's ``clip_by_value``
    (LayoutLMv3's relative positions). A clip's bounds are its attributes, which the diff
    holds as definitions (a bound of 6 against none is a finding, whatever the numbers)."""
    out = node.outputs[0]
    if len(node.inputs) != 2 or out.dtype == "bool":
        return False
    for v, c in (node.inputs, node.inputs[::-1]):
        outer = rw.scalar(c)
        inner = rw.producer(v)
        if outer is None or inner is None or rw.uses(v) != 1 or len(inner.inputs) != 2 or \
                inner.op != ("maximum" if node.op == "minimum" else "minimum"):
            continue
        for x, d in (inner.inputs, inner.inputs[::-1]):
            bound = rw.scalar(d)
            if bound is None or x.shape != out.shape:
                continue
            lo, hi = (bound, outer) if node.op == "minimum" else (outer, bound)
            if not lo <= hi:
                continue
            if out.dtype not in FLOAT_DTYPES:  # integer bounds, as PyTorch's clip keeps them
                if lo != int(lo) or hi != int(hi):
                    continue
                lo, hi = int(lo), int(hi)
            rw.replace(out, rw.emit("clip", [x], {"min": lo, "max": hi}, like=node,
                                    shape=out.shape))
            return True
    return False


def _guard(rw: Rewriter, v: Value) -> tuple[Value, float, str] | None:
    """(s, c, c's dtype) where ``v`` is max(s, c): s a sum or mean of squares, c a float
    constant of one element, at or above zero."""
    node = rw.producer(v)
    if node is None or node.op != "maximum" or len(node.inputs) != 2 or \
            v.dtype not in FLOAT_DTYPES:
        return None
    for s, c in (node.inputs, node.inputs[::-1]):
        bound = rw.scalar(c)
        if bound is not None and bound >= 0 and s.shape == v.shape and \
                _squares_summed(rw, s):
            return s, bound, c.dtype
    return None


def _squares_summed(rw: Rewriter, s: Value) -> bool:
    total = rw.producer(s)
    if total is None or total.op not in ("reduce_sum", "reduce_mean"):
        return False
    square = rw.producer(total.inputs[0])
    return square is not None and square.op == "pow" and rw.scalar(square.inputs[1]) == 2


def _rooted(rw: Rewriter, like: Node, s: Value, c: float, dtype: str) -> Value:
    """max(√s, √c)."""
    root = rw.emit("sqrt", [s], like=like, shape=s.shape)
    return rw.emit("maximum", [root, rw.constant(np.sqrt(c), dtype)], like=like,
                   shape=s.shape)


def _expand_without_unit_axes(rw: Rewriter, node: Node) -> bool:
    """An expand read only by reshapes, with axes of size one that it leaves as they are
    (TF's GQA repeat as [B, H, 1, 1, T, d] where PyTorch writes [B, H, 1, T, d]): the same
    expand without those axes, the reshapes around it absorbing the difference."""
    x, out = node.inputs[0], node.outputs[0]
    shape = (1,) * (out.rank - x.rank) + tuple(x.shape)  # fewer axes: leading ones added
    keep = [a for a in range(out.rank) if not (shape[a] == 1 and out.shape[a] == 1)]
    users = rw.graph.consumers(out)
    if len(keep) == out.rank or not keep or not users or \
            any(u.op != "reshape" for u in users) or rw.uses(out) != len(users):
        return False
    small_in = tuple(shape[a] for a in keep)
    small_out = tuple(out.shape[a] for a in keep)
    y = rw.emit("reshape", [x], {"shape": small_in}, like=node, shape=small_in)
    y = rw.emit("expand", [y], {"shape": small_out}, like=node, shape=small_out)
    rw.replace(out, rw.emit("reshape", [y], {"shape": out.shape}, like=node, shape=out.shape))
    return True


def _tile_as_expand(rw: Rewriter, node: Node) -> bool:
    """A chain of reshapes, expands and tiles, one a tile, that only repeats x along new or
    size-1 axes (TF's ``tf.repeat`` as reshape·tile·reshape) is ``expand(x)``, proved on
    random x."""
    chain, x = [node], node.inputs[0]
    while (inner := rw.producer(x)) is not None and inner.op in _VIEWS and rw.uses(x) == 1:
        chain.append(inner)
        x = inner.inputs[0]
    if node.op != "tile" and (len(chain) == 1 or all(n.op == "reshape" for n in chain)):
        return False
    out = node.outputs[0]
    starts = [x] + [n.inputs[0] for n in reversed(chain[:-1])]  # farthest first
    starts = [v for v in starts if _broadcasts(v.shape, out.shape)]
    if not starts:
        return False
    rw.keep(node)  # the region's root must be visible to the region walk
    for v in starts:
        nodes = region(rw, out, [v])
        if nodes is not None and agrees(
                rw, nodes, out, [v], lambda env, v=v: np.broadcast_to(env[v], out.shape),
                claim=("expand", out.shape)):
            rw.replace(out, rw.emit("expand", [v], {"shape": out.shape}, like=node,
                                    shape=out.shape))
            break
    return True


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return len(shape) <= len(target) and np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _transpose(rw: Rewriter, node: Node) -> bool:
    perm = node.attrs["perm"]
    x = node.inputs[0]
    if perm == tuple(range(len(perm))):
        rw.replace(node.outputs[0], x)
        return True
    inner = rw.producer(x)
    if inner is not None and inner.op == "reshape" and rw.uses(x) == 1:
        return _unit_axes_after(rw, node, inner) or _unit_axes_moved(rw, node, inner) or \
            _inserted_units_after(rw, node, inner)
    if inner is not None and inner.op == "transpose":
        composed = tuple(inner.attrs["perm"][p] for p in perm)
        source = inner.inputs[0]
        if composed == tuple(range(len(composed))):
            rw.replace(node.outputs[0], source)
        else:
            rw.replace(node.outputs[0], rw.emit("transpose", [source], {"perm": composed},
                                                like=node, shape=node.outputs[0].shape))
        return True
    return False


def _unit_axes_after(rw: Rewriter, node: Node, reshape: Node) -> bool:
    """transpose(reshape(x, [1, .., 1, *x.shape]), p), p keeping those leading size-1 axes
    in place: the transpose of x, then the reshape adding them (they sink toward a
    broadcasting reader that drops them)."""
    x, perm = reshape.inputs[0], node.attrs["perm"]
    lead = reshape.outputs[0].rank - x.rank
    if lead < 1 or reshape.outputs[0].shape != (1,) * lead + x.shape or \
            perm[:lead] != tuple(range(lead)):
        return False
    inner_perm = tuple(p - lead for p in perm[lead:])
    moved = tuple(x.shape[p] for p in inner_perm)
    out = node.outputs[0]
    t = rw.emit("transpose", [x], {"perm": inner_perm}, like=node, shape=moved)
    rw.replace(out, rw.emit("reshape", [t], {"shape": out.shape}, like=reshape,
                            shape=out.shape))
    return True


def _inserted_units_after(rw: Rewriter, node: Node, reshape: Node) -> bool:
    """transpose(reshape(x)), the reshape only inserting axes of one between x's (none of
    size one): the transpose of x, then the reshape inserting them where the transpose put
    them (TF's Funnel pools ``[B, D, T]`` and moves ``[B, D, 1, T]`` to ``[B, 1, T, D]``).
    Axes appended at the end are the transposes pass's (it moves that reshape above)."""
    x, y, out = reshape.inputs[0], reshape.outputs[0], node.outputs[0]
    if 1 in x.shape or y.rank <= x.rank or tuple(n for n in y.shape if n != 1) != x.shape \
            or y.shape[:x.rank] == x.shape:
        return False
    where = [k for k, n in enumerate(y.shape) if n != 1]  # y's axis of each x axis
    perm = tuple(where.index(p) for p in node.attrs["perm"] if y.shape[p] != 1)
    moved = tuple(x.shape[p] for p in perm)
    t = x if perm == tuple(range(x.rank)) else rw.emit("transpose", [x], {"perm": perm},
                                                       like=node, shape=moved)
    rw.replace(out, rw.emit("reshape", [t], {"shape": out.shape}, like=reshape,
                            shape=out.shape))
    return True


def _unit_axes_before(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(x)) where the transpose moves only size-1 axes (the others keep
    their order, and x's size-1 axes are its last), nothing else reads it and the reshape
    drops them: one reshape of x (Keras' ``Flatten`` of an NHWC
    ``[B, 1, 1, C]`` after a channels-first 1x1 conv, where PyTorch flattens
    ``[B, C, 1, 1]``: MobileNetV3's head; TF's CvT reshapes a 1x1 map of keys to one token,
    ``[B, 1, C]``, where PyTorch's flattens and permutes it); or where the reshape drops
    every axis of one and nothing else (a time step of a sequence read time-major,
    ``[1, B, D]`` as ``[B, D]``, where the batch-first side drops ``[B, 1, D]``'s)."""
    t = rw.producer(node.inputs[0])
    if t is None or t.op != "transpose" or rw.uses(node.inputs[0]) != 1:
        return False
    perm, shape = t.attrs["perm"], t.inputs[0].shape
    kept = [p for p in perm if shape[p] != 1]
    out = node.outputs[0]
    units = [k for k, n in enumerate(shape) if n == 1]
    channels_last = tuple(perm) == (0, *range(2, len(shape)), 1) and \
        units == list(range(2, len(shape)))  # a 1x1 map moved channels-last (CvT's keys)
    squeeze = out.shape == tuple(shape[p] for p in kept) and 1 not in out.shape
    if kept != sorted(kept) or (1 in out.shape[1:] and not channels_last) or \
            (units != list(range(len(shape) - len(units), len(shape))) and not squeeze):
        # a pooled map's trailing size-1 axes (``[B, C, 1, 1]``) the reshape drops (a
        # flatten) only: heads merged back over one token (``[B, H, 1, D]`` transposed
        # and reshaped to ``[B, H·D]``, MobileViT's attention at one patch, a decoder's
        # step) stay the attention's own transpose
        return False
    rw.replace(out, rw.emit("reshape", [t.inputs[0]], {"shape": out.shape}, like=node,
                            shape=out.shape))
    return True


def _norm_between_reshapes(rw: Rewriter, node: Node) -> bool:
    """reshape(norm(reshape(x)), x.shape): the norm of x over its trailing axes with as
    many elements as the norm's rows (in C order each row is the same run of elements
    either way). TF's BLIP normalizes its pooled ``[B, C]`` features as
    ``squeeze(layer_norm(expand_dims(x, 1)), 1)``, PyTorch's as ``layer_norm(x)``;
    tf_keras' fused LayerNormalization normalizes ``[B, T, C]`` laid out as
    ``[1, B·T, C, 1]``."""
    norm = rw.producer(node.inputs[0])
    if norm is not None and norm.op == "group_norm" and rw.uses(node.inputs[0]) == 1:
        return _group_norm_of_units(rw, node, norm)
    if norm is None or norm.op not in ("layer_norm", "rms_norm") or \
            rw.uses(node.inputs[0]) != 1:
        return False
    inner = rw.producer(norm.inputs[0])
    if inner is None or inner.op != "reshape" or rw.uses(norm.inputs[0]) != 1:
        return False
    x, y = inner.inputs[0], norm.inputs[0]
    size = prod(y.shape[norm.attrs["axis"]:])
    if node.outputs[0].shape != x.shape:
        return False
    # the trailing axes of x with as many elements: each row is the same run of elements
    axis = next((k for k in range(x.rank - 1, -1, -1) if prod(x.shape[k:]) == size), None)
    if axis is None:
        return False
    block = x.shape[axis:]
    params = [p if p.shape == block else rw.emit("reshape", [p], {"shape": block}, like=norm,
                                                 shape=block)
              for p in norm.inputs[1:]]
    attrs = {**norm.attrs, "axis": axis}
    rw.replace(node.outputs[0], rw.emit(norm.op, [x, *params], attrs, like=norm,
                                        shape=x.shape))
    return True


def _group_norm_of_units(rw: Rewriter, node: Node, norm: Node) -> bool:
    """reshape(group_norm(reshape(x)), x.shape) where the inner reshape appends spatial axes
    of one to x: group_norm(x) (its moments read the same elements; Keras'
    GroupNormalization with a group per channel normalizes [B, C, H, W, 1])."""
    inner = rw.producer(norm.inputs[0])
    if inner is None or inner.op != "reshape" or rw.uses(norm.inputs[0]) != 1:
        return False
    x, y = inner.inputs[0], norm.inputs[0]
    if x.rank < 3 or node.outputs[0].shape != x.shape or \
            y.shape != x.shape + (1,) * (y.rank - x.rank):
        return False
    rw.replace(node.outputs[0], rw.emit("group_norm", [x, *norm.inputs[1:]],
                                        dict(norm.attrs), like=norm, shape=x.shape))
    return True


def _unit_axes_moved(rw: Rewriter, node: Node, reshape: Node) -> bool:
    """transpose(reshape(x)) where the transpose moves only size-1 axes (the others keep
    their order): one reshape of x (TF's ``x[:, :, None]`` then a channels-first
    transpose, where PyTorch writes ``x[:, None]``)."""
    perm, shape = node.attrs["perm"], node.inputs[0].shape
    kept = [p for p in perm if shape[p] != 1]
    if kept != sorted(kept):
        return False
    out = node.outputs[0]
    rw.replace(out, rw.emit("reshape", [reshape.inputs[0]], {"shape": out.shape},
                            like=reshape, shape=out.shape))
    return True


def _batched_transpose(rw: Rewriter, node: Node) -> bool:
    """reshape(transpose(reshape(x, [B, *T]), p), S) with p keeping the merged batch axis
    first, S splitting it back: one transpose of x (exporters flatten batch and heads)."""
    t = rw.producer(node.inputs[0])
    if t is None or t.op != "transpose" or t.attrs["perm"][0] != 0:
        return False
    merge = rw.producer(t.inputs[0])
    if merge is None or merge.op != "reshape":
        return False
    x = merge.inputs[0]
    tail = merge.outputs[0].shape[1:]
    lead = x.shape[: x.rank - len(tail)]
    if x.shape[x.rank - len(tail):] != tail or not lead:
        return False
    perm = t.attrs["perm"]
    permuted = tuple(tail[p - 1] for p in perm[1:])
    if node.outputs[0].shape != lead + permuted:
        return False
    full = tuple(range(len(lead))) + tuple(len(lead) + p - 1 for p in perm[1:])
    rw.replace(node.outputs[0], rw.emit("transpose", [x], {"perm": full}, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _nan_guarded_softmax(rw: Rewriter, node: Node) -> bool:
    """where(s != s, 0, s) of a softmax s is s: the guard zeroes only the rows a softmax
    turns to NaN, those whose every key is masked with -inf, and PyTorch's own attention
    (its safe softmax) gives those rows 0 as well. torch.onnx's export writes the guard
    out after the softmax of ``scaled_dot_product_attention`` with a boolean mask; each
    program's numbers still show a masked-out row that one side leaves NaN."""
    cond, fill, s = node.inputs
    test = rw.producer(cond)
    soft = rw.producer(s)
    if test is None or test.op != "not_equal" or soft is None or \
            soft.op not in ("softmax", "log_softmax") or rw.scalar(fill) != 0.0:
        return False
    if [rw.resolve(v) for v in test.inputs] != [rw.resolve(s), rw.resolve(s)]:
        return False
    rw.replace(node.outputs[0], s)
    return True


def _select(rw: Rewriter, node: Node) -> bool:
    """reshape(x[..., i:i+1, ...]) dropping that axis is x[..., i, ...]: a gather of one
    index, as PyTorch's select and TF's strided slice with shrink_axis write it."""
    sl = rw.producer(node.inputs[0])
    if sl is None or sl.op != "slice" or len(sl.attrs["axes"]) != 1 or \
            rw.uses(node.inputs[0]) != 1:
        return False
    (axis,), (start,), (step,) = sl.attrs["axes"], sl.attrs["starts"], sl.attrs["steps"]
    x = sl.inputs[0]
    if sl.outputs[0].shape[axis] != 1 or start < 0 or step <= 0:
        return False
    if node.outputs[0].shape != x.shape[:axis] + x.shape[axis + 1:]:
        return False
    index = rw.constant(np.array(start, dtype=np.int64), "int64")
    rw.replace(node.outputs[0], rw.emit("gather", [x, index], {"axis": axis}, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _rank_promotion(rw: Rewriter, node: Node) -> bool:
    """reshape(x, [1, ..., 1, *x.shape]) read only by elementwise ops or matrix products that
    broadcast it to their own shape anyway, or as an attention's mask (which broadcasts to
    the scores): NumPy broadcasting prepends those size-1 axes itself."""
    x, out = node.inputs[0], node.outputs[0]
    lead = out.rank - x.rank
    if lead < 1 or out.shape != (1,) * lead + x.shape:
        return False
    users = rw.graph.consumers(out)
    if not users or rw.uses(out) != len(users):
        return False  # unread, or a graph output: its shape is visible
    for user in users:
        if user.op == "attention":  # its mask operand broadcasts to the scores alike
            scores = user.outputs[0].shape[:-1] + (user.inputs[1].shape[-2],)
            if any(v is out for v in user.inputs[:3]) or x.rank > len(scores) or \
                    np.broadcast_shapes(x.shape, scores) != scores:
                return False
            continue
        shapes = [x.shape if v is out else v.shape for v in user.inputs]
        shape_of = _matmul_shape if user.op == "matmul" else (
            np.broadcast_shapes if get_spec(user.op).category in ("elementwise", "activation")
            else None)
        try:
            if shape_of is None or shape_of(*shapes) != user.outputs[0].shape:
                return False  # x alone would give the result fewer axes
        except ValueError:
            return False
    rw.replace(out, x)
    return True


def _one_nonempty(rw: Rewriter, node: Node) -> bool:
    """A concat of one operand with operands of no elements (an empty key cache) is it."""
    full = [v for v in node.inputs if 0 not in v.shape]
    if len(full) != 1 or full[0].shape != node.outputs[0].shape:
        return False
    rw.replace(node.outputs[0], full[0])
    return True


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a·b for operands of rank >= 2 (batch axes broadcast as NumPy's)."""
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ValueError("not a matrix product")
    return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])


def _zeros_around(rw: Rewriter, node: Node) -> bool:
    """A concat of one value between constant blocks of zeros is that value padded with
    zeros (TF's Speech2Text pads its convolutions' inputs so; PyTorch's pads in the
    conv)."""
    ends = [v for v in node.inputs if rw.constant_value(v) is not None]
    inner = [k for k, v in enumerate(node.inputs) if rw.constant_value(v) is None]
    if len(inner) != 1 or not ends or not all(rw.uniform(v) == 0.0 for v in ends):
        return False
    (k,) = inner
    x, out = node.inputs[k], node.outputs[0]
    axis = node.attrs["axis"] % x.rank
    before = sum(v.shape[axis] for v in node.inputs[:k])
    after = sum(v.shape[axis] for v in node.inputs[k + 1:])
    pads = [0] * (2 * x.rank)
    pads[axis], pads[x.rank + axis] = before, after
    rw.replace(out, rw.emit("pad", [x], {"pads": tuple(pads)}, like=node, shape=out.shape))
    return True


_BROADCASTING = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "logical_and",
                          "logical_or"})


def _expand_broadcast(rw: Rewriter, node: Node) -> bool:
    """An elementwise op reading an expand whose source its other operands broadcast to the
    same shape reads the source (PyTorch XLM's ``x + emb.expand_as(x)``: TF adds the lookup
    and lets the sum broadcast it; HF Wav2Vec2's ``mask.unsqueeze(-1).repeat(1, 1, C)``
    before ``where``, where TF lets ``where`` broadcast the mask)."""
    out = node.outputs[0]
    inputs = list(node.inputs)
    changed = False
    for k, v in enumerate(inputs):
        producer = rw.producer(v)
        if producer is None or producer.op != "expand":
            continue
        source = producer.inputs[0]
        others = [u.shape for j, u in enumerate(inputs) if j != k]
        try:
            shape = np.broadcast_shapes(source.shape, *others)
        except ValueError:
            continue
        if tuple(shape) == out.shape:
            inputs[k], changed = source, True
    if not changed:
        return False
    rw.replace(out, rw.emit(node.op, inputs, dict(node.attrs), like=node, shape=out.shape))
    return True


def _expand_later(rw: Rewriter, node: Node) -> bool:
    """Integer arithmetic on an expand (read there alone) with constants its source's shape
    holds is the arithmetic, then the expand: index offsets computed once per row
    (PyTorch's ``gather(x, 1, keep[..., None].expand(-1, -1, C))`` scales the expanded
    indices by the row's stride, TF's batched gather the indices themselves)."""
    out = node.outputs[0]
    if out.dtype not in _INT_RANGE or out.dtype == "bool":
        return False
    for k, v in enumerate(node.inputs):
        producer = rw.producer(v)
        if producer is None or producer.op != "expand" or rw.uses(v) != 1:
            continue
        source = producer.inputs[0]
        others = [u for j, u in enumerate(node.inputs) if j != k]
        if any(rw.constant_value(u) is None for u in others):
            return False
        try:
            if tuple(np.broadcast_shapes(source.shape, *(u.shape for u in others))) != \
                    source.shape:
                return False
        except ValueError:
            return False
        inputs = [source if j == k else u for j, u in enumerate(node.inputs)]
        made = rw.emit(node.op, inputs, dict(node.attrs), like=node, shape=source.shape,
                       dtype=out.dtype)
        rw.replace(out, rw.emit("expand", [made], {"shape": out.shape}, like=producer,
                                shape=out.shape, dtype=out.dtype))
        return True
    return False


def _only_entry(rw: Rewriter, node: Node) -> bool:
    """A gather at a scalar index of an axis of size one is that axis dropped: PyTorch's
    ``x[0]`` of a batch of one selects, TF's strided slice reshapes."""
    x, out = node.inputs[0], node.outputs[0]
    data = rw.constant_value(node.inputs[1]) if len(node.inputs) == 2 else None
    if data is None or np.ndim(data) != 0 or not x.rank or rw.is_param(x) or \
            np.asarray(data).dtype.kind not in "iu":
        return False
    axis = node.attrs["axis"] % x.rank
    if x.shape[axis] != 1 or int(data) not in (0, -1):
        return False
    rw.replace(out, rw.emit("reshape", [x], {"shape": out.shape}, like=node, shape=out.shape))
    return True


def _gather_range(rw: Rewriter, node: Node) -> bool:
    """A gather of an evenly spaced run of constant indices along an axis of a computed
    value is a slice (XLNet's relative shift: ``index_select(x, 3, arange(klen))`` in
    PyTorch, ``x[:, :klen]`` in TF); a parameter's rows are a lookup (``lookups``)."""
    x, out = node.inputs[0], node.outputs[0]
    data = rw.constant_value(node.inputs[1]) if len(node.inputs) == 2 else None
    if data is not None and np.ndim(data) > 1 and x.rank and \
            np.asarray(data).dtype.kind in "iu":
        return _gather_all_reshaped(rw, node, np.asarray(data))
    if data is not None and np.ndim(data) == 1 and x.rank == 1 and not rw.is_param(x) and \
            np.asarray(data).dtype.kind in "iu" and _gather_all_reshaped(rw, node,
                                                                      np.asarray(data)):
        return True
    if data is None or rw.is_param(x) or np.ndim(data) != 1 or len(data) < 1 or \
            np.asarray(data).dtype.kind not in "iu" or not x.rank:
        return False
    axis = node.attrs["axis"] % x.rank
    ids = np.asarray(data, dtype=np.int64)
    ids = np.where(ids < 0, ids + x.shape[axis], ids)
    step = int(ids[1] - ids[0]) if len(ids) > 1 else 1
    if step < 1 or ids.min() < 0 or ids.max() >= x.shape[axis] or \
            not np.array_equal(ids, ids[0] + step * np.arange(len(ids))):
        return False
    attrs = {"axes": (axis,), "starts": (int(ids[0]),), "ends": (int(ids[-1]) + 1,),
             "steps": (step,)}
    rw.replace(out, rw.emit("slice", [x], attrs, like=node, shape=out.shape))
    return True


def _gather_all_reshaped(rw: Rewriter, node: Node, ids: np.ndarray) -> bool:
    """A gather of every index of an axis once, in order, laid out in several axes, is a
    reshape of that axis into them: a dynamo ONNX export reads HF's padding mask
    ``m[b, j]`` as the flattened mask gathered at ``arange(B·T)`` shaped ``[B, T]``."""
    x, out = node.inputs[0], node.outputs[0]
    axis = node.attrs["axis"] % x.rank
    n = x.shape[axis]
    if ids.size != n:
        return False
    flat = np.where(ids < 0, ids + n, ids).reshape(-1)
    if not np.array_equal(flat, np.arange(n)):
        return x.rank == 1 and _gathered_transpose(rw, node, flat)
    rw.replace(out, rw.emit("reshape", [x], {"shape": out.shape}, like=node, shape=out.shape))
    return True


def _radix(ids: np.ndarray) -> list[tuple[int, int]] | None:
    """``ids``, a permutation of 0..n-1, as digits (size, stride), innermost first, with
    ``ids[k]`` = Σ digitᵢ(k)·strideᵢ; None where no such digits give it."""
    digits: list[tuple[int, int]] = []
    while ids.size > 1:
        step = int(ids[1] - ids[0])
        size = 1
        while size < ids.size and ids[size] == ids[0] + size * step:
            size += 1
        if step <= 0 or ids.size % size:
            return None
        rows = ids.reshape(-1, size)
        if not np.array_equal(rows, rows[:, :1] + step * np.arange(size)):
            return None
        digits.append((size, step))
        ids = rows[:, 0]
    return digits if ids.size == 1 and ids[0] == 0 else None


def _gathered_transpose(rw: Rewriter, node: Node, ids: np.ndarray) -> bool:
    """A gather of every element of a flat tensor once, in the order of a transpose of it
    split into factors, is that reshape·transpose·reshape (TF's masked-image-modeling heads
    permute each example's channels with ``tf.gather(batch_dims=-1)`` before
    ``depth_to_space``, where PyTorch's ``PixelShuffle`` has one transpose)."""
    x, out = node.inputs[0], node.outputs[0]
    digits = _radix(ids)
    if digits is None or len(digits) < 2:
        return False
    by_stride = sorted(range(len(digits)), key=lambda k: -digits[k][1])
    expect = 1
    for k in reversed(by_stride):  # the strides of a split of x, innermost first
        if digits[k][1] != expect:
            return False
        expect *= digits[k][0]
    factors = tuple(digits[k][0] for k in by_stride)
    # output axes outermost first: digit k (innermost first) reads input factor by_stride's
    perm = tuple(by_stride.index(k) for k in reversed(range(len(digits))))
    split = rw.emit("reshape", [x], {"shape": factors}, like=node, shape=factors)
    moved = rw.emit("transpose", [split], {"perm": perm}, like=node,
                    shape=tuple(factors[p] for p in perm))
    rw.replace(out, rw.emit("reshape", [moved], {"shape": out.shape}, like=node,
                            shape=out.shape))
    return True


def _pieces_reversed(rw: Rewriter, node: Node) -> bool:
    """The pieces of one split into single entries along an axis, joined back last first
    along it, are the flip of the split value (PyTorch's ``a, b = y.unbind(0);
    torch.stack([b, a])`` against JAX's ``y[::-1]``)."""
    out = node.outputs[0]
    axis = node.attrs["axis"] % max(out.rank, 1)
    split = rw.producer(node.inputs[0])
    if split is None or split.op != "split" or len(node.inputs) < 2 or \
            split.attrs["axis"] % max(split.inputs[0].rank, 1) != axis or \
            list(node.inputs) != list(split.outputs)[::-1] or \
            set(split.attrs["sizes"]) != {1} or split.inputs[0].shape != out.shape:
        return False
    rw.replace(out, rw.emit("flip", [split.inputs[0]], {"axes": (axis,)}, like=node,
                            shape=out.shape))
    return True


def _copies(rw: Rewriter, node: Node) -> bool:
    """A concat of copies of one value of size one along its axis is that value expanded
    (RoFormer's interleaved rotary tables: PyTorch's ``stack([s, s], -1)``, TF's
    ``tf.repeat(s, 2, -1)``)."""
    x, out = node.inputs[0], node.outputs[0]
    axis = node.attrs["axis"] % max(1, x.rank)
    if len(node.inputs) < 2 or any(v is not x for v in node.inputs) or not x.rank or \
            x.shape[axis] != 1:
        return False
    rw.replace(out, rw.emit("expand", [x], {"shape": out.shape}, like=node, shape=out.shape))
    return True


# the least and the greatest value of each integer type (bool counts 0 and 1)
_INT_RANGE = {"bool": (0, 1), **{name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
                                 for name in ("uint8", "int8", "int16", "int32", "int64")}}
_INT_VIEWS = ("reshape", "transpose", "expand", "slice", "squeeze", "unsqueeze", "tile")


def _reversed_argsort(rw: Rewriter, node: Node) -> bool:
    """flip(n - 1 - argsort(flip(x))) along the sorted axis of n elements is x's argsort the
    other way, stably: equal values, met last index first in the flipped x, come out first
    index first (JAX's descending ``jnp.argsort``)."""
    sub = rw.producer(node.inputs[0])
    if sub is None or sub.op != "sub" or rw.uses(node.inputs[0]) != 1:
        return False
    sort = rw.producer(sub.inputs[1])
    if sort is None or sort.op != "argsort":
        return False
    axis = sort.attrs["axis"]
    inner = rw.producer(sort.inputs[0])
    n = sort.inputs[0].shape[axis]
    if tuple(a % node.inputs[0].rank for a in node.attrs["axes"]) != (axis,) or \
            inner is None or inner.op != "flip" or \
            tuple(a % inner.inputs[0].rank for a in inner.attrs["axes"]) != (axis,) or \
            rw.scalar(sub.inputs[0]) != n - 1:
        return False
    out = node.outputs[0]
    attrs = {**sort.attrs, "descending": not sort.attrs["descending"]}
    made = rw.emit("argsort", [inner.inputs[0]], attrs, like=sort, shape=out.shape,
                   dtype=sort.outputs[0].dtype)
    rw.replace(out, made if made.dtype == out.dtype else rw.emit(
        "cast", [made], {"dtype": out.dtype}, like=node, shape=out.shape, dtype=out.dtype))
    return True


def _monotone_under_argsort(rw: Rewriter, node: Node) -> bool:
    """argsort of a value that only orders its input's elements: of neg(x), x's argsort the
    other way (equal values stay equal: a stable sort keeps them in index order either
    way); of an integer x plus or minus a scalar, or of an integer cast, that holds every
    value x can take (``_int_range``), x's. TF sorts ascending by top_k of -x, of -x - 1
    for integers."""
    x = node.inputs[0]
    made = rw.producer(x)
    if made is None:
        return False
    attrs = dict(node.attrs)
    if made.op == "neg":
        attrs["descending"] = not attrs["descending"]
    elif made.op in ("add", "sub", "cast") and x.dtype in _INT_RANGE and \
            made.inputs[0].dtype in _INT_RANGE and made.inputs[0].dtype != "bool" and \
            (made.op == "cast" or rw.scalar(made.inputs[1]) is not None) and \
            _int_range(rw, x) is not None and _int_range(rw, made.inputs[0]) is not None:
        pass  # (the result's range known: nothing wrapped)
    else:
        return False
    source, out = made.inputs[0], node.outputs[0]
    rw.replace(out, rw.emit("argsort", [source], attrs, like=node, shape=out.shape,
                            dtype=out.dtype))
    return True


def _exact_integer_cast(rw: Rewriter, node: Node) -> bool:
    """A cast from one integer type to another that holds every value its input can take
    (proved from the ops that compute it: ``_int_range``) changes no value: it is dropped.
    Position ids are counted through such casts in one framework and not in another
    (PyTorch's RoBERTa-style ``cumsum(mask.int()).type_as(mask) * mask`` then ``.long()``,
    against TF's one integer type throughout). A cast whose input's range is not known (token
    ids, read from an input) stays."""
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype == "bool" or x.dtype not in _INT_RANGE or out.dtype not in _INT_RANGE:
        return False
    known = _int_range(rw, x)
    least, most = _INT_RANGE[out.dtype]
    if known is None or known[0] < least or known[1] > most:
        return False
    rw.replace(out, x)
    return True


def _int_range(rw: Rewriter, value: Value, depth: int = 12) -> tuple[int, int] | None:
    """The least and the greatest value an integer ``value`` can take, from the ops that
    compute it (booleans, constants, casts, counts, sums, products, bounds and views); None
    where one of them is not bounded so (an input)."""
    if value.dtype == "bool":
        return 0, 1
    if value.dtype not in _INT_RANGE or depth == 0:
        return None
    data = rw.constant_value(value)
    if data is not None:
        return (int(data.min()), int(data.max())) if data.size else None
    node = rw.producer(value)
    if node is None:
        return None
    ranges = [_int_range(rw, v, depth - 1) if v.dtype in _INT_RANGE else None
              for v in node.inputs]
    first = ranges[0] if ranges else None
    op = node.op
    if op == "cast" or op in _INT_VIEWS:
        found = first
    elif op == "cumsum" and first is not None:
        n = node.inputs[0].shape[node.attrs["axis"]] if node.inputs[0].rank else 1
        found = min(first[0], n * first[0]), max(first[1], n * first[1])
    elif op in ("add", "sub", "mul", "minimum", "maximum") and len(ranges) == 2 and \
            None not in ranges:
        (a, b), (c, d) = ranges  # type: ignore[misc]
        if op == "add":
            found = a + c, b + d
        elif op == "sub":
            found = a - d, b - c
        elif op == "mul":
            corners = (a * c, a * d, b * c, b * d)
            found = min(corners), max(corners)
        elif op == "minimum":
            found = min(a, c), min(b, d)
        else:
            found = max(a, c), max(b, d)
    elif op == "neg" and first is not None:
        found = -first[1], -first[0]
    elif op in ("argmax", "argmin", "argsort"):  # positions along the axis
        shape = node.inputs[0].shape
        found = 0, max(0, (shape[node.attrs["axis"]] if shape else 1) - 1)
    elif op == "abs" and first is not None:
        low = 0 if first[0] <= 0 <= first[1] else min(abs(first[0]), abs(first[1]))
        found = low, max(abs(first[0]), abs(first[1]))
    elif op == "where" and len(ranges) == 3 and None not in ranges[1:]:
        found = min(ranges[1][0], ranges[2][0]), max(ranges[1][1], ranges[2][1])  # type: ignore[index]
    elif op == "concat" and ranges and None not in ranges:
        found = min(r[0] for r in ranges), max(r[1] for r in ranges)  # type: ignore[index]
    else:
        return None
    if found is None:
        return None
    least, most = _INT_RANGE[value.dtype]  # the op's own type holds it, or it wraps
    return found if least <= found[0] and found[1] <= most else None


def _cast_first(rw: Rewriter, node: Node) -> bool:
    """A cast of a reshaped or expanded boolean that nothing else reads is the cast, then
    the reshape or expand: one order for both (PyTorch's ``mask.unsqueeze(-1).to(dtype)``
    against TF's ``expand_dims(cast(mask), -1)``, Flaubert's hidden-state mask); the
    values are the same, element for element. (Integer attention masks keep the order
    they are written in: the mask forms ``input_masks`` reads are written so.)"""
    view = rw.producer(node.inputs[0])
    if view is None or view.op not in ("reshape", "expand") or rw.uses(node.inputs[0]) != 1 \
            or view.inputs[0].dtype != "bool":
        return False
    source, out = view.inputs[0], node.outputs[0]
    cast = rw.emit("cast", [source], dict(node.attrs), like=node, shape=source.shape,
                   dtype=out.dtype)
    rw.replace(out, rw.emit(view.op, [cast], dict(view.attrs), like=view, shape=out.shape,
                            dtype=out.dtype))
    return True


def _reshape_around_unary(rw: Rewriter, node: Node) -> bool:
    """reshape(f(reshape(x))) with f an elementwise op of one operand (an activation) read
    only there: f of x, reshaped once (exact: f acts on each element alone). TF's DeBERTa
    runs its 1-D conv as a 2-D one of height one and applies the activation before the
    squeeze that drops the height; PyTorch's applies it to the 1-D conv's output."""
    unary = rw.producer(node.inputs[0])
    if unary is None or len(unary.inputs) != 1 or len(unary.outputs) != 1 or \
            get_spec(unary.op).category not in ("elementwise", "activation") or \
            rw.uses(node.inputs[0]) != 1:
        return False
    inner = rw.producer(unary.inputs[0])
    if inner is None or inner.op != "reshape" or rw.uses(unary.inputs[0]) != 1:
        return False
    x = inner.inputs[0]
    moved = rw.emit(unary.op, [x], dict(unary.attrs), like=unary, shape=x.shape,
                    dtype=unary.outputs[0].dtype)
    shape = node.outputs[0].shape
    rw.replace(node.outputs[0], moved if x.shape == shape else rw.emit(
        "reshape", [moved], {"shape": shape}, like=node, shape=shape))
    return True


def _reshape_chain(rw: Rewriter, node: Node) -> bool:
    """squeeze and unsqueeze are reshapes; a reshape of a reshape is one reshape."""
    inner = rw.producer(node.inputs[0])
    if inner is None or inner.op != "reshape":
        if node.op == "reshape":
            return False
        shape = node.outputs[0].shape
        rw.replace(node.outputs[0], rw.emit("reshape", [node.inputs[0]], {"shape": shape},
                                            like=node, shape=shape))
        return True
    source = inner.inputs[0]
    shape = node.outputs[0].shape
    if source.shape == shape:
        rw.replace(node.outputs[0], source)
    else:
        rw.replace(node.outputs[0], rw.emit("reshape", [source], {"shape": shape}, like=node,
                                            shape=shape))
    return True


def _axis_groups(source: tuple[int, ...], target: tuple[int, ...]
                 ) -> list[tuple[list[int], list[int]]] | None:
    """The runs of ``source`` and ``target`` axes a reshape maps onto each other (equal
    products, shortest runs first); None where the sizes never meet."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(source) or j < len(target):
        gi, gj, ps, pt = [], [], 1, 1
        if i < len(source):
            gi.append(i)
            ps, i = ps * source[i], i + 1
        if j < len(target):
            gj.append(j)
            pt, j = pt * target[j], j + 1
        while ps != pt:
            if ps < pt and i < len(source):
                gi.append(i)
                ps, i = ps * source[i], i + 1
            elif pt < ps and j < len(target):
                gj.append(j)
                pt, j = pt * target[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    return groups


def _reshape_after_elementwise(rw: Rewriter, node: Node) -> bool:
    """reshape(op(reshape(y), c)), c fixed and of size 1 along every axis the inner reshape
    merges or splits: reshape(reshape(op(y, c'))), c' laid out over y's axes, the reshapes
    then one (JAX's dot_general with batch axes and nothing contracted, Flax RoFormer's
    ``einsum("bslh,...sh->bslh", x, cos)``, is ``x·cos`` with the batch axes merged around
    it)."""
    out = node.outputs[0]
    readers = rw.graph.consumers(out)
    if len(readers) != 1 or readers[0].op != "reshape" or out in rw.graph.outputs:
        return False  # only between two reshapes, as the lowering writes it: elsewhere the
        # reshape stays where layers' forms expect it (a bias added after a matmul's)
    for slot, (r_value, c) in enumerate((node.inputs, node.inputs[::-1])):
        r = rw.producer(r_value)
        if r is None or r.op != "reshape" or rw.uses(r_value) != 1 or \
                r_value.shape != out.shape or not rw.is_fixed(c) or c.rank > out.rank:
            continue
        y = r.inputs[0]
        t = rw.producer(y)
        if t is None or t.op != "transpose" or readers[0].outputs[0].shape != y.shape:
            continue  # the lowering's form: batch axes moved first, merged, then split back
        groups = _axis_groups(y.shape, r_value.shape)
        if groups is None or all(len(gi) == 1 and len(gj) == 1 for gi, gj in groups):
            continue
        full = (1,) * (out.rank - c.rank) + c.shape
        laid = [1] * y.rank
        for gi, gj in groups:
            if len(gi) == 1 and len(gj) == 1:
                laid[gi[0]] = full[gj[0]]
            elif any(full[a] != 1 for a in gj):
                break
        else:
            c2 = rw.emit("reshape", [c], {"shape": tuple(laid)}, like=node, shape=tuple(laid))
            operands = [y, c2] if slot == 0 else [c2, y]
            inner = rw.emit(node.op, operands, dict(node.attrs), like=node, shape=y.shape,
                            dtype=out.dtype)
            rw.replace(out, rw.emit("reshape", [inner], {"shape": out.shape}, like=r,
                                    shape=out.shape))
            return True
    return False


def _unit_axes_only(source: tuple[int, ...], target: tuple[int, ...], keep: int) -> bool:
    """Whether a reshape of ``source`` to ``target`` only adds or drops size-1 axes after
    the first ``keep``."""
    return source[:keep] == target[:keep] and \
        [n for n in source[keep:] if n != 1] == [n for n in target[keep:] if n != 1]


def _reshape_through_unary(rw: Rewriter, node: Node) -> bool:
    """reshape(f(reshape(x))), f a chain of elementwise ops of one operand (scalars aside)
    each read only by the next, is f(x) reshaped once; and where the chain starts at a
    ``group_norm`` of x with size-1 axes added or dropped after its channels, at the norm
    of x itself (Keras' ``GroupNormalization(groups=-1)`` normalizes [N, H, W, C, 1], and an
    activation before an ``UpSampling2D`` keeps that axis until the upsampling's reshapes
    drop it)."""
    chain: list[Node] = []
    value = node.inputs[0]
    while (p := rw.producer(value)) is not None and rw.uses(value) == 1 and \
            len(p.outputs) == 1 and get_spec(p.op).category in ("elementwise", "activation") \
            and p.inputs and p.inputs[0].shape == value.shape and \
            all(v.rank == 0 for v in p.inputs[1:]):
        chain.insert(0, p)
        value = p.inputs[0]
    start = rw.producer(value)
    if not chain and (start is None or start.op != "group_norm"):
        return False  # two reshapes in a row merge elsewhere
    if start is None or rw.uses(value) != 1 or start.op not in ("reshape", "group_norm"):
        return False
    if start.op == "reshape":
        x = start.inputs[0]
    else:
        inner = rw.producer(start.inputs[0])
        if inner is None or inner.op != "reshape" or rw.uses(start.inputs[0]) != 1:
            return False
        x = inner.inputs[0]
        if x.rank < 3 or not _unit_axes_only(tuple(x.shape), tuple(value.shape), 2):
            return False
        x = rw.emit("group_norm", [x, *start.inputs[1:]], dict(start.attrs), like=start,
                    shape=x.shape, dtype=value.dtype)
    for op in chain:
        x = rw.emit(op.op, [x if v is value else v for v in op.inputs], dict(op.attrs),
                    like=op, shape=x.shape, dtype=op.outputs[0].dtype)
        value = op.outputs[0]
    out = node.outputs[0]
    rw.replace(out, x if x.shape == out.shape else rw.emit(
        "reshape", [x], {"shape": out.shape}, like=node, shape=out.shape))
    return True


def _neutral(rw: Rewriter, node: Node) -> bool:
    """x·1, x/1, x+0, x-0 (an exporter's √1 attention scale, a head mask of ones, an
    attention mask of zeros) are x, expanded where the constant broadcasts it, cast where
    it promotes it."""
    a, b = node.inputs
    if node.attrs.get("rounding"):
        return False  # x // 1 floors x
    unit = 1.0 if node.op in ("mul", "div") else 0.0
    out = node.outputs[0]
    for keep, other in ((a, b), (b, a)) if node.op in ("mul", "add") else ((a, b),):
        if rw.uniform(other) != unit or keep.dtype == "bool":
            continue
        if keep.dtype != out.dtype:  # the constant promotes x (ESM's int32 positions plus
            # an int64 padding index of 0): x cast, as the promotion does
            keep = rw.emit("cast", [keep], {"dtype": out.dtype}, like=node,
                           shape=keep.shape, dtype=out.dtype)
        if keep.shape == out.shape:
            rw.replace(out, keep)
            return True
        # the constant only broadcasts x (TorchScript's T5 export adds a mask of zeros,
        # [B, 1, 1, T], to the [H, T, T] position bias): x expanded, which the readers'
        # broadcasting drops again
        rw.replace(out, rw.emit("expand", [keep], {"shape": out.shape}, like=node,
                                shape=out.shape))
        return True
    return False


def _slice_chain(rw: Rewriter, node: Node) -> bool:
    """slice(slice(x, A), B) over disjoint axes is one slice over A and B, axes sorted
    (PyTorch's ``x[:, 0::2, 0::2]`` is two slices, TF's strided slice one; an export that
    slices x[:, 0::2] once for x[:, 0::2, 0::2] and x[:, 0::2, 1::2] too, the inner slice
    then read by nothing else)."""
    inner = rw.producer(node.inputs[0])
    if inner is None or inner.op != "slice":
        return False
    keys = ("axes", "starts", "ends", "steps")
    rows = list(zip(*(inner.attrs[k] for k in keys))) + list(zip(*(node.attrs[k] for k in keys)))
    if len({r[0] for r in rows}) != len(rows):
        return False
    rows.sort()
    attrs = {k: tuple(r[i] for r in rows) for i, k in enumerate(keys)}
    rw.replace(node.outputs[0], rw.emit("slice", [inner.inputs[0]], attrs, like=node,
                                        shape=node.outputs[0].shape))
    return True


def _slice_of_concat(rw: Rewriter, node: Node) -> bool:
    """A slice along a concat's axis that falls within one of its operands is a slice of
    that operand, or the operand itself (a point's k-th index read back from the index
    vectors stacked for a ``gather_nd``)."""
    inner = rw.producer(node.inputs[0])
    if inner is None or inner.op != "concat" or len(node.attrs["axes"]) != 1 or \
            node.attrs["steps"] != (1,):
        return False
    (axis,), (start,), (end,) = node.attrs["axes"], node.attrs["starts"], node.attrs["ends"]
    if axis != inner.attrs["axis"] % inner.outputs[0].rank or start < 0 or end < 0:
        return False
    offset = 0
    for part in inner.inputs:
        size = part.shape[axis]
        if offset <= start and min(end, inner.outputs[0].shape[axis]) <= offset + size:
            out = node.outputs[0]
            if out.shape == part.shape:
                rw.replace(out, part)
            else:
                rw.replace(out, rw.emit("slice", [part], {
                    "axes": (axis,), "starts": (start - offset,), "ends": (end - offset,),
                    "steps": (1,)}, like=node, shape=out.shape))
            return True
        offset += size
    return False


def _constant_condition(rw: Rewriter, node: Node) -> bool:
    """where(c, a, b) with c a constant, true everywhere (false everywhere): a (b), where
    that already has the output's shape and dtype (Flax's wav2vec2 masks its features with
    a mask built from an all-ones attention mask)."""
    cond = rw.constant_value(node.inputs[0])
    if cond is None or not (cond.all() or not cond.any()):
        return False
    pick, out = node.inputs[1 if cond.all() else 2], node.outputs[0]
    if pick.shape != out.shape or pick.dtype != out.dtype:
        return False
    rw.replace(out, pick)
    return True


def _indicator(rw: Rewriter, node: Node) -> bool:
    """where(c, 1, 0) is c cast to numbers (a one-hot written as a select, TF's
    ``one_hot``, against one written as a scatter of ones into zeros, PyTorch's)."""
    cond, one, zero = node.inputs
    out = node.outputs[0]
    if cond.shape != out.shape or out.dtype == "bool" or rw.uniform(one) != 1 or \
            rw.uniform(zero) != 0:
        return False
    rw.replace(out, rw.emit("cast", [cond], {"dtype": out.dtype}, like=node, shape=out.shape))
    return True


def _index_wrap(rw: Rewriter, node: Node) -> bool:
    """where(i < 0, i + N, i) feeding only gathers over N rows: they wrap negative indices
    themselves, so the select changes nothing (Keras' Embedding writes it)."""
    cond, wrapped, i = node.inputs
    cmp_node, add_node = rw.producer(cond), rw.producer(wrapped)
    if cmp_node is None or cmp_node.op != "less" or add_node is None or add_node.op != "add":
        return False
    if cmp_node.inputs[0] is not i or rw.scalar(cmp_node.inputs[1]) != 0:
        return False
    known = _int_range(rw, i)
    if known is not None and known[0] >= 0:  # never negative (an argmax, an argsort): no wrap
        rw.replace(node.outputs[0], i)
        return True
    others = [v for v in add_node.inputs if v is not i]
    n = rw.scalar(others[0]) if len(others) == 1 else None
    users = rw.graph.consumers(node.outputs[0])
    if n is None or not users:
        return False
    for user in users:
        rows = {"embedding": lambda u: u.inputs[1].shape[0],
                "gather": lambda u: u.inputs[0].shape[u.attrs["axis"]]}.get(user.op)
        if rows is None or user.inputs[-1 if user.op == "gather" else 0] is not node.outputs[0] \
                or rows(user) != n:
            return False
    rw.replace(node.outputs[0], i)
    return True


class DropIdentitiesPass:
    """See the module docstring."""

    name = "drop-identities"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
