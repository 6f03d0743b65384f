"""How far apart two tensors are, and how far apart they may be.

Tolerances are dtype-aware and grow with the number of terms a node sums over (a matmul over
4096 features rounds more than one over 16). An element is a mismatch when
``|lhs − rhs| > atol + rtol·max(|lhs|, |rhs|)`` where ``atol`` defaults to ``rtol`` times the
tensor's RMS: errors are judged against the tensor's scale, so values near zero do not raise
false alarms and a wrong element among thousands still does.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgraph.ir import Node, same_elements
from specgraph.passes.drowned import DROWN

__all__ = ["Stats", "Tolerance", "measure", "tolerance", "reduction_size", "BASE_RTOL",
           "all_finite", "share_floor", "remembering", "UNDERFLOW", "underflow_floor"]

# relative tolerance per precision for a node that sums over few terms; TF32 and the
# 16-bit formats keep 10, 7 and 10 mantissa bits
BASE_RTOL = {"float64": 1e-9, "float32": 2e-5, "tf32": 4e-3, "float16": 4e-3,
             "bfloat16": 4e-2}


# the least absolute tolerance of float32 values (and of bfloat16's, which has float32's
# exponents): float32's smallest normal number is 1.2e-38, XLA and TensorFlow flush results
# below it to zero where PyTorch keeps them (and oneDNN's kernels flush them too), and the
# layers after such a flush (a normalization dividing by its epsilon's root) carry the
# difference up by orders of magnitude: an activation that shrank block by block to nothing
# (HF MobileViT's on its initial weights) is exactly zero on one side and up to 5e-30 on
# the other, both as right as float32 permits. No value that training can feel is this
# small (an update of 1e-27 moves no weight, Adam's included: its epsilon is 1e-8)
UNDERFLOW = 1e-27


def underflow_floor(*dtypes: Any) -> float:
    """The least absolute tolerance of values of these dtypes (NumPy or framework dtypes,
    or their names): ``UNDERFLOW`` where every one is float32 or bfloat16, else 0."""
    names = {getattr(d, "name", None) or getattr(d, "__name__", None)
             or str(d).rsplit(".", 1)[-1] for d in dtypes}
    return UNDERFLOW if names and names <= {"float32", "bfloat16"} else 0.0


@dataclass(frozen=True)
class Tolerance:
    """``rtol`` relative to each element, ``atol`` relative to the tensor's RMS (or absolute
    when ``absolute`` is set by the user); ``drowned``: the values are additive masks on
    their way into a softmax (``specgraph.passes.drowned``), where an element at or below
    ``DROWN`` on both sides is the same masked key, whatever the fill."""

    rtol: float
    atol: float
    absolute: bool = False
    drowned: bool = False


@dataclass(frozen=True)
class Stats:
    """The distance between two tensors.

    Attributes:
        max_abs: largest absolute difference.
        max_rel: largest difference relative to ``scale``.
        mismatch: fraction of elements outside the tolerance.
        cosine: cosine similarity of the flattened tensors (1.0 for two zero tensors).
        scale: RMS of lhs, or the floor it was measured with where that is larger (a
            gradient that cancels is judged against the gradient that reached it).
        finite: whether lhs and rhs are all finite (``lhs_finite``, ``rhs_finite``).
        shape_differs: the tensors have different shapes (nothing else is measured).
        underflow: some element parted by more than the tolerance relative to the scale
            and was passed only by ``UNDERFLOW``: the values lie at float32's underflow,
            where frameworks that flush subnormal numbers and those that keep them part.
    """

    max_abs: float
    max_rel: float
    mismatch: float
    cosine: float
    scale: float
    lhs_finite: bool = True
    rhs_finite: bool = True
    shape_differs: bool = False
    underflow: bool = False

    @property
    def diverges(self) -> bool:
        return self.shape_differs or self.mismatch > 0.0 or (
            self.lhs_finite != self.rhs_finite)

    @classmethod
    def from_sums(cls, saa: float, sbb: float, sab: float, max_abs: float, mismatch: float,
                  scale: float, floor: float, lhs_finite: bool = True,
                  rhs_finite: bool = True, underflow: bool = False,
                  rhs_scale: float = 0.0) -> Stats:
        """The statistics of a pair from Σa², Σb², Σab (over the elements finite on both
        sides), the largest difference, the fraction outside the tolerance and lhs's RMS,
        raised to ``floor``; where lhs is all zeros, the error is told against rhs's RMS
        (a recurrent state that starts at zero on one side)."""
        na, nb = math.sqrt(saa), math.sqrt(sbb)
        cosine = sab / (na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
        scale = max(scale, floor)
        told = scale if scale > 0 else rhs_scale
        return cls(max_abs, max_abs / told if told > 0 else (0.0 if max_abs == 0 else
                                                             math.inf),
                   mismatch, cosine, scale, lhs_finite, rhs_finite, underflow=underflow)

    def to_dict(self) -> dict[str, float | bool]:
        return {"max_abs": _round(self.max_abs), "max_rel": _round(self.max_rel),
                "mismatch": _round(self.mismatch), "cosine": _round(self.cosine),
                "scale": _round(self.scale)}


def _round(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x


class _Recent:
    """The sums of the last few pairs of arrays measured, by the arrays themselves, while a
    comparison asks for it (``remembering``): there the arrays' identity stands for their
    values, which the comparison never changes, and in a program's backward pass the
    gradient at a value is its reader's input gradient and its producer's output gradient,
    measured twice under two tolerances, read once. Outside, nothing is remembered."""

    SIZE = 16
    SQUARES = 64  # arrays whose Σx² is kept: a layer's outputs and gradients, a while

    def __init__(self) -> None:
        self.depth = 0
        self._pairs: collections.OrderedDict[
            tuple[int, int], tuple[weakref.ref[np.ndarray], weakref.ref[np.ndarray],
                                   tuple[float, float, float, float]]] = \
            collections.OrderedDict()
        self._squares: collections.OrderedDict[int, tuple[weakref.ref[np.ndarray], float]] \
            = collections.OrderedDict()

    def square_sum(self, x: Any) -> float | None:
        """Σx² of ``x`` as one of the last measures or checks found it, else None."""
        kept = self._squares.get(id(x)) if self.depth else None
        return kept[1] if kept is not None and kept[0]() is x else None

    def put_square_sum(self, x: Any, total: float, count: int | None = None) -> None:
        """Keep Σx² of ``x`` (an array of ``count`` elements: a device tensor's, whose
        ``size`` is no count)."""
        if not self.depth or (x.size if count is None else count) < 4096:
            return
        try:
            ref = weakref.ref(x)
        except TypeError:
            return
        self._squares[id(x)] = (ref, total)
        self._squares.move_to_end(id(x))
        while len(self._squares) > self.SQUARES:
            self._squares.popitem(last=False)

    def get(self, a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float] | None:
        kept = self._pairs.get((id(a), id(b))) if self.depth else None
        if kept is None or kept[0]() is not a or kept[1]() is not b:
            return None
        return kept[2]

    def put(self, a: np.ndarray, b: np.ndarray, sums: tuple[float, float, float, float]
            ) -> None:
        if not self.depth or a.size < 4096:  # small ones: cheaper to measure again
            return
        try:
            refs = (weakref.ref(a), weakref.ref(b))
        except TypeError:
            return
        self._pairs[(id(a), id(b))] = (*refs, sums)
        while len(self._pairs) > self.SIZE:
            self._pairs.popitem(last=False)

    def clear(self) -> None:
        self._pairs.clear()
        self._squares.clear()


_RECENT = _Recent()


@contextlib.contextmanager
def remembering() -> Iterator[None]:
    """Within, ``measure`` remembers the sums of the last pairs it measured, by the arrays
    themselves, and measures a pair again only if one of them is another array: for a
    caller that changes no array it has measured (a comparison's kept values)."""
    _RECENT.depth += 1
    try:
        yield
    finally:
        _RECENT.depth -= 1
        if not _RECENT.depth:
            _RECENT.clear()


def known_square_sum(x: Any) -> float | None:
    """Σx² of ``x`` (an array or a device tensor) as a measure inside ``remembering`` found
    it, else None: what a finite check or a floor reads instead of reading ``x`` again."""
    return _RECENT.square_sum(x)


def keep_square_sum(x: Any, total: float, count: int) -> None:
    """Inside ``remembering``, keep Σx² of ``x`` (``count`` elements) for the checks that
    follow its measure (a device measure's: ``known_square_sum``)."""
    _RECENT.put_square_sum(x, total, count)


def measure(lhs: np.ndarray, rhs: np.ndarray, tol: Tolerance, floor: float = 0.0) -> Stats:
    """Compare two host arrays (any float or integer dtype) under ``tol``.

    ``floor`` is a least scale for the relative ``atol``: a gradient that cancels to near
    zero (a bias that softmax cannot see) is judged against the gradient that reached it.
    Elementwise work is done in the arrays' own precision when both are float32 (a
    difference of two float32 numbers is computed to within one rounding), sums in float64.
    """
    a, b = np.asarray(lhs), np.asarray(rhs)
    if a.shape != b.shape and same_elements(a.shape, b.shape):
        b = b.reshape(a.shape)  # a scalar against [1]: the same elements in the same order
    held = (a, b)  # the arrays as given: the ones a caller can give again
    if a.shape != b.shape:
        return Stats(math.inf, math.inf, 1.0, 0.0, 0.0, shape_differs=True)
    if tol.drowned:
        a, b = undrowned(a, b)
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        wrong = float(np.mean(a != b)) if a.size else 0.0
        return Stats(float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)),
                     0.0, wrong, 1.0 if wrong == 0 else 0.0, 0.0)
    least = 0.0 if tol.absolute else underflow_floor(a.dtype, b.dtype)
    work = np.float32 if a.dtype == b.dtype == np.float32 else np.float64
    a, b = a.astype(work, copy=False), b.astype(work, copy=False)
    paired = _flat_pair(a, b)
    diff = None
    remember = a is held[0] and b is held[1]  # not a copy made here (another dtype)
    sums = _RECENT.get(a, b) if remember else None
    tiled = None if paired is not None or sums is not None else _tiled_pass(a, b)
    if paired is None and sums is None and tiled is None:
        moved = _in_one_order(a, b)
        if moved is not None:  # a short fastest axis: one copied into the other's order
            paired = _flat_pair(*moved)
    if sums is not None:  # the same two arrays measured just before (under another tolerance)
        saa, sbb, sab, max_abs = sums
        a, b = paired if paired is not None else (a, b)
    elif paired is not None:  # one layout: read once, together, in memory order
        a, b = paired
        saa, sbb, sab, max_abs = _one_pass(a, b)
    elif tiled is not None:  # a transposed kernel's gradient against one in order
        saa, sbb, sab, max_abs = tiled
    else:  # two layouts (a transposed view against a contiguous array): nothing copied,
        # Σab from Σa², Σb² and Σ(a−b)² (each summed in its own memory order)
        with np.errstate(over="ignore", invalid="ignore"):
            saa, sbb = _sum_of_squares(flat(a)), _sum_of_squares(flat(b))
            diff = np.subtract(a, b)
            sab = (saa + sbb - _sum_of_squares(flat(diff))) / 2
            np.abs(diff, out=diff)  # |a − b| from here on
            max_abs = float(diff.max()) if a.size else 0.0
    if remember and sums is None:
        _RECENT.put(*held, (saa, sbb, sab, max_abs))
        # the finite checks and the floors that read these arrays next need not read them
        _RECENT.put_square_sum(held[0], saa)
        _RECENT.put_square_sum(held[1], sbb)
    # Σx² is finite exactly when every element is (short of overflow, checked the long way)
    fa = math.isfinite(saa) or bool(np.isfinite(a).all())
    fb = math.isfinite(sbb) or bool(np.isfinite(b).all())
    if not (fa and fb and math.isfinite(saa) and math.isfinite(sbb)):
        return _measure_nonfinite(a.astype(np.float64), b.astype(np.float64), tol, floor,
                                  fa, fb, least)
    scale = math.sqrt(saa / a.size) if a.size else 0.0
    relative = tol.atol if tol.absolute else tol.atol * max(scale, floor)
    atol = max(relative, least)
    bad = 0
    if max_abs > atol:  # else no element can exceed its bound (atol + rtol·max(|a|, |b|))
        del diff  # read again in pieces, in one order
        if paired is None:
            paired = _flat_pair(*_one_layout(a, b))
        assert paired is not None
        bad = _count_outside(*paired, atol, tol.rtol)
    return Stats.from_sums(saa, sbb, sab, max_abs, bad / a.size if a.size else 0.0, scale,
                           floor, underflow=bad == 0 and max_abs > relative and atol > relative,
                           rhs_scale=math.sqrt(sbb / a.size) if a.size else 0.0)


