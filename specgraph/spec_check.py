"""``check_spec``: hold an implementation against a paper spec.

The spec is the definition. Its dims are bound to the implementation's input sizes
(``specgraph.spec.binding``), what it leaves open takes the implementation's choices along
an alignment of the two graphs (``specgraph.spec.resolve``), and the two are compared as
any two models are (``specgraph.check.compare``), the implementation as lhs, whose weights
move into the spec: the structure first, then the implementation's numbers, on its own
framework's kernels, against the spec run by the float64 reference, with the tolerances
the spec states. Findings on what the spec leaves open are dropped; every other one blames
the implementation and is placed at the spec's line and column and at the model's source
line. Stated parameter counts are held against the implementation's parameters.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from specgraph.align import Alignment, align
from specgraph.check import compare
from specgraph.errors import ModelReferenceError
from specgraph.ir import Graph, Node
from specgraph.loading import trace
from specgraph.model import TracedModel
from specgraph.numeric.options import NumericOptions
from specgraph.passes import canonicalize_model
from specgraph.report import (Finding, Location, Side, SpecFinding, SpecReport,
                              StatementResult, Voice)
from specgraph.spec import CompiledSpec, Fill, Implementation
from specgraph.spec.binding import bind
from specgraph.spec.resolve import fills
from specgraph.spec_equations import check_equations, hold_equations

__all__ = ["check_spec", "CHECK", "listed", "unexpected"]

CHECK = Voice("the implementation", "the spec", spec="rhs")
_FLAGS = {"bias": "bias", "weight": "scale"}  # a parameter's role -> the flag that has it


def check_spec(model: str | TracedModel, spec: str | Path, *, mode: str = "both",
               options: NumericOptions | None = None, batch: int | None = None,
               progress: Callable[[str], None] | None = None) -> SpecReport:
    """Check an implementation against a paper spec.

    Args:
        model: the implementation: a model reference (``file.py:factory``, ``.onnx``) or a
            TracedModel.
        spec: the spec ``.yaml`` file.
        mode: ``both`` (structure, then numbers), ``structure`` or ``numbers``, as for
            ``specgraph.compare``.
        options: how to compare numbers (seeds, contexts...); the spec's tolerances apply
            where ``rtol``/``atol`` are not given.
        batch: trace a model reference with its example inputs resized to this batch.
        progress: called with a line of text at each step.

    Returns:
        The report; ``bool(report)`` is True when the implementation satisfies the spec.

    Raises:
        SpecgraphError: the model or the spec cannot be read, traced or run (the spec's
            errors at ``file:line:col``).

    Example:
        >>> report = check_spec("examples/specs/bert_torch.py:encoder",
        ...                     "examples/specs/bert_layer.spec.yaml")  # doctest: +SKIP
        >>> report.satisfied  # doctest: +SKIP
        True
    """
    say = progress or (lambda _: None)
    reference = str(spec)
    if not reference.endswith((".yaml", ".yml")):
        raise ModelReferenceError(f"--spec {reference}: a spec is a .yaml file; pass the "
                                  "path of the paper spec to check against")
    impl = model if isinstance(model, TracedModel) else _traced(model, say, batch)
    say(f"canonicalizing the implementation ({len(impl.graph)} nodes)")
    impl = canonicalize_model(impl)
    say(f"reading the spec {reference}")
    stated = trace(reference)
    binding = bind(stated.native, [v.shape for v in impl.graph.inputs])
    if binding.conflicts or len(impl.graph.inputs) != len(stated.graph.inputs):
        return _inputs_differ(impl, stated.native, reference, binding.conflicts)
    if binding.dims != {d: stated.native.sizes[d] for d in binding.dims}:
        stated = trace(reference, dims=binding.dims)
    resolved = canonicalize_model(stated)
    say("aligning the spec with the implementation")
    alignment = align(impl.graph, resolved.graph)
    chosen = fills(stated.native, alignment)
    if _changes(chosen, resolved.graph):  # run the spec as the implementation chose
        resolved = canonicalize_model(trace(reference, dims=binding.dims, fills=chosen))
        alignment = align(impl.graph, resolved.graph)
    compiled: CompiledSpec = resolved.native
    voice = replace(CHECK, stand_ins=frozenset((u.scope, u.op) for u in compiled.unchecked
                                               if u.stand_in))
    opts = replace(options or NumericOptions(), voice=voice, tolerances=_tolerances(compiled))
    report = compare(impl, resolved, mode=mode, raw=True, options=opts, progress=say,
                     voice=voice, keep=_Keep(compiled, alignment), alignment=alignment)
    found = [f if f.blame == "rhs" else replace(f, blame="lhs") for f in report.findings]
    found += _counts(compiled, alignment, impl)
    found, notes = hold_equations(found, check_equations(compiled, alignment), alignment)
    placed = tuple(_Placer(compiled, alignment).place(f) for f in found)
    return SpecReport(reference, impl.reference, impl.framework, placed,
                      _statements(compiled, placed), report, (*report.notes, *notes),
                      dict(compiled.paper))


def _changes(chosen: Mapping[tuple[str, str], Fill], graph: Graph) -> bool:
    """Whether the fills change a node of ``graph`` (what the spec leaves open is not
    already what the implementation chose)."""
    for node in graph.nodes:
        fill = chosen.get((node.scope, node.op))
        if fill is not None and ((fill.op is not None and fill.op != node.op) or any(
                node.attrs.get(k) != v for k, v in fill.attrs.items())):
            return True
    return False


def _traced(reference: str, say: Callable[[str], None], batch: int | None) -> TracedModel:
    say(f"tracing the implementation {reference}")
    return trace(reference, batch=batch)


def _tolerances(spec: CompiledSpec) -> dict[str, tuple[float | None, float | None]]:
    return {s.scope: (s.tolerance.rtol, s.tolerance.atol) for s in spec.statements
            if s.tolerance.rtol is not None or s.tolerance.atol is not None}


def _blanket(spec: CompiledSpec, scope: str) -> bool:
    """Whether ``scope`` lies in a statement or block marked ``unspecified``."""
    return any(u.op is None and u.covers(scope) for u in spec.unchecked)


def _index(side: Side) -> int:
    return int(side.node.split(":", 1)[0])


def _matched_above(graph: Graph, node: Node, matched: Mapping[int, int]) -> int | None:
    """The nearest node above ``node`` (through unmatched producers, first inputs first)
    that ``matched`` pairs, or None."""
    seen: set[int] = set()
    stack = list(node.inputs)
    while stack and len(seen) < 256:
        producer = graph.producer(stack.pop(0))
        if producer is None or id(producer) in seen:
            continue
        seen.add(id(producer))
        index = graph.index(producer)
        if index in matched:
            return index
        stack.extend(producer.inputs)
    return None


class _Keep:
    """Which findings a check keeps: none on what the spec leaves open."""

    def __init__(self, spec: CompiledSpec, alignment: Alignment) -> None:
        self.spec, self.al = spec, alignment

    def __call__(self, f: Finding) -> bool:
        if f.rhs is None:
            return not self._beside_blanket(f)
        node = self.al.rhs.nodes[_index(f.rhs)]
        if _blanket(self.spec, node.scope):
            return False
        if f.code == "attr-mismatch" and f.attr is not None:
            return self.spec.checks(node.scope, node.op, f.attr)
        if f.code == "op-mismatch":
            return self.spec.checks(node.scope, node.op)
        if f.code == "param-mismatch" and f.lhs is not None:
            return not self._open_params(self.al.lhs.nodes[_index(f.lhs)], node)
        return True

    def _open_params(self, theirs: Node, node: Node) -> bool:
        """Every parameter whose shape differs is one the spec leaves open (a bias it
        does not state)."""
        roles = [self.al.rhs.param_name(v).rpartition(".")[2]
                 for u, v in zip(theirs.inputs, node.inputs)
                 if self.al.rhs.param_name(v) is not None and u.shape != v.shape]
        return bool(roles) and all(
            r in _FLAGS and not self.spec.checks(node.scope, node.op, _FLAGS[r]) for r in roles)

    def _beside_blanket(self, f: Finding) -> bool:
        """An op only the implementation has, inside what the spec leaves unspecified."""
        if f.lhs is None:
            return False
        node = self.al.lhs.nodes[_index(f.lhs)]
        above = _matched_above(self.al.lhs, node, self.al.lhs_to_rhs)
        if above is None:
            return False
        below = [self.al.lhs.index(u) for v in node.outputs for u in self.al.lhs.consumers(v)]
        near = [above, *(i for i in below if i in self.al.lhs_to_rhs)]
        return any(_blanket(self.spec, self.al.rhs.nodes[self.al.lhs_to_rhs[i]].scope)
                   for i in near)


def _counts(spec: CompiledSpec, al: Alignment, impl: TracedModel) -> list[Finding]:
    """A finding for each stated parameter count the implementation does not hold."""
    out = []
    for count in spec.counts:
        if count.scope:
            names = {al.lhs.param_name(v) for i in _counted(al, count.scope)
                     for v in al.lhs.nodes[i].inputs}
        else:
            names = set(al.lhs.params)
        names.discard(None)
        got = sum(math.prod(al.lhs.params[n].shape) for n in names)
        if got == count.stated:
            continue
        what = f"{count.scope}" if count.scope else "the whole model"
        message = (f"the spec states {count.stated:,} parameters for {what} but the "
                   f"implementation has {got:,} there ({got - count.stated:+,})")
        out.append(Finding("param-count-mismatch", message, op="param_count",
                           lhs=Side(count.scope or "<model>", "param_count", "", got),
                           rhs=Side(count.scope or "<model>", "param_count",
                                    f"{_spec_path(spec)}:{count.line}", count.stated),
                           blame="lhs"))
    return out


def _counted(al: Alignment, scope: str) -> set[int]:
    """The implementation's nodes that stand for the spec's under ``scope``: those aligned
    with its nodes there, and those aligned with none whose nearest aligned node above is
    one of them (a layer the implementation writes with other ops)."""
    def under(j: int) -> bool:
        found = al.rhs.nodes[j].scope
        return found == scope or found.startswith(scope + ".")

    out = {al.rhs_to_lhs[j] for j in range(len(al.rhs.nodes)) if j in al.rhs_to_lhs and under(j)}
    for i, node in enumerate(al.lhs.nodes):
        if i not in al.lhs_to_rhs:
            above = _matched_above(al.lhs, node, al.lhs_to_rhs)
            if above is not None and above in out:
                out.add(i)
    return out


def _spec_path(spec: CompiledSpec) -> str:
    """The spec file as its nodes' sources name it."""
    sources = [s.source for s in spec.statements]
    return sources[0].rpartition(":")[0] if sources else spec.name


