"""Raise written-out normalizations: mean/var/rsqrt over trailing axes -> layer_norm (or
rms_norm) with its eps, scale and bias; moments over every axis but the batch and the
channels -> group_norm with a group per channel; inference batch-norm arithmetic with
per-channel mean, variance, scale and bias -> batch_norm with its eps (channels moved to
axis 1).

Requires: a verified graph. Ensures: each rewrite is proved on random inputs and random
parameter values in float64 (``regions.agrees``); eps is the constant the model uses, so a
different eps survives as the attribute, never vanishes.
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import is_float
from specgraph.passes.cones import arithmetic_cone, inputs_to_try
from specgraph.passes.regions import agrees, layout_of, params_in, region, scalar_constants
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseNormsPass"]


def _nice(eps: float) -> float:
    """eps as the model's author wrote it (float32 constants hold 1e-5 as 9.99999974e-06)."""
    return float(f"{eps:.7g}")


def _squeezed(v: Value) -> tuple[int, ...]:
    shape = list(v.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    return tuple(shape)


def _eps_candidates(rw: Rewriter, nodes: list[Node]) -> list[float]:
    return [e for e in scalar_constants(rw, nodes) if 0 < e < 0.1]


def _param_source(rw: Rewriter, value: Value) -> Value:
    """The parameter behind a reshape/expand that lays it out for broadcasting."""
    node = rw.producer(value)
    while node is not None and node.op in ("reshape", "expand"):
        value = node.inputs[0]
        node = rw.producer(value)
    return value


def _try_layer_norm(rw: Rewriter, node: Node, x: Value, nodes: list[Node]) -> bool:
    axes = {n.attrs["axes"] for n in nodes if n.op in ("reduce_mean", "reduce_var")}
    if len(axes) != 1:
        return False
    (reduced,) = axes
    if reduced is None:
        return False
    axis = _trailing_from(reduced, x.shape)
    if axis is None:
        return False
    norm_shape = x.shape[axis:]
    params = [p for p in params_in(rw, nodes) if _squeezed(p) == norm_shape and p is not x]
    eps_list = _eps_candidates(rw, nodes)
    for op, eps in itertools.product(("layer_norm", "rms_norm"), eps_list):
        for chosen in _assignments(params, 1 if op == "rms_norm" else 2):
            if _raise(rw, node, op, x, nodes, chosen, {"axis": axis, "eps": _nice(eps)},
                      norm_shape):
                return True
    return False


def _trailing_from(reduced: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The first of the trailing axes ``reduced`` covers, size-1 axes aside (a reduction
    over one changes nothing): tf_keras' fused LayerNormalization (epsilon above 1e-5,
    its default 1e-3 included) normalizes ``[1, rows, features, 1]`` over axes 0, 2 and 3,
    a layer norm over the features. None if they are not trailing."""
    if any(not 0 <= a < len(shape) for a in reduced):
        return None  # reduced over another rank (a group norm's [B, G, C/G, H, W])
    real = [a for a in reduced if shape[a] != 1]
    if not real:
        return None
    first = min(real)
    if all(a in reduced or shape[a] == 1 for a in range(first, len(shape))):
        return first
    return None


def _assignments(params: list[Value], most: int) -> list[tuple[Value | None, ...]]:
    """(scale, bias) choices: every ordered pick of the params, None where absent."""
    slots = [None, *params]
    out = []
    for combo in itertools.product(slots, repeat=most):
        used = [c for c in combo if c is not None]
        if len(used) == len(set(used)):
            out.append(combo)
    out.sort(key=lambda c: -sum(v is not None for v in c))  # prefer the affine form
    return out


def _raise(rw: Rewriter, node: Node, op: str, x: Value, nodes: list[Node],
           chosen: tuple[Value | None, ...], attrs: dict[str, Any],
           norm_shape: tuple[int, ...]) -> bool:
    y = node.outputs[0]
    used = [p for p in params_in(rw, nodes) if p is not x]  # x itself may be a weight
    flags = {"scale": chosen[0] is not None}
    if op == "layer_norm":
        flags["bias"] = chosen[1] is not None
    present = [c for c in chosen if c is not None]
    if len(present) != len(used):
        return False  # every parameter of the region must have a role
    spec = get_spec(op)
    full = spec.normalize_attrs({**attrs, **flags})

    def candidate(env):
        wb = [np.reshape(env[p], norm_shape) for p in present]
        return spec.reference(env[x], *wb, **full)

    free = [x, *used]
    claim = (op, full, norm_shape, tuple(free.index(p) for p in present))
    rows = tuple(range(attrs["axis"]))  # the norm computes each row over the trailing axes
    if not agrees(rw, nodes, y, free, candidate, claim=claim, batch={y: rows, x: rows}):
        return False
    sources = [_param_source(rw, p) for p in present]
    inputs = [x]
    for src, p in zip(sources, present):
        inputs.append(src if src.shape == norm_shape else rw.emit(
            "reshape", [p], {"shape": norm_shape}, like=node, shape=norm_shape))
    rw.replace(y, rw.emit(op, inputs, full, like=node, shape=y.shape))
    return True


def _read_outside(rw: Rewriter, nodes: list[Node], y: Value) -> list[Value]:
    """Values of ``y``'s shape made inside the cone that ops outside it read too, nearest
    ``y`` first: a residual stream the norm reads and the shortcut adds (Keras ResNetV2's
    pre-activation batch norm, whose cone walks up the stream through earlier blocks)."""
    inside = {id(n) for n in nodes}
    return [n.outputs[0] for n in reversed(nodes) if len(n.outputs) == 1 and
            n.outputs[0] is not y and n.outputs[0].shape == y.shape and
            any(id(u) not in inside for u in rw.graph.consumers(n.outputs[0]))][:4]


def _try_batch_norm(rw: Rewriter, node: Node, x: Value, nodes: list[Node]) -> bool:
    if any(n.op.startswith("reduce") for n in nodes) or x.rank < 2:
        return False
    if not any(n.op in ("rsqrt", "sqrt") for n in nodes):
        return False
    params = params_in(rw, nodes)
    if len(params) not in (2, 3, 4) or any(len(_squeezed(p)) != 1 for p in params):
        return False
    c = _squeezed(params[0])[0]
    if any(_squeezed(p) != (c,) for p in params):
        return False
    y = node.outputs[0]
    for axis in [a for a in range(1, x.rank) if x.shape[a] == c]:
        perm = tuple([0, axis] + [i for i in range(1, x.rank) if i != axis])
        inv = tuple(perm.index(i) for i in range(x.rank))
        for eps in _eps_candidates(rw, nodes):
            for roles in itertools.permutations(params):
                for flags in _affine_flags(len(roles)):
                    if _batch_norm_agrees(rw, nodes, y, x, roles, eps, perm, inv, flags):
                        _emit_batch_norm(rw, node, x, roles, _nice(eps), perm, inv, flags)
                        return True
    return False


def _affine_flags(count: int) -> tuple[tuple[bool, bool], ...]:
    """The (scale, bias) a batch norm of ``count`` parameters may have: mean and variance
    alone, with both, or with one of them (Keras' ``BatchNormalization(scale=False)``,
    every one of InceptionV3's: a bias and no scale; the proof tells which)."""
    return {2: ((False, False),), 3: ((False, True), (True, False)),
            4: ((True, True),)}.get(count, ())


def _batch_norm_agrees(rw, nodes, y, x, roles, eps, perm, inv, flags) -> bool:
    attrs = get_spec("batch_norm").normalize_attrs(
        {"eps": eps, "scale": flags[0], "bias": flags[1]})
    spec = get_spec("batch_norm")

    def candidate(env):
        xt = np.transpose(env[x], perm)
        out = spec.reference(xt, *[np.reshape(env[p], -1) for p in roles], **attrs)
        return np.transpose(out, inv)

    # free is [x, *roles]: positions name the roles; every axis but the channel is slicewise
    others = tuple(a for a in range(x.rank) if a != perm[1])
    return agrees(rw, nodes, y, [x, *roles], candidate, positive=roles,
                  claim=("batch_norm", attrs, perm, inv), batch={y: others, x: others})


def _emit_batch_norm(rw, node, x, roles, eps, perm, inv, flags) -> None:
    y = node.outputs[0]
    attrs = {"eps": eps, "scale": flags[0], "bias": flags[1]}
    sources = []
    for p in roles:
        src = _param_source(rw, p)
        if src.rank != 1:
            src = rw.emit("reshape", [p], {"shape": (src.size,)}, like=node, shape=(src.size,))
        sources.append(src)
    xt = x
    if perm != tuple(range(x.rank)):
        xt = rw.emit("transpose", [x], {"perm": perm}, like=node,
                     shape=tuple(x.shape[i] for i in perm))
    out = rw.emit("batch_norm", [xt, *sources], attrs, like=node, shape=xt.shape)
    if perm != tuple(range(x.rank)):
        out = rw.emit("transpose", [out], {"perm": inv}, like=node, shape=y.shape)
    rw.replace(y, out)


def _try_instance_norm(rw: Rewriter, node: Node, x: Value, nodes: list[Node]) -> bool:
    """Moments over every axis but the batch and one channel axis, a per-channel scale and
    bias: a group norm with a group per channel (TF's Wav2Vec2 writes it with
    ``tf.nn.moments`` and ``tf.nn.batch_normalization`` on channels-last features where
    PyTorch calls ``nn.GroupNorm(C, C)``), its channels moved to axis 1 for it."""
    axes = {n.attrs["axes"] for n in nodes if n.op in ("reduce_mean", "reduce_var")}
    if len(axes) != 1 or x.rank < 3:
        return False
    (reduced,) = axes
    kept = [a for a in range(x.rank) if reduced is not None and a not in reduced]
    if reduced is None or len(kept) != 2 or kept[0] != 0 or max(reduced) >= x.rank:
        return False
    return _raise_group_norm(rw, node, x, nodes, kept[1], x.shape[kept[1]])


def _raise_group_norm(rw: Rewriter, node: Node, x: Value, nodes: list[Node], axis: int,
                      groups: int, out: tuple[int, ...] | None = None) -> bool:
    """The region ``nodes`` (ending at ``node``) as ``group_norm`` of ``groups`` groups of
    ``x`` with its channels at ``axis`` moved to axis 1, where proved on random values
    (``out``: the region's output is ``x``'s layout permuted so)."""
    c = x.shape[axis]
    params = params_in(rw, nodes)
    if len(params) not in (0, 2) or any(p.size != c for p in params):
        return False
    y = node.outputs[0]
    perm = tuple([0, axis] + [i for i in range(1, x.rank) if i != axis])
    inv = tuple(perm.index(i) for i in range(x.rank))
    if out is not None:  # back to x's layout, then to the output's
        inv = tuple(inv[i] for i in out)
    spec = get_spec("group_norm")
    for eps in _eps_candidates(rw, nodes):
        for roles in itertools.permutations(params):
            attrs = spec.normalize_attrs({"num_groups": groups, "eps": _nice(eps),
                                          "scale": bool(roles), "bias": bool(roles)})

            def candidate(env, roles=roles, attrs=attrs):
                out = spec.reference(np.transpose(env[x], perm),
                                     *[np.reshape(env[p], -1) for p in roles], **attrs)
                return np.transpose(out, inv)

            if not agrees(rw, nodes, y, [x, *roles], candidate,
                          claim=("group_norm", attrs, perm), batch={y: (0,), x: (0,)}):
                continue
            sources = []
            for p in roles:
                src = _param_source(rw, p)
                sources.append(src if src.shape == (c,) else rw.emit(
                    "reshape", [p], {"shape": (c,)}, like=node, shape=(c,)))
            xt = x if perm == tuple(range(x.rank)) else rw.emit(
                "transpose", [x], {"perm": perm}, like=node,
                shape=tuple(x.shape[i] for i in perm))
            out = rw.emit("group_norm", [xt, *sources], attrs, like=node, shape=xt.shape)
            if inv != tuple(range(x.rank)):
                out = rw.emit("transpose", [out], {"perm": inv}, like=node, shape=y.shape)
            rw.replace(y, out)
            return True
    return False


def _broadcast_axes(other: Value, rank: int) -> tuple[int, ...]:
    """Axes of a rank-``rank`` tensor that ``other`` varies along when broadcast to it."""
    full = (1,) * (rank - other.rank) + other.shape
    return tuple(i for i, s in enumerate(full) if s != 1)


def _fold_affine(rw: Rewriter, node: Node) -> bool:
    """norm(x)·γ + β written after a norm without them: the norm's own scale and bias."""
    if node.op not in ("add", "mul") or len(node.inputs) != 2:
        return False
    for norm_value, other in (node.inputs, node.inputs[::-1]):
        norm = rw.producer(norm_value)
        if norm is None or norm.op not in ("layer_norm", "rms_norm", "batch_norm",
                                           "group_norm") or \
                rw.uses(norm_value) != 1 or other.rank > norm_value.rank:
            continue
        slot = "bias" if node.op == "add" else "scale"
        if slot not in norm.attrs or norm.attrs[slot] or (slot == "scale" and
                                                         norm.attrs.get("bias")):
            continue
        rank = norm_value.rank
        if norm.op in ("batch_norm", "group_norm"):  # per channel (axis 1)
            norm_axes, first = (1,), 3 if norm.op == "batch_norm" else 1
        else:
            norm_axes, first = tuple(range(norm.attrs["axis"], rank)), 1
        norm_shape = tuple(norm_value.shape[a] for a in norm_axes)
        source = _param_source(rw, other)
        varies = _broadcast_axes(other, rank)
        if not rw.is_param(source) or not set(varies) <= set(norm_axes) or \
                source.size != prod(norm_shape) or len(varies) != len(
                    [s for s in norm_shape if s != 1]):
            continue
        if source.shape != norm_shape:
            source = rw.emit("reshape", [other], {"shape": norm_shape}, like=node,
                             shape=norm_shape)
        inputs = list(norm.inputs)
        inputs.insert(first if slot == "scale" else len(inputs), source)
        attrs = {**norm.attrs, slot: True}
        rw.replace(node.outputs[0], rw.emit(norm.op, inputs, attrs, like=norm,
                                            shape=node.outputs[0].shape))
        return True
    return False


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op == "reshape" and (_grouped_back(rw, node) or _regroup(rw, node)):
        return True
    if len(node.outputs) != 1 or get_spec(node.op).category not in ("elementwise", "activation"):
        return False
    if _fold_affine(rw, node):
        return True
    if not is_float(node.outputs[0].dtype):
        return False
    rw.keep(node)
    cone = arithmetic_cone(rw, node.outputs[0], limit=20) or arithmetic_cone(
        rw, node.outputs[0], limit=20, stop_at_shared=True) or arithmetic_cone(
        rw, node.outputs[0], limit=20, nearest=True)  # past a long residual stream, or a
    # long chain of arithmetic before the norm's input
    if cone is None:
        return True
    free, nodes = cone
    if len(nodes) < 3:
        return True
    for x in inputs_to_try(free, nodes, node.outputs[0]) + _normed_weights(
            rw, free, nodes, node.outputs[0]) + _read_outside(rw, nodes, node.outputs[0]):
        inner = region(rw, node.outputs[0], [x])
        if inner is None or len(inner) < 3:
            continue
        if any(n.op in ("reduce_mean", "reduce_var") for n in inner):
            if _try_layer_norm(rw, node, x, inner) or _try_instance_norm(rw, node, x, inner):
                return True
        elif _try_batch_norm(rw, node, x, inner):
            return True
    y = node.outputs[0]
    broadcast_back = any(v.shape != y.shape and (p := rw.producer(v)) is not None and
                         p.op in ("reshape", "expand") for v in free)
    for x in free if broadcast_back else ():  # moments of a grouped reshape, broadcast
        if x.shape != y.shape:  # back: the cone stops there
            continue
        inner = region(rw, node.outputs[0], [x])
        if inner is not None and _try_group_norm(rw, node, x, inner):
            return True
    return True


def _regroup(rw: Rewriter, node: Node) -> bool:
    """reshape(norm of each group of ``x``, back to ``x``'s shape), the groups ``x``'s
    channels cut into G runs (PyTorch's export of ``nn.GroupNorm``: a reshape to [B, G, -1],
    an InstanceNormalization of unit scale and zero bias, a reshape back, then the
    per-channel scale and bias): ``group_norm`` of ``x`` in G groups, which takes the scale
    and bias after it (``_fold_affine``)."""
    y = node.outputs[0]
    norm = rw.producer(node.inputs[0])
    if norm is None or norm.op != "group_norm" or rw.uses(node.inputs[0]) != 1:
        return False
    grouped = norm.inputs[0]
    split = rw.producer(grouped)
    if split is None or split.op != "reshape" or rw.uses(grouped) != 1:
        return False
    x = split.inputs[0]
    groups = grouped.shape[1] if grouped.rank >= 2 else 0
    if x.shape != y.shape or x.rank < 3 or grouped.shape[0] != x.shape[0] or \
            norm.attrs["num_groups"] != groups or not groups or x.shape[1] % groups:
        return False
    for value, unit in zip(norm.inputs[1:], (1.0, 0.0)):
        if rw.uniform(value) != unit:  # an affine of its own (per group): another norm
            return False
    attrs = {"num_groups": groups, "eps": norm.attrs["eps"], "scale": False, "bias": False}
    rw.replace(y, rw.emit("group_norm", [x], attrs, like=norm, shape=y.shape))
    return True


def _grouped_back(rw: Rewriter, node: Node) -> bool:
    """A reshape back from groups at the end of a norm of a grouped reshape (Keras'
    ``GroupNormalization`` normalizes ``x`` reshaped to [..., G, C/G], applies its scale
    and bias there, and reshapes back): ``group_norm`` of the ``x`` the groups were made
    from, laid out as the output is, where proved on random values."""
    y = node.outputs[0]
    last = rw.producer(node.inputs[0])  # the affine's add (or its scale's product)
    if last is None or last.op not in ("add", "mul") or not is_float(y.dtype):
        return False
    cone = arithmetic_cone(rw, node.inputs[0], limit=20)
    if cone is None:
        return False
    # the grouped value: where the cone starts, or a split into groups of one that the
    # cone walks through as a view (one group: [B, H, W, 1, C])
    grouped = cone[0] + [n.outputs[0] for n in cone[1] if n.op == "reshape"
                         and n.outputs[0].rank == n.inputs[0].rank + 1]
    for g in grouped:
        chain, v = [], g  # back from the grouped value through its layout ops to the
        split = None      # reshape that made the groups: x is what it split
        while split is None and (p := rw.producer(v)) is not None and \
                p.op in ("reshape", "transpose") and len(chain) < 4:
            chain.insert(0, p)
            v = p.inputs[0]
            if p.op == "reshape" and p.outputs[0].rank == v.rank + 1:
                split = p
        x = v
        if split is None or x.rank < 3 or x.size != y.size or \
                sorted(x.shape) != sorted(y.shape):
            continue
        parts = split.outputs[0].shape
        # the axis split in two (groups, channels per group); with a group of one, or a
        # channel per group, an axis of one makes others fit too: each is tried
        axes = [a for a in range(1, x.rank) if len(parts) == x.rank + 1
                and parts[:a] == x.shape[:a] and parts[a + 2:] == x.shape[a + 1:]
                and parts[a] * parts[a + 1] == x.shape[a]]
        out = layout_of(x, chain + [node])
        if not axes or out is None:
            continue
        rw.keep(node)
        nodes = region(rw, y, [x])
        if nodes is not None and any(_raise_group_norm(rw, node, x, nodes, axis,
                                                       parts[axis], out)
                                     for axis in axes):
            return True
    return False


def _try_group_norm(rw: Rewriter, node: Node, x: Value, nodes: list[Node]) -> bool:
    """Moments of ``x`` reshaped with one axis split in two (groups, channels per group),
    over every axis but the batch and the groups, broadcast back and applied to ``x``, with
    a per-channel scale and bias: a group norm of that many groups (Keras'
    ``GroupNormalization`` and Flax's ``GroupNorm`` are written so)."""
    axes = {n.attrs["axes"] for n in nodes if n.op in ("reduce_mean", "reduce_var")}
    if len(axes) != 1 or x.rank < 3 or None in axes:
        return False
    (reduced,) = axes
    tried = set()
    for r in nodes:  # an axis of x split in two, its moments over all but batch and groups
        split = r.outputs[0].shape if r.op == "reshape" else ()
        if len(split) != x.rank + 1 or prod(split) != prod(x.shape):
            continue
        kept = [a for a in range(len(split)) if a not in reduced]
        if len(kept) != 2 or kept[0] != 0:
            continue
        b = kept[1]
        if b + 1 >= len(split):
            continue
        for a in range(1, x.rank):
            if split[b] * split[b + 1] != x.shape[a] or (a, split[b]) in tried:
                continue
            tried.add((a, split[b]))
            if _raise_group_norm(rw, node, x, nodes, a, split[b]):
                return True
    return False


def _normed_weights(rw: Rewriter, free: list[Value], nodes: list[Node], y: Value
                    ) -> list[Value]:
    """Where the cone reads no activation, the weights of ``y``'s shape it reads twice: a
    norm of a weight table (DeBERTa's relative-position embeddings, normalized as a whole
    before the attention projects them)."""
    if free:
        return []
    reads: dict[Value, int] = {}
    for n in nodes:
        for v in n.inputs:
            if rw.is_param(v) and v.shape == y.shape:
                reads[v] = reads.get(v, 0) + 1
    return [v for v, k in reads.items() if k >= 2]


class RaiseNormsPass:
    """See the module docstring."""

    name = "raise-norms"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