def undrowned(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` with the elements that are at or below ``DROWN`` on both sides (one
    masked key, filled with -1e9 on one side and ``finfo.min`` on the other) made 0 on
    both: what is left to compare is what the softmax after them sees."""
    if a.dtype.kind != "f" or b.dtype.kind != "f" or not a.size:
        return a, b
    with np.errstate(invalid="ignore"):
        both = (a <= DROWN) & (b <= DROWN)
    if not both.any():
        return a, b
    return np.where(both, 0, a).astype(a.dtype), np.where(both, 0, b).astype(b.dtype)


def _count_outside(x: np.ndarray, y: np.ndarray, atol: float, rtol: float) -> int:
    """How many elements of two 1-D arrays (their float dtype) lie further apart than
    ``atol + rtol·max(|x|, |y|)``, read piece by piece; a piece whose largest difference
    is within ``atol`` is passed over (agreeing values cost one pass, not five)."""
    n = min(x.size, _CHUNK)
    d, m, w = (np.empty(n, x.dtype) for _ in range(3))
    bad = 0
    for start in range(0, x.size, _CHUNK):
        xs, ys = x[start:start + _CHUNK], y[start:start + _CHUNK]
        k = xs.size
        dk, mk, wk = d[:k], m[:k], w[:k]
        np.subtract(xs, ys, out=dk)
        np.abs(dk, out=dk)
        if not dk.max() > atol:
            continue
        np.abs(xs, out=mk)
        np.abs(ys, out=wk)
        np.maximum(mk, wk, out=mk)
        mk *= rtol
        mk += atol
        bad += int(np.count_nonzero(dk > mk))
    return bad


def _one_layout(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` laid out alike: one copied into the other's memory order where that
    is a transposed contiguous array, else both copied in C order."""
    for x, y in ((a, b), (b, a)):
        order = _memory_order(x)
        if x.transpose(order).flags.c_contiguous:
            return _copied_into(x, y, order, y is b)
    return np.ascontiguousarray(a), np.ascontiguousarray(b)


def _copied_into(x: np.ndarray, y: np.ndarray, order: list[int], y_second: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and a copy of ``y`` laid out in ``x``'s memory ``order`` (``x`` transposed by
    it is C-contiguous), in the order the pair was given (``y`` second or first)."""
    moved = np.ascontiguousarray(y.transpose(order)).transpose(np.argsort(order))
    return (x, moved) if y_second else (moved, x)


def _memory_order(a: np.ndarray) -> list[int]:
    """The axes of ``a`` from the longest stride to the shortest: ``a`` transposed so is
    contiguous where ``a`` is a transposed view of a contiguous array."""
    return sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))