def _location(source: str) -> Location | None:
    path, sep, line = source.rpartition(":")
    return Location(path, int(line)) if sep and line.isdigit() else None


class _Placer:
    """Where a finding sits in the spec (line and column) and in the model's source."""

    def __init__(self, spec: CompiledSpec, alignment: Alignment) -> None:
        self.spec, self.al, self.path = spec, alignment, _spec_path(spec)
        self.counts = {c.scope: c for c in spec.counts}

    def place(self, f: Finding) -> SpecFinding:
        if f.code == "param-count-mismatch":
            count = self.counts[f.rhs.scope if f.rhs.scope != "<model>" else ""]
            statement = self.spec.statement(count.scope) if count.scope else None
            scopes = (statement.scope,) if statement is not None \
                and statement.scope == count.scope else ()
            return SpecFinding(f, Location(self.path, count.line, count.column), None,
                               scopes, scopes or (None,))
        places = f.places or ((f.lhs, f.rhs),)
        each = tuple(self._statement(a, b) for a, b in places)
        scopes = tuple(dict.fromkeys(s for s in each if s is not None))
        first_lhs, first_rhs = places[0]
        return SpecFinding(f, self._spec_at(f, first_lhs, first_rhs),
                           self._model_at(first_lhs, first_rhs), scopes, each)

    def _spec_node(self, lhs: Side | None, rhs: Side | None) -> Node | None:
        if rhs is not None:
            return self.al.rhs.nodes[_index(rhs)]
        if lhs is None:
            return None
        above = _matched_above(self.al.lhs, self.al.lhs.nodes[_index(lhs)],
                               self.al.lhs_to_rhs)
        return self.al.rhs.nodes[self.al.lhs_to_rhs[above]] if above is not None else None

    def _statement(self, lhs: Side | None, rhs: Side | None) -> str | None:
        node = self._spec_node(lhs if rhs is None else None, rhs)
        found = self.spec.statement(node.scope) if node is not None else None
        return found.scope if found is not None else None

    def _spec_at(self, f: Finding, lhs: Side | None, rhs: Side | None) -> Location | None:
        node = self._spec_node(lhs, rhs)
        statement = self.spec.statement(node.scope) if node is not None else None
        if statement is None:
            return None
        keys = statement.keys
        if f.code == "equation-mismatch":
            key = "equation"
        elif f.attr is not None and f.attr in keys:
            key = f.attr
        elif node.op != statement.op and "activation" in keys and rhs is not None:
            key = "activation"
        else:
            key = statement.op
        return Location(self.path, *statement.position(key))

    def _model_at(self, lhs: Side | None, rhs: Side | None) -> Location | None:
        if lhs is not None:
            return _location(lhs.source)
        if rhs is None:
            return None
        above = _matched_above(self.al.rhs, self.al.rhs.nodes[_index(rhs)],
                               self.al.rhs_to_lhs)
        return _location(self.al.lhs.nodes[self.al.rhs_to_lhs[above]].source) \
            if above is not None else None


