"""Numbers arbitrate: a structural finding is a claim that two models compute different
things; where the region it concerns computes the same, it is only written differently.

The findings of a diff are grouped into **regions**: each side's nodes that are unmatched
or flagged by a finding, joined where they are adjacent in their graph, where an aligned
pair is flagged, and across sides where they feed the same slot of an aligned node or read
the same aligned value. A region's **exits** are the slots of aligned nodes outside it (and
the graph outputs) that read one of its values on either side.

For each seed the lhs graph runs in float64 (the reference interpreter, lhs's weights and
inputs); the rhs region is then evaluated in float64 on the same values: every value it
reads from outside is the lhs counterpart's (the alignment's value map), every parameter
lhs's moved into rhs. Where every exit carries the same values on both sides, within
``SAME`` of their scale (float32 constants against float64 ones stay inside it), on every
seed, and, where an op that bends or saturates differs between the two sides, once more
on the last seed's values scaled up where they reach the region (both sides of it run on
them: the example's activations seldom reach where a ReLU6 and a ReLU part), the region's
findings become one note: written differently, computes the same.
A region that casts to a narrower float on one side (bfloat16) is never settled: float64
holds the cast as the identity.
Findings about what training alone sees (an attribute whose ``Attr.affects`` says so: an
embedding's padding row, BatchNorm's momentum) are never arbitrated: the forward pass
cannot show them. Nor is an attribute that differs on the same op (an eps of 1.001e-5
against 1e-5, a conv with a bias against one without): the two compute different functions
of their weights, which one set of weights (a bias initialized to zero, running variances
of one) may not show; numbers name such a difference where it moves them, and the finding
stands where it does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specgraph.diff import side_index
from specgraph.errors import ExecutionError
from specgraph.interpreter import Interpreter
from specgraph.ir import Graph, Node, Value
from specgraph.model import TracedModel
from specgraph.numeric.feeds import example_inputs, rhs_inputs
from specgraph.numeric.pairing import Pairing
from specgraph.ops import get_spec
from specgraph.ops.dtypes import FLOAT_DTYPES, INT_DTYPES
from specgraph.report import CONFIRMED, Finding

__all__ = ["Region", "regions", "arbitrate", "confirm", "inside", "SAME"]

SAME = 1e-6  # largest difference, relative to the values' scale, that is "the same" in fp64


@dataclass
class Region:
    """Nodes of each side (indices) that one or more findings concern, and those findings."""

    lhs: set[int] = field(default_factory=set)
    rhs: set[int] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)


class _Union:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a: Any, b: Any) -> None:
        self.parent[self.find(a)] = self.find(b)


def regions(pairing: Pairing, findings: Sequence[Finding]) -> list[Region]:
    """The findings grouped by the region of the two graphs they concern."""
    lg, rg = pairing.lhs, pairing.rhs
    atoms: set[tuple[str, int]] = {("l", i) for i in pairing.alignment.lhs_only}
    atoms |= {("r", j) for j in pairing.alignment.rhs_only}
    u = _Union()
    for f in findings:  # a finding's places (a stride moved between two convs) are one region
        mine = [(tag, side_index(side)) for place in ((f.lhs, f.rhs), *f.places)
                for tag, side in zip("lr", place) if side_index(side) is not None]
        atoms.update(mine)
        for atom in mine[1:]:
            u.join(mine[0], atom)
    for atom in atoms:
        u.find(atom)
    for tag, graph in (("l", lg), ("r", rg)):
        for i, node in enumerate(graph.nodes):
            if (tag, i) not in atoms:
                continue
            for v in node.inputs:
                p = graph.producer(v)
                if p is not None and (tag, graph.index(p)) in atoms:
                    u.join((tag, i), (tag, graph.index(p)))
    for i, j in pairing.alignment.pairs:
        if ("l", i) in atoms and ("r", j) in atoms:
            u.join(("l", i), ("r", j))
    _join_across(pairing, atoms, u)
    by_root: dict[Any, Region] = {}
    for tag, i in sorted(atoms):
        region = by_root.setdefault(u.find((tag, i)), Region())
        (region.lhs if tag == "l" else region.rhs).add(i)
    for f in findings:
        for tag, side in (("l", f.lhs), ("r", f.rhs)):
            i = side_index(side)
            if i is not None:
                by_root[u.find((tag, i))].findings.append(f)
                break
    return [r for r in by_root.values() if r.findings]


def _join_across(pairing: Pairing, atoms: set[tuple[str, int]], u: _Union) -> None:
    """Join each side's atoms that feed one slot of an aligned node, or read one aligned
    value, with the other side's that do."""
    lg, rg = pairing.lhs, pairing.rhs
    for i, j in pairing.alignment.pairs:
        a, b = lg.nodes[i], rg.nodes[j]
        for va, vb in zip(a.inputs, b.inputs):
            pa, pb = lg.producer(va), rg.producer(vb)
            la = ("l", lg.index(pa)) if pa is not None else None
            rb = ("r", rg.index(pb)) if pb is not None else None
            if la in atoms and rb in atoms:
                u.join(la, rb)
        for va, vb in zip(a.outputs, b.outputs):
            readers = [("l", lg.index(n)) for n in lg.consumers(va)]
            readers += [("r", rg.index(n)) for n in rg.consumers(vb)]
            inside = [r for r in readers if r in atoms]
            for r in inside[1:]:
                u.join(inside[0], r)


