"""Numeric findings in words: where values part, by how much, and who is to blame."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specgraph.ir import Graph, Node
from specgraph.numeric.stats import UNDERFLOW, Stats, Tolerance
from specgraph.diff import describe_node as describe
from specgraph.diff import node_side
from specgraph.report import DIFF, Finding, Voice

__all__ = ["Verdict", "judge", "describe", "statement", "numeric_divergence", "gradient_divergence",
           "nan_introduced", "nonfinite_reaches", "nondeterministic", "with_reach", "subtle_definition", "rewired",
           "untrained", "untrained_state"]


@dataclass(frozen=True)
class Verdict:
    """Who left the truth: ``blame`` is lhs, rhs or unknown; ``reason`` one of ``kernel``,
    ``definition``, ``inherited``, ``both`` or a sentence."""

    blame: str
    reason: str
    errors: tuple[float, ...] = ()  # each side's error against fp64, when measured


def judge(lhs_error: float, rhs_error: float, rtol: float, *,
          definitions_differ: bool, errors: tuple[float, ...] = ()) -> Verdict:
    """Blame from each side's error against the fp64 truth of its own definition (errors
    relative to the tensor's scale): a side that leaves its definition by more than the
    tolerance, four times more than the other, is to blame."""
    if rhs_error > rtol and rhs_error > 4 * lhs_error:
        return Verdict("rhs", "kernel", errors=errors)
    if lhs_error > rtol and lhs_error > 4 * rhs_error:
        return Verdict("lhs", "kernel", errors=errors)
    if definitions_differ:
        return Verdict("unknown", "definition", errors=errors)
    return Verdict("unknown", "both", errors=errors)


def _where(a: Node, b: Node, seed: int, v: Voice = DIFF) -> str:
    """``op at scope`` of the pair (both sides' where they differ), and the seed if not 0."""
    where = describe(b) if describe(a) == describe(b) else \
        f"{describe(a)} ({v.rhs}: {describe(b)})"
    return f"{where} (seed {seed} inputs)" if seed else where


def _measure(stats: Stats, tol: Tolerance) -> str:
    if stats.shape_differs:
        return "their shapes differ"
    if stats.lhs_finite != stats.rhs_finite:
        return "one side has NaN or Inf where the other has none"
    return (f"max error {stats.max_abs:.3g} ({stats.max_rel:.2e} of the values' scale), "
            f"{stats.mismatch:.2%} of elements beyond tolerance (rtol {tol.rtol:.1e}), "
            f"cosine {stats.cosine:.6f}")


def _cause(node: Node) -> str:
    """A node as a cause is named: a cast with the dtype it casts to (a round trip through
    bfloat16 is two casts at one place)."""
    if node.op == "cast":
        return f"cast to {node.attrs['dtype']} at {node.scope or '<model>'}"
    return describe(node)


def _defined(pair: tuple[Node, Node] | None, v: Voice) -> str:
    """How two definitions of one layer differ, in words (``: eps is 1e-05 in lhs but
    0.001 in rhs``): their ops, else the attributes that differ; "" where neither does (the
    weights or constants they read: the structural diff says which)."""
    if pair is None:
        return ""
    a, b = pair
    if a.op != b.op:
        return f": {a.op} in {v.lhs}, {b.op} in {v.rhs}"
    keys = [k for k in sorted(set(a.attrs) | set(b.attrs))
            if _value(a.attrs.get(k)) != _value(b.attrs.get(k))]
    said = "; ".join(f"{k} is {_value(a.attrs.get(k))} in {v.lhs} but "
                     f"{_value(b.attrs.get(k))} in {v.rhs}" for k in keys)
    return f": {said}" if said else ""


def _why(verdict: Verdict, lfw: str, rfw: str, what: str,
         upstream: Sequence[tuple[str, Node]], v: Voice = DIFF,
         stated: Node | None = None, pair: tuple[Node, Node] | None = None) -> str:
    """Why the layer parts, in words; ``stated`` is the spec's node where one side is a
    spec (its statement is named when the two definitions differ)."""
    if verdict.reason == "kernel":
        side, fw = (verdict.blame, lfw if verdict.blame == "lhs" else rfw)
        errors = ""
        if len(verdict.errors) == 2:
            errors = (f" (error against fp64: {v.lhs} {verdict.errors[0]:.2e}, {v.rhs} "
                      f"{verdict.errors[1]:.2e} of the values' scale)")
        if v.spec == side:
            return (f"fed the same inputs, the runner of {v.name(side)} leaves its own "
                    f"statement{errors}: this is a bug in specgraph, not in your code")
        if v.spec is not None:
            return (f"fed the same inputs, {v.name(side)} ({fw}) leaves {v.other(side)}: its "
                    f"{what} is off the fp64 reference of its own layer while the spec's "
                    f"statement holds{errors}")
        return (f"fed the same inputs, {side} ({fw}) leaves the fp64 reference of its own "
                f"{what} while {v.other(side)} keeps it{errors}: {side} is wrong")
    if verdict.reason == "definition":
        if v.spec is not None and stated is not None:
            impl = v.other(v.spec)
            return (f"fed the same inputs, {impl} computes its own layer faithfully, but the "
                    f"spec's own statement is {statement(stated)}: {impl} leaves the spec here")
        return ("fed the same inputs, each side computes its own definition faithfully: the "
                f"two layers are defined differently{_defined(pair, v)}")
    if verdict.reason == "inherited":
        if upstream:
            sides: dict[str, list[str]] = {}
            for side, n in upstream:  # one clause a side, each node said once
                said, named = sides.setdefault(side, []), _cause(n)
                if named not in said:
                    said.append(named)
            # found walking back from the layer: said in the program's order
            names = " and ".join(f"{v.name(side)}'s {', '.join(said[::-1])}, which "
                                 f"{v.other(side)} has no counterpart for"
                                 for side, said in sides.items())
            return f"fed the same inputs the two layers agree: the difference comes from {names}"
        return "fed the same inputs the two layers agree: the difference comes from upstream"
    if verdict.reason == "both":
        return "fed the same inputs, both sides are as far from the fp64 reference"
    return verdict.reason


def statement(node: Node) -> str:
    """A node as a spec states it: its op and attributes (``layer_norm with eps=1e-12``)."""
    attrs = ", ".join(f"{k}={_value(x)}" for k, x in sorted(node.attrs.items()))
    return f"{node.op} with {attrs}" if attrs else node.op


def _value(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, tuple):
        return "(" + ", ".join(_value(e) for e in x) + ")"
    return str(x)


def numeric_divergence(lg: Graph, a: Node, rg: Graph, b: Node, stats: Stats, tol: Tolerance,
                       verdict: Verdict, upstream: Sequence[tuple[str, Node]], lfw: str, rfw: str,
                       seed: int, v: Voice = DIFF) -> Finding:
    where = _where(a, b, seed, v)
    stated = (a if v.spec == "lhs" else b) if v.spec else None
    message = (f"values part at {where}: {_measure(stats, tol)}; "
               f"{_why(verdict, lfw, rfw, 'computation', upstream, v, stated, (a, b))}")
    causes = tuple(node_side(rg if side == "rhs" else lg, n, side) for side, n in upstream)
    return Finding("numeric-divergence", message, op=b.op, lhs=node_side(lg, a, stats.to_dict()),
                   rhs=node_side(rg, b, stats.to_dict()), blame=verdict.blame, causes=causes)


def subtle_definition(lg: Graph, a: Node, rg: Graph, b: Node, gap: float, seen_a: Node,
                      seen_b: Node, stats: Stats, tol: Tolerance, seed: int,
                      v: Voice = DIFF) -> Finding:
    """A layer whose two definitions differ by less than float32 noise shows, while the
    difference grows until a later layer parts."""
    where = _where(a, b, seed, v)
    if gap <= tol.rtol:
        apart = (f"{gap:.2e} of the values' scale apart in float64, too little to stand "
                 "out at the layer itself")
    else:  # (a gap past the tolerance the layer's own values did not show: say only that)
        apart = (f"{gap:.2e} of the values' scale apart in float64" if math.isfinite(gap)
                 else "their float64 values part")
    message = (f"values part at {where}: fed the same inputs, the two layers are "
               f"defined differently ({apart}); the difference grows until "
               f"{describe(seen_b)} parts: {_measure(stats, tol)}")
    return Finding("numeric-divergence", message, op=b.op, lhs=node_side(lg, a, stats.to_dict()),
                   rhs=node_side(rg, b, stats.to_dict()), blame="unknown")


def rewired(lg: Graph, a: Node, rg: Graph, b: Node,
            crossed: Sequence[tuple[Node | None, Node | None]], stats: Stats, tol: Tolerance,
            seed: int, v: Voice = DIFF) -> Finding:
    """Two layers that agree when fed the same inputs but read different values."""
    where = _where(a, b, seed, v)
    reads = "; ".join(
        f"{v.lhs}'s reads {describe(la) if la else 'an input'}, {v.rhs}'s reads "
        f"{describe(rb) if rb else 'an input'}" for la, rb in crossed)
    message = (f"values part at {where}: {_measure(stats, tol)}; fed the same inputs "
               f"the two layers agree, but they are wired to different values: {reads}")
    causes = tuple(node_side(g, n, side) for pair in crossed
                   for side, g, n in (("lhs", lg, pair[0]), ("rhs", rg, pair[1])) if n)
    return Finding("numeric-divergence", message, op=b.op, lhs=node_side(lg, a, stats.to_dict()),
                   rhs=node_side(rg, b, stats.to_dict()), blame="unknown", causes=causes)


def gradient_divergence(lg: Graph, a: Node, rg: Graph, b: Node, stats: Stats, tol: Tolerance,
                        verdict: Verdict, lfw: str, rfw: str, seed: int,
                        v: Voice = DIFF) -> Finding:
    where = _where(a, b, seed, v)
    stated = (a if v.spec == "lhs" else b) if v.spec else None
    message = (f"gradients part in the backward of {where} while its inputs and "
               f"output gradients agree: {_measure(stats, tol)}; "
               f"{_why(verdict, lfw, rfw, 'gradient', (), v, stated, (a, b))}")
    return Finding("gradient-divergence", message, op=b.op, lhs=node_side(lg, a, stats.to_dict()),
                   rhs=node_side(rg, b, stats.to_dict()), blame=verdict.blame)


def nan_introduced(side: str, graph: Graph, node: Node, direction: str,
                   v: Voice = DIFF) -> Finding:
    what = "values" if direction == "forward" else "gradients"
    given = "finite inputs" if direction == "forward" else "finite output gradients"
    made = "NaN or Inf" if direction == "forward" else "NaN"
    message = (f"{v.name(side)}'s {describe(node)} turns {given} into {made} {what} "
               f"({direction} pass)")
    return _one_side("nan-introduced", message, side, graph, node)


def nonfinite_reaches(side: str, graph: Graph, node: Node, output: str,
                      v: Voice = DIFF) -> Finding:
    """NaN or Inf that one side's layer gives where the other's values are finite, from
    inputs that were not finite already (a -inf fill over a row that keeps no key), and that
    reach an output: no layer turned finite values into them, yet the outputs part."""
    message = (f"{v.name(side)}'s {describe(node)} gives NaN or Inf where "
               f"{v.name(v.other(side))}'s gives finite values (forward pass), and they reach "
               f"the output {output}")
    return _one_side("nan-introduced", message, side, graph, node)


def nondeterministic(side: str, graph: Graph, node: Node, first: Sequence[np.ndarray],
                     again: Sequence[np.ndarray], v: Voice = DIFF) -> Finding:
    worst = max((float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)),
                              initial=0.0)) for x, y in zip(first, again)
                 if np.shape(x) == np.shape(y)), default=float("nan"))
    message = (f"{v.name(side)}'s {describe(node)} gives different results on repeated runs of the "
               f"same inputs (max difference {worst:.3g}): the kernel is nondeterministic")
    return _one_side("nondeterminism", message, side, graph, node)