def _statements(spec: CompiledSpec, placed: tuple[SpecFinding, ...]
                ) -> tuple[StatementResult, ...]:
    path = _spec_path(spec)
    out = []
    for s in spec.statements:
        hits = tuple(k for k, f in enumerate(placed) if s.scope in f.statements)
        status = "unchecked" if s.unspecified else ("failed" if hits else "passed")
        out.append(StatementResult(s.scope, s.op, Location(path, s.line, s.column), status,
                                   hits))
    for count in spec.counts:
        if count.scope and spec.statement(count.scope) is not None and \
                spec.statement(count.scope).scope == count.scope:
            continue  # a statement's own count: its finding fails the statement
        hits = tuple(k for k, f in enumerate(placed) if f.finding.code == "param-count-mismatch"
                     and f.spec_at == Location(path, count.line, count.column))
        out.append(StatementResult(count.scope or "<spec>", "param_count",
                                   Location(path, count.line, count.column),
                                   "failed" if hits else "passed", hits))
    return tuple(out)


def _inputs_differ(impl: TracedModel, spec: CompiledSpec, reference: str,
                   conflicts: tuple) -> SpecReport:
    """The implementation's inputs are not what the spec states: one finding, nothing else
    can be compared."""
    path = _spec_path(spec)
    names = list(spec.input_shapes)
    if conflicts:
        c = conflicts[0]
        what, name = c.describe(), c.input
    else:
        what = (f"the spec states {len(names)} inputs ({', '.join(names)}) but the "
                f"implementation takes {len(impl.graph.inputs)}")
        name = names[0]
    said = "; ".join(x.describe() for x in conflicts) or what
    line, column = spec.input_positions.get(name, (1, 1))
    at = Location(path, line, column)
    finding = Finding("shape-mismatch", f"the implementation's inputs differ from the spec's: "
                      f"{said}; nothing else was compared", op="input",
                      lhs=Side("<model>", "input"), rhs=Side(name, "input", f"{path}:{line}"),
                      blame="lhs")
    readers = [n for v in impl.graph.inputs for n in impl.graph.consumers(v) if n.source]
    placed = (SpecFinding(finding, at, _location(readers[0].source) if readers else None,
                          (name,), (name,)),)
    status = StatementResult(name, "input", at, "failed", (0,))
    return SpecReport(reference, impl.reference, impl.framework, placed, (status,), None,
                      (), dict(spec.paper))