class _Proof:
    """Evaluates one region on both sides in float64 and compares its exits."""

    def __init__(self, pairing: Pairing, region: Region, rweights: Mapping[str, Any],
                 rinputs: Mapping[str, Any], lvalues: Mapping[Value, np.ndarray],
                 widened: Mapping[str, Any] | None = None) -> None:
        self.p, self.region = pairing, region
        self.rweights, self.rinputs, self.lvalues = rweights, rinputs, lvalues
        self.rvalues: dict[Value, np.ndarray] = {}
        # ``widened`` (lhs's weights): both sides of the region run on what reaches it
        # scaled (``_widened``), lhs's side computed here too
        self.lweights = widened
        self.lmade: dict[Value, np.ndarray] = {}

    def lhs(self, u: Value) -> np.ndarray | None:
        if self.lweights is None:
            return self.lvalues.get(u)
        if u in self.lmade:
            return self.lmade[u]
        value = self.lvalues.get(u)
        if value is None or _made_in(self.p.lhs, u, self.region.lhs):
            return None
        return _widened(value)

    def _run_lhs(self) -> bool:
        """lhs's side of the region on widened values (whether it could run)."""
        g = self.p.lhs
        assert self.lweights is not None
        interp = Interpreter(g, self.lweights, check_shapes=False)
        for i in sorted(self.region.lhs):
            node = g.nodes[i]
            args = []
            for u in node.inputs:
                name = g.param_name(u)
                if name is not None:
                    args.append(np.asarray(self.lweights[name], dtype=np.float64))
                elif u in g.constants:
                    args.append(np.asarray(g.constants[u]))
                else:
                    args.append(self.lhs(u))
            if any(a is None for a in args):
                return False
            try:
                with np.errstate(all="ignore"):
                    outs = interp.run_node(i, node, args)
            except ExecutionError:
                return False
            self.lmade.update(zip(node.outputs, outs))
        return True

    def rhs(self, v: Value) -> np.ndarray | None:
        """rhs's value ``v``: computed in the region, a leaf of rhs, or lhs's counterpart."""
        if v in self.rvalues:
            return self.rvalues[v]
        g = self.p.rhs
        name = g.param_name(v)
        if name is not None:
            return np.asarray(self.rweights[name], dtype=np.float64)
        if v in g.constants:
            return np.asarray(g.constants[v])
        if v in g.inputs:
            given = np.asarray(self.rinputs[g.input_names[g.inputs.index(v)]])
            return given if self.lweights is None else _widened(given)
        u = self.p.values.get(v)
        if u is None or _made_in(self.p.lhs, u, self.region.lhs):
            # no counterpart, or one the region computes on lhs: feeding it would hold lhs's
            # region against itself (rhs's last linear layer, an output, paired with lhs's
            # residual add after it, which rhs lacks)
            return None
        value = self.lhs(u)
        if value is None or value.shape != v.shape:
            return None  # a counterpart of another shape (paired views): nothing to feed
        return value

    def run(self) -> float | None:
        """The largest exit difference relative to its values' scale (None: unprovable)."""
        if self.lweights is not None and not self._run_lhs():
            return None
        g = self.p.rhs
        interp = Interpreter(g, self.rweights, check_shapes=False)
        for j in sorted(self.region.rhs):
            node = g.nodes[j]
            args = [self.rhs(v) for v in node.inputs]
            if any(a is None for a in args):
                return None
            try:
                with np.errstate(all="ignore"):
                    outs = interp.run_node(j, node, args)
            except ExecutionError:  # an op the reference interpreter cannot run
                return None
            self.rvalues.update(zip(node.outputs, outs))
        exits = self._exits()
        if not exits:  # nothing reads what the region makes on both sides: nothing proved
            return None
        worst = 0.0
        for lhs_value, rhs_value in exits:
            if lhs_value is None or rhs_value is None:
                return None
            worst = max(worst, _distance(lhs_value, rhs_value))
        return worst

    def _exits(self) -> list[tuple[np.ndarray | None, np.ndarray | None]]:
        lg, rg = self.p.lhs, self.p.rhs
        lin, rin = self.region.lhs, self.region.rhs
        out = []
        for i, j in self.p.alignment.pairs:
            if i in lin or j in rin:
                continue
            a, b = lg.nodes[i], rg.nodes[j]
            touched = [s for s, (va, vb) in enumerate(zip(a.inputs, b.inputs))
                       if _made_in(lg, va, lin) or _made_in(rg, vb, rin)]
            if not touched:
                continue
            if get_spec(a.op).commutative and len(a.inputs) == 2 == len(b.inputs):
                out.extend(self._commutative(a, b))
                continue
            out.extend(self._selected(a, b, s) for s in touched)
        for u, v in _output_pairs(lg, rg):
            if _made_in(lg, u, lin) or _made_in(rg, v, rin):
                out.append((self.lhs(u), self.rhs(v)))
        return out

    def _selected(self, a: Node, b: Node, slot: int) -> tuple[Any, Any]:
        """The values exit slot ``slot`` of aligned nodes ``a``/``b`` reads on each side; for
        a branch of a ``where`` whose condition comes from outside the region and agrees,
        only the elements it selects (what it discards reaches nothing: LayoutLMv3's
        bucket for large distances, truncated before or after adding its offset, differs
        only at the small distances the ``where`` takes from the other branch)."""
        x, y = self.lhs(a.inputs[slot]), self.rhs(b.inputs[slot])
        if a.op != "where" or b.op != "where" or slot == 0 or x is None or y is None:
            return x, y
        ca, cb = a.inputs[0], b.inputs[0]
        if _made_in(self.p.lhs, ca, self.region.lhs) or _made_in(self.p.rhs, cb,
                                                                   self.region.rhs):
            return x, y
        c, d = self.lhs(ca), self.rhs(cb)
        if c is None or d is None or np.shape(c) != np.shape(d) or \
                not np.array_equal(np.asarray(c, bool), np.asarray(d, bool)):
            return x, y
        try:
            keep = np.broadcast_to(np.asarray(c, bool) == (slot == 1), a.outputs[0].shape)
            return (np.broadcast_to(x, a.outputs[0].shape)[keep],
                    np.broadcast_to(y, b.outputs[0].shape)[keep])
        except ValueError:  # shapes the where does not broadcast alike: compared whole
            return x, y

    def _commutative(self, a: Node, b: Node) -> list[tuple[Any, Any]]:
        la = [self.lhs(v) for v in a.inputs]
        rb = [self.rhs(v) for v in b.inputs]
        if any(x is None for x in la + rb):
            return [(None, None)]
        straight = max(_distance(x, y) for x, y in zip(la, rb))
        crossed = max(_distance(x, y) for x, y in zip(la, reversed(rb)))
        return list(zip(la, rb)) if straight <= crossed else list(zip(la, reversed(rb)))


