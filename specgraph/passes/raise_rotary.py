"""Raise rotary position embeddings, however written, to ``rotary_embedding`` with their
theta, rotated dimension count, layout and position axis.

Models write the same rotation many ways: ``x·cos + rotate_half(x)·sin`` with precomputed
tables (HF's Llama, Mistral, Gemma in PyTorch, TF and Flax), the halves rotated explicitly
and concatenated, ``rotate_every_two`` with tables repeated per pair (GPT-J), strided
slices stacked and flattened, a rotated head of the features concatenated with the rest
(GPT-NeoX's partial rotary). All of them are linear in x with constant tables: the rule
takes a region that reads one tensor x (everything else constant) through slicing,
concatenation and arithmetic, runs it on random x in float64, and reads back, pair by pair
and position by position, the cosine and sine it turns each pair by. Those give the layout
(which features pair), the rotated count (the trailing features it passes through), the
position axis (the one axis along which the angles change) and the frequencies
ωᵢ = angle / position, hence theta = ω₁^(-dim/2); theta is taken as the shortest decimal
that still agrees.

Requires: constants folded (the tables are constants). Ensures: each rewrite is proved on
random x in float64 (``regions.agrees``) against ``rotary_embedding``'s reference, within
float32 rounding of the tables' angles; tables built from another theta raise with that
theta (an attribute the diff compares), and anything that is not a rotation by
position·θ^(-2i/dim) from position 0 (an offset, another frequency law)
is left as written. Positions divided by a factor (HF's linear ``rope_scaling``) turn the
first pair by t / factor: the factor is read off it and kept as an attribute.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.dtypes import is_float
from specgraph.passes.regions import agrees, region, run_region
from specgraph.passes.rewrite import PassResult, Rewriter, rewrite

__all__ = ["RaiseRotaryPass"]

_ROOTS = frozenset({"add", "sub", "concat", "reshape"})
# what a rotation is written with: arithmetic with its tables, and the ways pairs are taken
_OPS = frozenset({"add", "sub", "mul", "neg", "slice", "split", "concat", "reshape",
                  "unsqueeze", "squeeze", "expand", "rotary_embedding"})
_PAIRING = frozenset({"slice", "split", "concat", "reshape", "rotary_embedding"})
_LIMIT = 24


def _cone(rw: Rewriter, node: Node) -> tuple[list[Value], list[Node]] | None:
    """The values of ``node``'s output shape in its cone through ``_OPS`` (nearest first)
    that are not fixed, and the cone's nodes; None past the limit."""
    y = node.outputs[0]
    found: list[Value] = []
    nodes: list[Node] = [node]
    queue = list(node.inputs)
    seen: set[Value] = set()
    while queue:
        v = queue.pop(0)
        if v in seen or rw.is_fixed(v):
            continue
        seen.add(v)
        if v.shape == y.shape:
            found.append(v)
        producer = rw.producer(v)
        if producer is not None and producer.op in _OPS and producer not in nodes:
            nodes.append(producer)
            if len(nodes) > _LIMIT:
                return None
            queue.extend(producer.inputs)
    return found, nodes


def _tables(rw: Rewriter, nodes: Sequence[Node]) -> int:
    """How many multiplications in ``nodes`` read a fixed tensor of more than one element."""
    return sum(1 for n in nodes if n.op == "mul" and any(
        rw.is_fixed(v) and v.size > 1 for v in n.inputs))


