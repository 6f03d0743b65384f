"""``Localizer``: at a layer whose values or gradients part, what is reported and who is blamed.

The layer is re-run on rhs with lhs's inputs (and output gradients) and both sides are held
against the fp64 reference of what each side's graph says it computes
(``specgraph.numeric.oracle``): a side that leaves its own definition is blamed; two sides
that each keep theirs differ in definition; a layer that agrees when fed the same inputs
inherited the difference from upstream: from a layer one side lacks (named), from values
wired differently (named), from a definition that differs by less than float32 noise at its
own layer (traced back and named), or from rounding that accumulated (a note, not a
finding). Findings are returned ordered by code (``specgraph.report.CODES``), then in the
order the run met them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.numeric import findings as words
from specgraph.numeric.lhs_values import LhsValues
from specgraph.numeric.oracle import (conditioning_error, directional_derivative,
                                      reference_outputs)
from specgraph.numeric.program import host_array
from specgraph.numeric.record import Measurements, worst
from specgraph.numeric.repro import ReproCase, write_repro
from specgraph.numeric.sides import Sides
from specgraph.numeric.stats import Stats, Tolerance, measure, reduction_size, share_floor
from specgraph.report import CODES, Finding

__all__ = ["Localizer", "feedable"]


class Localizer:
    """Decides, for one seed, which divergences become findings and what they say.

    Args:
        sides: the comparison's fixed parts.
        lhs: lhs's values (kept or remade).
        record: what the run has measured so far.
        seed: the input seed, for messages.
    """

    def __init__(self, sides: Sides, lhs: LhsValues, record: Measurements, seed: int) -> None:
        self.s, self.p = sides, sides.pairing
        self.lhs, self.record, self.seed = lhs, record, seed
        self.found: list[Finding] = []
        self.first_forward: Finding | None = None
        self.first_fwd: int | None = None  # rhs index of the first forward divergence
        self.first_bwd: int | None = None
        self.later = 0  # layers that part after the first, end to end
        self.nan: set[str] = set()  # "lhs", "rhs", "rhs-backward": NaN already reported
        self.nondeterministic: set[str] = set()
        self.case: ReproCase | None = None
        self.repro: tuple[str, ...] = ()
        self.notes: list[str] = []
        # gradient differences judged no divergence, by kind and layer (a layer is judged
        # twice, as its reader's input and as itself: noted once, the larger difference)
        self.passed: dict[tuple[str, str], words.Passed] = {}
        self.native_rhs: Any = None  # rhs's NativeExecution when its program gives the numbers

    # --- the findings ---------------------------------------------------------------------
    def findings(self, outputs: Mapping[str, Stats]) -> list[Finding]:
        """Every finding, by code then in the order met; the first forward divergence
        (end to end) says how far the difference travels."""
        out = sorted(self.found, key=lambda f: CODES.index(f.code))
        first = self.first_forward
        if first is not None and not self.s.options.isolated:
            out[out.index(first)] = words.with_reach(first, self.later, outputs)
        return out

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _programs(self) -> tuple[str, str]:
        """What each side ran, as a blame names it: the framework, with how it ran where
        both sides are the same framework (a model against its own compiled self)."""
        lrun, rrun = self.s.lrun, self.s.rrun
        if lrun.framework != rrun.framework:
            return lrun.framework, rrun.framework
        lc, rc = lrun.context, rrun.context
        return (f"{lrun.framework}, {lc.device} {lc.mode} {lc.dtype}",
                f"{rrun.framework}, {rc.device} {rc.mode} {rc.dtype}")

    def _passed(self, kind: str, b: Node, stats: Stats) -> None:
        """A difference at rhs node ``b`` (its gradients, or its values: ``accumulated``)
        judged no divergence: noted with the others of its kind (``findings.passed_notes``)."""
        new = words.Passed(kind, words.describe(b), stats.max_rel, self.seed)
        seen = self.passed.get((kind, new.layer))
        if seen is None or not seen.size >= new.size:
            self.passed[(kind, new.layer)] = new

    def nan_introduced(self, side: str, graph: Graph, node: Node, direction: str) -> None:
        key = side if direction == "forward" else f"{side}-backward"
        if key not in self.nan:
            self.nan.add(key)
            self.found.append(words.nan_introduced(side, graph, node, direction,
                                                   self.s.options.voice))

    def nondeterminism(self, side: str, graph: Graph, node: Node, first: list[np.ndarray],
                       again: list[np.ndarray]) -> None:
        if side not in self.nondeterministic:
            self.nondeterministic.add(side)
            self.found.append(words.nondeterministic(side, graph, node, first, again,
                                                     self.s.options.voice))

    def _capture(self, case: ReproCase) -> None:
        """Keep the first divergence, and write its repro where the options ask for one."""
        if self.case is not None:
            return
        self.case = case
        folder = self.s.options.repro
        if folder is not None:
            backends = self.s.backends
            self.repro = write_repro(case, Path(folder), [("lhs", backends.lhs_repro),
                                                          ("rhs", backends.rhs_repro)])
            compiled = sorted(case.compiled)
            if compiled:
                ran = ("the model's own op" if all(side in case.native_calls
                                                   for side in compiled)
                       else "specgraph's kernel for it")
                self.note(f"the --repro scripts run the layer alone ({ran}); "
                          f"{' and '.join(compiled)}'s script compiles that layer alone, so "
                          "a fault of the compiler that needs the fusion across layers of "
                          "the whole program may not show there")

    def _native_calls(self, a: Node, b: Node, inputs: Sequence[np.ndarray]
                      ) -> dict[str, tuple[str, Any, Any]]:
        """Each side's own call that made its layer's output in its program, where the
        program names one and it reads exactly the layer's inputs, in order, as laid out
        (one tensor, or tensors of shapes that tell them apart): what a ``--repro`` script
        runs in place of specgraph's kernel."""
        if self.s.options.repro is None:  # no script to write
            return {}
        shapes = [tuple(np.shape(x)) for x in inputs]
        calls = {}
        for side, node in (("lhs", a), ("rhs", b)):
            model = self.s.native(side)
            native = model.graph.natives.get(node.outputs[0]) if model is not None and \
                len(node.outputs) == 1 else None
            find = getattr(getattr(model, "program", None), "native_call", None)
            if native is None or native.perm is not None or native.shape is not None or \
                    find is None:
                continue
            call = find(native.key)
            if call is None or list(call[3]) != shapes or (
                    len(shapes) > 1 and len(set(shapes)) != len(shapes)):
                continue
            calls[side] = call[:3]
        return calls

    def _compiled(self) -> frozenset[str]:
        """The sides whose programs ran compiled whole."""
        return frozenset(side for side, run in (("lhs", self.s.lrun), ("rhs", self.s.rrun))
                         if run.context.mode == "compiled")

    # --- forward ------------------------------------------------------------------------
    def forward(self, j: int, stats: Stats, tol: Tolerance) -> None:
        """rhs node ``j``'s outputs were measured (``stats``, end to end or isolated)."""
        isolated = self.s.options.isolated
        if not stats.diverges:
            if isolated and stats.max_rel > tol.rtol / 8 and self.gap(j) > 1e-7:
                a, b = self._nodes(j)
                self.found.append(words.numeric_divergence(
                    self.p.lhs, a, self.p.rhs, b, stats, tol,
                    words.Verdict("unknown", "definition"), [], self.s.lrun.framework,
                    self.s.rrun.framework, self.seed, self.s.options.voice))
            return
        if self.first_fwd is not None and not isolated:
            self.later += 1
        elif self._forward_finding(j, stats, tol):
            self.first_fwd = j if self.first_fwd is None else self.first_fwd

    def _nodes(self, j: int) -> tuple[Node, Node]:
        return self.p.lhs.nodes[self.p.r2l[j]], self.p.rhs.nodes[j]

    def _add_forward(self, finding: Finding) -> bool:
        if self.first_forward is None:
            self.first_forward = finding
        self.found.append(finding)
        return True

    def _forward_finding(self, j: int, stats: Stats, tol: Tolerance) -> bool:
        """Report the divergence at rhs node ``j`` unless it is rounding that accumulated
        upstream (every layer agrees when fed the same inputs, no definition differs);
        returns whether it was reported."""
        s, p = self.s, self.p
        a, b = self._nodes(j)
        verdict = self._rerun(j, a, b, tol)
        upstream = [] if self.record.inputs_agree.get(j, True) else self._upstream(a, b)
        own = [p.rhs.param_name(v) for v in b.inputs if p.rhs.param_name(v) is not None
               and not s.param_agree.get(v, True)]
        if own and verdict.reason == "inherited" and not upstream:
            # fed lhs's inputs, lhs's weights included, the two agree: what parts them is
            # the weights rhs holds of its own (not moved: --no-transfer, or no counterpart)
            v = s.options.voice
            reason = (f"fed {v.lhs}'s inputs and weights the two layers agree: {v.rhs} holds "
                      f"weights of its own here ({', '.join(sorted(own))}), not {v.lhs}'s")
            return self._add_forward(words.numeric_divergence(
                p.lhs, a, p.rhs, b, stats, tol, words.Verdict("rhs", reason), [],
                s.lrun.framework, s.rrun.framework, self.seed, v))
        if verdict.reason in ("inherited", "no inputs to re-run it on") and not upstream:
            crossed = self._rewired(a, b)
            if crossed:
                return self._add_forward(words.rewired(p.lhs, a, p.rhs, b, crossed, stats,
                                                       tol, self.seed, s.options.voice))
        if verdict.reason in ("inherited", "conditioning") and not upstream:
            # each side computes this layer as well as float32 allows on its inputs: what
            # parts them comes from upstream, a definition too close to stand out where it
            # differs (an epsilon) or rounding that accumulated
            root = self._definition_root(j)
            if root is not None:
                k, gap = root
                ra, rb = self._nodes(k)
                return self._add_forward(words.subtle_definition(
                    p.lhs, ra, p.rhs, rb, gap, a, b, stats, tol, self.seed, s.options.voice))
        if verdict.reason == "conditioning":  # one note a layer, over every seed
            self._passed("conditioning", b, stats)
            return False
        if verdict.reason == "inherited" and not upstream:
            # one note for every such layer (a deep CNN has dozens): ``passed_notes``
            self._passed("accumulated", b, stats)
            return False
        if _rounding(verdict, stats):
            self._passed("rounding-values", b, stats)
            return False
        return self._add_forward(words.numeric_divergence(
            p.lhs, a, p.rhs, b, stats, tol, verdict, upstream, *self._programs(),
            self.seed, s.options.voice))

    def _rerun(self, j: int, a: Node, b: Node, tol: Tolerance) -> words.Verdict:
        """rhs's layer re-run on lhs's inputs and judged against both definitions; the
        first divergence that is not inherited is captured for a repro."""
        s = self.s
        lin = self.lhs.node_inputs(self.p.r2l[j])
        if not feedable(lin, b):
            return words.Verdict("unknown", "no inputs to re-run it on")
        verdict = words.Verdict("unknown", "no inputs to re-run it on")
        native = self.native_rhs
        if native is not None and self.record.inputs_agree.get(j, False) and \
                all(v in native.observed for v in b.outputs):
            # rhs's own program already ran this layer on inputs that agree with lhs's
            riso = [host_array(native.observed[v]) for v in b.outputs]
        else:
            rin = [s.rrun.put(x, v.dtype) for x, v in zip(lin, b.inputs)]
            riso = [s.rrun.fetch(o) for o in s.rrun.run(b, rin)]
        louts = [self.lhs.value(u) for u in a.outputs]
        if any(x is None for x in louts):
            louts = []
        iso = worst([measure(x, y, tol) for x, y in zip(louts, riso)])
        if iso is not None:
            self.record.isolated[j] = iso
            verdict = self._judge(a, b, lin, louts, riso, iso, tol)
        if verdict.reason != "inherited":
            self._capture(ReproCase("forward", a, b, tuple(lin), (), verdict.blame,
                                    s.lrun.framework, s.rrun.framework, self.seed,
                                    self._compiled(), self._native_calls(a, b, lin)))
        return verdict

    def _judge(self, a: Node, b: Node, lin: list[np.ndarray], louts: list[np.ndarray],
               riso: list[np.ndarray], iso: Stats, tol: Tolerance) -> words.Verdict:
        if not iso.diverges:
            return words.Verdict("unknown", "inherited")
        truth_l = reference_outputs(a, lin)
        truth_r = reference_outputs(b, lin)
        differ = any(measure(x, y, tol).diverges for x, y in zip(truth_l, truth_r))
        own = self._rhs_own_inputs(b)
        if own is not None:  # rhs's own program's outputs: held against its own inputs
            truth_r = reference_outputs(b, own)
        el = max((_rel_error(x, t) for x, t in zip(louts, truth_l)), default=0.0)
        er = max((_rel_error(x, t) for x, t in zip(riso, truth_r)), default=0.0)
        rtol = tol.rtol
        if self.native_rhs is not None:
            # what float32 allows this layer on these inputs: the fp64 reference moved by
            # rounding its inputs to float32 (large where the input makes it ill-conditioned),
            # grown with the square root of the terms each output sums (rounding inside)
            spread = conditioning_error(a, lin, truth_l)
            bound = 4.0 * spread * math.sqrt(max(1, reduction_size(a)))
            if not differ and max(el, er) <= max(rtol, bound):
                return words.Verdict("unknown", "conditioning")
            rtol = max(rtol, bound)
        return words.judge(el, er, rtol, definitions_differ=differ,
                           errors=(el, er) if self.native_rhs is not None else ())

    def _rhs_own_inputs(self, b: Node) -> list[np.ndarray] | None:
        """The inputs rhs's own program gave layer ``b`` (None outside native mode, or
        where one of them has no counterpart in the program)."""
        native = self.native_rhs
        if native is None or not all(v in native.observed for v in b.outputs):
            return None
        values = [native.host_value(v) for v in b.inputs]
        return None if any(x is None for x in values) else values  # type: ignore[misc]

    def _definition_root(self, j: int, limit: int = 256) -> tuple[int, float] | None:
        """The earliest aligned layer above rhs node ``j`` whose two definitions, run in
        float64 on the same inputs, differ: a difference too small to stand out of float32
        noise at that layer that grows downstream (an epsilon, say). Returns its rhs index
        and the gap relative to the values' scale."""
        rg = self.p.rhs
        seen: set[int] = set()
        stack = [rg.producer(v) for v in rg.nodes[j].inputs]
        found: list[tuple[int, float]] = []
        while stack and len(seen) < limit:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(rg.producer(v) for v in node.inputs)
            k = rg.index(node)
            if k not in self.p.r2l:
                continue
            gap = self.gap(k)
            if gap > 1e-7:
                found.append((k, gap))
        return min(found) if found else None

    def gap(self, j: int) -> float:
        """How far apart, relative to the values' scale, the two definitions of aligned rhs
        node ``j`` compute in float64 on lhs's inputs (0.0 when they cannot be run)."""
        a, b = self._nodes(j)
        lin = self.lhs.node_inputs(self.p.r2l[j])
        if not feedable(lin, b):
            return 0.0
        return max((_rel_error(x, t) for x, t in zip(reference_outputs(a, lin),
                                                     reference_outputs(b, lin))), default=0.0)

    def _rewired(self, a: Node, b: Node) -> list[tuple[Node | None, Node | None]]:
        """Where the two layers read values that are not each other's counterparts: the
        producers (None for a graph input or parameter) each side reads in those slots."""
        if len(a.inputs) != len(b.inputs):
            return []
        lc, rc = self.p.lhs.constants, self.p.rhs.constants
        return [(self.p.lhs.producer(u), self.p.rhs.producer(v))
                for u, v in zip(a.inputs, b.inputs) if self.p.values.get(v) is not u
                # one constant on both sides (a hard swish's 1/6) is no other wiring
                and not (u in lc and v in rc and np.array_equal(lc[u], rc[v]))]

    def _upstream(self, a: Node, b: Node) -> list[tuple[str, Node]]:
        """The unmatched nodes above the two layers that explain why their inputs differ."""
        out: list[tuple[str, Node]] = []
        for side, graph, node, matched in (("rhs", self.p.rhs, b, self.p.r2l),
                                           ("lhs", self.p.lhs, a, self.p.l2r)):
            seen: set[int] = set()
            stack = list(node.inputs)
            while stack and len(out) < 4:
                p = graph.producer(stack.pop())
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                if graph.index(p) not in matched:
                    out.append((side, p))
                    stack.extend(p.inputs)
        return out

    # --- backward -----------------------------------------------------------------------
    def backward(self, j: int, stats: Stats, tol: Tolerance, floor: float, *,
                 parted: frozenset[int] = frozenset()) -> None:
        """rhs node ``j``'s pullback shares part (``stats``) while its inputs and output
        gradients agree: report it unless it is inherited rounding. ``parted``: the input
        slots whose shares, kept by lhs, parted (empty where what parted is a whole gradient
        made of several readers' shares)."""
        if self.first_bwd is None or self.s.options.isolated:
            if self._gradient_finding(j, stats, tol, floor, parted):
                self.first_bwd = j if self.first_bwd is None else self.first_bwd

    def _gradient_finding(self, j: int, stats: Stats, tol: Tolerance, floor: float,
                          parted: frozenset[int]) -> bool:
        """Report the gradient divergence at rhs node ``j`` unless rhs's pullback, fed lhs's
        inputs and output gradients, agrees with lhs's (the difference then came with the
        output gradients, within tolerance, and grew where a gradient cancels to near
        zero); returns whether it was reported."""
        s, p = self.s, self.p
        i = p.r2l[j]
        a, b = self._nodes(j)
        verdict = words.Verdict("unknown", "no inputs to re-run it on")
        lin = self.lhs.node_inputs(i)
        if feedable(lin, b):
            verdict = self._judge_backward(i, a, b, lin, tol, floor, parted)
            if verdict.reason == "both" and self.native_rhs is not None and \
                    b.op in _PICKS_ONE and _has_ties(lin[0]):
                self._passed("ties", b, stats)
                return False
            if verdict.reason == "both" and self.native_rhs is not None and \
                    _near_a_kink(b, lin[0], tol):
                self._passed("kink", b, stats)
                return False
            if verdict.reason == "inherited":
                self._passed("inherited", b, stats)
                return False
            if _rounding(verdict, stats):
                self._passed("rounding", b, stats)
                return False
            octs = tuple(self.lhs.output_gradient(i, k) for k in range(len(a.outputs)))
            self._capture(ReproCase("backward", a, b, tuple(lin), octs, verdict.blame,
                                    s.lrun.framework, s.rrun.framework, self.seed,
                                    self._compiled(), self._native_calls(a, b, lin)))
        self.found.append(words.gradient_divergence(
            p.lhs, a, p.rhs, b, stats, tol, verdict, *self._programs(),
            self.seed, s.options.voice))
        return True

    def _judge_backward(self, i: int, a: Node, b: Node, lin: list[np.ndarray],
                        tol: Tolerance, floor: float, parted: frozenset[int] = frozenset()
                        ) -> words.Verdict:
        rrun = self.s.rrun
        locts = [self.lhs.output_gradient(i, k) for k in range(len(a.outputs))]
        native = self.native_rhs
        rg = self.p.rhs
        rshares = None
        if native is not None and all(
                v in native.grads and len(rg.consumers(v)) == 1 and v in native.single
                for v in b.inputs
                if rg.param_name(v) is None and v.dtype.startswith(("float", "bfloat"))):
            # rhs's own program's gradients at this layer's inputs (it alone reads them) and
            # at the parameters it alone reads (their whole gradient is its share)
            rshares = [self._native_share(native, v) for v in b.inputs]
            if any(k < len(rshares) and rshares[k] is None for k in parted):
                rshares = None  # a share that parted the program does not give: re-run
        if rshares is None:
            _, pullback = rrun.vjp(b, [rrun.put(x, v.dtype) for x, v in zip(lin, b.inputs)])
            rshares = pullback([None if c is None else rrun.put(c, v.dtype)
                                for c, v in zip(locts, b.outputs)])
        keys = [self.lhs.share_key(i, k, b.inputs[k] if k < len(b.inputs) else None)
                for k in range(len(a.inputs))]
        lshares = [self.lhs.host(key) if key is not None and key in self.lhs else None
                   for key in keys]
        rhost = [None if c is None else rrun.fetch(c).astype(np.float64) for c in rshares]
        # the shares that parted are ones lhs kept and rhs's re-run gives: where they agree
        # now, it is settled without lhs's kernel making the others
        if parted and all(k < len(lshares) and k < len(rhost) and lshares[k] is not None
                          and rhost[k] is not None for k in parted) and \
                not self._shares_part(lshares, rhost, b, tol, floor):
            return words.Verdict("unknown", "inherited")
        if native is not None and any(x is None for x in lshares) and \
                all(c is not None for c in locts):
            # lhs's program gave totals, not this layer's shares: lhs's kernel makes them
            lrun = self.s.lrun
            _, pull = lrun.vjp(a, [lrun.put(x, v.dtype) for x, v in zip(lin, a.inputs)])
            made = pull([lrun.put(c, v.dtype) for c, v in zip(locts, a.outputs)])
            lshares = [x if x is not None else (None if m is None else lrun.fetch(m))
                       for x, m in zip(lshares, made)]
        if not self._shares_part(lshares, rhost, b, tol, floor):
            return words.Verdict("unknown", "inherited")
        direction = [None if x is None or y is None else x.astype(np.float64) - y
                     for x, y in zip(lshares, rhost)]
        if not any(d is not None and np.any(d) for d in direction):
            return words.Verdict("unknown", "inherited")
        finite_l, finite_r = (all(x is None or bool(np.isfinite(x).all()) for x in shares)
                              for shares in (lshares, rhost))
        if finite_l != finite_r:  # Inf or NaN where the other side's gradient is finite:
            # there is no derivative along it to take; that side is the one off
            return words.judge(0.0 if finite_l else math.inf, 0.0 if finite_r else math.inf,
                               tol.rtol, definitions_differ=False)
        truth_l = directional_derivative(a, lin, locts, direction)
        truth_r = directional_derivative(b, lin, locts, direction)
        vl = sum(float(np.sum(x * d)) for x, d in zip(lshares, direction) if d is not None)
        vr = sum(float(np.sum(x * d)) for x, d in zip(rhost, direction) if d is not None)
        scale = max(abs(truth_l), abs(truth_r), abs(vl), abs(vr), 1e-30)
        differ = abs(truth_l - truth_r) > tol.rtol * scale
        return words.judge(abs(vl - truth_l) / scale, abs(vr - truth_r) / scale, tol.rtol,
                           definitions_differ=differ)

    def _native_share(self, native: Any, v: Value) -> Any:
        """The gradient rhs's own program gives the layer's input ``v`` as its share: the
        gradient at a value it alone reads, or a parameter's it alone reads (None
        otherwise)."""
        rg = self.p.rhs
        name = rg.param_name(v)
        if name is None:
            grad = native.grads.get(v)
        elif len(rg.consumers(v)) == 1:
            grad = native.native_param_grads.get(name)
        else:
            grad = None
        return None if grad is None else native.runner_form(grad, v.dtype)

    @staticmethod
    def _shares_part(lshares: list[Any], rhost: list[Any], b: Node, tol: Tolerance,
                     floor: float) -> bool:
        """Whether some input's gradient known on both sides parts beyond ``tol``."""
        return any(x is not None and y is not None and
                   measure(x, y, tol, share_floor(floor, b, k)).diverges
                   for k, (x, y) in enumerate(zip(lshares, rhost)))