def _one_side(code: str, message: str, side: str, graph: Graph, node: Node) -> Finding:
    """A finding about one side's ``node`` alone, blamed on that side."""
    place = node_side(graph, node)
    return Finding(code, message, op=node.op, lhs=place if side == "lhs" else None,
                   rhs=place if side == "rhs" else None, blame=side)


def with_reach(finding: Finding, later: int, outputs: Mapping[str, Stats]) -> Finding:
    """The first divergence, told how far the difference travels downstream."""
    worst = max((s.max_rel for s in outputs.values() if not s.shape_differs), default=0.0)
    tail = (f"; {later} later layer{'s' if later != 1 else ''} differ too" if later else "")
    if outputs:
        tail += f", the outputs by {worst:.2e} of their scale"
    return replace(finding, message=finding.message + tail)


# --- gradient differences judged no divergence -----------------------------------------------
@dataclass(frozen=True)
class Passed:
    """A layer's gradients (or values) that differ beyond the tolerance yet were judged no
    divergence.

    Attributes:
        kind: why: ``ties`` (its input ties for a maximum), ``kink`` (its input lies within
            rounding of a kink), ``inherited`` (its pullback agrees fed the same inputs and
            output gradients); ``accumulated``, of its values: every layer agrees fed the
            same inputs and no definition differs.
        layer: the layer, in words.
        size: the difference, relative to the values' scale.
        seed: the input seed.
    """

    kind: str
    layer: str
    size: float
    seed: int