def flat(x: np.ndarray) -> np.ndarray:
    """The elements of ``x`` as a 1-D array, in no particular order (for sums and other
    order-free statistics): a transposed view is read where it lies, not copied."""
    x = np.asarray(x)
    if x.flags.c_contiguous:
        return x.ravel()
    return x.transpose(_memory_order(x)).ravel()


def _flat_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``a`` and ``b`` (one shape) as 1-D views that pair the same elements, both walked in
    ``a``'s memory order; None where that would copy one of them (laid out otherwise)."""
    if a.flags.c_contiguous and b.flags.c_contiguous:
        return a.ravel(), b.ravel()
    order = _memory_order(a)
    ta, tb = a.transpose(order), b.transpose(order)
    if not (ta.flags.c_contiguous and tb.flags.c_contiguous):
        return None
    return ta.ravel(), tb.ravel()


def all_finite(x: np.ndarray) -> bool:
    """Whether every element of ``x`` is finite (Σx² is finite exactly when every element
    is, short of overflow: then checked the long way)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return True
    if x.dtype == np.float32 and math.isfinite(square_sum(x)):
        return True
    return bool(np.isfinite(flat(x)).all())


def square_sum(x: np.ndarray) -> float:
    """Σx² of a float array (float32 in one BLAS pass, to within its roundings); inside
    ``remembering``, as the last ``measure`` of ``x`` or call for it found it, if any."""
    known = _RECENT.square_sum(x)
    if known is not None:
        return known
    data = flat(x)
    with np.errstate(over="ignore", invalid="ignore"):
        # float32: one BLAS pass (what reads this needs no sum exact to the last rounding)
        total = float(np.dot(data, data)) if data.dtype == np.float32 else \
            float(np.sum(np.square(data, dtype=np.float64)))
    _RECENT.put_square_sum(x, total)
    return total


_CHUNK = 1 << 17  # elements per piece of ``_one_pass`` (two pieces and a difference: 1.5 MiB,
# in L2 or near it: 20% faster than pieces a quarter as long, whose calls cost more)


def _one_pass(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """Σa², Σb², Σab and max|a−b| of two 1-D arrays, read once, piece by piece (each piece's
    products and difference are made while it is in cache; sums in float64). The maximum
    is meaningful only where the sums are finite. One thread: a pass in memory order is
    bound by memory, not by the core (threads made a 25M-element pass slower)."""
    piece = np.empty(min(a.size, _CHUNK), a.dtype)
    sums = [0.0, 0.0, 0.0, 0.0]
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, a.size, _CHUNK):
            x, y = a[start:start + _CHUNK], b[start:start + _CHUNK]
            _add_piece(sums, x, y, piece[:x.size])
    return sums[0], sums[1], sums[2], sums[3]


def _combined(parts: list[list[float]]) -> tuple[float, float, float, float]:
    """Parts' Σx², Σy², Σxy summed in the parts' order, and their largest difference."""
    sums = [0.0, 0.0, 0.0, 0.0]
    for p in parts:
        sums[0] += p[0]
        sums[1] += p[1]
        sums[2] += p[2]
        sums[3] = max(sums[3], p[3])
    return sums[0], sums[1], sums[2], sums[3]


_PART = 1 << 21  # elements a measuring thread reads at a time (8 MiB of float32 per side)
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _in_parts(work: Callable[[int, int], Any], size: int, step: int) -> list[Any]:
    """``work(begin, end)`` over ``[0, size)`` cut into parts of ``step``, the parts on a
    pool of threads (NumPy's copies and BLAS let go of the interpreter lock: the blocked
    walk of two layouts, bound by the core rather than by memory, runs 1.8x faster on two
    cores), their results in the parts' order (sums combined in a fixed order: the same
    figures on any machine)."""
    if size <= step:
        return [work(0, size)]
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, min(4, os.cpu_count() or 1)),
                thread_name_prefix="specgraph-measure")
    futures = [_POOL.submit(work, begin, min(begin + step, size))
               for begin in range(0, size, step)]
    return [f.result() for f in futures]


def _sum_of_squares(x: np.ndarray) -> float:
    """Σx² of a 1-D array, summed piece by piece in float64 (as ``_one_pass`` sums): one
    dot product over a million float32 elements is off by a few parts in 10⁷, enough to
    move the tolerance past an element that lies on it. A sum past the largest float is
    inf (``measure`` then checks the elements one by one)."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, x.size, _CHUNK):
            piece = x[i:i + _CHUNK]
            total += float(np.dot(piece, piece))
    return total


