"""Known differences accepted, as linters keep baselines: ``CODE:WHERE`` rules from
``--accept`` and from ``accept = [...]`` under ``[tool.specgraph]`` in pyproject.toml.

A rule accepts the findings with its code whose lhs or rhs scope matches WHERE (shell
wildcards, ``*`` for every scope); in a check against a spec WHERE matches the spec
statement's name too (``layer.3.ln1``). A finding found in several places is accepted when
rules cover every place; accepted findings leave ``findings`` (so they do not make two
models different, nor fail a check) and are listed in the report's ``accepted``.

Example:
    >>> rule = parse_rule("attr-mismatch:encoder.layer.*.LayerNorm", "--accept")
    >>> (rule.code, rule.where)
    ('attr-mismatch', 'encoder.layer.*.LayerNorm')
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from specgraph.errors import SpecgraphError, first_line
from specgraph.report import (CODES, Accepted, AcceptRule, DiffReport, Finding, SpecFinding,
                              SpecReport, StatementResult)

__all__ = ["AcceptError", "parse_rule", "parse_rules", "find_pyproject", "rules_from",
           "accept"]

_Report = TypeVar("_Report", DiffReport, SpecReport)

_EXAMPLE = "attr-mismatch:encoder.layer.*.LayerNorm"


class AcceptError(SpecgraphError):
    """An accept rule (``--accept`` or pyproject.toml) is malformed."""


def parse_rule(text: str, origin: str) -> AcceptRule:
    """``CODE:WHERE`` as a rule; AcceptError, naming ``origin``, if it is not one."""
    code, sep, where = (text.partition(":") if isinstance(text, str) else ("", "", ""))
    code, where = code.strip(), where.strip()
    if not sep or not code or not where:
        raise AcceptError(
            f"{origin}: accept rule {text!r} is not CODE:WHERE; write e.g. {_EXAMPLE!r} "
            "(WHERE matches a finding's lhs or rhs scope, or in a check the spec statement's "
            "name, with * for any scope)")
    if code not in CODES:
        raise AcceptError(
            f"{origin}: accept rule {text!r} names no finding code {code!r}; the codes are "
            f"{', '.join(CODES)}")
    return AcceptRule(code, where, origin)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml from ``start`` upward that has a ``[tool.specgraph]``
    table (as ruff looks for ``[tool.ruff]``), or None."""
    for folder in (start.resolve(), *start.resolve().parents):
        path = folder / "pyproject.toml"
        if path.is_file() and "specgraph" in _read_toml(path).get("tool", {}):
            return path
    return None


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise AcceptError(f"{path}: cannot read it as TOML ({first_line(err)}); fix the "
                          "file, since specgraph reads its [tool.specgraph] table") from err


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def rules_from(flags: Sequence[str], start: Path) -> tuple[AcceptRule, ...]:
    """The rules in force: ``accept`` under ``[tool.specgraph]`` in the nearest
    pyproject.toml from ``start`` upward, then the ``--accept`` flags."""
    rules: list[AcceptRule] = []
    path = find_pyproject(start)
    if path is not None:
        origin = _shown(path)
        entries = _read_toml(path)["tool"]["specgraph"].get("accept", [])
        if not isinstance(entries, list):
            raise AcceptError(f"{origin}: [tool.specgraph] accept is a "
                              f"{type(entries).__name__}; make it a list of strings such as "
                              f'["{_EXAMPLE}"]')
        rules += [parse_rule(entry, f"{origin} [tool.specgraph] accept") for entry in entries]
    return (*rules, *(parse_rule(flag, "--accept") for flag in flags))


def parse_rules(texts: Sequence[str] | str, origin: str) -> tuple[AcceptRule, ...]:
    """Each of ``texts`` as a rule (``parse_rule``); a lone string is one rule."""
    if isinstance(texts, str):
        texts = [texts]
    return tuple(parse_rule(text, origin) for text in texts)


def _scopes(finding: Finding | SpecFinding) -> list[list[str]]:
    """Per place of ``finding``, the scopes a rule's WHERE may match: each side's, and in
    a check the statement the place lies in."""
    base = finding.finding if isinstance(finding, SpecFinding) else finding
    places = base.places or ((base.lhs, base.rhs),)
    out = [[side.scope for side in place if side is not None] for place in places]
    if isinstance(finding, SpecFinding):
        statements = finding.place_statements or (  # a report made by hand
            finding.statements if len(finding.statements) == len(places) else ())
        for scopes, statement in zip(out, statements):
            if statement is not None:
                scopes.append(statement)
    return out


def _covering(rules: Sequence[AcceptRule], finding: Finding | SpecFinding
              ) -> tuple[AcceptRule, ...] | None:
    """The rules that cover every place of ``finding`` (the first that matches each), or
    None if a place is left uncovered."""
    code = finding.finding.code if isinstance(finding, SpecFinding) else finding.code
    used: list[AcceptRule] = []
    for scopes in _scopes(finding):
        rule = next((r for r in rules if r.code == code and any(
            fnmatch.fnmatchcase(scope, r.where) for scope in scopes)), None)
        if rule is None:
            return None
        if rule not in used:
            used.append(rule)
    return tuple(used)


def accept(report: _Report, rules: Sequence[AcceptRule]) -> _Report:
    """``report`` with the findings ``rules`` cover moved to ``accepted``.

    Args:
        report: a comparison's report, or a check's against a spec (whose statements
            then count an accepted finding as accepted, not failed).
        rules: accept rules (``parse_rule``, ``rules_from``).

    Returns:
        The report with ``rules`` recorded; unchanged but for that if no rule applies.
    """
    if not rules:
        return report
    kept: list = []
    accepted = list(report.accepted)
    moved: dict[int, tuple[bool, int]] = {}  # finding index -> (accepted?, its new index)
    for k, finding in enumerate(report.findings):
        covering = _covering(rules, finding)
        if covering is None:
            moved[k] = (False, len(kept))
            kept.append(finding)
        else:
            moved[k] = (True, len(accepted))
            accepted.append(Accepted(finding, covering))
    out = dataclasses.replace(report, findings=tuple(kept), accepted=tuple(accepted),
                              rules=(*report.rules, *rules))
    if isinstance(out, SpecReport):
        out = dataclasses.replace(out, statements=tuple(
            _restated(s, moved) for s in report.statements))
    return out


def _restated(statement: StatementResult, moved: dict[int, tuple[bool, int]]
              ) -> StatementResult:
    """``statement`` with its findings renumbered, those accepted moved to ``accepted``;
    failed only while a finding of its own is left."""
    findings = tuple(moved[k][1] for k in statement.findings if not moved[k][0])
    accepted = (*statement.accepted, *(moved[k][1] for k in statement.findings
                                       if moved[k][0]))
    status = "passed" if statement.status == "failed" and not findings else statement.status
    return dataclasses.replace(statement, status=status, findings=findings, accepted=accepted)
