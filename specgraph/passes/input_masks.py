"""Masks built from a model input: what a mask tensor holds where an ``attention_mask`` of
ones and zeros is one and where it is zero, its one written form, and the random draws that
prove a rewrite reading it.

Libraries write the same key-padding mask many ways: HF's ``(1 - m[:, None, None, :]) *
finfo.min``, ``m == 0`` for ``masked_fill``, ``m > 0``, ``m.astype(bool)``, Flax's
``make_attention_mask`` (``ones[:, :, None] * m[:, None, :] != 0``, expanded). Over an input
that holds ones and zeros, as every library's ``attention_mask`` does, each is an
elementwise function of the input laid out by reshapes and broadcasts: ``where(K, on, off)``
with ``K = cast(reshape(m), bool)``, the input's axes where the mask has them and ones
elsewhere. ``read_mask`` finds ``on``, ``off`` and that layout by running the mask's cone on
inputs of zeros, of ones and of random ones and zeros (the fp64 references); ``keep_mask``
and ``select`` write the one form.

That an input holds ones and zeros is assumed of an integer or boolean input that serves as
a mask and nothing else (``_only_masks``: never looked up, reduced or returned, as ids,
positions or token types are; counting positions along it, as OPT does, is a mask's use);
over other integers HF's ``(1 - m)·finfo.min`` and ``m == 0`` part, so the assumption is
what makes them one.

Requires: a graph whose constants are folded. Ensures: a mask is read only where its cone is
elementwise arithmetic and layout over one such input, and agrees with ``where(K, on, off)``
on every draw of ones and zeros.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specgraph.ir import Node, Value
from specgraph.ops.dtypes import numpy_dtype
from specgraph.passes.drowned import DROWN
from specgraph.passes.regions import random_env, run_region
from specgraph.passes.rewrite import Rewriter

__all__ = ["InputMask", "FedMask", "DROWN", "LOWEST", "MASK_OPS", "read_mask", "fed_mask",
           "keep_mask", "select", "is_select", "written_as", "drowns", "smallest", "draw_keep",
           "proved"]

_ELEMENTWISE = frozenset({
    "cast", "add", "sub", "mul", "div", "neg", "minimum", "maximum", "equal", "not_equal",
    "greater", "greater_equal", "less", "less_equal", "logical_not", "logical_and",
    "logical_or", "where"})
_LAYOUT = frozenset({"reshape", "expand", "unsqueeze", "squeeze"})
_LIMIT = 16
_SOURCE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8")
# (and-ed with another mask: LongT5's padding mask with its local window)
_APPLIED = frozenset({"add", "sub", "mul", "where", "attention", "logical_and", "logical_or"})
# what counts positions from a mask of ones and zeros (OPT's cumsum(m)·m - 1) or the
# lengths of its rows (ESM's token dropout divides by m.sum(-1)): a reader an id or a token
# type never has
_COUNTED = frozenset({"cumsum", "reduce_sum"})
# what moves a mask's entries about without reading them as numbers (LongT5's local
# attention pads its mask, splits it into blocks and joins three blocks each): a mask still
_MOVED = frozenset({"pad", "concat", "slice", "split", "transpose", "tile"})
# every op a mask is computed or laid out with: what carries an input's ones and zeros on
MASK_OPS = _ELEMENTWISE | _LAYOUT | _MOVED


@dataclass(frozen=True)
class InputMask:
    """A mask tensor read as ``broadcast(where(reshape(source, shape) != 0, on, off))``.

    Attributes:
        source: the graph input the mask is built from (its ones and zeros).
        shape: the source reshaped: its axes where the mask has them, ones elsewhere (the
            mask's rank).
        on / off: what the mask holds where the source is one / zero (bool or float).
        fixed: a constant boolean pattern (broadcastable to the mask) that the mask keeps
            only where it also holds: Flax's ``combine_masks(padding, causal)``, PyTorch's
            ``causal & padding`` (then ``on`` only where both keep); None for a mask the
            source alone sets.
    """

    source: Value
    shape: tuple[int, ...]
    on: float | bool
    off: float | bool
    fixed: np.ndarray | None = field(default=None, compare=False, hash=False)

    def keeps(self, keep: np.ndarray) -> np.ndarray:
        """Where the mask holds ``on``, given where the source keeps (laid out as
        ``shape``)."""
        return keep if self.fixed is None else keep & self.fixed


def _cone(rw: Rewriter, value: Value) -> tuple[Value, list[Node]] | None:
    """The one input and the elementwise/layout nodes computing ``value`` from it and from
    constants; else the one boolean comparison of other values it is computed from (a
    mask built from lengths, as XLM's and Flaubert's ``arange(T) < lengths[:, None]``,
    holds ones and zeros by its dtype); None for anything else."""
    # a comparison first, casts walked through: PyTorch's SDPA mask over DPR's
    # ``input_ids != pad`` casts it to float, inverts it and casts that to bool again,
    # and stopping at that last cast found two sources
    return (_cone_from(rw, value, False) or _cone_from(rw, value, True, casts=False)
            or _cone_from(rw, value, True))


def _made_boolean(rw: Rewriter, v: Value, casts: bool = True) -> bool:
    """Whether ``v`` is a boolean that a comparison (or, with ``casts``, a cast) made from
    values that are not. A cast of integers to booleans is their comparison with zero
    (canonicalization writes DPR's ``input_ids != pad`` with pad 0 so)."""
    node = rw.producer(v)
    return (v.dtype == "bool" and node is not None and node.op in _ELEMENTWISE
            and (casts or node.op != "cast" or not node.inputs[0].dtype.startswith(
                ("float", "bfloat")))
            and not any(u.dtype == "bool" for u in node.inputs))


def _cone_from(rw: Rewriter, value: Value, at_booleans: bool, casts: bool = True
               ) -> tuple[Value, list[Node]] | None:
    sources: set[Value] = set()
    found: dict[int, Node] = {}
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v in seen or rw.constant_value(v) is not None:
            continue
        seen.add(v)
        node = rw.producer(v)
        if at_booleans and _made_boolean(rw, v, casts):
            sources.add(v)
            continue
        if node is None:
            if rw.is_param(v):
                return None
            sources.add(v)
            continue
        if node.op not in _ELEMENTWISE | _LAYOUT or len(found) >= _LIMIT:
            return None
        found[id(node)] = node
        stack.extend(node.inputs)
    if len(sources) != 1:
        return None
    (source,) = sources
    if source.dtype not in _SOURCE_DTYPES or source.size == 0 or not _only_masks(rw, source):
        return None
    return source, rw.in_order(found.values())


def _only_masks(rw: Rewriter, source: Value) -> bool:
    """Whether the input ``source`` serves as a mask and nothing else: every value computed
    from it alone (elementwise, laid out, padded, sliced or joined) is read only by such
    nodes, applied to other tensors (added, multiplied, selected with, and-ed with another
    mask, an attention's mask) or counted along
    (OPT's positions, ``cumsum(m)·m - 1``; ESM's row lengths, ``m.sum(-1)``); never looked
    up, reduced otherwise or returned, as ids, positions or token types are."""
    graph = rw.graph
    pure, stack = {source}, [source]
    while stack:
        for node in graph.consumers(stack.pop()):
            alone = all(u in pure or u in graph.constants for u in node.inputs)
            if alone and node.op in _ELEMENTWISE | _LAYOUT | _MOVED:
                fresh = [out for out in node.outputs if out not in pure]
                pure.update(fresh)
                stack.extend(fresh)
            elif node.op not in _APPLIED | _COUNTED:
                return False
    return not pure & set(graph.outputs)


def _uniform(array: np.ndarray) -> float | bool | None:
    """The one value every element of ``array`` holds (NaN counts as one value), or None."""
    flat = np.asarray(array).reshape(-1)
    if flat.size == 0 or not np.array_equal(flat, np.full_like(flat, flat[0]),
                                            equal_nan=flat.dtype.kind == "f"):
        return None
    return bool(flat[0]) if flat.dtype == bool else float(flat[0])


def _layouts(source: Value, target: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every placement of the source's non-unit axes, in order, on axes of ``target`` of the
    same sizes: the source reshaped to ``target``'s rank with ones elsewhere."""
    sizes = [s for s in source.shape if s != 1]
    out = []
    for places in itertools.combinations(range(len(target)), len(sizes)):
        if all(target[p] == s for p, s in zip(places, sizes)):
            shape = [1] * len(target)
            for p, s in zip(places, sizes):
                shape[p] = s
            out.append(tuple(shape))
    return out


def _select_array(keep: np.ndarray, on, off, shape, dtype: str) -> np.ndarray:
    out = np.broadcast_to(np.where(keep, on, off), shape)
    return out.astype(bool) if dtype == "bool" else out.astype(np.float64)


def read_mask(rw: Rewriter, value: Value) -> InputMask | None:
    """``value`` as an elementwise function of one input holding ones and zeros, laid out
    by reshapes and broadcasts (see the module docstring); None if it is not one."""
    if value.dtype != "bool" and value.dtype not in ("float16", "bfloat16", "float32",
                                                     "float64"):
        return None
    cone = _cone(rw, value)
    if cone is None:
        return None
    source, nodes = cone
    kind = numpy_dtype(source.dtype)

    def run(m: np.ndarray) -> np.ndarray | None:
        try:
            with np.errstate(all="ignore"):
                return np.asarray(run_region(rw, nodes, {source: m.astype(kind)}, value))
        except (KeyError, ValueError, TypeError, IndexError):
            return None

    zeros, ones = (run(np.full(source.shape, b)) for b in (0, 1))
    if zeros is None or ones is None:
        return None
    rng = np.random.default_rng(4321)
    draws = [rng.random(source.shape) < 0.5 for _ in range(3)]
    off, on = _uniform(zeros), _uniform(ones)
    fixed = None
    if on is None and off is not None:  # a constant pattern and-ed in (a causal mask)
        on, fixed = _fixed_part(ones, off)
    if on is None or off is None or on == off:
        return _drowning_read(run, source, value, zeros, ones, draws)
    if value.dtype != "bool":  # -0.0 (HF's (1 - 1)·finfo.min) is the zero it adds
        on, off = on + 0.0, off + 0.0
    for shape in _layouts(source, value.shape):
        mask = InputMask(source, shape, on, off, fixed)
        if all(_matches(run(d), _select_array(mask.keeps(d.reshape(shape)), on, off,
                                                value.shape, value.dtype)) for d in draws):
            return mask
    return _drowning_read(run, source, value, zeros, ones, draws)


def _kept_keys(out: np.ndarray | None) -> np.ndarray | None:
    """Where an additive mask keeps its key (adds exactly 0), if every other element drowns
    its key (at or below ``DROWN``, -inf included); None otherwise."""
    if out is None:
        return None
    data = np.asarray(out, np.float64)
    kept = data == 0
    if np.isnan(data).any() or not np.all(kept | (data <= DROWN)):
        return None
    return kept


def _drowning_read(run: Callable[[np.ndarray], np.ndarray | None], source: Value,
                   value: Value, zeros: np.ndarray, ones: np.ndarray,
                   draws: Sequence[np.ndarray]) -> InputMask | None:
    """A float mask that adds 0 where it keeps a key and drowns the others, not always with
    one fill: TensorFlow's OPT adds a causal mask of -1e8 to a padding mask of -1e8 (a key
    both future and padded gets -2e8), TensorFlow's Mistral two of ``float32.min`` (-inf
    there). Read as the keys it keeps: the source's ones, and a constant pattern where the
    source keeps everything; ``off`` is its largest drowning value (``drowns``: its one form
    is the boolean mask of the keys kept)."""
    if value.dtype == "bool":
        return None
    kz, ko = _kept_keys(zeros), _kept_keys(ones)
    if kz is None or ko is None or kz.any() or not ko.any():
        return None
    drowned = np.concatenate([np.asarray(zeros, np.float64).ravel(),
                              np.asarray(ones, np.float64)[~ko].ravel()])
    off = float(drowned.max())
    fixed = None if ko.all() else smallest(ko)
    for shape in _layouts(source, value.shape):
        mask = InputMask(source, shape, 0.0, off, fixed)
        if all(_matches_kept(_kept_keys(run(d)), mask.keeps(d.reshape(shape)), value.shape)
               for d in draws):
            return mask
    return None


def _matches_kept(got: np.ndarray | None, want: np.ndarray, shape: tuple[int, ...]) -> bool:
    return got is not None and got.shape == shape and bool(
        np.array_equal(got, np.broadcast_to(want, shape)))


def smallest(array: np.ndarray) -> np.ndarray:
    """``array`` with every axis along which it repeats itself kept once (size one)."""
    for axis in range(array.ndim):
        if array.shape[axis] > 1 and np.all(array == np.take(array, [0], axis=axis)):
            array = np.take(array, [0], axis=axis)
    return array


def _fixed_part(ones: np.ndarray, off: float | bool
                ) -> tuple[float | bool | None, np.ndarray | None]:
    """Where the source keeps everything, a mask that still holds ``off`` in places holds
    a constant pattern too: what it holds elsewhere (one value) and the pattern, as small
    as its repetitions allow; (None, None) where it holds more than two values."""
    flat = np.asarray(ones)
    if flat.dtype == bool:
        kept = flat != bool(off)
    else:
        kept = ~((flat == off) | (np.isnan(flat) & np.isnan(off)))
    if not kept.any():
        return None, None
    on = _uniform(flat[kept])
    if on is None:
        return None, None
    return on, smallest(kept)


def _matches(got: np.ndarray | None, want: np.ndarray) -> bool:
    if got is None or got.shape != want.shape:
        return False
    if want.dtype == bool:
        return bool(np.array_equal(got.astype(bool), want))
    return bool(np.array_equal(np.asarray(got, np.float64), want, equal_nan=True))


# --- masks applied to attention scores ------------------------------------------------------
@dataclass(frozen=True)
class FedMask:
    """A node masking the scores with a mask built from an input: the scores it reads, the
    mask tensor, how that reads the input, and what it adds to the scores where the input
    is one and where it is zero."""

    node: Node
    scores: Value
    operand: Value
    mask: InputMask
    on: float
    off: float


# the most negative finite number of each dtype: the fill of a drowning mask's one form
LOWEST = {"float16": -65504.0, "bfloat16": -3.3895313892515355e38,
          "float32": float(np.finfo(np.float32).min), "float64": float(np.finfo(np.float64).min)}


def drowns(on: float | bool, off: float | bool) -> bool:
    """Whether an additive key mask adds zero to the keys it keeps and drowns the others:
    -inf, or a finite fill at or below ``DROWN`` (TensorFlow's -1e4, -1e9 or -1e30,
    PyTorch's and Flax's ``finfo.min``). Its one form is then the boolean mask of the keys
    kept, as SDPA's: wherever a row keeps a key, the softmax after it is the same (each
    masked score's exponential is 0, in float32 and float64 alike), whichever fill. Only a
    row that keeps no key tells them apart, and no library's output means anything there
    (uniform weights, the scores' own softmax, NaN or zeros, by fill and library)."""
    if isinstance(on, bool) or isinstance(off, bool):
        return False
    return on == 0 and off <= DROWN


def fed_mask(rw: Rewriter, node: Node) -> FedMask | None:
    """``s + A`` or ``s - A`` with A an additive mask built from an input, or
    ``where(C, s, fill)`` / ``where(C, fill, s)`` (``masked_fill``) with C a boolean one and
    a fill that drowns the keys it masks (-inf, ``finfo.min``, -1e9, -1e4: selecting it is
    adding it, wherever a row keeps a key), read as what it adds; None for anything
    else."""
    if node.op == "add":
        for scores, operand in (node.inputs, node.inputs[::-1]):
            mask = None if operand.dtype == "bool" else read_mask(rw, operand)
            if mask is not None:
                return FedMask(node, scores, operand, mask, float(mask.on), float(mask.off))
        return None
    if node.op == "sub":  # DistilBERT's scores - 1e30·(1 - m): it adds the negated mask
        scores, operand = node.inputs
        mask = None if operand.dtype == "bool" else read_mask(rw, operand)
        if mask is None:
            return None
        return FedMask(node, scores, operand, mask, 0.0 - float(mask.on), 0.0 - float(mask.off))
    if node.op != "where" or node.inputs[0].dtype != "bool":
        return None
    cond, a, b = node.inputs
    fills = [rw.uniform(a), rw.uniform(b)]
    if fills.count(None) != 1:
        return None
    fill = next(f for f in fills if f is not None)
    if not fill <= DROWN:
        return None
    mask = read_mask(rw, cond)
    if mask is None:
        return None
    scores = a if fills[0] is None else b
    added = [0.0 if (a if picks else b) is scores else fill for picks in (mask.on, mask.off)]
    return FedMask(node, scores, cond, mask, *added)


# --- the one written form ------------------------------------------------------------------
def keep_mask(rw: Rewriter, mask: InputMask, like: Node) -> Value:
    """``cast(reshape(source, shape), bool)``: True where the source is one (a constant
    pattern ``mask.fixed`` is the caller's to write: causality, an attention's flag)."""
    x = mask.source
    if x.shape != mask.shape:
        x = rw.emit("reshape", [x], {"shape": mask.shape}, like=like, shape=mask.shape,
                    dtype=x.dtype)
    if x.dtype != "bool":
        x = rw.emit("cast", [x], {"dtype": "bool"}, like=like, shape=mask.shape, dtype="bool")
    return x


def select(rw: Rewriter, mask: InputMask, on: float, off: float, dtype: str, like: Node
           ) -> Value:
    """``where(keep_mask, on, off)`` in ``dtype``: an additive mask."""
    storage = np.float32 if dtype == "bfloat16" else numpy_dtype(dtype)
    values = [rw.constant(np.array(c, dtype=storage), dtype) for c in (on, off)]
    return rw.emit("where", [keep_mask(rw, mask, like), *values], like=like, shape=mask.shape,
                   dtype=dtype)


def _is_keep(rw: Rewriter, value: Value, mask: InputMask) -> bool:
    """Whether ``value`` is what ``keep_mask`` writes for ``mask``."""
    if value.dtype != "bool" or value.shape != mask.shape:
        return False
    node = rw.producer(value)
    if mask.source.dtype != "bool":
        if node is None or node.op != "cast":
            return False
        value = node.inputs[0]
        node = rw.producer(value)
    if value is mask.source:
        return True
    return node is not None and node.op == "reshape" and node.inputs[0] is mask.source


def is_select(rw: Rewriter, value: Value, mask: InputMask) -> bool:
    """Whether ``value`` is already the one form of ``mask``: ``keep_mask`` itself for a
    boolean mask holding True where the source is one, ``select`` for a float one."""
    if mask.fixed is not None:
        return False
    if value.dtype == "bool":
        return mask.on is True and _is_keep(rw, value, mask)
    return not drowns(mask.on, mask.off) and written_as(rw, value, mask, mask.on, mask.off)


def written_as(rw: Rewriter, value: Value, mask: InputMask, on: float, off: float) -> bool:
    """Whether ``value`` is ``select(mask, on, off)`` as written here."""
    node = rw.producer(value)
    if node is None or node.op != "where" or value.shape != mask.shape or \
            mask.fixed is not None:
        return False
    cond, a, b = node.inputs
    return (_is_keep(rw, cond, mask) and rw.scalar(a) is not None and rw.scalar(b) is not None
            and _same(rw.scalar(a), on) and _same(rw.scalar(b), off))


def _same(a: float, b: float) -> bool:
    """Equal as stored: NaN is NaN, and -0.0 is not 0.0."""
    return bool(np.array_equal(np.float64(a), np.float64(b), equal_nan=True)
                and np.signbit(a) == np.signbit(b))


# --- proofs --------------------------------------------------------------------------------
def draw_keep(mask: InputMask, rng: np.random.Generator, *, empty_row: bool,
              band: np.ndarray | None = None) -> np.ndarray:
    """Random ones and zeros for the source, laid out as ``mask.shape``, as booleans: the
    first key of every row kept, or (``empty_row``) the first row keeping none. With a
    constant ``band`` of keys each query may see (a local attention's window) and-ed in,
    every row also keeps a key of its band: the last, where the draw kept none."""
    keep = rng.random(mask.shape) < 0.6
    keep[..., 0] = True
    if empty_row:
        keep.reshape(-1, mask.shape[-1])[0] = False
    elif band is not None:
        _keep_in_band(keep, band)
    return keep


def _keep_in_band(keep: np.ndarray, band: np.ndarray) -> None:
    """Keep (in place) a key of each row's ``band`` where ``keep`` and-ed with it keeps none:
    the row's last key in the band (its own position, in a causal window)."""
    try:
        shape = np.broadcast_shapes(keep.shape, band.shape)
    except ValueError:
        return
    if len(shape) != keep.ndim:
        return
    wide = np.broadcast_to(band, shape)
    for _ in range(int(np.prod(shape[:-1]))):
        empty = np.argwhere(~(np.broadcast_to(keep, shape) & wide).any(axis=-1))
        if not len(empty):
            return
        place = tuple(empty[0])
        keys = np.nonzero(wide[place])[0]
        if not len(keys):
            return  # a row the band itself leaves empty
        keep[tuple(0 if keep.shape[d] == 1 else i for d, i in enumerate(place))
             + (keys[-1],)] = True


def proved(rw: Rewriter, nodes: Sequence[Node], output: Value, free: Sequence[Value],
           masks: Mapping[Value, InputMask],
           candidate: Callable[[Mapping[Value, np.ndarray], np.ndarray], np.ndarray], *,
           empty_rows: Sequence[bool] = (False, False), rtol: float = 1e-6,
           band: np.ndarray | None = None) -> bool:
    """Whether the region ``nodes`` and ``candidate`` agree on random ``free`` values, the
    mask tensors among them drawn from one random source (``masks``: each mask tensor and
    how it reads the source; they share it), once per entry of ``empty_rows``.
    ``candidate(env, keep)`` gets the draws and the source's keep mask; with a ``band``
    and-ed into the mask, every row keeps a key of it (``draw_keep``)."""
    sources = {m.source for m in masks.values()}
    if len(sources) != 1 or len({m.shape for m in masks.values()}) != 1:
        return False
    plain = [v for v in free if v not in masks]
    for trial, empty in enumerate(empty_rows):
        rng = np.random.default_rng(2024 + trial)
        env = random_env(plain, seed=1234 + trial)
        keep = draw_keep(next(iter(masks.values())), rng, empty_row=empty, band=band)
        for v, m in masks.items():
            env[v] = _select_array(m.keeps(keep), m.on, m.off, v.shape, v.dtype)
        try:
            with np.errstate(all="ignore"):
                want = run_region(rw, nodes, env, output)
                got = np.asarray(candidate(env, keep))
        except (KeyError, ValueError, TypeError, IndexError, FloatingPointError):
            return False
        if got.shape != want.shape:
            return False
        finite = np.isfinite(want)
        if not np.array_equal(finite, np.isfinite(got)):
            return False
        scale = max(float(np.max(np.abs(want[finite]), initial=0.0)), 1e-30)
        if np.max(np.abs(got[finite] - want[finite]), initial=0.0) > rtol * scale:
            return False
    return True

