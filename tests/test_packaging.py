"""Packaging: the package list, bare imports, a missing framework, and a built wheel that
holds and imports every subpackage (what the core may import: tests/test_layering.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"specgraph": "specgraph", "frontends": "specgraph.frontends",
           "renderers": "specgraph.renderers"}


def _subpackages() -> list[str]:
    """Every folder with an ``__init__.py`` under the three installed trees, as a package."""
    out = []
    for folder, package in FOLDERS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            out.append(".".join((package, *parts)))
    return out


SUBPACKAGES = _subpackages()


def test_pyproject_lists_every_subpackage() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(config["tool"]["setuptools"]["packages"]) == sorted(SUBPACKAGES)


def test_no_bare_frontends_or_renderers_imports() -> None:
    pattern = re.compile(r"^\s*(import|from)\s+(frontends|renderers)\b", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for folder in ("specgraph", "frontends", "renderers",
                                                          "tests", "examples", "bench")
                 for p in (ROOT / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_missing_framework_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    from specgraph import frontends
    from specgraph.errors import FrontendMissingError

    framework = frontends.Framework("specgraph_no_such_frontend_module", "nosuchfw", "nosuchfw",
                                    ("nosuchfw",), "runner:Runner", "repro:write")
    monkeypatch.setitem(frontends.FRAMEWORKS, "nosuchfw", framework)
    monkeypatch.setitem(frontends.MODEL_KINDS, "nosuchfw", frontends.ModelKind(
        "nosuchfw", "nosuchfw", ("nosuchfw.",), "(model, example_inputs)", 2))
    monkeypatch.setattr(frontends, "importlib", _ImportFails("nosuchfw"))
    with pytest.raises(FrontendMissingError,
                       match=r"^nosuchfw frontend needs nosuchfw: "
                             r"pip install 'specgraph-check\[nosuchfw\]'$"):
        frontends.load("nosuchfw")
    with pytest.raises(FrontendMissingError,
                       match=r"^running nosuchfw models needs nosuchfw: "
                             r"pip install 'specgraph-check\[nosuchfw\]'$"):
        frontends.runner("nosuchfw", None)


class _ImportFails:
    """Stands in for importlib inside specgraph.frontends: the framework is not installed."""

    def __init__(self, missing: str) -> None:
        self.missing = missing

    def import_module(self, name: str) -> None:
        raise ModuleNotFoundError(f"No module named {self.missing!r}", name=self.missing)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(out), str(ROOT)], check=True, capture_output=True, text=True)
    (path,) = out.glob("specgraph_check-*.whl")
    return path


def test_wheel_contains_every_subpackage_under_specgraph(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for package in SUBPACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert "specgraph/frontends/torch/tracer.py" in names
    assert "specgraph/renderers/text.py" in names
    assert "specgraph/spec/spec.schema.json" in names  # package data: `specgraph schema`
    top = {n.split("/")[0] for n in names}
    assert top <= {"specgraph", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                   + ".dist-info"}, top
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    entries = zipfile.ZipFile(wheel).read(entry).decode()
    assert "specgraph = specgraph.cli:main" in entries
    assert "[pytest11]\nspecgraph = specgraph.pytest_plugin" in entries  # *.spec.yaml tests
    assert "specgraph/renderers/sarif.py" in names and "specgraph/pytest_plugin.py" in names


def test_wheel_imports_every_subpackage(wheel: Path, tmp_path: Path) -> None:
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(wheel)!r})\n"
        f"for name in {SUBPACKAGES!r} + ['specgraph.frontends.torch.tracer', 'specgraph.cli']:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(wheel)!r}), module.__file__\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.stdout.strip() == "ok", proc.stderr
