"""Mutation benchmark of the structural diff and of the numeric check: the golden transformer
block and CNN, written in PyTorch, JAX, Keras and exported to ONNX, against copies with one
planted mutation, for every ordered pair of frameworks. The mutations, and the layer each one
changes, are the table in ``tests/zoo/mutations.py`` (``tests/test_mutations.py`` runs a
subset of it). Then the same scores on real models: the peer corpus's HF transformers
ports (``bench/peer_models.py``) with one mutation planted in one framework's port
(``bench/peer_mutants.py``: a config value, or one layer's method replaced), each against
every framework's unmutated port and each unmutated port of another framework against it.

    python -m bench.mutations [--frameworks torch,jax,keras,onnx] [--models ...] [--quiet]
                              [--no-numeric] [--no-corpus] [--archs bert,gpt2,...]

Structural diff (``compare_structure``), over all (model, mutation, lhs framework, rhs
framework) cases:
    recall        the diff reports at least one finding;
    precision     it reports exactly one finding (nothing else);
    localization  a finding concerns the mutated layer (its op is the layer's ``op`` in
                  the table);
and false alarms: unmutated pairs of different frameworks that report anything. In the
corpus, the genuine differences between two frameworks' ports (``bench.peers.DISCOVERIES``:
PyTorch's padding rows, ...) are neither counted as findings nor as false alarms.

Numeric check alone (``compare(..., mode="numbers")``, seed 0; forward only
where a side is ONNX, whose runner computes no gradients), over the same cases:
    shapes differ the mutation changes a parameter's shape (``reshapes`` in the table), so
                  lhs's weights cannot be moved into rhs: such cases are counted apart, as
                  named when the TransferError names a parameter of the mutated layer whose
                  shape changed;
    silent        the mutation moves no value beyond the float32 tolerance (run in float64
                  by the reference interpreter on the same weights and inputs, every aligned
                  layer and output): no float32 check can see it, so it is counted apart;
    recall        of the other cases, the numeric check reports a finding;
    localization  its first finding concerns the mutated layer: the finding's op is one
                  of the table's ``numeric_ops``, or the finding names such a layer as the
                  upstream node the difference comes from (a layer one side lacks);
and false alarms: unmutated pairs of different frameworks with any numeric finding (or whose
weights cannot be moved). A weight transfer refused for any other reason, or an exception
raised by the check, is a miss (printed; the other cases still run).

The next to last line reads ``mutations: recall R/N, precision P/N, localization L/N, false
alarms F/M; numeric: localization X/Y (Z with different shapes named by the transfer), false
alarms A/B`` (without the numeric part under ``--no-numeric``), and the last line the same for
the corpus, ``mutations (corpus): ...`` (the zoo's line is the last under ``--no-corpus``).
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings
from collections.abc import Callable
from typing import Any

from tests.zoo.mutations import (MODELS, Mutation, mutations_of, names_mutated_layer,
                                 numerically_located, reshaped_params, structurally_located)


def _factories() -> dict[str, Callable[[str, str | None], Any]]:
    """framework -> (model, mutation) -> canonical TracedModel."""
    from specgraph.passes import canonicalize_model

    def torch_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import torch as frontend
        from tests.zoo.torch_mutants import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="torch"))

    def jax_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import jax as frontend
        from tests.zoo.jax_models import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="jax"))

    def keras_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import tf as frontend
        from tests.zoo.keras_mutants import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="keras"))

    def onnx_side(model: str, mutation: str | None) -> Any:
        import torch

        from specgraph.frontends import onnx as frontend
        from tests.zoo.torch_mutants import mutant

        net, inputs = mutant(model, mutation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(net, inputs, dynamo=True, optimize=False,
                                        verbose=False)
        traced = frontend.trace_model(program.model_proto, tuple(t.numpy() for t in inputs),
                                      reference="onnx")
        return canonicalize_model(traced)

    return {"torch": torch_side, "jax": jax_side, "keras": keras_side, "onnx": onnx_side}


def observable(lhs: Any, rhs: Any) -> bool:
    """Whether rhs, given lhs's weights and example inputs, computes any aligned layer's
    values or any output beyond the float32 tolerance of lhs's, both run in float64 by the
    reference interpreter (forward only): whether a float32 check can see the difference."""
    from specgraph.align import align
    from specgraph.interpreter import run as interpret
    from specgraph.check import numeric_pairing
    from specgraph.numeric.feeds import example_inputs, rhs_inputs, transfer_weights
    from specgraph.numeric.stats import measure, tolerance

    pairing = numeric_pairing(lhs, rhs, align(lhs.graph, rhs.graph))
    inputs = example_inputs(lhs, 0)
    values: dict[Any, Any] = {}
    louts = interpret(lhs.graph, inputs, lhs.weights,
                      on_node=lambda node, outs: values.update(zip(node.outputs, outs)))
    vmap = pairing.values
    seen = [False]

    def compare_node(node: Any, outs: Any) -> None:
        tol = tolerance(node, ("float32", "float32"))
        for v, out in zip(node.outputs, outs):
            u = vmap.get(v)
            if u in values and measure(values[u], out, tol).diverges:
                seen[0] = True

    routs = interpret(rhs.graph, rhs_inputs(lhs.graph, rhs.graph, inputs),
                      transfer_weights(pairing, lhs.weights), on_node=compare_node)
    for a, (rname, b) in zip(louts.values(), routs.items()):
        producer = rhs.graph.producer(rhs.graph.outputs[rhs.graph.output_names.index(rname)])
        if producer is not None and measure(a, b, tolerance(producer, ("float32",) * 2)).diverges:
            seen[0] = True
    return seen[0]


def _brief(findings: Any) -> str:
    return " | ".join(f"[{f.code}] {f.op} (lhs {f.lhs.node if f.lhs else '-'}, rhs "
                      f"{f.rhs.node if f.rhs else '-'}): {f.message[:160]}"
                      for f in findings[:2]) or "no finding"


Side = tuple[str, "str | None"]  # a framework and the mutation its model carries (or None)
Case = tuple[Mutation, Side, Side]  # a mutation and the (lhs, rhs) sides it is scored on
Known = Callable[[str, str, str], set[tuple[str, str, "str | None"]]]


def _label(side: Side) -> str:
    return side[0] + ("*" if side[1] else "")


class _Bench:
    """The traced models (cached), the counts, and the two passes over the cases.

    Args:
        say: prints a detail line.
        make: framework -> (model, mutation) -> canonical TracedModel.
        known: (model, lhs framework, rhs framework) -> the (code, op, attr) of the genuine
            differences between the two unmutated models (none in the zoo; the peer
            corpus's ports differ in a few, ``bench.peers.DISCOVERIES``): findings that are
            neither scored nor false alarms.
    """

    def __init__(self, say: Callable[[str], None],
                 make: dict[str, Callable[[str, str | None], Any]],
                 known: Known = lambda model, lhs, rhs: set()) -> None:
        self.make = make
        self.known = known
        self.cache: dict[tuple[str, str, str | None], Any] = {}
        self.say = say
        self.counts = dict.fromkeys(
            ["cases", "recall", "precision", "localization", "pairs", "alarms",
             "numeric_cases", "numeric_recall", "numeric_localization", "numeric_shapes",
             "numeric_shapes_named", "numeric_silent", "numeric_errors", "numeric_pairs",
             "numeric_alarms", "numeric_runs"], 0)
        self.numeric_seconds: dict[tuple[str, str], float] = {}

    def get(self, fw: str, model: str, mutation: str | None) -> Any:
        key = (fw, model, mutation)
        if key not in self.cache:
            self.cache[key] = self.make[fw](model, mutation)
        return self.cache[key]

    def _unknown(self, findings: Any, model: str, a: str, b: str) -> list[Any]:
        """``findings`` less the genuine differences between the two frameworks' models."""
        known = self.known(model, a, b)
        return [f for f in findings if (f.code, f.op, f.attr) not in known]

    def structural(self, model: str, pairs: list[tuple[str, str]], cases: list[Case]) -> None:
        from specgraph.check import compare_structure

        c = self.counts
        for a, b in pairs:
            report = compare_structure(self.get(a, model, None), self.get(b, model, None))
            found = self._unknown(report.findings, model, a, b)
            c["pairs"] += 1
            if found:
                c["alarms"] += 1
                self.say(f"FALSE ALARM {model} {a}/{b}: {found[0].message}")
        for mutation, (a, ma), (b, mb) in cases:
            report = compare_structure(self.get(a, model, ma), self.get(b, model, mb))
            found = self._unknown(report.findings, model, a, b)
            c["cases"] += 1
            c["recall"] += bool(found)
            c["precision"] += len(found) == 1
            located = any(structurally_located(f, mutation) for f in found)
            c["localization"] += located
            if len(found) != 1 or not located:
                self.say(f"{model}/{mutation.name} {_label((a, ma))}->{_label((b, mb))}: "
                         f"{len(found)} findings: " +
                         " | ".join(f"[{f.code}] {f.message[:110]}" for f in found[:3]))

    def _timed(self, key: tuple[str, str], work: Callable[[], Any]) -> Any:
        """``work()``, its time added to the numeric seconds of the pair of frameworks."""
        start = time.perf_counter()
        try:
            return work()
        finally:
            spent = time.perf_counter() - start
            self.numeric_seconds[key] = self.numeric_seconds.get(key, 0.0) + spent

    def _numeric(self, lhs: Any, rhs: Any, key: tuple[str, str]) -> Any:
        """The numeric-only report, or the error that stopped it: a TransferError, or any
        other exception (a crash, scored as a miss and printed, so the other cases run)."""
        from specgraph.check import compare
        from specgraph.numeric.options import NumericOptions

        def work() -> Any:
            try:
                return compare(lhs, rhs, mode="numbers",
                               options=NumericOptions(seeds=(0,)))
            except Exception as err:  # every outcome of a case is scored
                return err

        self.counts["numeric_runs"] += 1
        return self._timed(key, work)

    def numeric(self, model: str, pairs: list[tuple[str, str]], cases: list[Case]) -> None:
        c = self.counts
        for a, b in pairs:
            out = self._numeric(self.get(a, model, None), self.get(b, model, None), (a, b))
            c["numeric_pairs"] += 1
            if not hasattr(out, "findings") or out.findings:
                c["numeric_alarms"] += 1
                self.say(f"NUMERIC FALSE ALARM {model} {a}/{b}: " + (
                    _brief(out.findings) if hasattr(out, "findings")
                    else f"{type(out).__name__}: {out}"))
        for case in cases:
            self._numeric_case(model, *case)

    def _numeric_case(self, model: str, mutation: Mutation, left: Side, right: Side) -> None:
        from specgraph.transfer import TransferError

        (a, ma), (b, mb) = left, right
        ops, c = mutation.numeric_ops, self.counts
        where = f"numeric {model}/{mutation.name} {_label(left)}->{_label(right)}"
        lhs, rhs = self.get(a, model, ma), self.get(b, model, mb)
        out = self._numeric(lhs, rhs, (a, b))
        if mutation.reshapes:
            reshaped = reshaped_params(self.get(b, model, None), rhs)
            c["numeric_shapes"] += 1
            named = isinstance(out, TransferError) and names_mutated_layer(str(out), rhs,
                                                                            reshaped, ops)
            c["numeric_shapes_named"] += named
            if not named:
                self.say(f"{where}: shapes differ ({', '.join(reshaped) or 'none did'}), "
                         f"not named: {out}")
            return
        if not hasattr(out, "findings"):
            c["numeric_cases"] += 1
            crashed = not isinstance(out, TransferError)
            c["numeric_errors"] += crashed
            self.say(f"{where}: " + (f"ERROR {type(out).__name__}: {out}" if crashed
                                      else f"weights not moved: {out}"))
            return
        if not self._timed((a, b), lambda: observable(lhs, rhs)):
            c["numeric_silent"] += 1
            self.say(f"{where}: below float32 resolution; {_brief(out.findings)}")
            return
        c["numeric_cases"] += 1
        c["numeric_recall"] += bool(out.findings)
        located = bool(out.findings) and numerically_located(out.findings[0], ops)
        c["numeric_localization"] += located
        if not located:
            self.say(f"{where}: not at {'/'.join(sorted(ops))}: {_brief(out.findings)}")


def _zoo_cases(model: str, frameworks: list[str]) -> list[Case]:
    """Every framework's golden model against every framework's mutant."""
    return [(m, (a, None), (b, m.name)) for m in mutations_of(model)
            for a, b in itertools.product(frameworks, repeat=2)]


def run(frameworks: list[str], models: list[str], *, numeric: bool = True,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark; returns the counts (details are printed through ``say``), with
    ``numeric_seconds`` the time the numeric part took (comparisons and float64 runs)."""
    bench = _Bench(say, _factories())
    pairs = list(itertools.permutations(frameworks, 2))
    for model in models:
        bench.structural(model, pairs, _zoo_cases(model, frameworks))
        if numeric:
            bench.numeric(model, pairs, _zoo_cases(model, frameworks))
    return _finish(bench, numeric, say)


def _finish(bench: _Bench, numeric: bool, say: Callable[[str], None]) -> dict[str, Any]:
    if numeric:
        say("numeric seconds by pair: " + ", ".join(
            f"{a}->{b} {t:.0f}" for (a, b), t in sorted(bench.numeric_seconds.items())))
    return {**bench.counts, "numeric_seconds": sum(bench.numeric_seconds.values())}


def _corpus_factories() -> dict[str, Callable[[str, str | None], Any]]:
    """framework -> (architecture, mutation) -> the canonical TracedModel of the peer
    corpus's model (``bench/peer_models.py``) or of its mutant (``bench/peer_mutants.py``),
    traced from its model reference as the CLI traces it."""
    from specgraph.loading import trace
    from specgraph.passes import canonicalize_model

    def side(fw: str) -> Callable[[str, str | None], Any]:
        def make(arch: str, mutation: str | None) -> Any:
            ref = (f"bench/peer_mutants.py:{arch}_{fw}_{mutation}" if mutation
                   else f"bench/peer_models.py:{arch}_{fw}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return canonicalize_model(trace(ref))
        return make

    return {fw: side(fw) for fw in ("torch", "tf", "flax")}


def corpus_cases(arch: str) -> list[Case]:
    """The cases of an architecture's mutants: each framework's unmutated port against each
    mutant, and each mutant against the other frameworks' unmutated ports."""
    from bench.peer_mutants import CORPUS

    cases: list[Case] = []
    for plant in CORPUS:
        m = plant.mutation
        if m.model != arch:
            continue
        for x in plant.frameworks:
            for g in _frameworks_of(arch):
                cases.append((m, (g, None), (x, m.name)))
                if g != x:
                    cases.append((m, (x, m.name), (g, None)))
    return cases


def _frameworks_of(arch: str) -> list[str]:
    """The frameworks the peer corpus has ``arch`` in."""
    from bench.peer_models import ARCHS

    return list(ARCHS[arch].classes)


def run_corpus(archs: list[str], *, numeric: bool = True,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark on the peer corpus's mutants (``bench/peer_mutants.py``); returns
    the counts, as ``run`` does. The genuine differences between two frameworks' ports
    (``bench.peers.DISCOVERIES``) are neither scored nor false alarms."""
    from bench.peers import expected

    bench = _Bench(say, _corpus_factories(), expected)
    for arch in archs:
        pairs = list(itertools.permutations(_frameworks_of(arch), 2))
        bench.structural(arch, pairs, corpus_cases(arch))
        if numeric:
            bench.numeric(arch, pairs, corpus_cases(arch))
    return _finish(bench, numeric, say)


def summary(counts: dict[str, Any], *, numeric: bool = True, name: str = "mutations"
            ) -> list[str]:
    """The summary lines; the last one is the benchmark's score (``name`` first)."""
    c = counts
    n, m = c["cases"], c["pairs"]
    last = (f"{name}: recall {c['recall']}/{n}, precision {c['precision']}/{n}, "
            f"localization {c['localization']}/{n}, false alarms {c['alarms']}/{m}")
    if not numeric:
        return [last]
    y = c["numeric_cases"]
    lines = [f"{name}, numeric only: recall {c['numeric_recall']}/{y}, localization "
             f"{c['numeric_localization']}/{y} ({c['numeric_errors']} crashed); shapes "
             f"differ: named by the transfer error {c['numeric_shapes_named']}/"
             f"{c['numeric_shapes']}; below float32 resolution {c['numeric_silent']}; false "
             f"alarms {c['numeric_alarms']}/{c['numeric_pairs']}; {c['numeric_runs']} numeric "
             f"comparisons (seed 0) in {c['numeric_seconds']:.0f} s"]
    last += (f"; numeric: localization {c['numeric_localization']}/{y} "
             f"({c['numeric_shapes_named']} with different shapes named by the transfer), "
             f"false alarms {c['numeric_alarms']}/{c['numeric_pairs']}")
    return [*lines, last]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,jax,keras,onnx")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    parser.add_argument("--no-numeric", action="store_true",
                        help="score the structural diff only (skip the numeric check)")
    parser.add_argument("--corpus", action=argparse.BooleanOptionalAction, default=True,
                        help="also score the mutants of the peer corpus (default: yes)")
    parser.add_argument("--archs", default=None,
                        help="the peer corpus's architectures with mutants to score "
                             "(default: all of bench/peer_mutants.py)")
    args = parser.parse_args()
    say = (lambda _: None) if args.quiet else print
    numeric = not args.no_numeric
    lines = summary(run(args.frameworks.split(","), args.models.split(","), numeric=numeric,
                        say=say), numeric=numeric)
    if args.corpus:
        from bench.peer_mutants import corpus_models

        archs = args.archs.split(",") if args.archs else list(corpus_models())
        corpus = summary(run_corpus(archs, numeric=numeric, say=say), numeric=numeric,
                         name="mutations (corpus)")
        lines = [*lines[:-1], *corpus[:-1], lines[-1], corpus[-1]]
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