def _output_pairs(lg: Graph, rg: Graph) -> list[tuple[Value, Value]]:
    """Each lhs output with rhs's of its name, else (as many outputs on each side) with the
    one in its place: an export renames its outputs (``output`` becomes ``transpose_12``)."""
    rnames = dict(zip(rg.output_names, rg.outputs))
    if all(name in rnames for name in lg.output_names):
        return [(u, rnames[name]) for name, u in zip(lg.output_names, lg.outputs)]
    if len(lg.outputs) != len(rg.outputs):
        return [(u, rnames[name]) for name, u in zip(lg.output_names, lg.outputs)
                if name in rnames]
    return list(zip(lg.outputs, rg.outputs))


def _made_in(graph: Graph, value: Value, nodes: set[int]) -> bool:
    p = graph.producer(value)
    return p is not None and graph.index(p) in nodes


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over the values' scale (inf when shapes or non-finite places differ)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    fx, fy = np.isfinite(x), np.isfinite(y)
    if not np.array_equal(fx, fy) or not np.array_equal(x[~fx], y[~fy]):
        return float("inf")
    if not fx.any():
        return 0.0
    scale = float(np.sqrt(np.mean(np.square(x[fx]))))
    err = float(np.max(np.abs(x[fx] - y[fy])))
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


