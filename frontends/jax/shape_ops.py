"""JAX shape, indexing and array-creation primitives -> canonical ops (a table of their own)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specgraph.frontends._common.points import emit_point_gather
from specgraph.frontends._common.table import ConverterTable
from specgraph.frontends._common.writes import emit_write, fill_of
from specgraph.ir import Value

__all__ = ["CONVERTERS"]

CONVERTERS = ConverterTable()
_reg = CONVERTERS.register


def _shape(var: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in var.aval.shape)


def _reshaped(cx: Any, x: Any, shape: tuple[int, ...]) -> Any:
    if x.shape == shape:
        return x
    return cx.emit("reshape", [x], {"shape": shape}, out=(shape, x.dtype))


@_reg("reshape")
def _reshape(cx: Any, eqn: Any) -> Any:
    if eqn.params.get("dimensions") is not None:
        return cx.opaque()  # a transpose folded into the reshape (deprecated in JAX)
    x = cx.value(eqn.invars[0])
    shape = _shape(eqn.outvars[0])
    if x.shape == shape:
        return cx.emit("identity", [x])
    return cx.emit("reshape", [x], {"shape": shape})


@_reg("squeeze")
def _squeeze(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    axes = tuple(sorted(int(d) % max(x.rank, 1) for d in eqn.params["dimensions"]))
    if not axes:
        return cx.emit("identity", [x])
    return cx.emit("squeeze", [x], {"axes": axes})


@_reg("tile")
def _tile(cx: Any, eqn: Any) -> Any:
    """``jnp.tile`` (JAX's own primitive since 0.6): each axis repeated ``reps`` times."""
    x = cx.value(eqn.invars[0])
    reps = tuple(int(r) for r in eqn.params["reps"])
    if len(reps) != x.rank:
        return cx.opaque()
    if all(r == 1 for r in reps):
        return cx.emit("identity", [x])
    return cx.emit("tile", [x], {"repeats": reps})


@_reg("expand_dims")
def _expand_dims(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    return cx.emit("reshape", [x], {"shape": _shape(eqn.outvars[0])})


@_reg("broadcast_in_dim")
def _broadcast_in_dim(cx: Any, eqn: Any) -> Any:
    """A scalar literal broadcast is ``full``; a broadcast that only adds size-1 axes is a
    ``reshape``; otherwise the operand is reshaped to the output's rank and ``expand``ed."""
    operand = eqn.invars[0]
    shape, dtype = cx.out()
    known = cx.known(operand)
    if known is not None and known.size == 1 and not eqn.params["broadcast_dimensions"]:
        return cx.emit("full", [], {"shape": shape, "value": float(known.reshape(())),
                                    "dtype": dtype})
    x = cx.value(operand)
    aligned = [1] * len(shape)
    for i, d in enumerate(eqn.params["broadcast_dimensions"]):
        aligned[int(d)] = x.shape[i]
    if x.shape == shape:
        return cx.emit("identity", [x])
    if math.prod(aligned) == math.prod(shape):
        return cx.emit("reshape", [x], {"shape": shape})
    x = _reshaped(cx, x, tuple(aligned))
    return cx.emit("expand", [x], {"shape": shape})


@_reg("transpose")
def _transpose(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    perm = tuple(int(p) for p in eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return cx.emit("identity", [x])
    return cx.emit("transpose", [x], {"perm": perm})


@_reg("concatenate")
def _concatenate(cx: Any, eqn: Any) -> Any:
    return cx.emit("concat", [cx.value(v) for v in eqn.invars],
                   {"axis": int(eqn.params["dimension"])})


@_reg("stack")
def _stack(cx: Any, eqn: Any) -> Any:
    """``jnp.stack``: each operand given a size-1 axis at ``axis``, then joined along it."""
    axis = int(eqn.params["axis"])
    parts = []
    for v in eqn.invars:
        x = cx.value(v)
        shape = x.shape[:axis] + (1,) + x.shape[axis:]
        parts.append(cx.emit("unsqueeze", [x], {"axes": (axis,)}, out=(shape, x.dtype)))
    return cx.emit("concat", parts, {"axis": axis})


_UNROLL_LIMIT = 64  # steps of a ``scan`` unrolled into the graph (longer ones stay opaque)


@_reg("scan")
def _scan(cx: Any, eqn: Any) -> Any:
    """``lax.scan`` (``nnx.scan``, Flax's ``nn.scan`` over layers with stacked weights) of a
    known length, unrolled: step i runs the body on the carry and on row i of each scanned
    operand (``W[i]``: a slice of the stacked weight), its per-step outputs stacked. The
    body's values are not observed in the program (one equation there runs every step);
    the scan's own outputs are."""
    p = eqn.params
    steps, n_consts, n_carry = int(p["length"]), int(p["num_consts"]), int(p["num_carry"])
    if steps > _UNROLL_LIMIT or steps < 1:
        return cx.opaque()
    consts = [cx.atom(v) for v in eqn.invars[:n_consts]]
    carry: list[Any] = [cx.atom(v) for v in eqn.invars[n_consts:n_consts + n_carry]]
    scanned = [cx.value(v) for v in eqn.invars[n_consts + n_carry:]]
    ys: list[list[Value]] = [[] for _ in eqn.outvars[n_carry:]]
    order = range(steps - 1, -1, -1) if p["reverse"] else range(steps)
    cx.unrolled += 1
    try:
        for i in order:
            rows = []
            for x in scanned:
                row = _emit_slice(cx, x, [i] + [0] * (x.rank - 1), [i + 1, *x.shape[1:]],
                                  [1] * x.rank)
                rows.append(cx.emit("squeeze", [row], {"axes": (0,)},
                                    out=(x.shape[1:], x.dtype)))
            outs = cx.call_body(p["jaxpr"], [*consts, *carry, *rows], eqn)
            carry = list(outs[:n_carry])
            for k, y in enumerate(outs[n_carry:]):
                ys[k].append(cx.resolve(y))
    finally:
        cx.unrolled -= 1
    stacked = []
    for parts in ys:
        if p["reverse"]:
            parts = parts[::-1]
        pieces = [cx.emit("unsqueeze", [y], {"axes": (0,)}, out=((1, *y.shape), y.dtype))
                  for y in parts]
        stacked.append(pieces[0] if len(pieces) == 1 else cx.emit("concat", pieces,
                                                                   {"axis": 0}))
    return [*(cx.resolve(c) for c in carry), *stacked]


@_reg("split")
def _split(cx: Any, eqn: Any) -> Any:
    sizes = tuple(int(s) for s in eqn.params["sizes"])
    return cx.emit_multi("split", [cx.value(eqn.invars[0])],
                         {"axis": int(eqn.params["axis"]), "sizes": sizes})


def _emit_slice(cx: Any, x: Any, starts: list[int], ends: list[int], steps: list[int]) -> Any:
    axes = [a for a in range(x.rank) if (starts[a], ends[a], steps[a]) != (0, x.shape[a], 1)]
    shape = tuple(len(range(b, e, st)) for b, e, st in zip(starts, ends, steps))
    if not axes:
        return cx.emit("identity", [x], out=(shape, x.dtype))
    return cx.emit("slice", [x], {"axes": tuple(axes),
                                  "starts": tuple(starts[a] for a in axes),
                                  "ends": tuple(ends[a] for a in axes),
                                  "steps": tuple(steps[a] for a in axes)},
                   out=(shape, x.dtype))


@_reg("slice")
def _slice(cx: Any, eqn: Any) -> Any:
    x = cx.value(eqn.invars[0])
    starts = [int(s) for s in eqn.params["start_indices"]]
    ends = [int(s) for s in eqn.params["limit_indices"]]
    steps = [int(s) for s in (eqn.params.get("strides") or (1,) * x.rank)]
    return _emit_slice(cx, x, starts, ends, steps)


@_reg("dynamic_slice")
def _dynamic_slice(cx: Any, eqn: Any) -> Any:
    """A slice on the axes whose start is known at trace time (clamped as XLA does); an
    axis with a computed start must be cut to size 1, which is a ``gather`` of that index."""
    operand, *indices = eqn.invars
    x = cx.value(operand)
    sizes = [int(s) for s in eqn.params["slice_sizes"]]
    known = [cx.known(v) for v in indices]
    dynamic = [a for a, k in enumerate(known) if k is None or k.size != 1]
    if any(sizes[a] != 1 for a in dynamic):
        return cx.opaque()
    starts, ends = [0] * x.rank, list(x.shape)
    for a, k in enumerate(known):
        if a not in dynamic:
            starts[a] = int(np.clip(int(k.reshape(())), 0, x.shape[a] - sizes[a]))
            ends[a] = starts[a] + sizes[a]
    y = x
    if any((b, e) != (0, n) for b, e, n in zip(starts, ends, x.shape)):
        y = _emit_slice(cx, x, starts, ends, [1] * x.rank)
    for a in dynamic:
        index = _reshaped(cx, cx.value(indices[a]), (1,))
        shape = y.shape[:a] + (1,) + y.shape[a + 1:]
        y = cx.emit("gather", [y, index], {"axis": a}, out=(shape, y.dtype))
    return y


@_reg("pad")
def _pad(cx: Any, eqn: Any) -> Any:
    operand, padding_value = eqn.invars
    value = cx.known(padding_value)
    config = [tuple(int(c) for c in cfg) for cfg in eqn.params["padding_config"]]
    if value is None or any(interior for _, _, interior in config):
        return cx.opaque()
    pads = tuple(lo for lo, _, _ in config) + tuple(hi for _, hi, _ in config)
    return cx.emit("pad", [cx.value(operand)],
                   {"pads": pads, "mode": "constant", "value": float(value.reshape(()))})


@_reg("rev")
def _rev(cx: Any, eqn: Any) -> Any:
    axes = tuple(sorted(int(d) for d in eqn.params["dimensions"]))
    return cx.emit("flip", [cx.value(eqn.invars[0])], {"axes": axes})


@_reg("iota")
def _iota(cx: Any, eqn: Any) -> Any:
    """``arange`` along the iota dimension, reshaped and expanded to the full shape."""
    shape, dtype = cx.out()
    axis = int(eqn.params["dimension"])
    n = shape[axis]
    line = cx.emit("arange", [], {"start": 0.0, "limit": float(n), "delta": 1.0,
                                  "dtype": dtype}, out=((n,), dtype))
    if len(shape) == 1:
        return line
    aligned = tuple(n if a == axis else 1 for a in range(len(shape)))
    line = _reshaped(cx, line, aligned)
    if aligned == shape:
        return line
    return cx.emit("expand", [line], {"shape": shape})


@_reg("gather")
def _gather(cx: Any, eqn: Any) -> Any:
    """Gathers that take whole slices along one axis (``jnp.take``, ``x[ids]``) become
    ``gather`` (``embedding`` for rows of a 2-D parameter); others stay opaque."""
    operand, indices = eqn.invars
    axis = _take_axis(eqn, _shape(operand), _shape(indices))
    if axis is None and _points(eqn, _shape(operand), _shape(indices)):
        return emit_point_gather(cx, cx.value(operand), cx.value(indices), cx.constant)
    batched = _batched_take(eqn, _shape(operand), _shape(indices))
    if axis is None and batched is not None:
        return _batched_rows(cx, cx.value(operand), cx.value(indices), batched)
    if axis is None:
        return cx.opaque()
    batch = _shape(indices)[:-1]
    ids = _reshaped(cx, cx.value(indices), batch)
    if cx.is_param(operand) and len(operand.aval.shape) == 2 and axis == 0:
        return cx.emit("embedding", [ids, cx.value(operand)])
    return cx.emit("gather", [cx.value(operand), ids], {"axis": axis})


def _batched_rows(cx: Any, x: Any, indices: Any, k: int) -> Any:
    """``jax.vmap(lambda p, i: p[i])`` over the leading k axes (BigBird's block gather):
    written as PyTorch's ``torch_gather_b2`` writes it, the batch and the picked axis
    flattened into rows, each index shifted to its batch entry's rows, one gather of whole
    rows, reshaped back."""
    shape = tuple(int(n) for n in x.shape)
    index_shape = tuple(int(n) for n in indices.shape)[:-1]
    rows = math.prod(shape[:k + 1])
    n = math.prod(index_shape)
    flat_x = _reshaped(cx, x, (rows,) + shape[k + 1:])
    ids = _reshaped(cx, indices, (n,))
    dtype = np.dtype(indices.dtype)
    per_entry = math.prod(index_shape[k:])  # the indices of one batch entry
    shift = (np.arange(n) // per_entry * shape[k]).astype(dtype)
    ids = cx.emit("add", [ids, cx.constant(shift)], out=((n,), indices.dtype))
    picked = cx.emit("gather", [flat_x, ids], {"axis": 0},
                     out=((n,) + shape[k + 1:], x.dtype))
    return _reshaped(cx, picked, index_shape + shape[k + 1:])


def _batched_take(eqn: Any, shape: tuple[int, ...], index_shape: tuple[int, ...]
                  ) -> int | None:
    """The axis a gather with batch dimensions takes along, where it is ``p[i]`` vmapped
    over the leading k axes of both (indices of any shape per batch entry, whole slices of
    the axis right after the batch): None for any other gather."""
    dn = eqn.params["dimension_numbers"]
    k = len(dn.operand_batching_dims)
    lead = tuple(range(k))
    if not k or tuple(dn.operand_batching_dims) != lead or \
            tuple(dn.start_indices_batching_dims) != lead or len(index_shape) < k + 2 or \
            index_shape[-1] != 1 or index_shape[:k] != shape[:k] or len(shape) <= k:
        return None
    if tuple(dn.start_index_map) != (k,) or tuple(dn.collapsed_slice_dims) != (k,):
        return None
    sizes = tuple(int(n) for n in eqn.params["slice_sizes"])
    if sizes != (1,) * (k + 1) + shape[k + 1:]:
        return None
    first = len(index_shape) - 1
    return k if tuple(int(d) for d in dn.offset_dims) == tuple(
        range(first, first + len(shape) - k - 1)) else None


def _points(eqn: Any, shape: tuple[int, ...], index_shape: tuple[int, ...]) -> bool:
    """Whether the gather takes, at each index vector of k numbers, the whole slice of x
    at those k leading positions (``x[jnp.arange(B), ids]``)."""
    dn = eqn.params["dimension_numbers"]
    k = index_shape[-1] if index_shape else 0
    lead = tuple(range(k))
    if k < 2 or k > len(shape) or dn.operand_batching_dims or \
            tuple(dn.start_index_map) != lead or tuple(dn.collapsed_slice_dims) != lead:
        return False
    nb = len(index_shape) - 1
    return tuple(int(s) for s in eqn.params["slice_sizes"]) == (1,) * k + shape[k:] and \
        tuple(int(d) for d in dn.offset_dims) == tuple(range(nb, nb + len(shape) - k))


def _take_axis(eqn: Any, shape: tuple[int, ...], index_shape: tuple[int, ...]) -> int | None:
    dn = eqn.params["dimension_numbers"]
    if (len(dn.start_index_map) != 1 or dn.operand_batching_dims or not index_shape
            or index_shape[-1] != 1):
        return None
    axis = int(dn.start_index_map[0])
    sizes = tuple(int(s) for s in eqn.params["slice_sizes"])
    if tuple(dn.collapsed_slice_dims) != (axis,) or sizes != shape[:axis] + (1,) + shape[axis + 1:]:
        return None
    nb = len(index_shape) - 1
    expected = tuple(range(axis)) + tuple(range(axis + nb, len(shape) - 1 + nb))
    return axis if tuple(int(d) for d in dn.offset_dims) == expected else None


@_reg("scatter")
def _scatter(cx: Any, eqn: Any) -> Any:
    """``x.at[idx].set(y)`` with indices known at trace time: ``where`` over the elements
    written, ``y`` placed (``frontends._common.writes``); which element of ``y`` lands where
    is found by running the scatter itself on positions. Computed indices stay opaque."""
    evaluated = cx.evaluate(eqn)  # every input known (Flax wav2vec2's mask): a constant
    if evaluated:
        return evaluated
    operand, indices, updates = eqn.invars
    at = cx.known(indices)
    if at is None and isinstance(cx.env.get(indices), Value):  # computed from constants
        at = cx.b.constant_of(cx.env[indices], limit=1 << 16)
    shape, update_shape = _shape(operand), _shape(updates)
    if at is None or math.prod(shape) > 1 << 22:
        return cx.opaque()
    import jax

    try:
        with jax.default_device(jax.devices("cpu")[0]):
            source = np.asarray(eqn.primitive.bind(
                np.full(shape, -1, np.int32), at,
                np.arange(math.prod(update_shape), dtype=np.int32).reshape(update_shape),
                **eqn.params))
    except Exception:  # noqa: BLE001  (what JAX cannot run on positions stays opaque)
        return cx.opaque()
    fill = fill_of(cx, cx.known(updates))
    return emit_write(cx, cx.value(operand), source.astype(np.int64),
                      None if fill is not None else cx.value(updates), fill)
