"""A spec's ``equation:`` against what the implementation computes for that statement.

For each statement with an equation, the implementation's region is found along the
alignment: the values the statement reads and the value it gives, on the implementation's
side. What the implementation computes between them is written as a formula
(``specgraph.spec.algebra``); the spec's equation gets the statement's attributes and the
spec's hyperparameters substituted, and its names mapped onto the op's inputs (``x``,
``q``, ``gamma`` -> the weight...). Both are rewritten into one vocabulary and compared:
``same``, ``different`` (both written in plain words), or ``undecided`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from specgraph.align import Alignment
from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.report import Finding, Side
from specgraph.spec import CompiledSpec
from specgraph.spec.algebra import (ROLE_ALIASES, Unreadable, implementation_expr, normalize,
                                    same, unknown)
from specgraph.spec.compiled import Statement
from specgraph.symbolic import to_text

__all__ = ["EquationCheck", "check_equations", "hold_equations"]

_PRODUCTS = frozenset({"linear", "matmul", "attention", "conv", "embedding", "einsum"})


@dataclass(frozen=True)
class EquationCheck:
    """One statement's equation held against the implementation.

    Attributes:
        statement: the statement.
        verdict: ``same``, ``different`` or ``undecided``.
        spec_text: the spec's equation with its numbers put in, in words.
        impl_text: what the implementation computes there ("" when undecided early).
        reason: why it is undecided ("" otherwise).
        spec_node: index of the statement's op node in the spec's graph.
        impl_node: index of the implementation's node that gives the statement's value, or
            None.
    """

    statement: Statement
    verdict: str
    spec_text: str
    impl_text: str
    reason: str
    spec_node: int
    impl_node: int | None


def check_equations(spec: CompiledSpec, alignment: Alignment) -> list[EquationCheck]:
    """Each statement's equation (those that state one, outside ``unspecified`` parts)
    against the implementation (the alignment's lhs; the spec is its rhs)."""
    out = []
    for statement in spec.statements:
        if statement.equation is None or statement.unspecified:
            continue
        region = [i for i, n in enumerate(alignment.rhs.nodes) if n.scope == statement.scope]
        main = [i for i in region if alignment.rhs.nodes[i].op == statement.op]
        if not main:
            continue
        out.append(_check(spec, statement, alignment, region, main[0]))
    return out


def _check(spec: CompiledSpec, statement: Statement, al: Alignment, region: list[int],
           main: int) -> EquationCheck:
    node = al.rhs.nodes[main]
    commutative = node.op not in _PRODUCTS
    names = _names(al.rhs, node, spec)
    written = _substituted(statement.equation, node, spec, names)
    wanted = normalize(written, commutative)
    spec_text = to_text(_shown(written, node.op, commutative))
    output = _region_output(al.rhs, region)
    impl_out = _impl_value(al, output)
    base = (statement, "undecided", spec_text)
    if impl_out is None:
        return EquationCheck(*base, "", "the implementation has no value that stands for "
                             "the statement's", main, None)
    impl_node = al.lhs.index(al.lhs.producer(impl_out)) if al.lhs.producer(impl_out) \
        is not None else None
    boundary = {}
    for role, value in names.items():
        mapped = _impl_value(al, value) if al.rhs.param_name(value) is None else None
        if mapped is not None:
            boundary[mapped] = sympy.Symbol(role, commutative=commutative)
    try:
        got = implementation_expr(al.lhs, impl_out, boundary, commutative)
    except Unreadable as err:
        return EquationCheck(*base, "", f"the implementation's part cannot be written as "
                             f"a formula: {err}", main, impl_node)
    impl_text = to_text(_shown(got, node.op, commutative))
    computed = normalize(got, commutative)
    outside = unknown(computed) + unknown(wanted)
    if same(wanted, computed):
        return EquationCheck(statement, "same", spec_text, impl_text, "", main, impl_node)
    if outside:
        return EquationCheck(*base, impl_text, f"{', '.join(sorted(set(outside)))} "
                             "cannot be written out", main, impl_node)
    return EquationCheck(statement, "different", spec_text, impl_text, "", main, impl_node)


def _names(graph: Graph, node: Node, spec: CompiledSpec) -> dict[str, Value]:
    """The op's input roles (``x``, ``weight``, ``q``) -> the values the node reads."""
    roles = [r.lstrip("*").partition("?")[0] for r in get_spec(node.op).inputs]
    present = [r for r in roles if not _absent(r, node)] if len(roles) != len(node.inputs) \
        else roles
    return dict(zip(present, node.inputs))


def _absent(role: str, node: Node) -> bool:
    for entry in get_spec(node.op).inputs:
        name, _, flag = entry.partition("?")
        if name == role and flag:
            return not node.attrs.get(flag, False)
    return False


def _substituted(expr: Any, node: Node, spec: CompiledSpec, names: dict[str, Value]) -> Any:
    """The spec's equation with numbers for its attributes and hyperparameters, and its
    tensors named by role (a statement's input by the role it is read as)."""
    subs: dict[Any, Any] = {}
    reads = {v: role for role, v in names.items()}
    for s in expr.free_symbols:
        if s.is_commutative:
            value = node.attrs.get(s.name, spec.sizes.get(s.name))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                subs[s] = sympy.Float(value) if isinstance(value, float) else \
                    sympy.Integer(value)
            continue
        role = ROLE_ALIASES.get(s.name, s.name)
        if role not in names:
            role = next((reads[v] for v in reads if _reads_name(v, s.name, spec)), role)
        subs[s] = sympy.Symbol(role, commutative=False)
    return expr.xreplace(subs)


def _reads_name(value: Value, name: str, spec: CompiledSpec) -> bool:
    graph = spec.graph
    producer = graph.producer(value)
    if producer is not None:
        return producer.scope == name or producer.scope.endswith("." + name)
    return name in graph.input_names and graph.inputs[graph.input_names.index(name)] is value


def _region_output(graph: Graph, region: list[int]) -> Value:
    """The value the statement gives: its last node's first output."""
    return graph.nodes[region[-1]].outputs[0]


def _impl_value(al: Alignment, value: Value) -> Value | None:
    """The implementation's value that stands for the spec's ``value``: the aligned
    producer's output, or what an aligned reader reads in its place."""
    rhs, lhs = al.rhs, al.lhs
    producer = rhs.producer(value)
    if producer is None:
        if value in rhs.inputs:
            return lhs.inputs[rhs.inputs.index(value)]
        return None
    index = rhs.index(producer)
    if index in al.rhs_to_lhs:
        theirs = lhs.nodes[al.rhs_to_lhs[index]]
        position = producer.outputs.index(value)
        return theirs.outputs[position] if position < len(theirs.outputs) else None
    for reader in rhs.consumers(value):
        j = rhs.index(reader)
        if j in al.rhs_to_lhs:
            theirs = lhs.nodes[al.rhs_to_lhs[j]]
            position = reader.inputs.index(value)
            return theirs.inputs[position] if position < len(theirs.inputs) else None
    return None


_NORM_NAMES = {"weight": "γ", "bias": "β", "mean": "μ", "var": "σ²"}
_NAMES = {"weight": "W", "bias": "b"}


def _shown(expr: Any, op: str, commutative: bool) -> Any:
    """A formula as people read it: numbers to six digits, γ and β for a norm's weight and
    bias (W and b otherwise), products of tensors in their order unless elementwise."""
    names = _NORM_NAMES if op.endswith("_norm") else _NAMES
    subs = {s: sympy.Symbol(names.get(s.name, s.name),
                            commutative=commutative or s.is_commutative)
            for s in expr.free_symbols}
    floats = {f: sympy.Float(float(f"{float(f):.6g}")) for f in expr.atoms(sympy.Float)}
    return _evaluated(expr.xreplace(floats).xreplace(subs))


def _evaluated(expr: Any) -> Any:
    """``expr`` rebuilt with sympy's evaluation (``x + (-1)·m`` as ``x - m``)."""
    if not expr.args:
        return expr
    return expr.func(*(_evaluated(a) for a in expr.args))


_REPLACED = frozenset({"op-mismatch", "missing-op"})  # what an equation's verdict settles


def hold_equations(found: list[Finding], checks: list[EquationCheck], al: Alignment
                   ) -> tuple[list[Finding], list[str]]:
    """The findings with the equations' verdicts: a different formula is one
    ``equation-mismatch`` (in place of the ops that differ at that statement, and unless
    another finding there already says what differs); the same formula computed with other
    ops settles the ops' difference (a note); an undecided comparison is a note."""
    notes: list[str] = []
    for check in checks:
        scope = check.statement.scope
        at = [f for f in found if _at(f, scope, al)]
        settled = [f for f in at if f.code in _REPLACED]
        where = f"{check.statement.source}:{check.statement.position('equation')[1]}"
        if check.verdict == "undecided":
            notes.append(f"the equation of {scope} ({where}) was not compared: {check.reason}")
            continue
        if check.verdict == "same":
            if settled:
                notes.append(f"{scope} computes the spec's equation {check.spec_text} with "
                             "other ops than the spec's")
            found = [f for f in found if f not in settled]
            continue
        if len(at) > len(settled):
            continue  # what differs there is already said
        found = [f for f in found if f not in settled] + [_mismatch(check, al)]
    return found, notes


def _at(f: Finding, scope: str, al: Alignment) -> bool:
    sides = [r for _, r in f.places] if f.places else [f.rhs]
    return any(r is not None and r.node[:1].isdigit() and
               al.rhs.nodes[int(r.node.split(":", 1)[0])].scope == scope for r in sides)


def _mismatch(check: EquationCheck, al: Alignment) -> Finding:
    statement = check.statement
    lhs = None
    if check.impl_node is not None:
        node = al.lhs.nodes[check.impl_node]
        lhs = Side(node.scope or "<model>", f"{check.impl_node}:{node.op}", node.source)
    rhs = Side(statement.scope, f"{check.spec_node}:{statement.op}", statement.source)
    message = (f"the spec's equation for {statement.scope} is {check.spec_text}, but the "
               f"implementation computes {check.impl_text} there")
    return Finding("equation-mismatch", message, op=statement.op, lhs=lhs, rhs=rhs,
                   blame="lhs")
