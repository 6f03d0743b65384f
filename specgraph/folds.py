"""Folded BatchNorms: one side applies an inference BatchNorm right after a conv or a linear
layer, the other has folded it into that layer's weights, as inference exports do
(``torch.onnx.export``'s optimizer, tf2onnx, onnxsim, PyTorch's ``fuse_conv_bn_eval``).

With its statistics fixed, BatchNorm is a per-channel scale ``s = γ/√(σ² + ε)`` and shift, and
``conv(x, W) + b`` followed by it is ``conv(x, W·s) + (b − μ)·s + β``: the same function of
the input, its weights written otherwise. Where the folding side's own weights are the other
side's folded (a model and its export), such a pair (``Fold``) is not a structural
difference: the diff says it in a note instead of a missing BatchNorm and a conv bias. The
numbers compare the folded layer's outputs with the BatchNorm's; moving weights, the side
that folds gets the other's folded (or, folded the other way, its BatchNorm the identity and
its layer the folded weights). Gradients of the weights themselves are not compared there: a
folded weight is not a weight of the other side.

A fold is recognized only where it is exact: the layer's one reader is the BatchNorm, whose
statistics, scale and shift are parameters or constants; the folded layer is the same op,
paired with the layer by the alignment, and has a bias (or, folded the other way, the
BatchNorm side has one to take the shift); the BatchNorm's readers are the folded layer's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from specgraph.align import Alignment
from specgraph.ir import Graph, Node, Value, same_elements
from specgraph.ops import get_spec
from specgraph.report import Voice

__all__ = ["Fold", "Folded", "find_folds", "find_folded", "numeric_alignment",
           "fold_weights", "fold_notes", "folded_notes", "FOLDABLE"]

FOLDABLE = ("conv", "linear")  # layers whose output channels a BatchNorm scales on axis 1


@dataclass(frozen=True)
class Fold:
    """A BatchNorm one side keeps after a layer, folded by the other into its counterpart.

    Attributes:
        side: the side that keeps the BatchNorm (``lhs`` or ``rhs``).
        layer: that side's conv or linear node (index).
        norm: that side's batch_norm node (index).
        folded: the other side's node that holds both, paired with ``layer``.
    """

    side: str
    layer: int
    norm: int
    folded: int

    @property
    def pair(self) -> tuple[int, int]:
        """The (lhs, rhs) node indices whose outputs are the same values."""
        return (self.norm, self.folded) if self.side == "lhs" else (self.folded, self.norm)

    @property
    def aligned(self) -> tuple[int, int]:
        """The (lhs, rhs) node indices the alignment pairs (the two layers)."""
        return (self.layer, self.folded) if self.side == "lhs" else (self.folded, self.layer)


def _is_param(graph: Graph, v: Value) -> bool:
    return graph.param_name(v) is not None


def _has_bias(node: Node) -> bool:
    return len(node.inputs) == 3


def _norm_parts(norm: Node) -> dict[str, Value]:
    """The batch_norm's inputs by role (weight and bias only where it has them)."""
    parts = {"mean": norm.inputs[1], "var": norm.inputs[2]}
    rest = list(norm.inputs[3:])
    if norm.attrs.get("scale", True) and rest:
        parts["weight"] = rest.pop(0)
    if norm.attrs.get("bias", True) and rest:
        parts["bias"] = rest.pop(0)
    return parts