def _add_piece(sums: list[float], x: np.ndarray, y: np.ndarray, d: np.ndarray) -> None:
    """Add Σx², Σy², Σxy of two 1-D pieces to ``sums`` and raise its last entry to max|x−y|
    (``d``, as long as they, holds the difference)."""
    sums[0] += float(np.dot(x, x))
    sums[1] += float(np.dot(y, y))
    sums[2] += float(np.dot(x, y))
    np.subtract(x, y, out=d)
    np.abs(d, out=d)
    sums[3] = max(sums[3], float(d.max()))


_TILE = 1 << 16  # elements in a block of ``_tiled_pass`` (two blocks and more in L2)


def _tiled_pass(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float] | None:
    """``_one_pass`` of two arrays in two layouts, one of them contiguous (a transposed
    view of a kernel's gradient against one laid out in order): axes both walk alike are
    merged, and the two axes each reads fastest along are walked in blocks, each copied
    into a buffer while it is in cache (a plain elementwise pass reads one of them across
    its rows). None where that does not pay (see ``_tile_plan``)."""
    if a.size < 4096:
        return None
    plan = _tile_plan(a.shape, a.strides, b.strides, a.itemsize)
    if plan is None:
        return None
    swap, order, shape, strides, axes = plan
    x, y = (b, a) if swap else (a, b)
    tx = np.lib.stride_tricks.as_strided(x.transpose(order), shape, strides, writeable=False)
    ty = y.transpose(order).reshape(shape)
    tx, ty = tx.transpose(axes), ty.transpose(axes)
    rows, cols = tx.shape[-2:]
    bc = min(cols, 256)
    br = min(rows, max(1, _TILE // bc))
    # the row blocks of every outer index, in order: long arrays measured in parts of
    # them on the measuring threads (``_in_parts``)
    blocks = [(outer, i) for outer in np.ndindex(*tx.shape[:-2]) for i in range(0, rows, br)]

    def part(begin: int, end: int) -> list[float]:
        bx, by, d = (np.empty(br * bc, tx.dtype) for _ in range(3))
        sums = [0.0, 0.0, 0.0, 0.0]  # Σx², Σy², Σxy, max|x−y|
        with np.errstate(over="ignore", invalid="ignore"):
            for outer, i in blocks[begin:end]:
                mx, my = tx[outer], ty[outer]
                for j in range(0, cols, bc):
                    xs, ys = mx[i:i + br, j:j + bc], my[i:i + br, j:j + bc]
                    n = xs.size
                    np.copyto(bx[:n].reshape(xs.shape), xs)
                    np.copyto(by[:n].reshape(ys.shape), ys)
                    _add_piece(sums, bx[:n], by[:n], d[:n])
        return sums

    per_block = br * cols
    sxx, syy, sxy, top = _combined(_in_parts(part, len(blocks),
                                             max(1, _PART // max(1, per_block))))
    return (syy, sxx, sxy, top) if swap else (sxx, syy, sxy, top)


def _in_one_order(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``a`` and ``b`` laid out alike, the contiguous one copied into the memory order of
    the other (a transposed view of a contiguous array), where the contiguous one runs
    along 256 elements or fewer before the other's layout breaks the run (a 3x3 kernel
    against one laid out HWIO, 16x16 channels-first activations against channels-last): a
    plain pass would then stride across the other every few elements, and NumPy's copy in
    that direction is the fast one. None otherwise."""
    for x, y in ((a, b), (b, a)):
        if not y.flags.c_contiguous or x.flags.c_contiguous:
            continue
        order = _memory_order(x)
        if not x.transpose(order).flags.c_contiguous:
            return None
        if y.size < 4096 or any(st <= 0 for st, n in zip(x.strides, x.shape) if n > 1):
            return None
        shape, _ = _merged(y.shape, x.strides)  # the axes both walk alike, merged
        if shape[-1] > 256:  # the contiguous one's run that the other does not share
            return None
        return _copied_into(x, y, order, y is b)
    return None


@functools.lru_cache(maxsize=4096)
def _tile_plan(shape: tuple[int, ...], sa: tuple[int, ...], sb: tuple[int, ...],
               itemsize: int) -> tuple[bool, tuple[int, ...], tuple[int, ...],
                                            tuple[int, ...], tuple[int, ...]] | None:
    """How ``_tiled_pass`` walks arrays of ``shape`` with strides ``sa`` and ``sb`` (bytes, of
    elements ``itemsize`` wide): whether they swap (``a`` is then ``y``, the one read in
    its memory order: a contiguous array or a transposed view of one), the axis order that
    makes ``y`` C-contiguous, the merged shape and ``x``'s strides in it, and the order
    that puts the axis ``x`` reads fastest along next to ``y``'s; None where blocks do not
    pay (neither is a transposed contiguous array, a stride is negative, one axis is
    fastest for both, or the two are short enough for a plain pass to read whole cache
    lines)."""
    plans = []
    for swap, sx, sy in ((False, sa, sb), (True, sb, sa)):
        plan = _tile_plan_as(swap, shape, sx, sy, itemsize)
        if plan is not None:
            plans.append(plan)
    # a block reads x a row at a time across its columns: the plan whose column stride
    # spreads over more cache sets reads up to 2x faster (fc1's 3072x768 gradient read
    # 12 KiB apart meets one set, 3 KiB apart four); then the one with the shorter rows
    plans.sort(key=lambda plan: (-_cache_sets(plan[3][-1]),
                                 plan[2][plan[4][-2]] > plan[2][plan[4][-1]]))
    return plans[0] if plans else None


def _cache_sets(stride: int) -> int:
    """How many sets of a 4 KiB-way cache (64-byte lines, as x86 L1 caches are) rows
    ``stride`` bytes apart fall into."""
    if stride % 64:
        return 64
    return 64 // math.gcd(stride // 64, 64)


def _tile_plan_as(swap: bool, shape: tuple[int, ...], sx: tuple[int, ...],
                  sy: tuple[int, ...], itemsize: int
                  ) -> tuple[bool, tuple[int, ...], tuple[int, ...], tuple[int, ...],
                             tuple[int, ...]] | None:
    """``_tile_plan`` where the array of strides ``sy`` is the one read in its memory order
    (the other, of strides ``sx``, is read in blocks), if it can be."""
    order = tuple(sorted(range(len(shape)), key=lambda k: -abs(sy[k])))
    oshape = tuple(shape[k] for k in order)
    if not _is_c_contiguous(oshape, tuple(sy[k] for k in order), itemsize):
        return None
    osx = tuple(sx[k] for k in order)
    if any(st <= 0 for st, n in zip(osx, oshape) if n > 1):
        return None
    merged, strides = _merged(oshape, osx)
    nd = len(merged)
    q = min(range(nd), key=lambda k: strides[k])  # the axis x's elements lie along
    rows, cols = merged[q], merged[-1]
    if q == nd - 1 or min(rows, cols) < 256 or max(rows, cols) < 2048:
        return None
    axes = tuple([k for k in range(nd) if k not in (q, nd - 1)] + [q, nd - 1])
    return swap, order, merged, strides, axes


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether an array of ``shape``, ``strides`` and ``itemsize`` lies in C order, without
    gaps (size-1 axes aside)."""
    expect = itemsize
    for n, st in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if st != expect:
            return False
        expect = st * n
    return True


def _merged(shape: tuple[int, ...], strides: tuple[int, ...]
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``shape`` with its size-1 axes dropped and each axis merged into the next where the
    array of ``strides`` steps over both as over one (a C-contiguous array of ``shape``
    always does): the shape and strides of the same elements, fewer axes."""
    axes = [(n, st) for n, st in zip(shape, strides) if n > 1] or [(1, 0)]
    out = [axes[-1]]
    for n, st in reversed(axes[:-1]):
        inner_n, inner_st = out[-1]
        if st == inner_st * inner_n:
            out[-1] = (n * inner_n, inner_st)
        else:
            out.append((n, st))
    out.reverse()
    return tuple(n for n, _ in out), tuple(st for _, st in out)


def _measure_nonfinite(a: np.ndarray, b: np.ndarray, tol: Tolerance, floor: float,
                       fa: bool, fb: bool, least: float = 0.0) -> Stats:
    ia, ib = np.isfinite(a), np.isfinite(b)
    both = ia & ib
    same_nonfinite = ~ia & ~ib & ((a == b) | (np.isnan(a) & np.isnan(b)))
    scale = float(np.sqrt(np.mean(np.square(a[both])))) if both.any() else 0.0
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: not compared
        diff = np.where(both, np.abs(a - b), 0.0)
    atol = max(tol.atol if tol.absolute else tol.atol * max(scale, floor), least)
    bound = atol + tol.rtol * np.maximum(np.abs(a), np.abs(b))
    bad = (both & (diff > bound)) | (~both & ~same_nonfinite)
    dot = float(np.sum(a[both] * b[both]))
    na, nb = float(np.linalg.norm(a[both])), float(np.linalg.norm(b[both]))
    cosine = dot / (na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    max_abs = float(np.max(diff, initial=0.0))
    scale = max(scale, floor)
    return Stats(max_abs, max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf),
                 float(np.mean(bad)) if a.size else 0.0, cosine, scale, fa, fb)


def reduction_size(node: Node) -> int:
    """How many terms one output element of ``node`` sums over (1 for elementwise ops)."""
    ins = node.inputs
    op = node.op
    if op in ("linear", "matmul") and len(ins) >= 2 and ins[1].rank:
        if op == "linear":
            return int(ins[1].shape[0])
        # matmul's contracted axis: a vector's only axis, else the second to last (NumPy's)
        return int(ins[1].shape[0] if ins[1].rank == 1 else ins[1].shape[-2])
    if op in ("conv", "conv_transpose") and len(ins) >= 2:
        return int(math.prod(ins[1].shape[1:]))
    if op == "attention" and ins:
        return int(ins[0].shape[-1] + ins[1].shape[-2])
    if op in ("layer_norm", "rms_norm", "softmax", "log_softmax"):
        axes = node.attrs.get("axis", -1)
        axes = axes if isinstance(axes, tuple) else (axes,)
        return int(math.prod([ins[0].shape[a] for a in axes]))
    if op == "group_norm" and ins:
        return int(math.prod(ins[0].shape[1:])) // max(1, int(node.attrs["num_groups"]))
    if op == "avg_pool":
        return int(math.prod(node.attrs["kernel"]))
    if op == "adaptive_avg_pool" and ins:
        return max(1, int(math.prod(ins[0].shape[2:])) // max(1, int(math.prod(
            node.attrs["output_size"]))))
    if op.startswith("reduce_") and ins:
        axes = node.attrs.get("axes") or tuple(range(ins[0].rank))
        return int(math.prod([ins[0].shape[a] for a in axes]))
    return 1


def pullback_size(node: Node) -> int:
    """How many terms one element of the gradient at ``node``'s (first) input sums over: a
    linear layer's output features, a conv's output channels of its group times its kernel,
    a product's other free axis; what the forward sums over elsewhere. A 1x1 conv from 96 to
    576 channels (MobileNetV3's) rounds its input's gradient over 576 terms, not 96."""
    ins = node.inputs
    if node.op == "linear" and len(ins) >= 2 and ins[1].rank == 2:
        return int(ins[1].shape[1])
    if node.op == "conv" and len(ins) >= 2 and ins[1].rank >= 2:
        groups = max(1, int(node.attrs.get("groups", 1)))
        return int(ins[1].shape[0]) // groups * int(math.prod(ins[1].shape[2:]))
    if node.op == "matmul" and len(ins) == 2 and ins[0].rank >= 2 and ins[1].rank >= 2:
        return max(int(ins[1].shape[-1]), int(ins[0].shape[-2]))
    return reduction_size(node)


def share_floor(floor: float, node: Node, slot: int) -> float:
    """The least scale for the gradient ``node``'s pullback gives input ``slot`` when the
    gradients that reached its outputs have RMS ``floor``. Where that input was broadcast
    over the outputs (a bias or a norm's scale over 256 tokens, the smaller operand of an
    elementwise op), the pullback sums that many of their elements into each of its own,
    and the rounding those gradients carry adds up as the square root of the count on
    average: the floor grows so. A key projection's bias under softmax attention gets
    exactly zero gradient, in rounding only: that sum is judged against its own size. An
    input the pullback only slices out of the outputs' gradient (concat, pad) keeps the
    floor."""
    terms = _broadcast_count(node, slot)
    return floor * math.sqrt(terms) if terms > 1 else floor


# layers whose vector inputs after the first (bias, scale, shift) are broadcast over the
# output's other axes
_BROADCAST_LAYERS = frozenset({"linear", "conv", "conv_transpose", "layer_norm", "rms_norm",
                               "group_norm", "batch_norm"})


def _broadcast_count(node: Node, slot: int) -> int:
    """How many output elements each element of input ``slot`` was broadcast to (1 where it
    was not broadcast)."""
    if slot >= len(node.inputs) or not node.outputs:
        return 1
    x, out = node.inputs[slot], max(node.outputs, key=lambda v: v.size)
    if not x.size or x.size >= out.size:
        return 1
    from specgraph.ops import get_spec

    if get_spec(node.op).category == "elementwise":
        shape = (1,) * (out.rank - x.rank) + tuple(x.shape)
        if x.rank > out.rank or any(n not in (1, m) for n, m in zip(shape, out.shape)):
            return 1
        return out.size // x.size
    if node.op in _BROADCAST_LAYERS and slot > 0 and x.rank == 1:
        return out.size // x.size
    return 1


def tolerance(node: Node, precisions: tuple[str, str], *, rtol: float | None = None,
              atol: float | None = None, backward: bool = False) -> Tolerance:
    """The tolerance for ``node``'s outputs (or, with ``backward``, the gradients its
    pullback gives, which round twice as often, over as many terms as the pullback sums
    where that is more: ``pullback_size``) when one side runs in ``precisions[0]`` and
    the other in ``precisions[1]``; ``rtol``/``atol`` given by the user win (``atol`` is
    then absolute)."""
    base = max(BASE_RTOL.get(p, BASE_RTOL["float32"]) for p in precisions)
    base *= 2.0 if backward else 1.0
    terms = max(reduction_size(node), pullback_size(node)) if backward else \
        reduction_size(node)
    grown = base * max(1.0, math.sqrt(terms / 64.0))
    r = rtol if rtol is not None else grown
    if atol is not None:
        return Tolerance(r, atol, absolute=True)
    return Tolerance(r, r)