_MISSING = object()  # a value the reference interpreter could not compute


class _Partial(Interpreter):
    """The reference interpreter, leaving out what it cannot compute: the outputs of an op
    it cannot run (an opaque op) and of every op downstream of one are ``_MISSING``."""

    def run_node(self, index: int, node: Node, args: list[Any]) -> tuple[Any, ...]:
        if not any(a is _MISSING for a in args):
            try:
                return super().run_node(index, node, args)
            except ExecutionError:
                pass
        return (_MISSING,) * len(node.outputs)


def _lhs_values(model: TracedModel, seed: int, needed: set[Value]) -> dict[Value, np.ndarray]:
    """lhs's values in ``needed`` on ``seed``'s inputs, computed in float64; a value the
    reference interpreter cannot compute (downstream of an op it cannot run: an opaque op)
    is left out, and a region that needs it stays unsettled."""
    g = model.graph
    inputs = example_inputs(model, seed)
    out: dict[Value, np.ndarray] = {}

    def keep(node: Node, outs: tuple[Any, ...]) -> None:
        out.update((v, o) for v, o in zip(node.outputs, outs)
                   if v in needed and o is not _MISSING)

    interp = _Partial(g, model.weights, on_node=keep)
    env = interp.bind(interp.named_inputs(inputs))
    out.update((v, x) for v, x in env.items() if v in needed)
    with np.errstate(all="ignore"):
        interp.execute(env)
    return out


def _needed(pairing: Pairing, region: Region) -> set[Value]:
    """The lhs values a region's proof reads: what its rhs side reads from outside (through
    the value map) and every value its exits carry on lhs."""
    lg, rg = pairing.lhs, pairing.rhs
    out: set[Value] = set()
    for j in region.rhs:
        out.update(pairing.values[v] for v in rg.nodes[j].inputs if v in pairing.values)
    for i in region.lhs:
        out.update(lg.nodes[i].outputs)
        out.update(lg.nodes[i].inputs)
    for i, j in pairing.alignment.pairs:
        a, b = lg.nodes[i], rg.nodes[j]
        if any(_made_in(lg, v, region.lhs) for v in a.inputs) or any(
                _made_in(rg, v, region.rhs) for v in b.inputs):
            out.update(a.inputs)
            out.update(pairing.values[v] for v in b.inputs if v in pairing.values)
    out.update(lg.outputs)
    return out