def _folds_from(keeper: Graph, other: Graph, x: int, y: int, side: str,
                matched: Mapping[int, int]) -> Iterator[Fold]:
    a, b = keeper.nodes[x], other.nodes[y]
    if a.op not in FOLDABLE or b.op != a.op or len(a.outputs) != 1 or \
            not all(_is_param(g, n.inputs[k]) for g, n in ((keeper, a), (other, b))
                    for k in range(1, len(n.inputs))):
        return
    out = a.outputs[0]
    readers = keeper.consumers(out)
    if len(readers) != 1 or out in keeper.outputs or out.rank < 2:
        return
    norm = readers[0]
    k = keeper.index(norm)
    if norm.op != "batch_norm" or norm.inputs[0] is not out or k in matched or \
            (a.op == "linear" and out.rank != 2):
        return
    parts = _norm_parts(norm)
    if not all(_is_param(keeper, v) or v in keeper.constants for v in parts.values()):
        return
    if side == "lhs" and not _has_bias(b):
        return  # the folded layer has nowhere to hold the shift
    if side == "rhs":
        # the folded weights go into rhs's layer, its BatchNorm made the identity: its
        # statistics must be parameters to set, and the shift needs a bias somewhere
        if not all(_is_param(keeper, parts[r]) for r in ("mean", "var")) or \
                not (_has_bias(a) or "bias" in parts and _is_param(keeper, parts["bias"])):
            return
    folded_out = b.outputs[0]
    if (norm.outputs[0] in keeper.outputs) != (folded_out in other.outputs):
        return
    mine = {matched.get(keeper.index(r)) for r in keeper.consumers(norm.outputs[0])}
    theirs = {other.index(r) for r in other.consumers(folded_out)}
    if None in mine or mine != theirs:
        return
    yield Fold(side, x, k, y)


def find_folds(al: Alignment, lhs_weights: Mapping[str, np.ndarray],
               rhs_weights: Mapping[str, np.ndarray]
               ) -> tuple[tuple[Fold, ...], tuple[Fold, ...]]:
    """Every BatchNorm one side of ``al`` keeps that the other has folded into the layer
    before it (in lhs order), and the places shaped like one whose weights say otherwise.

    A layer with a bias and no BatchNorm after it, where the other side has one, is as
    often a BatchNorm forgotten; the weights tell them apart: an export holds its model's
    weights folded, a model that forgot it holds weights of its own. A place is a fold where
    the folding side's own weights are the other's folded (to float32 rounding)."""
    found, unlike = [], []
    for i, j in al.pairs:
        for f in _folds_from(al.lhs, al.rhs, i, j, "lhs", al.lhs_to_rhs):
            ok = _holds_folded(al.lhs, al.rhs, f, lhs_weights, rhs_weights)
            (found if ok else unlike).append(f)
        for f in _folds_from(al.rhs, al.lhs, j, i, "rhs", al.rhs_to_lhs):
            ok = _holds_folded(al.rhs, al.lhs, f, rhs_weights, lhs_weights)
            (found if ok else unlike).append(f)
    return tuple(found), tuple(unlike)


def numeric_alignment(al: Alignment, folds: Sequence[Fold],
                      folded: Sequence[Folded] = ()) -> Alignment:
    """``al`` with each fold's folded layer paired with the BatchNorm instead of the layer
    before it (their outputs are the same values); the layer is then unpaired. The adds
    inside a sum folded in another order are unpaired too: only its last one gives the
    same values on both sides."""
    inner = {(f.lhs_node, f.rhs_node) for f in folded if f.inner}
    if not folds and not inner:
        return al
    swap = {f.aligned: f.pair for f in folds}
    pairs = tuple(sorted(swap.get(p, p) for p in al.pairs if p not in inner))
    lhs_only = set(al.lhs_only) | {i for i, _ in inner}
    rhs_only = set(al.rhs_only) | {j for _, j in inner}
    for f in folds:
        if f.side == "lhs":
            lhs_only = (lhs_only - {f.norm}) | {f.layer}
        else:
            rhs_only = (rhs_only - {f.norm}) | {f.layer}
    return Alignment(al.lhs, al.rhs, pairs, tuple(sorted(lhs_only)), tuple(sorted(rhs_only)))


def _array(graph: Graph, weights: Mapping[str, np.ndarray], v: Value) -> np.ndarray:
    name = graph.param_name(v)
    data = weights[name] if name is not None else graph.constants[v]
    return np.asarray(data, dtype=np.float64)


