"""``SeedRun``: one numeric comparison on one set of inputs (see ``compare`` for the plan)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgraph.align import Alignment
from specgraph.ir import Graph, Node, Value
from specgraph.numeric import findings as words
from specgraph.numeric.engine import Execution
from specgraph.numeric.oracle import directional_derivative, reference_outputs
from specgraph.numeric.result import LayerResult, ReproCase
from specgraph.numeric.runner import FLOAT, Runner
from specgraph.numeric.stats import Stats, Tolerance, all_finite, measure, tolerance
from specgraph.numeric.arrays import arrays_for
from specgraph.ops import get_spec
from specgraph.report import Finding

__all__ = ["Sides", "SeedRun"]


@dataclass
class Sides:
    """The two graphs, their runners and weights, and which rhs value is which lhs value."""

    alignment: Alignment
    lrun: Runner
    rrun: Runner
    lweights: Mapping[str, np.ndarray]
    rweights: Mapping[str, np.ndarray]
    vmap: dict[Value, Value]
    transferred: bool
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lhs: Graph = self.alignment.lhs
        self.rhs: Graph = self.alignment.rhs
        self.l2r = self.alignment.lhs_to_rhs()
        self.r2l = self.alignment.rhs_to_lhs()
        self.param_agree = self._param_agreement()

    def _param_agreement(self) -> dict[Value, bool]:
        out = {}
        for name, v in self.rhs.params.items():
            u = self.vmap.get(v)
            if self.transferred or u is None:
                out[v] = self.transferred
                continue
            a = np.asarray(self.lweights[self.lhs.param_name(u)])
            b = np.asarray(self.rweights[name])
            out[v] = a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-7))
        return out


def _is_float(v: Value) -> bool:
    return v.dtype in FLOAT


def _worst(stats: list[Stats]) -> Stats | None:
    if not stats:
        return None
    return max(stats, key=lambda s: (s.diverges, s.mismatch, s.max_rel))


class SeedRun:
    """Runs lhs then rhs on one seed's inputs, comparing each aligned layer as rhs makes it."""

    def __init__(self, sides: Sides, seed: int, linputs: Mapping[str, np.ndarray],
                 rinputs: Mapping[str, np.ndarray], loss: Mapping[str, np.ndarray],
                 opts: Any, *, backward: bool, say: Callable[[str], None]) -> None:
        self.s, self.seed, self.opts, self.backward, self.say = sides, seed, opts, backward, say
        self.linputs, self.rinputs, self.loss = linputs, rinputs, loss
        self.ax = arrays_for(sides.lrun, sides.rrun)
        self.store = self.ax.store(opts.store_budget)
        self.precisions = (opts.lhs_context.dtype, opts.rhs_context.dtype)
        self.fwd: dict[int, Stats] = {}
        self.iso: dict[int, Stats] = {}
        self.bwd: dict[int, Stats] = {}
        self.inputs_ok: dict[int, bool] = {}
        self.agree: dict[Value, bool] = {}
        self.lfinite: dict[Value, bool] = {}
        self.rfinite: dict[Value, bool] = {}
        self.events: list[tuple[int, Finding]] = []
        self.first_fwd: int | None = None
        self.first_bwd: int | None = None
        self.later = 0
        self.nan: dict[str, bool] = {}
        self.nondeterministic: dict[str, bool] = {}
        self.outputs: dict[str, Stats] = {}
        self.gradients: dict[str, Stats] = {}
        self.layers: tuple[LayerResult, ...] = ()
        self.case: ReproCase | None = None
        self._floors: dict[Value, float] = {}
        self.share_agree: dict[Value, bool] = {}  # rhs value -> its readers' shares agree
        self._done = 0  # aligned layers compared forward, for progress lines

    def tol(self, node: Node, backward: bool = False) -> Tolerance:
        return tolerance(node, self.precisions, rtol=self.opts.rtol, atol=self.opts.atol,
                         backward=backward)

    def execute(self) -> list[Finding]:
        try:
            self._run_lhs()
            self._run_rhs()
        finally:
            self.store.close()
        rg = self.s.rhs
        self.layers = tuple(
            LayerResult(words.describe(self.s.lhs.nodes[self.s.r2l[j]]),
                        words.describe(rg.nodes[j]), self.fwd.get(j), self.iso.get(j),
                        self.bwd.get(j))
            for j in sorted(self.s.r2l) if j in self.fwd or j in self.bwd)
        events = sorted(self.events, key=lambda e: e[0])
        if self.first_fwd is not None and not self.opts.isolated:
            events[0] = (0, words.with_reach(events[0][1], self.later, self.outputs))
        return [f for _, f in events]

    # --- lhs ---------------------------------------------------------------------------
    def _run_lhs(self) -> None:
        s, lg = self.s, self.s.lhs
        need: set[Value] = set()
        for i in s.l2r:
            need.update(lg.nodes[i].outputs)
            need.update(v for v in lg.nodes[i].inputs if lg.producer(v) is not None)
        # what a reshape or transpose makes is remade from its input when needed
        need = {v for v in need if lg.producer(v).op not in _LAYOUT_OPS}  # type: ignore
        self.say(f"seed {self.seed}: running lhs with {s.lrun.framework} "
                 f"({len(lg.nodes)} nodes{', forward and backward' if self.backward else ''})")
        ex = Execution(lg, s.lrun, s.lweights, self.linputs, backward=self.backward)
        self._seed_finite(lg, self.lfinite, self.linputs, s.lweights)

        def on_node(i: int, node: Node, args: Any, outs: Any) -> None:
            hosts = [self.ax.keep(s.lrun, o) for o in outs]
            for v, h in zip(node.outputs, hosts):
                if v in need:
                    self.store.put(("f", v), h)
            self._check_finite("lhs", lg, i, node, hosts, self.lfinite)
            self._check_repeat("lhs", s.lrun, self.opts.lhs_context.repeat, i, node, args,
                               hosts)

        outs = ex.forward(on_node=on_node)
        for name, o in outs.items():
            self.store.put(("out", name), self.ax.keep(s.lrun, o))
        if not self.backward:
            return

        def on_back(i: int, node: Node, octs: Any, shares: Any) -> None:
            if i not in s.l2r:
                return
            for k, c in enumerate(octs):  # else summed from the readers' shares if needed
                if c is not None and self.opts.isolated:
                    self.store.put(("oct", i, k), self.ax.keep(s.lrun, c))
            for slot, c in enumerate(shares):
                if c is not None and lg.param_name(node.inputs[slot]) is None:
                    self.store.put(("ct", i, slot), self.ax.keep(s.lrun, c))

        def on_param(name: str, grad: Any) -> None:
            self.store.put(("grad", name), self.ax.keep(s.lrun, grad))

        ex.backward(self.loss, on_node=on_back, on_param=on_param)

    def _seed_finite(self, g: Graph, flags: dict[Value, bool], inputs: Mapping[str, Any],
                     weights: Mapping[str, Any]) -> None:
        for name, v in zip(g.input_names, g.inputs):
            flags[v] = all_finite(inputs[name])
        for name, v in g.params.items():
            flags[v] = all_finite(weights[name])

    def _check_finite(self, side: str, g: Graph, index: int, node: Node,
                      hosts: list[np.ndarray], flags: dict[Value, bool]) -> None:
        for v, h in zip(node.outputs, hosts):
            flags[v] = self.ax.finite(h)
        if side in self.nan or all(flags[v] for v in node.outputs):
            return
        if all(flags.get(v, True) for v in node.inputs):
            self.nan[side] = True
            self.events.append((3, words.nan_introduced(side, g, node, "forward")))

    def _check_repeat(self, side: str, runner: Runner, repeat: int, index: int, node: Node,
                      args: Any, hosts: list[np.ndarray]) -> None:
        if repeat <= 1 or side in self.nondeterministic:
            return
        for _ in range(repeat - 1):
            again = [self.ax.keep(runner, o) for o in runner.run(node, args)]
            if not all(self.ax.equal(a, b) for a, b in zip(hosts, again)):
                self.nondeterministic[side] = True
                g = self.s.lhs if side == "lhs" else self.s.rhs
                self.events.append((4, words.nondeterministic(
                    side, g, node, [self.ax.host(h) for h in hosts],
                    [self.ax.host(h) for h in again])))
                return

    # --- rhs ---------------------------------------------------------------------------
    def _run_rhs(self) -> None:
        s, rg = self.s, self.s.rhs
        self.say(f"seed {self.seed}: running rhs with {s.rrun.framework}, comparing "
                 f"{len(s.r2l)} aligned layers as they are produced")
        ex = Execution(rg, s.rrun, s.rweights, self.rinputs, backward=self.backward)
        self._seed_finite(rg, self.rfinite, self.rinputs, s.rweights)
        feed = self._feed_inputs if self.opts.isolated else None
        lagging = _Lagging(self._compare_forward)
        outs = ex.forward(on_node=lagging, feed=feed)
        lagging.flush()
        self._compare_outputs(outs)
        if not self.backward:
            return
        loss = {}
        lnames = dict(zip(s.lhs.outputs, s.lhs.output_names))
        for position, (name, v) in enumerate(zip(rg.output_names, rg.outputs)):
            u = s.vmap.get(v)
            lname = lnames.get(u) if u is not None else None
            if lname is None and position < len(s.lhs.output_names):
                lname = s.lhs.output_names[position]
            if lname in self.loss:
                loss[name] = self.loss[lname].astype(np.float32)
        self.say(f"seed {self.seed}: rhs backward, comparing gradients layer by layer")
        feed_cts = self._feed_cotangents if self.opts.isolated else None
        lagging = _Lagging(self._compare_backward)

        def on_param(name: str, grad: Any) -> None:
            lagging.flush()  # its reader's share, compared first, sets what this one uses
            self._compare_gradient(name, grad)

        ex.backward(loss, on_node=lagging, on_param=on_param, feed=feed_cts)
        lagging.flush()

    def _lhs_value(self, u: Value) -> np.ndarray | None:
        lg = self.s.lhs
        p = lg.producer(u)
        if p is not None:
            if ("f", u) in self.store:
                return self.ax.host(self.store.get(("f", u)))
            if p.op not in _LAYOUT_OPS:
                return None
            ins = [self._lhs_value(x) for x in p.inputs]
            if any(x is None for x in ins):
                return None
            out = get_spec(p.op).reference(*ins, **p.attrs)
            return np.asarray(out[p.outputs.index(u)] if isinstance(out, tuple) else out)
        if u in lg.constants:
            return np.asarray(lg.constants[u])
        name = lg.param_name(u)
        if name is not None:
            return np.asarray(self.s.lweights[name])
        return np.asarray(self.linputs[lg.input_names[lg.inputs.index(u)]])

    def _lhs_kept(self, u: Value) -> Any:
        """lhs's value ``u`` as kept for comparison (remade if it was not kept)."""
        if ("f", u) in self.store:
            return self.store.get(("f", u))
        return self._lhs_value(u) if self.s.lhs.producer(u) is not None else None

    def _lhs_oct(self, i: int, k: int) -> np.ndarray | None:
        """The gradient that reached lhs node ``i``'s output ``k``: kept (isolated mode), or
        summed from its readers' shares and the loss (None if a reader's share is unknown)."""
        if ("oct", i, k) in self.store:
            return self.ax.host(self.store.get(("oct", i, k)))
        lg = self.s.lhs
        v = lg.nodes[i].outputs[k]
        total: np.ndarray | None = None
        if v in lg.outputs:
            name = lg.output_names[lg.outputs.index(v)]
            if name in self.loss:
                total = np.asarray(self.loss[name], dtype=np.float64)
        index = {id(n): r for r, n in enumerate(lg.nodes)}
        for reader in lg.consumers(v):
            r = index[id(reader)]
            for slot, x in enumerate(reader.inputs):
                if x is not v:
                    continue
                key = self._share_key(r, slot)
                if key is None or key not in self.store:
                    return None
                share = self.ax.host(self.store.get(key)).astype(np.float64)
                total = share if total is None else total + share
        return None if total is None else total.astype(np.float32)

    def _lhs_inputs(self, i: int) -> list[np.ndarray] | None:
        values = [self._lhs_value(u) for u in self.s.lhs.nodes[i].inputs]
        return None if any(v is None for v in values) else values  # type: ignore[misc]

    def _feed_inputs(self, j: int, node: Node, args: list[Any]) -> list[Any]:
        if j not in self.s.r2l:
            return args
        i = self.s.r2l[j]
        lin = self._lhs_inputs(i)
        if not _feedable(lin, node):
            return args
        return [self.s.rrun.put(x, v.dtype) for x, v in zip(lin, node.inputs)]

    def _agrees(self, v: Value) -> bool:
        if v in self.agree:
            return self.agree[v]
        rg = self.s.rhs
        if rg.producer(v) is not None:
            return False  # made by a node lhs has no counterpart for
        if v in self.s.param_agree:
            return self.s.param_agree[v]
        return True  # an input or a constant

    def _compare_forward(self, j: int, node: Node, args: Any, outs: Any) -> None:
        s = self.s
        hosts = [self.ax.keep(s.rrun, o) for o in outs]
        self._check_finite("rhs", s.rhs, j, node, hosts, self.rfinite)
        self._check_repeat("rhs", s.rrun, self.opts.rhs_context.repeat, j, node, args, hosts)
        if j not in s.r2l:
            return
        self._done += 1
        if self._done * 4 // len(s.r2l) > (self._done - 1) * 4 // len(s.r2l):
            self.say(f"seed {self.seed}: compared {self._done}/{len(s.r2l)} layers forward")
        a = s.lhs.nodes[s.r2l[j]]
        if self._moves_data_alike(a, node):
            self.agree.update((v, True) for v in node.outputs)
            self.inputs_ok[j] = True
            return
        tol = self.tol(node)
        stats = []
        for k, (v, h) in enumerate(zip(node.outputs, hosts)):
            lv = self._lhs_kept(a.outputs[k]) if k < len(a.outputs) else None
            if lv is not None:
                st = self.ax.measure(lv, h, tol)
                self.agree[v] = not st.diverges
                stats.append(st)
        worst = _worst(stats)
        if worst is None:
            return
        if worst.shape_differs:  # laid out differently here: nothing to compare
            self._note(f"{words.describe(node)} not compared: its output is shaped "
                       f"{list(node.outputs[0].shape)} on rhs, "
                       f"{list(a.outputs[0].shape)} on lhs")
            return
        self.fwd[j] = worst
        self.inputs_ok[j] = self.opts.isolated or (
            all(self._agrees(v) for v in node.inputs) and self._wired_alike(a, node))
        if self.opts.isolated:
            self.iso[j] = worst
        if not worst.diverges:
            if self.opts.isolated and worst.max_rel > tol.rtol / 8 and self._gap(j) > 1e-7:
                self.events.append((0, words.numeric_divergence(
                    s.lhs, a, s.rhs, node, worst, tol, words.Verdict("unknown", "definition"),
                    [], s.lrun.framework, s.rrun.framework, self.seed)))
            return
        if self.first_fwd is not None and not self.opts.isolated:
            self.later += 1
        elif self._forward_finding(j, worst, tol):
            self.first_fwd = j if self.first_fwd is None else self.first_fwd

    def _forward_finding(self, j: int, stats: Stats, tol: Tolerance) -> bool:
        """Report the divergence at rhs node ``j`` unless it is rounding that accumulated
        upstream (every layer agrees when fed the same inputs, no definition differs);
        returns whether it was reported."""
        s = self.s
        i = s.r2l[j]
        a, b = s.lhs.nodes[i], s.rhs.nodes[j]
        lin = self._lhs_inputs(i)
        verdict = words.Verdict("unknown", "no inputs to re-run it on")
        if _feedable(lin, b):
            rin = [s.rrun.put(x, v.dtype) for x, v in zip(lin, b.inputs)]
            riso = [s.rrun.fetch(o) for o in s.rrun.run(b, rin)]
            louts = [self._lhs_value(u) for u in a.outputs]
            if any(x is None for x in louts):
                louts = []
            iso = _worst([measure(x, y, tol) for x, y in zip(louts, riso)])
            if iso is not None:
                self.iso[j] = iso
                verdict = self._judge(a, b, lin, louts, riso, iso, tol)
            if self.case is None and verdict.reason != "inherited":
                self.case = ReproCase("forward", a, b, tuple(lin), (), verdict.blame,
                                      s.lrun.framework, s.rrun.framework, self.seed)
        upstream = [] if self.inputs_ok.get(j, True) else self._upstream(a, b)
        if verdict.reason in ("inherited", "no inputs to re-run it on") and not upstream:
            crossed = self._rewired(a, b)
            if crossed:
                self.events.append((0, words.rewired(s.lhs, a, s.rhs, b, crossed, stats, tol,
                                                     self.seed)))
                return True
        if verdict.reason == "inherited" and not upstream:
            root = self._definition_root(j)
            if root is not None:
                k, gap = root
                ra, rb = s.lhs.nodes[s.r2l[k]], s.rhs.nodes[k]
                self.events.append((0, words.subtle_definition(
                    s.lhs, ra, s.rhs, rb, gap, a, b, stats, tol, self.seed)))
                return True
            self._note(f"values at {words.describe(b)} differ by {stats.max_rel:.2e} of their "
                       f"scale (seed {self.seed}), beyond the tolerance ({tol.rtol:.1e}), yet "
                       "every layer agrees when fed the same inputs and no definition "
                       "differs: rounding that accumulated, not reported as a divergence")
            return False
        self.events.append((0, words.numeric_divergence(
            s.lhs, a, s.rhs, b, stats, tol, verdict, upstream, s.lrun.framework,
            s.rrun.framework, self.seed)))
        return True

    def _note(self, text: str) -> None:
        if text not in self.s.notes:
            self.s.notes.append(text)

    def _definition_root(self, j: int, limit: int = 256) -> tuple[int, float] | None:
        """The earliest aligned layer above rhs node ``j`` whose two definitions, run in
        float64 on the same inputs, differ: a difference too small to stand out of float32
        noise at that layer that grows downstream (an epsilon, say). Returns its rhs index
        and the gap relative to the values' scale."""
        s, rg = self.s, self.s.rhs
        index = {id(n): k for k, n in enumerate(rg.nodes)}
        seen: set[int] = set()
        stack = [rg.producer(v) for v in rg.nodes[j].inputs]
        found: list[tuple[int, float]] = []
        while stack and len(seen) < limit:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(rg.producer(v) for v in node.inputs)
            k = index[id(node)]
            if k not in s.r2l:
                continue
            gap = self._gap(k)
            if gap > 1e-7:
                found.append((k, gap))
        return min(found) if found else None

    def _gap(self, j: int) -> float:
        """How far apart, relative to the values' scale, the two definitions of aligned rhs
        node ``j`` compute in float64 on lhs's inputs (0.0 when they cannot be run)."""
        s = self.s
        a, b = s.lhs.nodes[s.r2l[j]], s.rhs.nodes[j]
        lin = self._lhs_inputs(s.r2l[j])
        if not _feedable(lin, b):
            return 0.0
        return max((_rel_error(x, t) for x, t in zip(reference_outputs(a, lin),
                                                     reference_outputs(b, lin))), default=0.0)

    def _judge(self, a: Node, b: Node, lin: list[np.ndarray], louts: list[np.ndarray],
               riso: list[np.ndarray], iso: Stats, tol: Tolerance) -> words.Verdict:
        if not iso.diverges:
            return words.Verdict("unknown", "inherited")
        truth_l = reference_outputs(a, lin)
        truth_r = reference_outputs(b, lin)
        el = max((_rel_error(x, t) for x, t in zip(louts, truth_l)), default=0.0)
        er = max((_rel_error(x, t) for x, t in zip(riso, truth_r)), default=0.0)
        differ = any(measure(x, y, tol).diverges for x, y in zip(truth_l, truth_r))
        return words.judge(el, er, tol.rtol, definitions_differ=differ)

    def _moves_data_alike(self, a: Node, b: Node) -> bool:
        """A reshape, transpose... that both sides apply alike to inputs that agree: its
        outputs agree by construction, so measuring them would only cost time."""
        return (b.op in _LAYOUT_OPS and a.op == b.op and a.attrs == b.attrs
                and not self.opts.isolated and self._wired_alike(a, b)
                and all(self._agrees(v) for v in b.inputs))

    def _wired_alike(self, a: Node, b: Node) -> bool:
        """Whether each input of rhs's node is the counterpart of lhs's input in that slot."""
        return len(a.inputs) == len(b.inputs) and all(
            self.s.vmap.get(v) is u for u, v in zip(a.inputs, b.inputs))

    def _rewired(self, a: Node, b: Node) -> list[tuple[Node | None, Node | None]]:
        """Where the two layers read values that are not each other's counterparts: the
        producers (None for a graph input or parameter) each side reads in those slots."""
        if len(a.inputs) != len(b.inputs):
            return []
        return [(self.s.lhs.producer(u), self.s.rhs.producer(v))
                for u, v in zip(a.inputs, b.inputs) if self.s.vmap.get(v) is not u]

    def _upstream(self, a: Node, b: Node) -> list[tuple[str, Node]]:
        """The unmatched nodes above the two layers that explain why their inputs differ."""
        out: list[tuple[str, Node]] = []
        for side, graph, node, matched in (("rhs", self.s.rhs, b, self.s.r2l),
                                           ("lhs", self.s.lhs, a, self.s.l2r)):
            seen: set[int] = set()
            stack = list(node.inputs)
            while stack and len(out) < 4:
                p = graph.producer(stack.pop())
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                if graph.nodes.index(p) not in matched:
                    out.append((side, p))
                    stack.extend(p.inputs)
        return out

    def _compare_outputs(self, outs: Mapping[str, Any]) -> None:
        s = self.s
        lnames = dict(zip(s.lhs.outputs, s.lhs.output_names))
        for position, (name, v) in enumerate(zip(s.rhs.output_names, s.rhs.outputs)):
            u = s.vmap.get(v)
            lname = lnames.get(u) if u is not None else None
            if lname is None and position < len(s.lhs.output_names):
                lname = s.lhs.output_names[position]
            if lname is None or ("out", lname) not in self.store:
                continue
            producer = s.rhs.producer(v)
            tol = self.tol(producer) if producer is not None else Tolerance(1e-4, 1e-4)
            self.outputs[lname] = self.ax.measure(self.store.get(("out", lname)),
                                                  self.ax.keep(s.rrun, outs[name]), tol)

    # --- rhs backward ------------------------------------------------------------------
    def _feed_cotangents(self, j: int, node: Node, octs: list[Any]) -> list[Any]:
        i = self.s.r2l.get(j)
        if i is None:
            return octs
        return [self.s.rrun.put(self.ax.host(self.store.get(("oct", i, k))), v.dtype)
                if ("oct", i, k) in self.store else c
                for k, (c, v) in enumerate(zip(octs, node.outputs))]

    def _compare_backward(self, j: int, node: Node, octs: Any, shares: Any) -> None:
        s = self.s
        i = s.r2l.get(j)
        hosts = [None if c is None else self.ax.keep(s.rrun, c) for c in shares]
        self._check_backward_finite(j, node, octs, hosts)
        if i is None:  # a node lhs lacks sends gradients lhs does not have
            self.share_agree.update((v, False) for v, h in zip(node.inputs, hosts)
                                    if h is not None)
            return
        a = s.lhs.nodes[i]
        # the output gradients were measured as the shares of the readers that sent them
        oct_ok = self.opts.isolated or all(self.share_agree.get(v, True)
                                           for v in node.outputs)
        if self._moves_data_alike(a, node) and oct_ok:
            self.share_agree.update((v, True) for v in node.inputs)
            return
        tol = self.tol(node, backward=True)
        floor = max((self.ax.rms(self.ax.keep(s.rrun, c)) for c in octs if c is not None),
                    default=0.0)
        stats = []
        for slot, h in enumerate(hosts):
            st = self._share_stats(i, node, slot, h, tol, floor)
            if st is not None:
                stats.append(st)
        worst = _worst(stats)
        if worst is None:
            return
        self.bwd[j] = worst
        fwd = self.fwd.get(j)
        local = oct_ok and self.inputs_ok.get(j, False) and not (fwd and fwd.diverges)
        if worst.diverges and local and (self.first_bwd is None or self.opts.isolated):
            if self._gradient_finding(j, worst, tol, floor):
                self.first_bwd = j if self.first_bwd is None else self.first_bwd

    def _share_key(self, i: int, slot: int, rhs_input: Value | None = None) -> Any:
        """Where lhs's share of node ``i``'s input ``slot`` is kept: a parameter read once is
        its whole gradient (``None`` for parameters read several times, compared whole)."""
        u = self.s.lhs.nodes[i].inputs[slot]
        name = self.s.lhs.param_name(u)
        if name is None:
            return ("ct", i, slot)
        single = len(self.s.lhs.consumers(u)) == 1 and (
            rhs_input is None or len(self.s.rhs.consumers(rhs_input)) == 1)
        return ("grad", name) if single else None

    def _share_stats(self, i: int, node: Node, slot: int, host: np.ndarray | None,
                     tol: Tolerance, floor: float) -> Stats | None:
        if slot < len(node.inputs) and self.s.rhs.param_name(node.inputs[slot]) is not None:
            self._floors[node.inputs[slot]] = floor
        key = self._share_key(i, slot, node.inputs[slot])
        if host is None or key is None or key not in self.store:
            return None
        st = self.ax.measure(self.store.get(key), host, tol, floor)
        if st.shape_differs:
            return None
        v = node.inputs[slot]
        same = self.s.vmap.get(v) is self.s.lhs.nodes[i].inputs[slot]  # the same value?
        self.share_agree[v] = self.share_agree.get(v, True) and same and not st.diverges
        if key[0] == "grad":  # a parameter read once: this is its whole gradient
            self.gradients[key[1]] = st
        if st.diverges and get_spec(node.op).commutative and len(node.inputs) == 2:
            other = ("ct", i, 1 - slot)
            if other in self.store:
                swapped = self.ax.measure(self.store.get(other), host, tol, floor)
                if not swapped.diverges:
                    return swapped
        return st

    def _check_backward_finite(self, j: int, node: Node, octs: Any, hosts: list[Any]) -> None:
        if "rhs-backward" in self.nan:
            return
        if any(h is not None and not self.ax.finite(h) for h in hosts):
            if all(c is None or self.ax.finite(self.ax.keep(self.s.rrun, c)) for c in octs):
                self.nan["rhs-backward"] = True
                self.events.append((3, words.nan_introduced("rhs", self.s.rhs, node,
                                                            "backward")))

    def _gradient_finding(self, j: int, stats: Stats, tol: Tolerance, floor: float) -> bool:
        """Report the gradient divergence at rhs node ``j`` unless rhs's pullback, fed lhs's
        inputs and output gradients, agrees with lhs's (the difference then came with the
        output gradients, within tolerance, and grew where a gradient cancels to near
        zero); returns whether it was reported."""
        s = self.s
        i = s.r2l[j]
        a, b = s.lhs.nodes[i], s.rhs.nodes[j]
        verdict = words.Verdict("unknown", "no inputs to re-run it on")
        lin = self._lhs_inputs(i)
        if _feedable(lin, b):
            verdict = self._judge_backward(i, a, b, lin, tol, floor)
            if verdict.reason == "inherited":
                self._note(f"gradients of {words.describe(b)} differ by {stats.max_rel:.2e} "
                           f"(seed {self.seed}), yet its pullback agrees when fed the same "
                           "inputs and output gradients: rounding in the gradients that "
                           "reached it, not reported as a divergence")
                return False
            if self.case is None or self.case.kind != "forward":
                octs = tuple(self._lhs_oct(i, k) for k in range(len(a.outputs)))
                self.case = ReproCase("backward", a, b, tuple(lin), octs, verdict.blame,
                                      s.lrun.framework, s.rrun.framework, self.seed)
        self.events.append((2, words.gradient_divergence(
            s.lhs, a, s.rhs, b, stats, tol, verdict, s.lrun.framework, s.rrun.framework,
            self.seed)))
        return True

    def _judge_backward(self, i: int, a: Node, b: Node, lin: list[np.ndarray],
                        tol: Tolerance, floor: float) -> words.Verdict:
        s = self.s
        locts = [self._lhs_oct(i, k) for k in range(len(a.outputs))]
        _, pullback = s.rrun.vjp(b, [s.rrun.put(x, v.dtype) for x, v in zip(lin, b.inputs)])
        rshares = pullback([None if c is None else s.rrun.put(c, v.dtype)
                            for c, v in zip(locts, b.outputs)])
        keys = [self._share_key(i, k, b.inputs[k] if k < len(b.inputs) else None)
                for k in range(len(a.inputs))]
        lshares = [self.ax.host(self.store.get(key)) if key is not None and key in self.store
                   else None for key in keys]
        rhost = [None if c is None else s.rrun.fetch(c).astype(np.float64) for c in rshares]
        if not any(x is not None and y is not None and measure(x, y, tol, floor).diverges
                   for x, y in zip(lshares, rhost)):
            return words.Verdict("unknown", "inherited")
        direction = [None if x is None or y is None else x.astype(np.float64) - y
                     for x, y in zip(lshares, rhost)]
        if not any(d is not None and np.any(d) for d in direction):
            return words.Verdict("unknown", "inherited")
        truth_l = directional_derivative(a, lin, locts, direction)
        truth_r = directional_derivative(b, lin, locts, direction)
        vl = sum(float(np.sum(x * d)) for x, d in zip(lshares, direction) if d is not None)
        vr = sum(float(np.sum(x * d)) for x, d in zip(rhost, direction) if d is not None)
        scale = max(abs(truth_l), abs(truth_r), abs(vl), abs(vr), 1e-30)
        differ = abs(truth_l - truth_r) > tol.rtol * scale
        return words.judge(abs(vl - truth_l) / scale, abs(vr - truth_r) / scale, tol.rtol,
                           definitions_differ=differ)

    def _compare_gradient(self, name: str, grad: Any) -> None:
        """A parameter's whole gradient, against lhs's, once rhs has finished it."""
        s = self.s
        v = s.rhs.params[name]
        u = s.vmap.get(v)
        lname = s.lhs.param_name(u) if u is not None else None
        if lname is None or ("grad", lname) not in self.store or lname in self.gradients:
            return
        readers = s.rhs.consumers(v)
        tol = self.tol(readers[0], backward=True) if readers else Tolerance(1e-4, 1e-4)
        self.gradients[lname] = self.ax.measure(self.store.get(("grad", lname)),
                                                self.ax.keep(s.rrun, grad), tol,
                                                self._floors.get(v, 0.0))


