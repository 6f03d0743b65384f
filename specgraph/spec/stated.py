"""What a spec states beyond its graph, compiled: each statement's equation, tolerance and
parameter count (``Statement``), the parameter counts of blocks and of the whole spec
(``Count``, held against the statements' shapes), and the implementations it lists.

A part of the compiler (``specgraph.spec.compiler``), kept apart: ``Stated`` is mixed into
its ``_Compiler`` and reads the compiler's document, sizes and side tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgraph.accept import AcceptError, parse_rule
from specgraph.ops import get_spec
from specgraph.report import AcceptRule
from specgraph.spec.compiled import Count, Implementation, Statement, Tolerance
from specgraph.spec.expr import equation, evaluate
from specgraph.spec.reader import Path
from specgraph.spec.vocabulary import REARRANGE, attributes

__all__ = ["Stated", "MAX_COUNT"]

MAX_COUNT = 10**15


class Stated:
    """The compiler's methods for what statements state beyond the graph."""

    doc: Any
    data: dict[str, Any]
    sizes: dict[str, int | float]
    statements: list[Statement]
    counts: list[Count]
    fills: Any

    def _implementations(self) -> tuple[Implementation, ...]:
        out = []
        for k, item in enumerate(self.data.get("implementations") or []):
            item = item if isinstance(item, dict) else {"model": item}
            out.append(Implementation(item["model"], item.get("expect", "satisfied"),
                                      tuple(item.get("codes") or ()), item.get("says", ""),
                                      *self.doc.where(("implementations", k)),
                                      self._accept(item.get("accept") or (), k)))
        return tuple(out)

    def _accept(self, texts: list[str], k: int) -> tuple[AcceptRule, ...]:
        """An implementation's ``accept:`` rules, each read as ``--accept`` reads one; a
        malformed one is an error at its line."""
        rules = []
        for j, text in enumerate(texts):
            path = ("implementations", k, "accept", j)
            origin = "{}:{}:{}".format(self.doc.name, *self.doc.where(path))
            try:
                rules.append(parse_rule(text, origin))
            except AcceptError as err:  # the error names the place itself
                raise self.fail(path, str(err)[len(origin) + 2:]) from None
        return tuple(rules)

    def _record(self, item: dict[str, Any], path: Path, op: str, scope: str, source: str,
                env: Mapping[str, int | float], tolerance: Tolerance, refs: list[str],
                params: int, blanket: bool) -> None:
        tolerance = self._tolerance(item.get("tolerance"), (*path, "tolerance"), tolerance)
        expr, text = None, item.get("equation", "")
        if text:
            spec = get_spec(op) if op != REARRANGE else None
            tensors = {r for r in refs if r.isidentifier()} | {"W", "b", "gamma", "beta",
                                                               "γ", "β", "mu", "μ", "sigma"}
            if spec is not None:
                tensors |= {e.lstrip("*").partition("?")[0] for e in spec.inputs}
            scalars = set(env) | set(attributes(op))
            with self.at((*path, "equation")):
                _, expr = equation(text, tensors, scalars - tensors)
        count = None
        if "param_count" in item:
            count = self._count(item["param_count"], (*path, "param_count"), env, params,
                                f"statement {scope}", scope)
        line, column = self.doc.where(path)
        keys = {k: self.doc.where((*path, k), key=True) for k in item}
        self.statements.append(Statement(scope, source, op, expr, text, tolerance, count,
                                         line, column, keys, blanket))

    def _tolerance(self, value: Any, path: Path, inherited: Tolerance) -> Tolerance:
        if value is None:
            return inherited
        given = value
        if not isinstance(value, dict):
            value = {"rtol": value}
        out = {}
        for key, number in value.items():
            where = (*path, key) if isinstance(given, dict) else path
            with self.at(where, f"tolerance {key}: "):
                out[key] = float(evaluate(number, self.sizes))
            if out[key] < 0:
                raise self.fail(where, f"the tolerance {key} is {out[key]:g}; a tolerance is a "
                                "number from 0")
        return Tolerance(out.get("rtol", inherited.rtol), out.get("atol", inherited.atol))

    def _count(self, stated: Any, path: Path, env: Mapping[str, int | float], actual: int,
               what: str, scope: str) -> int | None:
        if stated is None:
            return None
        with self.at(path, "param_count: "):
            value = evaluate(stated, env)
        if not float(value).is_integer() or not 0 <= value <= MAX_COUNT:
            raise self.fail(path, f"param_count is {value:g}; a parameter count is a whole "
                            f"number from 0 to {MAX_COUNT:,}")
        value = int(value)
        self.counts.append(Count(scope, value, actual, *self.doc.where(path, key=True)))
        if value != actual and self.fills is None:
            raise self.fail(path, f"{what} states {value:,} parameters but its statements hold "
                            f"{actual:,}; fix the count or the shapes")
        return value
