"""Known differences accepted, as linters keep baselines: ``CODE:WHERE`` rules from
``--accept`` and from ``accept = [...]`` under ``[tool.specgraph]`` in pyproject.toml.

A rule accepts the findings with its code whose lhs or rhs scope matches WHERE (shell
wildcards, ``*`` for every scope). A finding found in several places is accepted when rules
cover every place; accepted findings leave ``findings`` (so they do not make two models
different) and are listed in the report's ``accepted``.

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
from collections.abc import Iterable, Sequence
from pathlib import Path

from specgraph.errors import SpecgraphError, first_line
from specgraph.report import CODES, Accepted, AcceptRule, DiffReport, Finding, Side

__all__ = ["AcceptError", "parse_rule", "find_pyproject", "rules_from", "accept"]

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
            "(WHERE matches a finding's lhs or rhs scope, with * for any scope)")
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


def _places(finding: Finding) -> Iterable[tuple[Side | None, Side | None]]:
    return finding.places or ((finding.lhs, finding.rhs),)


def _covering(rules: Sequence[AcceptRule], finding: Finding) -> tuple[AcceptRule, ...] | None:
    """The rules that cover every place of ``finding`` (the first that matches each), or
    None if a place is left uncovered."""
    used: list[AcceptRule] = []
    for place in _places(finding):
        scopes = [side.scope for side in place if side is not None]
        rule = next((r for r in rules if r.code == finding.code and any(
            fnmatch.fnmatchcase(scope, r.where) for scope in scopes)), None)
        if rule is None:
            return None
        if rule not in used:
            used.append(rule)
    return tuple(used)


def accept(report: DiffReport, rules: Sequence[AcceptRule]) -> DiffReport:
    """``report`` with the findings ``rules`` cover moved to ``accepted``.

    Args:
        report: a comparison's report.
        rules: accept rules (``parse_rule``, ``rules_from``).

    Returns:
        The report with ``rules`` recorded; unchanged but for that if no rule applies.
    """
    if not rules:
        return report
    kept: list[Finding] = []
    accepted = list(report.accepted)
    for finding in report.findings:
        covering = _covering(rules, finding)
        if covering is None:
            kept.append(finding)
        else:
            accepted.append(Accepted(finding, covering))
    return dataclasses.replace(report, findings=tuple(kept), accepted=tuple(accepted),
                               rules=(*report.rules, *rules))