_PASSED_ONE = {
    "ties": ("where its input ties for the maximum: each program sends the gradient to "
             "another of the tied elements, both as far from the fp64 reference (the layer "
             "has no derivative there); not reported as a divergence"),
    "kink": ("where its input lies within rounding of a kink: the two programs' inputs fall "
             "on either side of it, both as far from the fp64 reference (the layer has no "
             "derivative there); not reported as a divergence"),
    # the gradients that reached it agree within tolerance, but where its own gradient
    # cancels (a mean's, a normalization's) their difference can be large against it: no
    # "rounding" then (ConvNeXt V2's GRN differs by 2.25 of its own scale)
    "inherited": ("yet its pullback agrees when fed the same inputs and output gradients: "
                  "the difference comes from the gradients that reached it (within tolerance "
                  "there, grown where its own gradient cancels), not reported as a "
                  "divergence"),
    "accumulated": ("beyond the tolerance, yet every layer agrees when fed the same inputs "
                    "and no definition differs: rounding that accumulated, not reported as "
                    "a divergence"),
    "conditioning": ("within what float32 allows on these inputs (they make the layer "
                     "ill-conditioned: its inputs' rounding alone moves it as much), and both "
                     "sides keep that: not reported as a divergence"),
    "rounding": ("in a few elements, both sides as far from the fp64 reference of one "
                 "definition: float32 rounding in each, past the tolerance there; not "
                 "reported as a divergence"),
}
_PASSED_ONE["rounding-values"] = _PASSED_ONE["rounding"]  # the same, said of values
_FORWARD = frozenset({"accumulated", "rounding-values", "conditioning"})  # of values
_PASSED_MANY = {  # the same said of each of several layers
    **{kind: "each " + text.replace("a divergence", "divergences")
       for kind, text in _PASSED_ONE.items() if kind not in ("inherited", "accumulated")},
    "accumulated": ("each beyond its tolerance, yet every layer agrees when fed the same "
                    "inputs and no definition differs: rounding that accumulated, not "
                    "reported as divergences"),
    "inherited": ("yet each one's pullback agrees when fed the same inputs and output "
                  "gradients: the differences come from the gradients that reached them "
                  "(within tolerance there, grown where their own gradients cancel), not "
                  "reported as divergences"),
}
_NAMED = 4  # layers named in a note that stands for several


