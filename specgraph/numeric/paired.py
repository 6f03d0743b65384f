"""``PairedRun``: one numeric comparison on one set of inputs, lhs run then rhs compared.

lhs runs first, forward then backward, and its aligned layers' outputs, output gradients
and pullback shares go to a store (``LhsValues``). rhs then runs with lhs's weights and
inputs; each aligned layer is measured the moment rhs produces it (``Measurements``) and a
layer that parts goes to the ``Localizer``, which decides what is reported. A reshape or
transpose both sides apply alike to agreeing inputs is not measured: it agrees by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import numpy as np

from specgraph.ir import Graph, Node, Value
from specgraph.numeric import findings as words
from specgraph.numeric.engine import Execution, NativeExecution
from specgraph.numeric.layouts import RhsOrders
from specgraph.numeric.lhs_values import LAYOUT_OPS, LhsValues
from specgraph.numeric.localize import Localizer, feedable
from specgraph.numeric.program import host_array
from specgraph.numeric.record import Measurements, worst
from specgraph.numeric.runner import Runner
from specgraph.numeric.sides import Sides
from specgraph.numeric.stats import Stats, Tolerance, remembering, share_floor
from specgraph.numeric.store import return_freed_memory
from specgraph.ops import get_spec
from specgraph.ops.dtypes import FLOAT_DTYPES
from specgraph.report import Finding

__all__ = ["PairedRun"]


class PairedRun:
    """Runs lhs then rhs on one seed's inputs, comparing each aligned layer as rhs makes it.

    Args:
        sides: the comparison's fixed parts.
        seed: the input seed.
        linputs / rinputs: each side's inputs (rhs's are lhs's, cast to rhs's dtypes).
        loss: the projection of each lhs output the backward pass starts from.
        say: progress lines.
    """

    def __init__(self, sides: Sides, seed: int, linputs: Mapping[str, np.ndarray],
                 rinputs: Mapping[str, np.ndarray], loss: Mapping[str, np.ndarray],
                 say: Callable[[str], None]) -> None:
        self.s, self.p = sides, sides.pairing
        self.seed, self.say = seed, say
        self.rinputs = rinputs
        self.outputs = self._rhs_output_names()
        # the loss reads only the outputs both sides have: one rhs lacks would send
        # gradients to lhs alone
        paired = {lname for _, _, lname in self.outputs if lname is not None}
        self.loss = {k: r for k, r in loss.items() if k in paired}
        self.ax = sides.backends.arrays
        store = self.ax.store(sides.options.store_budget)
        orders = RhsOrders(self.p.lhs, self.p.rhs, self.p.values, sides.native("rhs"))
        self.lhs = LhsValues(self.p.lhs, self.p.rhs, store, self.ax, sides.lweights,
                             linputs, self.loss, orders)
        self.record = Measurements()
        self.localizer = Localizer(sides, self.lhs, self.record, seed)
        self._done = 0  # aligned layers compared forward, for progress lines
        self._rhs_ex: Execution | None = None
        # the first rhs node whose backward made NaN from finite gradients, and whether the
        # NaN reached a parameter's gradient (``_judge_backward_nan``)
        self._nan_made: Node | None = None
        self._nan_kept = False
        self._stood_in: set[Value] = set()  # lhs's opaque outputs no program value stands for

    def execute(self) -> list[Finding]:
        """Run both sides; returns the findings (empty when the seed agrees)."""
        paired = {lname for _, _, lname in self.outputs}
        alone = [n for n in self.p.lhs.output_names if n not in paired]
        if alone:
            many = len(alone) > 1
            self.localizer.note(
                f"lhs output{'s' if many else ''} {', '.join(alone)} "
                f"{'have' if many else 'has'} no rhs counterpart (by alignment, name, place "
                "or shape): not compared, and left out of the loss the gradients come from")
        try:
            rhs_model = self.s.native("rhs")
            if rhs_model is not None:  # what rhs's program can do with its weights alone,
                # it does while lhs's runs
                rhs_model.program.prepare(self.s.program_weights("rhs"),
                                          self.s.options.rhs_context)
            with remembering():  # a pair measured twice (under two tolerances) is read once
                self._run_lhs()
                # lhs's program is gone: its memory serves rhs's, given back to the system
                # once the values it spills are on file (rhs starts meanwhile)
                self.lhs.store.after_writes(return_freed_memory)
                self._run_rhs()
            self._note_underflow()
        finally:
            self.lhs.store.close()
            # the programs' observations go now, not when a garbage collection finds the
            # cycles through the hooks (their memory goes back to the system before the
            # next seed's lhs runs: ``compare_numeric``)
            self._rhs_ex = self.localizer.native_rhs = None
        return self.localizer.findings(self.record.outputs)

    def _note_underflow(self) -> None:
        """One note for every value passed only by float32's least tolerance: layers (their
        values or gradients), outputs and parameter gradients at its underflow."""
        rec, rg = self.record, self.p.rhs
        found: dict[str, Stats] = {}
        for j, st in (*rec.forward.items(), *rec.backward.items()):
            if st.underflow:
                found.setdefault(words.describe(rg.nodes[j]), st)
        for name, st in rec.outputs.items():
            if st.underflow:
                found.setdefault(f"the output {name}", st)
        for name, st in rec.gradients.items():
            if st.underflow:
                found.setdefault(f"the gradient of {name}", st)
        if found:
            self.localizer.note(words.underflow(list(found),
                                                max(st.max_abs for st in found.values())))

    # --- lhs ---------------------------------------------------------------------------
    def _run_lhs(self) -> None:
        s, lg, lhs = self.s, self.p.lhs, self.lhs
        need = lhs.kept_needed(self.p.l2r)
        self.say(f"seed {self.seed}: running lhs with {s.lrun.framework} "
                 f"({len(lg.nodes)} nodes{', forward and backward' if s.backward else ''})")
        ex = self._execution("lhs", lg, s.lrun, s.lweights, lhs.inputs, self.loss)
        # the program's observations are all held until its walk ends: the store writes
        # what it spills behind the walk instead of holding it up
        with lhs.store.deferred() if isinstance(ex, NativeExecution) else nullcontext():
            self._walk_lhs(ex, need)

    def _walk_lhs(self, ex: Execution, need: set[Value]) -> None:
        s, lg, lhs = self.s, self.p.lhs, self.lhs
        self._seed_finite(lg, self.record.lhs_finite, lhs.inputs, s.lweights)

        def on_node(i: int, node: Node, args: Any, outs: Any) -> None:
            kept = [self.ax.keep(s.lrun, o) for o in outs]
            for v, h in zip(node.outputs, kept):
                if v in need:
                    lhs.put(("f", v), h)
            if self._introduces(node, kept, self.record.lhs_finite):
                self.record.lhs_introduces.add(i)
            self._check_repeat("lhs", ex, s.options.lhs_context.repeat, node, args, kept)

        outs = ex.forward(on_node=on_node)
        self._stood_in = set(ex.unobserved)
        for name, o in outs.items():
            lhs.put(("out", name), self.ax.keep(s.lrun, o))
        if not s.backward:
            return

        def on_back(i: int, node: Node, octs: Any, shares: Any) -> None:
            if i not in self.p.l2r:
                return
            for k, c in enumerate(octs):  # else summed from the readers' shares if needed
                if c is not None and (s.options.isolated or s.native("lhs")):
                    lhs.put(("oct", i, k), self.ax.keep(s.lrun, c))
            for slot, c in enumerate(shares):
                if c is not None and lg.param_name(node.inputs[slot]) is None:
                    lhs.put(("ct", i, slot), self.ax.keep(s.lrun, c))

        def on_param(name: str, grad: Any) -> None:
            lhs.put(("grad", name), self.ax.keep(s.lrun, grad))

        ex.backward(self.loss, on_node=on_back, on_param=on_param)

    def _seed_finite(self, g: Graph, flags: dict[Value, bool], inputs: Mapping[str, Any],
                     weights: Mapping[str, Any]) -> None:
        for name, v in zip(g.input_names, g.inputs):
            flags[v] = self.ax.finite(inputs[name])
        for name, v in g.params.items():
            flags[v] = self.ax.finite(weights[name])

    def _introduces(self, node: Node, kept: list[Any], flags: dict[Value, bool]) -> bool:
        """Record whether each output is finite; whether ``node`` turns finite inputs into
        NaN or Inf."""
        for v, h in zip(node.outputs, kept):
            flags[v] = self.ax.finite(h)
        return not all(flags[v] for v in node.outputs) and all(
            flags.get(v, True) for v in node.inputs)

    def _check_introduced(self, j: int, node: Node, kept: list[Any]) -> None:
        """NaN or Inf that one side's layer makes from finite inputs where the other side's
        counterpart keeps its values finite (both masking with -inf is the same program);
        a layer lhs has no counterpart for is judged alone, by NaN only."""
        rec, p = self.record, self.p
        introduces = self._introduces(node, kept, rec.rhs_finite)
        i = p.r2l.get(j)
        if i is None:
            if introduces and not all(self.ax.nan_free(h) for h in kept):
                self.localizer.nan_introduced("rhs", p.rhs, node, "forward")
            return
        a = p.lhs.nodes[i]
        # a mask on its way into a softmax that overflows to -inf (BLOOM adds finfo.min to
        # scores already near it) drowns its keys as a fill of finfo.min does: no NaN or
        # Inf introduced on that side
        lhs_drowns, rhs_drowns = self._drowns("lhs", a), self._drowns("rhs", node)
        lhs_finite = lhs_drowns or all(rec.lhs_finite.get(u, True) for u in a.outputs)
        rhs_finite = rhs_drowns or all(rec.rhs_finite[v] for v in node.outputs)
        introduces = introduces and not rhs_drowns
        if introduces and lhs_finite:
            self.localizer.nan_introduced("rhs", p.rhs, node, "forward")
        elif i in rec.lhs_introduces and not lhs_drowns and rhs_finite:
            self.localizer.nan_introduced("lhs", p.lhs, p.lhs.nodes[i], "forward")
        elif introduces and i in rec.lhs_introduces and not all(
                self.ax.nan_free(h) for h in kept):
            self.localizer.note(f"{words.describe(node)} makes NaN from finite inputs on both "
                                "sides alike; its values are compared where they are numbers")

    def _drowns(self, side: str, node: Node) -> bool:
        """Whether ``node``'s outputs are additive masks on their way into a softmax, where
        -inf and the lowest float drown a key alike (``specgraph.passes.drowned``)."""
        lhs, rhs = self.s.drowning_values
        return bool(node.outputs) and all(v in (lhs if side == "lhs" else rhs)
                                          for v in node.outputs)

    def _check_repeat(self, side: str, ex: Execution, repeat: int, node: Node, args: Any,
                      kept: list[Any]) -> None:
        if repeat <= 1 or side in self.localizer.nondeterministic:
            return
        g = self.p.lhs if side == "lhs" else self.p.rhs
        if isinstance(ex, NativeExecution):  # the whole program ran again: what differed
            if any(v in ex.again for v in node.outputs) and \
                    all(v in ex.observed for v in node.outputs):
                self.localizer.nondeterminism(
                    side, g, node, [self.ax.host(h) for h in kept],
                    [host_array(ex.again.get(v, ex.observed[v])) for v in node.outputs])
            return
        runner = ex.runner
        for _ in range(repeat - 1):
            again = [self.ax.keep(runner, o) for o in runner.run(node, args)]
            if not all(self.ax.equal(a, b) for a, b in zip(kept, again)):
                self.localizer.nondeterminism(side, g, node, [self.ax.host(h) for h in kept],
                                              [self.ax.host(h) for h in again])
                return

    # --- rhs forward ---------------------------------------------------------------------
    def _run_rhs(self) -> None:
        s, rg = self.s, self.p.rhs
        self.say(f"seed {self.seed}: running rhs with {s.rrun.framework}, comparing "
                 f"{len(self.p.r2l)} aligned layers as they are produced")
        ex = self._execution("rhs", rg, s.rrun, s.rweights, self.rinputs, self._rhs_loss())
        self._rhs_ex = ex
        self.localizer.native_rhs = ex if isinstance(ex, NativeExecution) else None
        self._seed_finite(rg, self.record.rhs_finite, self.rinputs, s.rweights)
        feed = self._feed_inputs if s.options.isolated else None
        lagging = _Lagging(self._compare_forward)
        outs = ex.forward(on_node=lagging, feed=feed)
        lagging.flush()
        self._compare_outputs(outs)
        if not s.backward:
            return
        self.say(f"seed {self.seed}: rhs backward, comparing gradients layer by layer")
        feed_cts = self._feed_cotangents if s.options.isolated else None
        lagging = _Lagging(self._compare_backward)

        trained: set[str] = set()

        def on_param(name: str, grad: Any) -> None:
            lagging.flush()  # its reader's share, compared first, sets what this one uses
            trained.add(name)
            self._compare_gradient(name, grad)
            if self._nan_made is not None and not self._nan_kept:
                self._nan_kept = not self.ax.nan_free(self.ax.keep(s.rrun, grad))

        ex.backward(self._rhs_loss(), on_node=lagging, on_param=on_param, feed=feed_cts)
        lagging.flush()
        self._judge_backward_nan(bool(trained))
        self._note_untrained(trained)

    def _judge_backward_nan(self, trains: bool) -> None:
        """The first rhs node that made NaN gradients from finite ones is a finding where
        the NaN reaches a parameter's gradient (or the side trains none); where every
        parameter gradient is free of it, a select after it discarded it (TensorFlow's
        DeBERTa fills masked scores with -inf and zeroes the softmax's rows that keep no
        key: the softmax's gradient there is NaN, the scores' is 0), and training never
        sees it: a note."""
        node = self._nan_made
        if node is None:
            return
        if self._nan_kept or not trains:
            self.localizer.nan_introduced("rhs", self.p.rhs, node, "backward")
            return
        self.localizer.note(f"rhs's {words.describe(node)} makes NaN gradients from finite "
                            "ones (backward pass), and a later step discards them: no "
                            "parameter gradient holds a NaN; not reported as a divergence")

    def _execution(self, side: str, graph: Graph, runner: Runner, weights: Any, inputs: Any,
                   loss: Mapping[str, np.ndarray]) -> Execution:
        """The side's run: its own program where it gives the numbers, else the replay."""
        model = self.s.native(side)
        if model is None:
            return Execution(graph, runner, weights, inputs, backward=self.s.backward)
        self.say(f"seed {self.seed}: running {side}'s own {model.program.framework} program "
                 f"({runner.context.mode}), forward and backward, observed at its layers")
        return NativeExecution(graph, runner, weights, inputs, backward=self.s.backward,
                               model=model, loss=loss,
                               program_weights=self.s.program_weights(side))

    def _rhs_output_names(self) -> list[tuple[str, Value, str | None]]:
        """Each rhs output with the name of its lhs counterpart, of its shape: the output the
        alignment pairs it with, else the one of its name, else the one in its place, else
        the only one left of its shape (None: no counterpart; its gradient is not fed, nor
        its value compared). Two programs may order their outputs differently (a T5's
        logits and encoder states)."""
        lg, rg = self.p.lhs, self.p.rhs
        lnames = dict(zip(lg.outputs, lg.output_names))
        shapes = {name: v.shape for name, v in zip(lg.output_names, lg.outputs)}
        found: dict[str, str | None] = {name: None for name in rg.output_names}
        taken: set[str] = set()

        def take(name: str, lname: str | None, shape: tuple[int, ...]) -> None:
            if found[name] is None and lname in shapes and lname not in taken and \
                    shapes[lname] == shape:
                found[name] = lname
                taken.add(lname)

        outputs = list(enumerate(zip(rg.output_names, rg.outputs)))
        for _, (name, v) in outputs:  # one pass per rule: a name beats another's place
            u = self.p.values.get(v)
            take(name, lnames.get(u) if u is not None else None, v.shape)
        for _, (name, v) in outputs:
            take(name, name, v.shape)
        for position, (name, v) in outputs:
            take(name, lg.output_names[position] if position < len(lg.output_names) else None,
                 v.shape)
        for _, (name, v) in outputs:
            left = [n for n in lg.output_names if n not in taken and shapes[n] == v.shape]
            take(name, left[0] if len(left) == 1 else None, v.shape)
        return [(name, v, found[name]) for name, v in zip(rg.output_names, rg.outputs)]

    def _rhs_loss(self) -> dict[str, np.ndarray]:
        return {name: self.loss[lname].astype(np.float32)
                for name, _, lname in self.outputs if lname in self.loss}

    def _feed_inputs(self, j: int, node: Node, args: list[Any]) -> list[Any]:
        if j not in self.p.r2l:
            return args
        lin = self.lhs.node_inputs(self.p.r2l[j])
        if not feedable(lin, node):
            return args
        return [self.s.rrun.put(x, v.dtype) for x, v in zip(lin, node.inputs)]

    def _agrees(self, v: Value) -> bool:
        if v in self.record.agrees:
            return self.record.agrees[v]
        if self.p.rhs.producer(v) is not None:
            return False  # made by a node lhs has no counterpart for
        if v in self.s.param_agree:
            return self.s.param_agree[v]
        return True  # an input or a constant

    def _compare_forward(self, j: int, node: Node, args: Any, outs: Any) -> None:
        s, rec = self.s, self.record
        kept = [self.ax.keep(s.rrun, o) for o in outs]
        i = self.p.r2l.get(j)
        a = self.p.lhs.nodes[i] if i is not None else None
        alike = a is not None and self._moves_data_alike(a, node)
        # measured first: the finite checks below read again the sums the measures found
        measured = self._measured_outputs(a, node, kept) if a is not None and not alike \
            else []
        self._check_introduced(j, node, kept)
        self._check_repeat("rhs", self._rhs_ex, s.options.rhs_context.repeat, node, args,
                           kept)
        if a is None:
            return
        self._progress()
        if alike:
            rec.agrees.update((v, True) for v in node.outputs)
            rec.inputs_agree[j] = True
            return
        stats = []
        for v, st in measured:
            rec.agrees[v] = not st.diverges
            stats.append(st)
        most = worst(stats)
        if most is None:
            return
        if most.shape_differs:  # laid out differently here: nothing to compare
            self.localizer.note(f"{words.describe(node)} not compared: its output is shaped "
                                f"{list(node.outputs[0].shape)} on rhs, "
                                f"{list(a.outputs[0].shape)} on lhs")
            return
        rec.forward[j] = most
        rec.inputs_agree[j] = s.options.isolated or (
            all(self._agrees(v) for v in node.inputs) and self._wired_alike(a, node))
        if s.options.isolated:
            rec.isolated[j] = most
        self.localizer.forward(j, most, s.tol(node))

    def _measured_outputs(self, a: Node, node: Node, kept: list[Any]
                          ) -> list[tuple[Value, Stats]]:
        """Each output of rhs's ``node`` that lhs's ``a`` kept, measured against it."""
        tol = self.s.tol(node)
        out = []
        rhs_stood_in = self._rhs_ex.unobserved if self._rhs_ex is not None else set()
        for k, (v, h) in enumerate(zip(node.outputs, kept)):
            lv = self.lhs.kept(a.outputs[k]) if k < len(a.outputs) else None
            if k < len(a.outputs) and (v in rhs_stood_in or a.outputs[k] in self._stood_in):
                continue  # an opaque op's unread output: the program gave no value
            if lv is not None:
                drowns = self.s.drowned(a.outputs[k], v)
                out.append((v, self.ax.measure(lv, h, replace(tol, drowned=True) if drowns
                                               else tol)))
        return out

    def _progress(self) -> None:
        self._done += 1
        total = len(self.p.r2l)
        if self._done * 4 // total > (self._done - 1) * 4 // total:
            self.say(f"seed {self.seed}: compared {self._done}/{total} layers forward")

    def _moves_data_alike(self, a: Node, b: Node) -> bool:
        """A reshape, transpose... that both sides apply alike to inputs that agree: its
        outputs agree by construction, so measuring them would only cost time."""
        return (b.op in LAYOUT_OPS and a.op == b.op and a.attrs == b.attrs
                and not self.s.options.isolated and self._wired_alike(a, b)
                and all(self._agrees(v) for v in b.inputs))

    def _wired_alike(self, a: Node, b: Node) -> bool:
        """Whether each input of rhs's node is the counterpart of lhs's input in that slot."""
        return len(a.inputs) == len(b.inputs) and all(
            self.p.values.get(v) is u for u, v in zip(a.inputs, b.inputs))

    def _compare_outputs(self, outs: Mapping[str, Any]) -> None:
        for name, v, lname in self.outputs:
            if lname is None or ("out", lname) not in self.lhs:
                continue
            producer = self.p.rhs.producer(v)
            tol = self.s.tol(producer) if producer is not None else Tolerance(1e-4, 1e-4)
            self.record.outputs[lname] = self.ax.measure(
                self.lhs.get(("out", lname)), self.ax.keep(self.s.rrun, outs[name]), tol)
        self._check_outputs_finite()

    def _check_outputs_finite(self) -> None:
        """An output finite on one side only, with no finding said yet (every layer excused:
        a -inf fill drowns a row that keeps no key into NaN, which the layer's own inputs
        explain): one finding at the first aligned layer whose values part so."""
        rec, p, loc = self.record, self.p, self.localizer
        if loc.first_fwd is not None or loc.nan:
            return
        parted = next(((name, st) for name, st in rec.outputs.items()
                       if st.lhs_finite != st.rhs_finite), None)
        if parted is None:
            return
        name, st = parted
        side = "rhs" if not st.rhs_finite else "lhs"
        for j in sorted(rec.forward):
            layer = rec.forward[j]
            if layer.lhs_finite == layer.rhs_finite or \
                    (layer.rhs_finite if side == "rhs" else layer.lhs_finite):
                continue
            graph = p.rhs if side == "rhs" else p.lhs
            node = p.rhs.nodes[j] if side == "rhs" else p.lhs.nodes[p.r2l[j]]
            loc.nan.add(side)
            loc.found.append(words.nonfinite_reaches(side, graph, node, name,
                                                     self.s.options.voice))
            return

    # --- rhs backward --------------------------------------------------------------------
    def _feed_cotangents(self, j: int, node: Node, octs: list[Any]) -> list[Any]:
        i = self.p.r2l.get(j)
        if i is None:
            return octs
        return [self.s.rrun.put(self.lhs.host(("oct", i, k)), v.dtype)
                if ("oct", i, k) in self.lhs else c
                for k, (c, v) in enumerate(zip(octs, node.outputs))]

    def _compare_backward(self, j: int, node: Node, octs: Any, shares: Any) -> None:
        s, rec = self.s, self.record
        i = self.p.r2l.get(j)
        kept = [None if c is None else self.ax.keep(s.rrun, c) for c in shares]
        if i is None:  # a node lhs lacks sends gradients lhs does not have
            self._check_backward_nan(node, octs, kept, i)
            rec.shares_agree.update((v, False) for v, h in zip(node.inputs, kept)
                                    if h is not None)
            return
        a = self.p.lhs.nodes[i]
        # the output gradients were measured as the shares of the readers that sent them;
        # rhs's own program gives totals, not shares: those are measured here, whole
        oct_stats = None
        if self.localizer.native_rhs is not None and not s.options.isolated:
            oct_stats = self._oct_stats(i, node, octs)
            oct_ok = oct_stats is not None and not oct_stats.diverges
        else:
            oct_ok = s.options.isolated or all(rec.shares_agree.get(v, True)
                                               for v in node.outputs)
        if self._moves_data_alike(a, node) and oct_ok:
            self._check_backward_nan(node, octs, kept, i)
            rec.shares_agree.update((v, True) for v in node.inputs)
            return
        tol = s.tol(node, backward=True)
        floor = max((self.ax.rms(self.ax.keep(s.rrun, c)) for c in octs if c is not None),
                    default=0.0)
        # a folded layer against a BatchNorm: their inputs are not each other's (the
        # gradients that reached their outputs were measured above)
        by_slot = {} if j in self.p.folds else {
            slot: st for slot, h in enumerate(kept)
            if (st := self._share_stats(i, node, slot, h, tol, floor)) is not None}
        # after the measures, whose sums its checks read again
        self._check_backward_nan(node, octs, kept, i)
        stats = list(by_slot.values())
        if oct_stats is not None:
            self._gradient_reached(j, node, oct_stats, tol)
        most = worst(stats)
        if most is None:
            # no share known: the gradient that reached it, whole (where laid out alike)
            if oct_stats is not None and not oct_stats.shape_differs:
                rec.backward[j] = oct_stats
            return
        rec.backward[j] = most
        fwd = rec.forward.get(j)
        local = oct_ok and rec.inputs_agree.get(j, False) and not (fwd and fwd.diverges)
        if most.diverges and local:
            self.localizer.backward(j, most, tol, floor,
                                    parted=frozenset(k for k, st in by_slot.items()
                                                     if st.diverges))

    def _gradient_reached(self, j: int, node: Node, stats: Stats, tol: Tolerance) -> None:
        """rhs's own program gives the gradient that reached each value whole: where the
        gradient reaching rhs node ``j``'s outputs parts while the gradients reaching the
        outputs of its one reader agreed (and that reader's forward agreed), that reader's
        backward is where they part (its input gradients are not shares one can see)."""
        rec, rg = self.record, self.p.rhs
        rec.octs_agree[j] = not stats.diverges
        if not stats.diverges or self.localizer.first_bwd is not None:
            return
        readers = {id(r): r for v in node.outputs for r in rg.consumers(v)}
        if len(readers) != 1:
            return
        (reader,) = readers.values()
        r = rg.index(reader)
        fwd = rec.forward.get(r)
        if r in self.p.r2l and rec.octs_agree.get(r, False) and \
                rec.inputs_agree.get(r, False) and not (fwd and fwd.diverges):
            floor = max((self.ax.rms(x) for x in self._reader_octs(r)), default=0.0)
            self.localizer.backward(r, stats, self.s.tol(reader, backward=True), floor)

    def _reader_octs(self, r: int) -> list[Any]:
        native = self.localizer.native_rhs
        return [native.grads[v] for v in self.p.rhs.nodes[r].outputs if v in native.grads]

    def _oct_stats(self, i: int, node: Node, octs: Sequence[Any]) -> Stats | None:
        """The gradients that reached rhs node ``node``'s outputs (its own program's)
        measured against those that reached lhs node ``i``'s; None where one is unknown."""
        stats = []
        for k, c in enumerate(octs):
            if c is None:
                continue
            if k >= len(self.p.lhs.nodes[i].outputs):
                return None
            want = self.lhs.kept_output_gradient(i, k)
            if want is None:
                return None
            tol = self.s.tol(node, backward=True)
            stats.append(self.ax.measure(want, self.ax.keep(self.s.rrun, c), tol))
        return worst(stats)

    def _share_stats(self, i: int, node: Node, slot: int, kept: Any, tol: Tolerance,
                     floor: float) -> Stats | None:
        rec = self.record
        v = node.inputs[slot]
        floor = share_floor(floor, node, slot)
        if self.p.rhs.param_name(v) is not None:
            rec.floors[v] = floor
        if slot >= len(self.p.lhs.nodes[i].inputs):
            return None  # an input lhs's layer does not have (a mask, a bias)
        key = self.lhs.share_key(i, slot, v)
        if kept is None or key is None or key not in self.lhs:
            return None
        st = self.ax.measure(self.lhs.get(key), kept, tol, floor)
        if st.shape_differs:
            return None
        same = self.p.values.get(v) is self.p.lhs.nodes[i].inputs[slot]  # the same value?
        rec.shares_agree[v] = rec.shares_agree.get(v, True) and same and not st.diverges
        if key[0] == "grad":  # a parameter read once: this is its whole gradient
            rec.gradients[key[1]] = st
        if st.diverges and get_spec(node.op).commutative and len(node.inputs) == 2:
            other = ("ct", i, 1 - slot)
            if other in self.lhs:
                swapped = self.ax.measure(self.lhs.get(other), kept, tol, floor)
                if not swapped.diverges:
                    return swapped
        return st

    def _check_backward_nan(self, node: Node, octs: Sequence[Any], kept: list[Any],
                            i: int | None) -> None:
        if "rhs-backward" in self.localizer.nan or self._nan_made is not None:
            return
        bad = [slot for slot, h in enumerate(kept) if h is not None and not self.ax.nan_free(h)]
        # output gradients with Inf make NaN in any program (Inf·0): the Inf is the finding
        if not bad or not all(c is None or self.ax.finite(self.ax.keep(self.s.rrun, c))
                              for c in octs):
            return
        if i is not None and all(self._lhs_nan_too(i, node, slot) for slot in bad):
            return  # both sides make the same NaN gradients (sqrt of a negative): one program
        self._nan_made = node  # judged once the parameter gradients are known

    def _lhs_nan_too(self, i: int, node: Node, slot: int) -> bool:
        """Whether lhs's counterpart gradient at ``slot`` has NaN or Inf as well."""
        if slot >= len(self.p.lhs.nodes[i].inputs):
            return False
        key = self.lhs.share_key(i, slot, node.inputs[slot])
        return key is not None and key in self.lhs and not self.ax.nan_free(self.lhs.get(key))

    def _note_untrained(self, trained: set[str]) -> None:
        """Parameters one side's program gives no gradient at all (a table frozen by
        ``requires_grad=False`` or ``stop_gradient``) while the other side trains them: one
        finding per side, training differs; their gradients are not compared (the forward
        values still are)."""
        rg, v = self.p.rhs, self.s.options.voice
        if not self.loss:  # no output both sides have: no gradient to tell frozen from unused
            return
        frozen: dict[str, list[str]] = {"lhs": [], "rhs": []}
        for name, w in rg.params.items():
            u = self.p.values.get(w)
            lname = self.p.lhs.param_name(u) if u is not None else None
            if lname is None or not rg.consumers(w) or w.dtype not in FLOAT_DTYPES:
                continue
            lhs_trains, rhs_trains = ("grad", lname) in self.lhs, name in trained
            if lhs_trains != rhs_trains:
                side = "lhs" if rhs_trains else "rhs"
                frozen[side].append(lname if side == "lhs" else name)
        for side, names in frozen.items():
            model = self.s.native(side)
            state = model.program.state if model is not None else frozenset()
            held = [n for n in names if n in state]
            if held:  # running statistics the other side differentiates: by design
                self.localizer.note(words.untrained_state(side, held, v))
            names = [n for n in names if n not in state]
            if names:
                g = self.p.lhs if side == "lhs" else self.p.rhs
                readers = [r[0] for n in names if (r := g.consumers(g.params[n]))]
                if readers:
                    self.localizer.found.append(words.untrained(side, g, readers, names, v))

    def _compare_gradient(self, name: str, grad: Any) -> None:
        """A parameter's whole gradient, against lhs's, once rhs has finished it."""
        rec = self.record
        v = self.p.rhs.params[name]
        u = self.p.values.get(v)
        lname = self.p.lhs.param_name(u) if u is not None else None
        if lname is None or ("grad", lname) not in self.lhs or lname in rec.gradients:
            return
        readers = self.p.rhs.consumers(v)
        tol = self.s.tol(readers[0], backward=True) if readers else Tolerance(1e-4, 1e-4)
        want, kept = self.lhs.get(("grad", lname)), self.ax.keep(self.s.rrun, grad)
        st = self.ax.measure(want, kept, tol, rec.floors.get(v, 0.0))
        if st.diverges and v not in rec.floors and len(readers) == 1:
            # its layer's shares were not measured: judged against its share of the
            # gradient that reached that layer, as they would be (a key bias's gradient
            # cancels to rounding: a softmax ignores a shift of all its scores)
            reader = readers[0]
            i = self.p.r2l.get(self.p.rhs.index(reader))
            reached = self.lhs.kept_output_gradient(i, 0) if i is not None else None
            if reached is not None:
                floor = share_floor(self.ax.rms(reached), reader, reader.inputs.index(v))
                st = self.ax.measure(want, kept, tol, floor)
        rec.gradients[lname] = st


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
