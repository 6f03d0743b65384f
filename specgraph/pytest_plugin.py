"""A pytest plugin (entry point ``pytest11``): every ``*.spec.yaml`` file that lists the
implementations it checks (``implementations:``) is collected, one test per
implementation, which passes when the implementation satisfies the spec, or differs from it
as the spec says (``expect: differs``, with its ``codes`` and what a finding ``says``). The
known differences an entry's ``accept: [CODE:WHERE, ...]`` covers do not count; a passing
test lists them in a report section (``pytest -rP``) and in its ``user_properties`` (JUnit
XML ``<property name="accepted">``).

A spec that does not compile fails its collection with the ``file:line:col`` sentence; a
failing test reports every finding at its spec line and model line. ``-p no:specgraph``
turns the plugin off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SUFFIX = ".spec.yaml"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
    if file_path.name.endswith(SUFFIX):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecCheckFailure(Exception):
    """An implementation is not as its spec lists it; ``lines`` say how."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class SpecFile(pytest.File):
    """A spec file: one item per implementation it lists."""

    def collect(self) -> Iterator[pytest.Item]:
        from specgraph.spec import load

        spec = load(self.path, name=self._shown())
        for implementation in spec.implementations:
            yield SpecItem.from_parent(self, name=implementation.model,
                                       implementation=implementation)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        from specgraph.errors import SpecgraphError

        if isinstance(excinfo.value, SpecgraphError):  # file:line:col and the fix
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def _shown(self) -> str:
        try:
            return self.path.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return str(self.path)


class SpecItem(pytest.Item):
    """One implementation checked against the spec of its file."""

    def __init__(self, *, implementation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.implementation = implementation

    def runtest(self) -> None:
        from specgraph.accept import accept
        from specgraph.spec_check import check_spec, listed, unexpected

        spec = self.parent._shown()
        report = accept(check_spec(listed(spec, self.implementation), spec),
                        self.implementation.accept)
        lines = [f"[{a.finding.finding.code}] {a.finding.finding.message} (spec: "
                 f"{a.finding.spec_at}; accepted by {a.by})" for a in report.accepted]
        if lines:
            self.add_report_section("call", "accepted", "\n".join(lines))
            self.user_properties += [("accepted", line) for line in lines]
        problems = unexpected(report, self.implementation)
        if problems:
            raise SpecCheckFailure(problems)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, SpecCheckFailure):
            said = "satisfies" if self.implementation.expect == "satisfied" else "differs from"
            return (f"{self.implementation.model} is listed as it {said} "
                    f"{self.parent._shown()}, but:\n  " + "\n  ".join(excinfo.value.lines))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.implementation.line - 1, \
            f"{self.implementation.model} against {self.path.name}"
