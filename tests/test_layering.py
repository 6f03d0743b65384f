"""The architecture, checked: one way down from the CLI.

The core (``specgraph/``) imports no deep-learning framework, and only its front doors look
frontends up (through the one registry in ``specgraph.frontends``); renderers see the public
report types only. Read from the source with ``ast``, so a lazy import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRONT_DOORS = {"specgraph/loading.py", "specgraph/check.py", "specgraph/cli.py",
               "specgraph/testing.py"}
FRAMEWORKS = {"torch", "jax", "jaxlib", "flax", "tensorflow", "keras", "tf_keras", "onnx",
              "onnxruntime", "onnxscript", "transformers"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in it, with its line: ``from a import b``
    counts as ``a`` and as ``a.b`` (``from specgraph import frontends`` is a frontends
    import)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return out


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _offenders(folder: str, bad: callable) -> list[str]:
    found = []
    for path in _sources(folder):
        rel = path.relative_to(ROOT).as_posix()
        found.extend(f"{rel}:{line}: {name}" for line, name in _imports(path)
                     if bad(rel, name))
    return sorted(set(found))


def _frontends(name: str) -> bool:
    return name == "specgraph.frontends" or name.startswith("specgraph.frontends.")


def _framework(name: str) -> bool:
    return name.split(".")[0] in FRAMEWORKS


def test_only_the_front_doors_import_frontends() -> None:
    assert _offenders("specgraph", lambda rel, name: _frontends(name)
                      and rel not in FRONT_DOORS) == []


def test_front_doors_use_only_the_registry() -> None:
    assert _offenders("specgraph", lambda rel, name: _frontends(name)
                      and name != "specgraph.frontends") == []


def test_the_core_imports_no_framework() -> None:
    assert _offenders("specgraph", lambda rel, name: _framework(name)) == []


def test_renderers_import_no_frontend_and_no_framework() -> None:
    assert _offenders("renderers", lambda rel, name: _frontends(name) or _framework(name)) \
        == []


def test_a_framework_is_imported_only_by_its_own_package() -> None:
    own = {"torch": {"torch"}, "jax": {"jax", "jaxlib", "flax"},
           "tf": {"tensorflow", "keras", "tf_keras"}, "onnx": {"onnx", "onnxruntime"}}

    def foreign(rel: str, name: str) -> bool:
        parts = rel.split("/")
        top = name.split(".")[0]
        if not _framework(top) or len(parts) < 3:
            return _framework(top)  # frontends/__init__.py and _common/ import none
        package = parts[1]
        if package == "_common":
            return True
        # the device arithmetic sees every framework's tensor through PyTorch's DLPack
        if rel == "frontends/torch/arrays.py" and top == "tensorflow":
            return False
        # the ONNX runner and repro run what the exporter writes; torch exports ONNX too
        return top not in own.get(package, set())

    assert _offenders("frontends", foreign) == []


@pytest.mark.parametrize("modules", [
    "specgraph, specgraph.cli, specgraph.check, specgraph.testing, specgraph.summary, "
    "specgraph.symbolic, specgraph.passes, specgraph.graph_nx, specgraph.numeric.compare, "
    "specgraph.numeric.repro, specgraph.renderers.text, specgraph.renderers.json, "
    "specgraph.renderers.latex, specgraph.spec, specgraph.spec.compiler",
    "specgraph.frontends",
], ids=["core", "registry"])
def test_importing_loads_no_framework(modules: str) -> None:
    code = (
        f"import sys, {modules}\n"
        "import specgraph.ops\n"
        "specgraph.ops.registered_ops()\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        f"print(sorted(loaded & set({sorted(FRAMEWORKS)!r})))\n"
        "print('specgraph.frontends' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    frameworks, frontends = proc.stdout.split("\n")[:2]
    assert frameworks == "[]"
    assert frontends == ("True" if modules == "specgraph.frontends" else "False")