def _channels(layer: Node, vector: np.ndarray) -> np.ndarray:
    """A per-output-channel vector shaped to scale ``layer``'s weight (conv: ``[O, I, *K]``,
    linear: ``[in, out]``)."""
    if layer.op == "linear":
        return vector.reshape(1, -1)
    return vector.reshape((-1,) + (1,) * (layer.inputs[1].rank - 1))


def _scale_shift(keeper: Graph, norm: Node, weights: Mapping[str, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The inference BatchNorm ``norm`` as a per-channel ``x·s + t`` (float64):
    ``s = γ/√(σ² + ε)``, ``t = β − μ·s``."""
    parts = {role: _array(keeper, weights, v) for role, v in _norm_parts(norm).items()}
    s = parts.get("weight", 1.0) / np.sqrt(parts["var"] + norm.attrs.get("eps", 1e-5))
    s = np.broadcast_to(s, parts["var"].shape)
    return s, parts.get("bias", 0.0) - parts["mean"] * s


def _fold_into(keeper: Graph, folder: Graph, fold: Fold,
               weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The folded layer's weight and bias (by the folder's parameter names) made from the
    keeper's layer and BatchNorm weights: ``W·s`` and ``b·s + t`` (float64)."""
    layer, folded = keeper.nodes[fold.layer], folder.nodes[fold.folded]
    s, t = _scale_shift(keeper, keeper.nodes[fold.norm], weights)
    w = _array(keeper, weights, layer.inputs[1])
    b = _array(keeper, weights, layer.inputs[2]) if _has_bias(layer) else np.zeros(s.shape)
    names = [folder.param_name(v) for v in folded.inputs[1:3]]
    return {names[0]: w * _channels(layer, s),  # type: ignore[dict-item]
            names[1]: b * s + t}


def _holds_folded(keeper: Graph, folder: Graph, fold: Fold,
                  keeper_weights: Mapping[str, np.ndarray],
                  folder_weights: Mapping[str, np.ndarray]) -> bool:
    """Whether the folder's own weights are the keeper's folded (to float32 rounding), the
    BatchNorm being more than the identity (a fresh one, of unit statistics, folds into
    the weights as they are: then a BatchNorm forgotten looks the same)."""
    try:
        want = _fold_into(keeper, folder, fold, keeper_weights)
        s, t = _scale_shift(keeper, keeper.nodes[fold.norm], keeper_weights)
    except (KeyError, ValueError):
        return False
    if np.allclose(s, 1.0, rtol=0, atol=1e-3) and np.allclose(t, 0.0, rtol=0, atol=1e-6):
        return False
    return all(_same_numbers(folder_weights.get(name), expected)
               for name, expected in want.items())


def fold_weights(lhs: Graph, rhs: Graph, folds: Sequence[Fold],
                 lhs_weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """rhs's weights at each fold, made from lhs's (float64 arithmetic, each in its
    parameter's dtype): a layer rhs folds gets ``W·s`` and ``(b − μ)·s + β``; a BatchNorm
    rhs keeps where lhs folded it becomes the identity after lhs's folded weights."""
    out: dict[str, np.ndarray] = {}

    def put(graph: Graph, v: Value, data: np.ndarray) -> None:
        name = graph.param_name(v)
        if name is not None:
            out[name] = np.asarray(data).astype(np.dtype(v.dtype), copy=False)

    for f in folds:
        if f.side == "lhs":
            for name, data in _fold_into(lhs, rhs, f, lhs_weights).items():
                out[name] = data.astype(np.dtype(rhs.params[name].dtype), copy=False)
            continue
        layer, norm, folded = rhs.nodes[f.layer], rhs.nodes[f.norm], lhs.nodes[f.folded]
        parts = _norm_parts(norm)
        shift = _array(lhs, lhs_weights, folded.inputs[2])
        put(rhs, layer.inputs[1], _array(lhs, lhs_weights, folded.inputs[1]))
        zero = np.zeros(shift.shape)
        if _has_bias(layer):
            put(rhs, layer.inputs[2], shift)
            if "bias" in parts:
                put(rhs, parts["bias"], zero)
        else:
            put(rhs, parts["bias"], shift)
        put(rhs, parts["mean"], zero)
        put(rhs, parts["var"], np.full(shift.shape, _unit_variance(
            norm.attrs.get("eps", 1e-5), np.dtype(parts["var"].dtype))))
        if "weight" in parts:
            put(rhs, parts["weight"], np.ones(shift.shape))
    return out


def _unit_variance(eps: float, dtype: np.dtype) -> float:
    """A variance ``v`` with ``v + eps == 1`` in ``dtype`` where one exists (the BatchNorm
    then divides by exactly 1), else the nearest."""
    e = dtype.type(eps)
    v = dtype.type(1) - e
    for _ in range(4):
        total = v + e
        if total == 1:
            break
        v = np.nextafter(v, dtype.type(2) if total < 1 else dtype.type(0))
    return float(v)


def fold_notes(al: Alignment, folds: Sequence[Fold], unlike: Sequence[Fold], voice: Voice,
               *, numbers: bool = True) -> list[str]:
    """One note per side that folds, naming every place; one for the places shaped like a
    fold whose weights are not the other side's folded."""
    notes = []
    for keeper in ("lhs", "rhs"):
        graph = al.lhs if keeper == "lhs" else al.rhs
        folder = "rhs" if keeper == "lhs" else "lhs"
        mine = [f for f in folds if f.side == keeper]
        if mine:
            places = ", ".join(graph.nodes[f.norm].scope or "<model>" for f in mine)
            ops = sorted({graph.nodes[f.layer].op for f in mine})
            many = len(mine) > 1
            note = (f"{voice.name(folder)} folds the BatchNorm{'s' if many else ''} "
                    f"{voice.name(keeper)} applies after {' and '.join(ops)} layers into "
                    f"their weights, as inference exports do ({len(mine)} "
                    f"place{'s' if many else ''}: {places}): its own weights are "
                    f"{voice.name(keeper)}'s folded, W·γ/√(σ²+ε) and (b − μ)·γ/√(σ²+ε) + β, "
                    "the same function once the statistics are fixed")
            if numbers:
                note += ("; the numbers compare each folded layer with the BatchNorm, and "
                         "gradients of the folded weights are not compared")
            notes.append(note)
        other = [f for f in unlike if f.side == keeper]
        if other:
            places = ", ".join(graph.nodes[f.norm].scope or "<model>" for f in other)
            notes.append(
                f"{voice.name(folder)} could hold the BatchNorm{'s' if len(other) > 1 else ''}"
                f" {voice.name(keeper)} applies at {places} folded into the layer before, "
                f"as inference exports do, but its weights there are not "
                f"{voice.name(keeper)}'s folded (a BatchNorm forgotten, or an export of other "
                "weights): the difference is reported as it stands")
    return notes


# --- values folded into constants --------------------------------------------------------
@dataclass(frozen=True)
class Folded:
    """A value one side computes from parameters and constants alone (a position embedding
    looked up at fixed positions, a class token expanded over the batch) where the other
    side reads it as one tensor, its own weight already holding those numbers: an
    exporter's constant folding (``torch.onnx.export``'s optimizer, onnxsim).

    Attributes:
        side: the side that computes it.
        cone: that side's nodes that compute it (indices, none paired by the alignment).
        value: the value computed.
        held: the other side's parameter (or constant) read in its place.
        lhs_node / rhs_node / slot: the aligned pair that reads the two, and the slot.
        inner: a term of a sum folded in another order (``_folded_sums``) read before the
            sum's last add: the two sides' partial sums there are not the same values.
    """

    side: str
    cone: frozenset[int]
    value: Value
    held: Value
    lhs_node: int
    rhs_node: int
    slot: int
    inner: bool = False


def _fixed_cone(graph: Graph, v: Value, matched: Mapping[int, int],
                limit: int = 64) -> list[int] | None:
    """The nodes (in graph order) computing ``v`` from parameters and constants alone, none
    of them paired, with at least one parameter among their leaves; None otherwise."""
    nodes: set[int] = set()
    stack, seen, params = [v], set(), 0
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if graph.param_name(u) is not None:
            params += 1
            continue
        if u in graph.constants:
            continue
        node = graph.producer(u)
        if node is None:
            return None  # an input of the model
        k = graph.index(node)
        if k in matched or len(nodes) >= limit:
            return None
        nodes.add(k)
        stack.extend(node.inputs)
    return sorted(nodes) if nodes and params else None


def _evaluated(graph: Graph, cone: Sequence[int], weights: Mapping[str, np.ndarray],
               v: Value) -> np.ndarray | None:
    """``v`` computed in float64 by the op references from ``weights`` and constants."""
    from specgraph.numeric.oracle import reference_outputs

    env: dict[Value, np.ndarray] = {}

    def read(u: Value) -> np.ndarray:
        if u in env:
            return env[u]
        name = graph.param_name(u)
        return np.asarray(weights[name] if name is not None else graph.constants[u])

    try:
        for k in cone:
            node = graph.nodes[k]
            outs = reference_outputs(node, [read(u) for u in node.inputs])
            env.update(zip(node.outputs, outs))
    except Exception:  # noqa: BLE001  (an op its reference cannot run here: no fold)
        return None
    return env.get(v)


def _same_numbers(got: Any, want: np.ndarray | None,
                  broadcast: tuple[int, ...] | None = None) -> bool:
    """Whether ``got`` holds ``want``'s numbers to float32 rounding (both broadcast to
    ``broadcast`` first, where given)."""
    if want is None or got is None:
        return False
    if broadcast is not None:
        try:
            got = np.broadcast_to(np.asarray(got), broadcast)
            want = np.broadcast_to(np.asarray(want), broadcast)
        except ValueError:
            return False
    if np.shape(got) != np.shape(want):
        return False
    want = np.asarray(want, np.float64)
    scale = float(np.max(np.abs(want), initial=0.0))
    return bool(np.allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-6 * scale))


class _Term(NamedTuple):
    """A term of a sum that did not match alone (``_folded_sums``)."""

    rhs_node: int
    slot: int
    value: Value
    cone: list[int]
    held_value: Value
    computed: np.ndarray
    held: Any
    shape: tuple[int, ...]


def find_folded(al: Alignment, lhs_weights: Mapping[str, np.ndarray],
                rhs_weights: Mapping[str, np.ndarray]) -> tuple[Folded, ...]:
    """Every input of an aligned pair that one side computes from parameters and constants
    alone and the other reads as a parameter or constant holding the same numbers (to
    float32 rounding): the computation was folded into a constant, as exporters do."""
    found = []
    pending: dict[tuple[str, int], _Term] = {}  # by (side, lhs add)
    for i, j in al.pairs:
        a, b = al.lhs.nodes[i], al.rhs.nodes[j]
        # an elementwise op broadcasts its operands: a folded constant may be held
        # broadcast already (a position table for every example of the batch)
        out = a.outputs[0].shape if len(a.outputs) == 1 and a.outputs[0].shape == \
            b.outputs[0].shape and get_spec(a.op).category == "elementwise" and \
            a.op == b.op else None
        for slot, (u, v) in enumerate(zip(a.inputs, b.inputs)):
            # a constant held with axes of one more or fewer holds the same elements (the
            # dynamo export of T5 folds its [H, T, T] position bias into a [1, H, T, T])
            alike = same_elements(u.shape, v.shape)
            if u.dtype != v.dtype or (u.shape != v.shape and out is None and not alike):
                continue
            for side, g, x, other, y, mine, theirs, matched in (
                    ("lhs", al.lhs, u, al.rhs, v, lhs_weights, rhs_weights, al.lhs_to_rhs),
                    ("rhs", al.rhs, v, al.lhs, u, rhs_weights, lhs_weights, al.rhs_to_lhs)):
                name = other.param_name(y)
                if name is None and y not in other.constants:
                    continue
                cone = _fixed_cone(g, x, matched)
                if cone is None:
                    continue
                held = theirs.get(name) if name is not None else other.constants[y]
                computed = _evaluated(g, cone, mine, x)
                if out is None and alike and held is not None and computed is not None:
                    held = np.reshape(np.asarray(held), np.shape(computed))
                if _same_numbers(held, computed, out):
                    found.append(Folded(side, frozenset(cone), x, y, i, j, slot))
                elif a.op == b.op == "add" and out is not None and computed is not None:
                    pending[(side, i)] = _Term(j, slot, x, cone, y, computed, held, out)
    return tuple(found) + _folded_sums(al, pending)


def _folded_sums(al: Alignment, pending: Mapping[tuple[str, int], _Term]
                 ) -> tuple[Folded, ...]:
    """Terms of a chain of sums folded in another order: BERT's export adds its position
    and token-type constants the other way round (``x + t + p`` against ``x + p' + t'``),
    so no term matches alone while their sums do, broadcast to the chain's output."""
    found: list[Folded] = []
    for (side, last), link in pending.items():
        chain = [(last, link)]
        while True:  # down the chain, from its last add to its first
            i, term = chain[-1]
            carry_l = al.lhs.nodes[i].inputs[1 - term.slot]
            carry_r = al.rhs.nodes[term.rhs_node].inputs[1 - term.slot]
            pl, pr = al.lhs.producer(carry_l), al.rhs.producer(carry_r)
            if pl is None or pr is None:
                break
            k = al.lhs.index(pl)
            nxt = pending.get((side, k))
            if nxt is None or nxt.rhs_node != al.rhs.index(pr) or \
                    len(al.lhs.consumers(carry_l)) != 1:
                break
            chain.append((k, nxt))
        if len(chain) < 2 or any(
                (side, al.lhs.index(r)) in pending for r in
                al.lhs.consumers(al.lhs.nodes[last].outputs[0])):
            continue  # a link of a longer chain, or a term alone: judged from the last add
        computed = sum(np.broadcast_to(np.asarray(t.computed, np.float64), link.shape)
                       for _, t in chain)
        held = sum(np.broadcast_to(np.asarray(t.held, np.float64), link.shape)
                   for _, t in chain)
        if _same_numbers(held, computed):
            found.extend(Folded(side, frozenset(t.cone), t.value, t.held_value, i, t.rhs_node,
                                t.slot, inner=n > 0) for n, (i, t) in enumerate(chain))
    return tuple(found)


def folded_notes(al: Alignment, folded: Sequence[Folded], voice: Voice,
                 exported: Mapping[str, bool] | None = None) -> list[str]:
    """One note per side whose computations the other holds folded into constants;
    ``exported``: which sides are exported inference programs (an exporter folded them),
    else the constants were computed when the program was traced."""
    notes = []
    for side in ("lhs", "rhs"):
        mine = [f for f in folded if f.side == side]
        if not mine:
            continue
        graph = al.lhs if side == "lhs" else al.rhs
        other = "rhs" if side == "lhs" else "lhs"
        what = []
        for f in mine:
            ops = "·".join(graph.nodes[k].op for k in sorted(f.cone))
            scope = graph.nodes[min(f.cone)].scope or "<model>"
            what.append(f"{ops} at {scope}")
        what = list(dict.fromkeys(what))
        how = ("as an exporter folds constants" if exported is None or exported.get(other)
               else "computed once, when its program was traced")
        notes.append(
            f"{voice.name(other)} holds as constants what {voice.name(side)} computes from "
            f"its weights alone ({'; '.join(what[:4])}"
            f"{f' and {len(what) - 4} more' if len(what) > 4 else ''}), "
            f"{how}: {voice.name(other)}'s numbers are "
            f"{voice.name(side)}'s, so they are no difference; the numbers read each side's "
            "own there")
    return notes