def _pairs(layout: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    half = dim // 2
    if layout == "half":
        return np.arange(half), np.arange(half, dim)
    return np.arange(0, dim, 2), np.arange(1, dim, 2)


def _position_axis(c: np.ndarray) -> int | None:
    """The one axis (not the last) along which ``c`` changes, the others repeating it."""
    found = None
    for axis in range(c.ndim - 1):
        if c.shape[axis] > 1 and not np.allclose(c, np.take(c, [0], axis=axis), atol=1e-6):
            if found is not None:
                return None
            found = axis
    return found


def _theta(omega: np.ndarray, dim: int) -> float | None:
    """θ from ωᵢ = θ^(-2i/dim), i >= 1 (ω₀ = 1 whatever θ is; ω as the fit divided by its
    first, the positions' linear scaling taken apart by ``_fit``)."""
    if abs(omega[0] - 1.0) > 1e-4 or np.any(omega <= 0) or np.any(omega > 1.0 + 1e-4):
        return None
    if len(omega) == 1:
        return 10000.0  # one pair turns by its position alone: every theta is this rotation
    i = np.arange(1, len(omega))
    logs = -np.log(omega[1:]) * dim / (2.0 * i)
    if np.ptp(logs) > 1e-3 * max(1.0, float(np.max(np.abs(logs)))):
        return None  # not one geometric law of frequencies
    return float(np.exp(np.median(logs)))


def _fit(rw: Rewriter, nodes: list[Node], y: Value, x: Value) -> dict | None:
    """The layout, rotated count, position axis and theta the region's tables turn x by,
    read from one run on random x; None when it is no such rotation."""
    rng = np.random.default_rng(7)
    xs = rng.standard_normal(x.shape) + 0.5
    try:
        with np.errstate(all="ignore"):
            ys = np.asarray(run_region(rw, nodes, {x: xs}, y), dtype=np.float64)
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    if ys.shape != xs.shape or not np.all(np.isfinite(ys)):
        return None
    width = xs.shape[-1]
    dim = width
    while dim > 0 and np.array_equal(ys[..., dim - 1], xs[..., dim - 1]):
        dim -= 1
    if dim < 2 or dim % 2:
        return None
    for layout in ("half", "interleaved"):
        ia, ib = _pairs(layout, dim)
        a, b, ya, yb = xs[..., ia], xs[..., ib], ys[..., ia], ys[..., ib]
        norm = a * a + b * b
        c, s = (a * ya + b * yb) / norm, (a * yb - b * ya) / norm
        if not np.allclose(c * c + s * s, 1.0, atol=1e-4):
            continue
        axis = _position_axis(c)
        if axis is None:
            continue
        index = tuple(slice(None) if k in (axis, c.ndim - 1) else 0 for k in range(c.ndim))
        if not np.allclose(c, c[index].reshape(_kept(c.shape, axis)), atol=1e-5):
            continue
        angles = np.unwrap(np.arctan2(s[index], c[index]), axis=0)  # [T, dim/2]
        t = np.arange(angles.shape[0], dtype=np.float64)
        omega = t @ angles / (t @ t)
        if not 0.0 < omega[0] <= 1.0 + 1e-4:
            continue
        factor = 1.0 / omega[0] if abs(omega[0] - 1.0) > 1e-4 else 1.0
        theta = _theta(omega * factor, dim)
        if theta is not None:
            return {"layout": layout, "dim": dim, "axis": axis, "theta": theta,
                    "factor": factor}
    return None


def _kept(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return tuple(s if k in (axis, len(shape) - 1) else 1 for k, s in enumerate(shape))


def _snapped(theta: float, above: float = 1.0) -> list[float]:
    """θ (or a scaling factor) as the shortest decimals first (10000, not 9999.97 read back
    from float32 tables)."""
    out: list[float] = []
    for digits in range(1, 8):
        t = float(f"{theta:.{digits}g}")
        if t > above and t not in out:
            out.append(t)
    return out


def _rule(rw: Rewriter, node: Node) -> bool:
    if node.op not in _ROOTS or len(node.outputs) != 1:
        return False
    y = node.outputs[0]
    if y.rank < 2 or y.shape[-1] < 2 or not is_float(y.dtype):
        return False
    cone = _cone(rw, node)
    if cone is None or not cone[0]:
        return False
    found, nodes = cone
    if _tables(rw, nodes) < 2 and not any(n.op == "rotary_embedding" for n in nodes):
        return False
    if not any(n.op in _PAIRING for n in nodes):
        return False
    rw.keep(node)  # the root must be visible to the region walk
    spec = get_spec("rotary_embedding")
    for x in found:
        inside = region(rw, y, [x], limit=_LIMIT)
        if inside is None:
            continue
        fitted = _fit(rw, inside, y, x)
        if fitted is None:
            continue
        rtol = 1e-6 + 8.0 * (x.shape[fitted["axis"]] + 1) * 2.0 ** -24
        for theta, factor in [(t, f) for f in _snapped(fitted["factor"], 0.0)
                              for t in _snapped(fitted["theta"])][:12]:
            attrs = spec.normalize_attrs({**fitted, "theta": theta, "factor": factor})
            if agrees(rw, inside, y, [x], lambda env: spec.reference(env[x], **attrs),
                      rtol=rtol, claim=("rotary", attrs)):
                rw.replace(y, rw.emit("rotary_embedding", [x], attrs, like=node,
                                      shape=y.shape))
                return True
    return True


class RaiseRotaryPass:
    """See the module docstring."""

    name = "raise-rotary"

    def __call__(self, graph: Graph) -> PassResult:
        return rewrite(graph, _rule)