def listed(spec: str | Path, implementation: Implementation) -> str:
    """The model reference of an implementation a spec lists, its file taken relative to
    the spec's folder (``bert_torch.py:encoder`` next to ``examples/specs/bert.spec.yaml``
    is ``examples/specs/bert_torch.py:encoder``)."""
    model = implementation.model
    path, sep, factory = model.rpartition(":") if ".py:" in model else (model, "", "")
    if Path(path).is_absolute():
        return model
    joined = Path(os.path.normpath(Path(spec).parent / path)).as_posix()
    return f"{joined}{sep}{factory}"


def unexpected(report: SpecReport, implementation: Implementation) -> list[str]:
    """How ``report`` departs from what the spec says of ``implementation`` (``expect``,
    ``codes``, ``says``), in sentences; empty when it is as listed."""
    if implementation.expect == "satisfied":
        return [f"[{f.finding.code}] {f.finding.message} (spec: {f.spec_at}, "
                f"implementation: {f.model_at})" for f in report.findings]
    out = []
    if report.satisfied:
        out.append(f"{implementation.model} is listed as differing from the spec, but it "
                   "satisfies it")
    codes = {f.finding.code for f in report.findings}
    out += [f"no {code} finding, which the spec lists for {implementation.model} (found: "
            f"{', '.join(sorted(codes)) or 'none'})" for code in implementation.codes
            if code not in codes]
    if implementation.says and not any(implementation.says in f.finding.message
                                       for f in report.findings):
        out.append(f"no finding says {implementation.says!r}")
    return out