class _Lagging:
    """Calls ``compare`` one node late: the framework (JAX dispatches asynchronously) computes
    the next node while the previous one is compared. Every node is compared after all the
    nodes it depends on, as the comparison needs."""

    def __init__(self, compare: Callable[..., None]) -> None:
        self.compare = compare
        self.pending: tuple[Any, ...] | None = None

    def __call__(self, *event: Any) -> None:
        self.flush()
        self.pending = event

    def flush(self) -> None:
        if self.pending is not None:
            event, self.pending = self.pending, None
            self.compare(*event)


_LAYOUT_OPS = frozenset({"reshape", "transpose", "squeeze", "unsqueeze", "identity"})


def _feedable(values: list[np.ndarray] | None, node: Node) -> bool:
    """Whether lhs's ``values`` can be fed to rhs's ``node`` (same count and shapes)."""
    return values is not None and len(values) == len(node.inputs) and all(
        tuple(np.shape(x)) == v.shape for x, v in zip(values, node.inputs))


def _rel_error(got: np.ndarray, truth: np.ndarray) -> float:
    t = np.asarray(truth, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    if g.shape != t.shape:
        return float("inf")
    finite = np.isfinite(t)
    scale = float(np.sqrt(np.mean(np.square(t[finite])))) if finite.any() else 1.0
    err = np.abs(g - t)[finite]
    return float(np.max(err, initial=0.0)) / max(scale, 1e-30)
