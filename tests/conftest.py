"""Shared test settings: golden files (``--update-goldens`` rewrites them for review)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = Path(__file__).resolve().parent / "goldens"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true",
                     help="rewrite golden files from the current output (review the diff)")


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """``golden(name, text)`` compares text with tests/goldens/name (or rewrites it)."""
    update = request.config.getoption("--update-goldens")

    def check(name: str, text: str) -> None:
        path = GOLDENS / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"no golden file {path}; run pytest --update-goldens"
        assert text == path.read_text(encoding="utf-8"), f"output differs from {path}"

    return check


@pytest.fixture
def repo_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root, so source paths print relative to it."""
    monkeypatch.chdir(ROOT)
    return ROOT