# ops whose gradient goes to one element of several (the maximum): where elements tie, which
# one is each program's choice, and the layer has no derivative there
_PICKS_ONE = frozenset({"max_pool", "adaptive_max_pool", "reduce_max", "maximum"})


def _kinks(node: Node) -> tuple[float, ...]:
    """Where ``node``'s derivative jumps, for the piecewise-linear ops a model's gradient
    meets at every layer (ReLU's 0, a clip's bounds)."""
    if node.op in ("relu", "abs", "leaky_relu"):
        return (0.0,)
    if node.op == "clip":
        return tuple(float(node.attrs[k]) for k in ("min", "max")
                     if node.attrs.get(k) is not None)
    return ()


def _near_a_kink(node: Node, x: np.ndarray, tol: Tolerance) -> bool:
    """Whether some element of ``x`` lies within ``tol`` of a kink of ``node``: two
    programs that round it differently may put it on either side."""
    kinks = _kinks(node)
    if not kinks or np.size(x) == 0:
        return False
    x = np.asarray(x, np.float64)
    rms = float(np.sqrt(np.mean(np.square(x[np.isfinite(x)])))) if np.isfinite(x).any() else 0.0
    bound = tol.rtol * np.abs(x) + (tol.atol if tol.absolute else tol.atol * rms)
    return any(bool(np.any(np.abs(x - k) <= bound)) for k in kinks)


