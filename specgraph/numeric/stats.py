"""How far apart two tensors are, and how far apart they may be.

Tolerances are dtype-aware and grow with the number of terms a node sums over (a matmul over
4096 features rounds more than one over 16). An element is a mismatch when
``|lhs − rhs| > atol + rtol·max(|lhs|, |rhs|)`` where ``atol`` defaults to ``rtol`` times the
tensor's RMS: errors are judged against the tensor's scale, so values near zero do not raise
false alarms and a wrong element among thousands still does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specgraph.ir import Node

__all__ = ["Stats", "Tolerance", "measure", "tolerance", "reduction_size", "BASE_RTOL",
           "all_finite"]

# relative tolerance per precision for a node that sums over few terms; TF32 and the
# 16-bit formats keep 10, 7 and 10 mantissa bits
BASE_RTOL = {"float64": 1e-9, "float32": 2e-5, "tf32": 4e-3, "float16": 4e-3,
             "bfloat16": 4e-2}


@dataclass(frozen=True)
class Tolerance:
    """``rtol`` relative to each element, ``atol`` relative to the tensor's RMS (or absolute
    when ``absolute`` is set by the user)."""

    rtol: float
    atol: float
    absolute: bool = False


@dataclass(frozen=True)
class Stats:
    """The distance between two tensors.

    Attributes:
        max_abs: largest absolute difference.
        max_rel: largest difference relative to the tensor's scale (RMS of lhs).
        mismatch: fraction of elements outside the tolerance.
        cosine: cosine similarity of the flattened tensors (1.0 for two zero tensors).
        scale: RMS of lhs.
        finite: whether lhs and rhs are all finite (``lhs_finite``, ``rhs_finite``).
        shape_differs: the tensors have different shapes (nothing else is measured).
    """

    max_abs: float
    max_rel: float
    mismatch: float
    cosine: float
    scale: float
    lhs_finite: bool = True
    rhs_finite: bool = True
    shape_differs: bool = False

    @property
    def diverges(self) -> bool:
        return self.shape_differs or self.mismatch > 0.0 or (
            self.lhs_finite != self.rhs_finite)

    def to_dict(self) -> dict[str, float | bool]:
        return {"max_abs": _round(self.max_abs), "max_rel": _round(self.max_rel),
                "mismatch": _round(self.mismatch), "cosine": _round(self.cosine),
                "scale": _round(self.scale)}


def _round(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x


def measure(lhs: np.ndarray, rhs: np.ndarray, tol: Tolerance, floor: float = 0.0) -> Stats:
    """Compare two host arrays (any float or integer dtype) under ``tol``.

    ``floor`` is a least scale for the relative ``atol``: a gradient that cancels to near
    zero (a bias that softmax cannot see) is judged against the gradient that reached it.
    Elementwise work is done in the arrays' own precision when both are float32 (a
    difference of two float32 numbers is computed to within one rounding), sums in float64.
    """
    a, b = np.asarray(lhs), np.asarray(rhs)
    if a.shape != b.shape:
        return Stats(math.inf, math.inf, 1.0, 0.0, 0.0, shape_differs=True)
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        wrong = float(np.mean(a != b)) if a.size else 0.0
        return Stats(float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)),
                     0.0, wrong, 1.0 if wrong == 0 else 0.0, 0.0)
    work = np.float32 if a.dtype == b.dtype == np.float32 else np.float64
    a, b = a.astype(work, copy=False), b.astype(work, copy=False)
    paired = _flat_pair(a, b)
    diff, max_abs = None, None
    if paired is not None:  # one layout: read once, together, in memory order
        a, b = paired
        saa, sbb, sab, max_abs = _one_pass(a, b)
    else:  # two layouts (a transposed view against a contiguous array): nothing copied,
        # Σab from Σa², Σb² and Σ(a−b)² (each summed in its own memory order)
        with np.errstate(over="ignore", invalid="ignore"):
            fa_, fb_ = flat(a), flat(b)
            saa, sbb = float(np.dot(fa_, fa_)), float(np.dot(fb_, fb_))
            diff = np.subtract(a, b)
            d = flat(diff)
            sab = (saa + sbb - float(np.dot(d, d))) / 2
    # Σx² is finite exactly when every element is (short of overflow, checked the long way)
    fa = math.isfinite(saa) or bool(np.isfinite(a).all())
    fb = math.isfinite(sbb) or bool(np.isfinite(b).all())
    if not (fa and fb and math.isfinite(saa) and math.isfinite(sbb)):
        return _measure_nonfinite(a.astype(np.float64), b.astype(np.float64), tol, floor,
                                  fa, fb)
    scale = math.sqrt(saa / a.size) if a.size else 0.0
    if max_abs is None:
        diff = np.subtract(a, b) if diff is None else diff
        np.abs(diff, out=diff)
        max_abs = float(diff.max()) if a.size else 0.0
    atol = tol.atol if tol.absolute else tol.atol * max(scale, floor)
    bad = 0
    if max_abs > atol:  # else no element can exceed its bound (atol + rtol·max(|a|, |b|))
        if diff is None:
            diff = np.abs(np.subtract(a, b))
        near = diff > atol  # the only elements that can
        bound = np.maximum(np.abs(a[near]), np.abs(b[near]))
        bound *= tol.rtol
        bound += atol
        bad = int(np.count_nonzero(diff[near] > bound))
    na, nb = math.sqrt(saa), math.sqrt(sbb)
    cosine = sab / (na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    scale = max(scale, floor)
    return Stats(max_abs, max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf),
                 bad / a.size if a.size else 0.0, cosine, scale)


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
    """Whether every element of ``x`` is finite (one BLAS pass for float32)."""
    data = flat(x)
    if data.dtype.kind != "f":
        return True
    if data.dtype == np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            if math.isfinite(float(np.dot(data, data))):
                return True
    return bool(np.isfinite(data).all())


_CHUNK = 1 << 15  # elements per piece of ``_one_pass`` (two pieces and a difference in L2)


def _one_pass(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """Σa², Σb², Σab and max|a−b| of two 1-D arrays, read once, piece by piece (each piece's
    products and difference are made while it is in cache; sums in float64). The maximum
    is meaningful only where the sums are finite."""
    piece = np.empty(min(a.size, _CHUNK), a.dtype)
    saa = sbb = sab = top = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, a.size, _CHUNK):
            x, y = a[start:start + _CHUNK], b[start:start + _CHUNK]
            d = piece[:x.size]
            saa += float(np.dot(x, x))
            sbb += float(np.dot(y, y))
            sab += float(np.dot(x, y))
            np.subtract(x, y, out=d)
            np.abs(d, out=d)
            top = max(top, float(d.max()))
    return saa, sbb, sab, top


def _measure_nonfinite(a: np.ndarray, b: np.ndarray, tol: Tolerance, floor: float,
                       fa: bool, fb: bool) -> Stats:
    ia, ib = np.isfinite(a), np.isfinite(b)
    both = ia & ib
    same_nonfinite = ~ia & ~ib & ((a == b) | (np.isnan(a) & np.isnan(b)))
    scale = float(np.sqrt(np.mean(np.square(a[both])))) if both.any() else 0.0
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: not compared
        diff = np.where(both, np.abs(a - b), 0.0)
    atol = tol.atol if tol.absolute else tol.atol * max(scale, floor)
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
        return int(np.prod(ins[1].shape[1:]))
    if op == "attention" and ins:
        return int(ins[0].shape[-1] + ins[1].shape[-2])
    if op in ("layer_norm", "rms_norm", "softmax", "log_softmax"):
        axes = node.attrs.get("axis", -1)
        axes = axes if isinstance(axes, tuple) else (axes,)
        return int(np.prod([ins[0].shape[a] for a in axes]))
    if op == "group_norm" and ins:
        return int(np.prod(ins[0].shape[1:])) // max(1, int(node.attrs["num_groups"]))
    if op == "avg_pool":
        return int(np.prod(node.attrs["kernel"]))
    if op == "adaptive_avg_pool" and ins:
        return max(1, int(np.prod(ins[0].shape[2:])) // max(1, int(np.prod(
            node.attrs["output_size"]))))
    if op.startswith("reduce_") and ins:
        axes = node.attrs.get("axes") or tuple(range(ins[0].rank))
        return int(np.prod([ins[0].shape[a] for a in axes]))
    return 1


def tolerance(node: Node, precisions: tuple[str, str], *, rtol: float | None = None,
              atol: float | None = None, backward: bool = False) -> Tolerance:
    """The tolerance for ``node``'s outputs (or, with ``backward``, the gradients its
    pullback gives, which round twice as often) when one side runs in ``precisions[0]`` and
    the other in ``precisions[1]``; ``rtol``/``atol`` given by the user win (``atol`` is
    then absolute)."""
    base = max(BASE_RTOL.get(p, BASE_RTOL["float32"]) for p in precisions)
    base *= 2.0 if backward else 1.0
    grown = base * max(1.0, math.sqrt(reduction_size(node) / 64.0))
    r = rtol if rtol is not None else grown
    if atol is not None:
        return Tolerance(r, atol, absolute=True)
    return Tolerance(r, r)