def arbitrate(findings: Sequence[Finding], pairing: Pairing, lhs: TracedModel,
              rhs: TracedModel, rweights: Mapping[str, Any], seeds: Sequence[int]
              ) -> tuple[list[Finding], list[str], list[Region]]:
    """The findings that stand, a note for each region that computes the same, and those
    regions.

    Args:
        findings: the structural findings of ``diff``.
        pairing: the two canonical graphs and their correspondence.
        lhs / rhs: the two canonical models (lhs's inputs and weights are used).
        rweights: rhs's weights as the numbers ran it (lhs's moved into rhs).
        seeds: the input seeds the numbers ran on.
    """
    pending = [r for r in regions(pairing, findings)
               if not _rounds(pairing, r) and
               not any(f.affects is not None or (f.code == "attr-mismatch"
                                                 and not _representation(f))
                       for f in r.findings)]
    if not pending:
        return list(findings), [], []
    needed: set[Value] = set()
    for region in pending:
        needed |= _needed(pairing, region)
    worst = {id(r): 0.0 for r in pending}
    for seed in seeds:
        values = _lhs_values(lhs, seed, needed)
        rin = rhs_inputs(pairing.lhs, pairing.rhs, example_inputs(lhs, seed))
        for region in pending:
            if worst[id(region)] > SAME:
                continue
            gap = _Proof(pairing, region, rweights, rin, values).run()
            worst[id(region)] = float("inf") if gap is None else max(worst[id(region)], gap)
    widen = {id(r): _widenable(pairing, r) for r in pending}
    for region in pending:  # and on what reaches each region widened, where it may be
        if worst[id(region)] <= SAME and widen[id(region)]:
            gap = _Proof(pairing, region, rweights, rin, values, widened=lhs.weights).run()
            worst[id(region)] = float("inf") if gap is None else max(worst[id(region)], gap)
    settled: set[int] = set()
    notes: list[str] = []
    same = [region for region in pending if worst[id(region)] <= SAME]
    for region in same:
        settled.update(id(f) for f in region.findings)
        notes.append(_note(region, worst[id(region)], seeds, widen[id(region)]))
    return [f for f in findings if id(f) not in settled], notes, same


def inside(numeric: Sequence[Finding], same: Sequence[Region], outputs_agree: bool
           ) -> tuple[list[Finding], list[str]]:
    """The numeric findings that stand, and a note for each one left out: a divergence at
    a layer of a region that computes the same (on either side, or whose causes all lie in
    it), while every output agrees, is the region written differently (LayoutLMv3's bucket
    index truncated before its offset is added or after: the two part where a ``where``
    throws the values away, and -inf cast to an integer differs there)."""
    if not same or not outputs_agree:
        return list(numeric), []
    where = _by_node(same)

    def owner(places: list[tuple[str, int | None]]) -> Region | None:
        owners = [where.get(p) for p in places]
        return owners[0] if owners and all(o is owners[0] for o in owners) else None

    kept, notes = [], []
    for f in numeric:
        own = [(side, side_index(s)) for side, s in (("lhs", f.lhs), ("rhs", f.rhs))
               if s is not None]
        causes = [(str(c.value), side_index(c)) for c in f.causes]
        if f.code != "numeric-divergence" or (owner(own) is None and owner(causes) is None):
            kept.append(f)
            continue
        notes.append(f"inside a region written differently that computes the same: "
                     f"{_downstream(f)}, and the outputs agree")
    return kept, notes


def _by_node(found: Sequence[Region]) -> dict[tuple[str, int], Region]:
    """Each region's nodes, ``("lhs", i)`` and ``("rhs", j)``, to their region."""
    where: dict[tuple[str, int], Region] = {}
    for region in found:
        where.update((("lhs", i), region) for i in region.lhs)
        where.update((("rhs", j), region) for j in region.rhs)
    return where


WIDEN = 16.0  # in one more trial, what reaches a region is scaled by this