def _seeds(seeds: Sequence[int]) -> str:
    ordered = sorted(set(seeds))
    if len(ordered) == 1:
        return f"seed {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"seeds {ordered[0]}-{ordered[-1]}"
    return "seeds " + ", ".join(map(str, ordered))


def _named(names: Sequence[str]) -> str:
    """The first few of ``names``, and how many more."""
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def underflow(where: Sequence[str], largest: float) -> str:
    """The note for values passed only by float32's least tolerance (``stats.UNDERFLOW``):
    ``where`` names them (layers, gradients, outputs), ``largest`` is the largest
    difference among them."""
    what = (f"the values of {where[0]}" if len(where) == 1 else
            f"values at {len(where)} places ({_named(list(where))})")
    return (f"{what} lie at float32's underflow, where frameworks that flush subnormal "
            "numbers to zero (XLA, TensorFlow) and those that keep them (PyTorch) part: "
            f"they differ by up to {largest:.1e}, compared to within {UNDERFLOW:.0e} and "
            "not reported as divergences")


def untrained_state(side: str, names: Sequence[str], v: Voice = DIFF) -> str:
    """The note for state (``side``'s buffers, running statistics) the other side's
    program differentiates as parameters: no gradient by design on ``side``."""
    what = (f"state {names[0]}" if len(names) == 1 else
            f"{len(names)} values of state ({_named(names)})")
    them = "it" if len(names) == 1 else "them"
    return (f"{v.name(side)}'s program holds {what} as state, with no gradient, while "
            f"{v.name(v.other(side))}'s differentiates {them} as parameters: "
            f"{'its gradient is' if len(names) == 1 else 'their gradients are'} not compared")


