"""Structural diff: explain every difference between two aligned canonical graphs.

One root cause is one finding: a node whose inputs already differ in shape does not also
report its own shape or parameter shapes, and a connection that differs only because the
other side lacks an op in between is explained by that missing op alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specgraph.align import Alignment, align
from specgraph.graph_nx import attrs_equal
from specgraph.ir import Graph, Node, Value
from specgraph.report import Finding, Row, Side

__all__ = ["diff", "describe_node"]

_COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "equal", "not_equal",
                          "logical_and", "logical_or"})


def describe_node(node: Node) -> str:
    return f"{node.op} at {node.scope or '<model>'}"


def _side(graph: Graph, node: Node, value: Any = None) -> Side:
    index = graph.nodes.index(node)
    return Side(node.scope or "<model>", f"{index}:{node.op}", node.source, value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


class _Differ:
    def __init__(self, al: Alignment) -> None:
        self.al = al
        self.lhs, self.rhs = al.lhs, al.rhs
        self.l2r, self.r2l = al.lhs_to_rhs(), al.rhs_to_lhs()
        self.li = {id(n): i for i, n in enumerate(self.lhs.nodes)}
        self.ri = {id(n): i for i, n in enumerate(self.rhs.nodes)}
        self.findings: list[tuple[int, Finding]] = []  # (sort key, finding)
        self.flagged_l: set[int] = set()
        self.flagged_r: set[int] = set()

    # --- helpers -------------------------------------------------------------------------
    def _matched_above(self, graph: Graph, value: Value, matched: dict[int, int],
                       index: dict[int, int]) -> Any:
        """The nearest matched producer of ``value`` through unmatched nodes (or a leaf)."""
        seen = 0
        while True:
            node = graph.producer(value)
            if node is None:
                return ("leaf", _leaf_key(graph, value))
            i = index[id(node)]
            if i in matched or not node.inputs or seen > 64:
                return ("node", i)
            value = node.inputs[0]
            seen += 1

    def _neighbour_scopes(self, graph: Graph, node: Node, matched: dict[int, int],
                          index: dict[int, int]) -> tuple[str, str]:
        before = "the model's input"
        if node.inputs:
            kind, where = self._matched_above(graph, node.inputs[0], matched, index)
            if kind == "node":
                before = describe_node(graph.nodes[where])
        after = "the model's output"
        value = node.outputs[0]
        for _ in range(64):
            users = graph.consumers(value)
            if not users:
                break
            user = users[0]
            if index[id(user)] in matched:
                after = describe_node(user)
                break
            value = user.outputs[0]
        return before, after

    # --- findings ------------------------------------------------------------------------
    def missing(self) -> None:
        for graph, other, only, matched, index, side in (
                (self.lhs, "rhs", self.al.lhs_only, self.l2r, self.li, "lhs"),
                (self.rhs, "lhs", self.al.rhs_only, self.r2l, self.ri, "rhs")):
            for i in only:
                node = graph.nodes[i]
                before, after = self._neighbour_scopes(graph, node, matched, index)
                where = _side(graph, node)
                message = (f"{other} has no {node.op} between {before} and {after} "
                           f"({side} has it at {node.scope or '<model>'}"
                           f"{', ' + node.source if node.source else ''})")
                finding = Finding("missing-op", message, op=node.op,
                                  lhs=where if side == "lhs" else None,
                                  rhs=where if side == "rhs" else None)
                self.findings.append((i if side == "lhs" else self._rhs_key(i), finding))
                (self.flagged_l if side == "lhs" else self.flagged_r).add(i)

    def _rhs_key(self, j: int) -> int:
        for k in range(j, -1, -1):
            if k in self.r2l:
                return self.r2l[k]
        return 0

    def matched(self) -> None:
        for i, j in self.al.pairs:
            a, b = self.lhs.nodes[i], self.rhs.nodes[j]
            before = len(self.findings)
            if a.op != b.op:
                self._add(i, Finding(
                    "op-mismatch",
                    f"lhs computes {a.op} where rhs computes {b.op} "
                    f"({a.scope or '<model>'} / {b.scope or '<model>'})",
                    op=a.op, lhs=_side(self.lhs, a, a.op), rhs=_side(self.rhs, b, b.op)))
            else:
                self._attrs(i, a, b)
            inputs_differ = any(va.shape != vb.shape for va, vb in zip(a.inputs, b.inputs)
                                if self.lhs.param_name(va) is None)
            if not inputs_differ:
                self._params(i, a, b)
                if len(self.findings) == before and any(
                        va.shape != vb.shape for va, vb in zip(a.outputs, b.outputs)):
                    self._add(i, Finding(
                        "shape-mismatch",
                        f"{a.op} produces {a.outputs[0].shape} in lhs "
                        f"({a.scope or '<model>'}) but {b.outputs[0].shape} in rhs "
                        f"({b.scope or '<model>'}) from inputs of the same shape",
                        op=a.op, lhs=_side(self.lhs, a, a.outputs[0].shape),
                        rhs=_side(self.rhs, b, b.outputs[0].shape)))
            self._edges(i, a, b)
            if len(self.findings) > before:
                self.flagged_l.add(i)
                self.flagged_r.add(j)

    def _add(self, key: int, finding: Finding) -> None:
        self.findings.append((key, finding))

    def _attrs(self, i: int, a: Node, b: Node) -> None:
        for key in sorted(set(a.attrs) | set(b.attrs)):
            x, y = a.attrs.get(key), b.attrs.get(key)
            if attrs_equal({key: x}, {key: y}):
                continue
            self._add(i, Finding(
                "attr-mismatch",
                f"{a.op} {key} is {_fmt(x)} in lhs ({a.scope or '<model>'}) but {_fmt(y)} in "
                f"rhs ({b.scope or '<model>'})",
                op=a.op, attr=key, lhs=_side(self.lhs, a, x), rhs=_side(self.rhs, b, y)))

    def _params(self, i: int, a: Node, b: Node) -> None:
        """One finding per layer, naming every parameter whose shape differs."""
        diffs = []
        for va, vb in zip(a.inputs, b.inputs):
            na, nb = self.lhs.param_name(va), self.rhs.param_name(vb)
            if na is not None and nb is not None and va.shape != vb.shape:
                diffs.append((na, va.shape, nb, vb.shape))
        if not diffs:
            return
        said = "; ".join(f"{na} {list(sa)} vs {nb} {list(sb)}" for na, sa, nb, sb in diffs)
        self._add(i, Finding(
            "param-mismatch",
            f"{a.op} parameters differ in shape between lhs ({a.scope or '<model>'}) and rhs "
            f"({b.scope or '<model>'}): {said}",
            op=a.op, lhs=_side(self.lhs, a, [list(d[1]) for d in diffs]),
            rhs=_side(self.rhs, b, [list(d[3]) for d in diffs])))

    def _edges(self, i: int, a: Node, b: Node) -> None:
        left = [self._matched_above(self.lhs, v, self.l2r, self.li) for v in a.inputs]
        right = [self._matched_above(self.rhs, v, self.r2l, self.ri) for v in b.inputs]
        mapped = [("node", self.l2r[x]) if kind == "node" and x in self.l2r else (kind, x)
                  for kind, x in left]
        same = (sorted(map(repr, mapped)) == sorted(map(repr, right)) if a.op in _COMMUTATIVE
                else mapped == right)
        if same or len(left) != len(right):
            return
        diffs = [(m, r) for m, r in zip(mapped, right) if m != r]
        if a.op in _COMMUTATIVE:
            diffs = diffs[:1]
        (lm, rm) = diffs[0]
        self._add(i, Finding(
            "edge-mismatch",
            f"{a.op} at {a.scope or '<model>'} reads {self._say(lm, 'rhs')} in lhs but "
            f"{self._say(rm, 'rhs')} in rhs ({b.scope or '<model>'}): the two sides are "
            "wired differently here",
            op=a.op, lhs=_side(self.lhs, a), rhs=_side(self.rhs, b)))

    def _say(self, ref: Any, side: str) -> str:
        kind, x = ref
        if kind == "node":
            node = self.rhs.nodes[x]
            return f"the output of {describe_node(node)}"
        if x[0] == "const":
            return f"the constant {_fmt(x[2])}" if x[2] is not None else "a constant tensor"
        return {"param": "a parameter", "input": f"model input {x[1]}"}.get(x[0], "a value")

    def rows(self) -> list[Row]:
        rows: list[Row] = []
        rhs_after: dict[int, list[int]] = {}
        last = -1
        for j in range(len(self.rhs.nodes)):
            if j in self.r2l:
                last = self.r2l[j]
            else:
                rhs_after.setdefault(last, []).append(j)
        for j in rhs_after.get(-1, []):
            rows.append(self._row(None, j))
        for i in range(len(self.lhs.nodes)):
            rows.append(self._row(i, self.l2r.get(i)))
            for j in rhs_after.get(i, []):
                rows.append(self._row(None, j))
        return rows

    def _row(self, i: int | None, j: int | None) -> Row:
        a = self.lhs.nodes[i] if i is not None else None
        b = self.rhs.nodes[j] if j is not None else None
        differs = (i is None or j is None or i in self.flagged_l or j in self.flagged_r)
        return Row(_short(a), _short(b), a.scope if a else "", b.scope if b else "", differs)


def _short(node: Node | None) -> str:
    if node is None:
        return "—"
    return f"{node.op} {list(node.outputs[0].shape)}"


def _leaf_key(graph: Graph, value: Value) -> tuple[Any, ...]:
    if value in graph.constants:
        data = np.asarray(graph.constants[value])
        return ("const", value.shape, float(data.reshape(())) if data.size == 1 else None)
    if graph.param_name(value) is not None:
        return ("param",)  # shapes are compared as param-mismatch, not as wiring
    return ("input", graph.inputs.index(value) if value in graph.inputs else -1)


def diff(lhs: Graph, rhs: Graph) -> tuple[list[Finding], list[Row]]:
    """The findings that explain how ``rhs`` differs from ``lhs``, in lhs graph order, and
    the side-by-side rows of the alignment."""
    d = _Differ(align(lhs, rhs))
    d.missing()
    d.matched()
    findings = [f for _, f in sorted(d.findings, key=lambda kf: kf[0])]
    return findings, d.rows()