def _widened(value: np.ndarray) -> np.ndarray:
    """A float activation scaled by ``WIDEN`` (one factor for every value, so that values
    related linearly stay so): the example's values seldom reach where two ops written
    differently part (a ReLU6 against a ReLU part above 6, which a freshly initialized
    MobileNetV2's activations never reach); a mask or a count (integers, booleans, a float
    of two values) as it is."""
    x = np.asarray(value)
    if x.dtype.kind != "f" or x.size == 0 or np.unique(x.ravel()[:4096]).size <= 2:
        return x
    return x * WIDEN


# ops that bend or saturate: where one side has one the other writes otherwise, the two
# may part only beyond the example's range
_BENDS = frozenset({"clip", "relu", "minimum", "maximum", "hardsigmoid", "hardswish",
                    "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh", "softplus",
                    "mish"})


def _widenable(pairing: Pairing, region: Region) -> bool:
    """Whether the region runs widened too: an op that bends or saturates differs between
    its two sides (an op-mismatch of a ReLU6's clip against a ReLU), and no cast to an
    integer on either side (a bucket index computes the same only where the values fit
    both integer types). Only then: scaling keeps what reaches the region related linearly,
    not through a nonlinear op one side computes inside and the other reads from outside
    (BigBird's block gathers), so widening is kept to where it can show something."""
    bends = []
    for graph, nodes in ((pairing.lhs, region.lhs), (pairing.rhs, region.rhs)):
        if any((n := graph.nodes[i]).op == "cast" and n.attrs["dtype"] not in FLOAT_DTYPES
               for i in nodes):
            return False
        bends.append(sorted(graph.nodes[i].op for i in nodes
                            if graph.nodes[i].op in _BENDS))
    return bool(bends[0] or bends[1]) and bends[0] != bends[1]


_NARROW = frozenset({"bfloat16", "float16"})


def _rounds(pairing: Pairing, region: Region) -> bool:
    """Whether one side of the region casts to a narrower float (a round trip through
    bfloat16): float64 holds the cast as the identity, so the numbers cannot settle what
    the precision lost is."""
    def narrowing(graph: Graph, nodes: set[int]) -> set[str]:
        return {n.attrs["dtype"] for i in nodes if (n := graph.nodes[i]).op == "cast"
                and n.attrs["dtype"] in _NARROW}

    return narrowing(pairing.lhs, region.lhs) != narrowing(pairing.rhs, region.rhs)


def _representation(f: Finding) -> bool:
    """Whether an attribute finding is about how values are held or moved, not what is
    computed from weights, so that the numbers may settle it. A cast into one integer type
    against a cast into another (int64 in PyTorch, int32 in TF, of a truncated bucket
    index) computes the same wherever the values fit both. An op that only moves data
    (a pad, a slice, a concat) holds no weight that could hide a difference: two writes
    into a zero tensor's slices against one write of the two joined pad other widths,
    and what the region hands on is the same on every input tried."""
    if f.op is not None and get_spec(f.op).category == "shape":
        return True
    if f.op != "cast" or f.attr != "dtype" or f.lhs is None or f.rhs is None:
        return False
    return {f.lhs.value, f.rhs.value} <= INT_DTYPES


def _note(region: Region, gap: float, seeds: Sequence[int], widened: bool = False) -> str:
    said = "; ".join(f.message for f in region.findings[:3])
    more = f" (and {len(region.findings) - 3} more)" if len(region.findings) > 3 else ""
    where = "seed 0" if list(seeds) == [0] else f"seeds {', '.join(map(str, seeds))}"
    if widened:
        where += ", and on what reaches it scaled up"
    return (f"written differently, computes the same: {said}{more}; the region's outputs "
            f"agree to {gap:.1e} of their scale in float64 on {where}")