def _has_ties(x: np.ndarray) -> bool:
    """Whether ``x`` holds some value more than once (ties a maximum may meet)."""
    flat = np.asarray(x).ravel()
    return flat.size > 1 and np.unique(flat).size < flat.size


def feedable(values: list[np.ndarray] | None, node: Node) -> bool:
    """Whether lhs's ``values`` can be fed to rhs's ``node`` (same count and shapes)."""
    return values is not None and len(values) == len(node.inputs) and all(
        tuple(np.shape(x)) == v.shape for x, v in zip(values, node.inputs))


def _rel_error(got: Any, truth: np.ndarray) -> float:
    t = np.asarray(truth, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    if g.shape != t.shape:
        return float("inf")
    finite = np.isfinite(t)
    scale = float(np.sqrt(np.mean(np.square(t[finite])))) if finite.any() else 1.0
    err = np.abs(g - t)[finite]
    return float(np.max(err, initial=0.0)) / max(scale, 1e-30)


def _rounding(verdict: words.Verdict, stats: Stats) -> bool:
    """Whether a difference is float32 rounding past the tolerance model: one definition
    (no side blamed, none defined otherwise), both sides as far from its fp64 reference,
    a few elements apart by little (EfficientNetV2's BatchNorm gradients: 0.09% of them,
    6e-5 of their scale, cosine 1)."""
    return verdict.reason == "both" and stats.mismatch <= 0.01 and \
        stats.max_rel <= 1e-3 and stats.cosine >= 0.99999