def untrained(side: str, graph: Graph, readers: Sequence[Node], names: Sequence[str],
              v: Voice = DIFF) -> Finding:
    """One finding for the parameters ``side``'s program gives no gradient while the other
    side's trains them: training differs there, as with an embedding's padding row (each
    reader is the first node of ``graph`` reading one of them)."""
    frozen, other = v.name(side), v.name(v.other(side))
    what = (f"parameter {names[0]}" if len(names) == 1 else
            f"{len(names)} parameters ({_named(names)})")
    them = "it" if len(names) == 1 else "them"
    message = (f"{frozen}'s program gives {what} no gradient (frozen there: requires_grad="
               f"False, stop_gradient, no_grad, or a constant) while {other}'s trains {them}; "
               f"the forward pass is the same, training differs: "
               f"{'its gradient is' if len(names) == 1 else 'their gradients are'} not compared")
    place = node_side(graph, readers[0], "frozen")
    return Finding("gradient-divergence", message, op=readers[0].op,
                   lhs=place if side == "lhs" else None, rhs=place if side == "rhs" else None,
                   affects="training: which parameters learn")


# an output whose RMS is this small has vanished: a deep network on its initial weights
# shrinks its activations block by block to float32's underflow, and outputs that agree
# there say little about the layers before them
VANISHED = 1e-20


def vanished(outputs: Mapping[str, Stats]) -> str | None:
    """A note where every output compared has all but vanished (HF's MobileNetV2 and
    EfficientNet on their initial weights): "outputs 0.00e+00" would read as a pass."""
    scales = [s.scale for s in outputs.values() if not s.shape_differs]
    if not scales or max(scales) > VANISHED:
        return None
    many = len(scales) > 1
    return (f"the output{'s have' if many else ' has'} all but vanished (RMS below "
            f"{VANISHED:.0e}): {'their' if many else 'its'} agreement says little about "
            "the layers before; the layers' own errors say more")


def passed_notes(passed: Sequence[Passed]) -> list[str]:
    """One note per kind of gradient difference judged no divergence: a single layer's in
    full, several layers' together (how many, the largest difference, the first few named),
    so that a model which agrees is not told so in a hundred lines (a ResNet's ReLUs
    compiled on a GPU, every attention layer of a BERT)."""
    notes = []
    for kind in dict.fromkeys(p.kind for p in passed):
        group = [p for p in passed if p.kind == kind]
        layers = list(dict.fromkeys(p.layer for p in group))
        worst = max(group, key=lambda p: math.inf if math.isnan(p.size) else p.size)
        forward = kind in _FORWARD
        noun, scale = ("values", " of their scale") if forward else ("gradients", "")
        if len(group) == 1:
            comma = "," if kind in ("inherited", "accumulated") else ""
            at = "at" if forward else "of"
            notes.append(f"{noun} {at} {worst.layer} differ by {worst.size:.2e}{scale} "
                         f"(seed {worst.seed}){comma} {_PASSED_ONE[kind]}")
            continue
        what = (f"{noun} {'at' if forward else 'of'} {worst.layer}" if len(layers) == 1
                else f"{noun} of {len(layers)} layers ({_named(layers)})")
        notes.append(f"{what} differ by up to {worst.size:.2e}{scale} "
                     f"({len(group)} times, {_seeds([p.seed for p in group])}), "
                     f"{_PASSED_MANY[kind]}")
    return notes
