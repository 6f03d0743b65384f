"""Source paths as a person reads them: an installed package's file from its package root,
a file in the working directory relative to it, anything else as given."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specgraph.frontends._common.sources import display_path


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages folder on sys.path, with a package in it."""
    folder = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    (folder / "transformers" / "models" / "bert").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_an_installed_package_is_shown_from_its_package_root(site: Path, tmp_path: Path,
                                                              monkeypatch) -> None:
    file = site / "transformers" / "models" / "bert" / "modeling_bert.py"
    monkeypatch.chdir(Path(os.sep))
    assert display_path(str(file)) == "transformers/models/bert/modeling_bert.py"
    monkeypatch.chdir(tmp_path)  # a virtual environment inside the working directory
    assert display_path(str(file)) == "transformers/models/bert/modeling_bert.py"


def test_the_longest_sys_path_entry_wins(site: Path, monkeypatch) -> None:
    inner = site / "vendored" / "site-packages"
    (inner / "pkg").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(inner))
    assert display_path(str(inner / "pkg" / "mod.py")) == "pkg/mod.py"


def test_a_file_in_the_working_directory_is_relative(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    assert display_path(str(tmp_path / "models" / "net.py")) == os.path.join("models",
                                                                            "net.py")


def test_an_editable_install_is_shown_from_its_sys_path_entry(tmp_path: Path,
                                                              monkeypatch) -> None:
    src = tmp_path / "checkout" / "src"
    monkeypatch.syspath_prepend(str(src))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert display_path(str(src / "mylib" / "layers.py")) == "mylib/layers.py"


def test_anything_else_is_as_given(tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere" / "net.py"
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not str(tmp_path).startswith(p)
                                      or not p])
    assert display_path(str(elsewhere)) == str(elsewhere)


def test_a_real_installed_package_and_the_xor_example(repo_root: Path) -> None:
    numpy = pytest.importorskip("numpy")
    assert display_path(numpy.__file__) == "numpy/__init__.py"
    assert display_path(str(repo_root / "examples" / "xor" / "model_torch.py")) == \
        "examples/xor/model_torch.py"


def test_docstring_example_runs() -> None:
    import doctest

    from specgraph.frontends._common import sources

    assert doctest.testmod(sources).failed == 0