def confirm(structural: Sequence[Finding], numeric: Sequence[Finding], pairing: Pairing
            ) -> tuple[list[Finding], list[Finding]]:
    """One root cause, one finding: a numeric divergence at a layer of a structural
    finding's region (on either side), or whose causes (the layers upstream that explain it)
    all lie in one such region, is that finding's consequence; it leaves the findings and the structural
    one says the numbers confirm it. Returns the structural findings (some with that
    sentence added) and the numeric ones left."""
    found = regions(pairing, structural)
    where = _by_node(found)
    confirmed: dict[int, Finding] = {}
    left: list[Finding] = []
    for f in numeric:
        own = [where.get((side, side_index(s))) for side, s in (("lhs", f.lhs), ("rhs", f.rhs))
               if s is not None]
        wired = next((g for o in own if o is not None for g in o.findings
                      if g.code == "edge-mismatch"), None)
        if wired is not None:  # a layer a wiring finding names, wired to other values
            confirmed.setdefault(id(wired), f)
            continue
        places = [(str(c.value), side_index(c)) for c in f.causes]
        if not places:  # where it parts: its own layer, on either side
            places = [(side, side_index(s)) for side, s in (("lhs", f.lhs), ("rhs", f.rhs))
                      if s is not None]
        owners = [where.get(p) for p in places]
        if not f.causes:  # its own layer on one side is enough (a stride moved off it)
            owners = [o for o in owners if o is not None]
        region = owners[0] if owners else None
        if region is None or any(o is not region for o in owners):
            reshaped = None if f.causes else _reshaped_above(pairing, structural, f)
            if reshaped is None:
                left.append(f)
            else:  # the first layer compared again after the shapes part, downstream
                confirmed.setdefault(id(reshaped), f)
            continue
        first = region.findings[0]
        confirmed.setdefault(id(first), f)
    out = []
    for f in structural:
        seen = confirmed.get(id(f))
        out.append(f if seen is None else replace(f, message=f"{f.message}{CONFIRMED}"
                                                  f"{_downstream(seen)}"))
    return out, left


def _reshaped_above(pairing: Pairing, structural: Sequence[Finding], f: Finding
                    ) -> Finding | None:
    """The structural finding nearest upstream of numeric finding ``f``'s layer (on lhs)
    whose layer makes outputs of other shapes on the two sides (a stride moved): the
    layers between were not compared, and the first one compared again after the shapes
    meet (a global pool) parts as its consequence; None where there is none."""
    lg, rg = pairing.lhs, pairing.rhs
    at = side_index(f.lhs) if f.lhs is not None else None
    if at is None or not 0 <= at < len(lg.nodes):
        return None
    changing: dict[int, Finding] = {}
    for g in structural:
        i = side_index(g.lhs) if g.lhs is not None else None
        j = side_index(g.rhs) if g.rhs is not None else None
        if i is None or j is None or not (0 <= i < len(lg.nodes) and 0 <= j < len(rg.nodes)):
            continue
        if [v.shape for v in lg.nodes[i].outputs] != [v.shape for v in rg.nodes[j].outputs]:
            changing.setdefault(i, g)
    if not changing:
        return None
    seen, stack, found = {at}, [at], []
    while stack:  # lhs's layers upstream of ``f``'s
        node = lg.nodes[stack.pop()]
        for v in node.inputs:
            p = lg.producer(v)
            if p is None:
                continue
            k = lg.index(p)
            if k not in seen:
                seen.add(k)
                stack.append(k)
                if k in changing:
                    found.append(k)
    return changing[max(found)] if found else None


def _downstream(f: Finding) -> str:
    side = f.rhs or f.lhs
    stats = side.value if side is not None and isinstance(side.value, dict) else {}
    size = ""
    if stats.get("scale") == 0 and "max_abs" in stats:  # a mask of zeros, an integer count
        size = (f" by {stats['max_abs']:.3g} in {stats.get('mismatch', 0.0):.0%} of their "
                "elements")
    elif "max_rel" in stats:
        size = f" by {stats['max_rel']:.2e} of their scale"
    what = "gradients" if f.code == "gradient-divergence" else "values"
    return f"{what} part at {f.op} at {side.scope if side else '<model>'}{size}"
