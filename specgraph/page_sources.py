"""Source excerpts for the HTML report: the lines around each ``file.py:line`` a Python
model was traced from.

A location is read only where it names a ``.py`` file: as given (the model's own code,
relative to the working directory), or, for an installed package's file shown from its
package root (``transformers/models/gpt2/modeling_gpt2.py``), through the loaded module's
own file or under a ``sys.path`` entry. A path that leads outside the entry it is looked up
in (``..``, a link) is not followed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["excerpts", "read_text", "resolve"]

EXCERPT = 2  # source lines shown either side of the one a location points at
_MAX_SOURCE_BYTES = 2 << 20


def read_text(path: Path) -> str:
    """The text of ``path`` (at most 2 MiB; empty when it cannot be read)."""
    try:
        if path.stat().st_size > _MAX_SOURCE_BYTES:
            return ""
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _module_file(path: str) -> Path | None:
    """The file of the loaded module ``path`` names (``a/b.py`` -> module ``a.b``), when
    it is that path under a ``sys.path`` entry."""
    name = path[:-3].replace("/", ".").removesuffix(".__init__")
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if not file or not Path(file).as_posix().endswith("/" + path):
        return None
    root = Path(file[: -len(path)])
    return Path(file) if any(_inside(root, Path(e)) and _inside(Path(file), Path(e))
                             for e in sys.path if e) else None


def resolve(path: str) -> Path | None:
    """The ``.py`` file ``path`` (as a report shows it) stands for, or None.

    Example:
        >>> import json.decoder
        >>> resolve("json/decoder.py") == Path(json.decoder.__file__)
        True
        >>> resolve("json/../../../etc/passwd.py") is None
        True
    """
    if not path.endswith(".py"):
        return None
    given = Path(path)
    if given.is_file():
        return given
    if given.is_absolute() or ".." in given.parts:
        return None
    found = _module_file(path)
    if found is not None:
        return found
    for entry in sys.path:
        if not entry:
            continue
        candidate = Path(entry) / given
        if candidate.is_file() and _inside(candidate, Path(entry)):
            return candidate
    return None


def excerpts(locations: Iterable[str]) -> dict[str, Any]:
    """``file.py:line`` -> [first line number, lines around it], for the locations whose
    file ``resolve`` finds; nothing else is read."""
    files: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    for loc in locations:
        path, _, line = loc.rpartition(":")
        if not line.isdigit():
            continue
        if path not in files:
            found = resolve(path)
            files[path] = read_text(found).splitlines() if found is not None else []
        lines = files[path]
        k = int(line)
        if not 1 <= k <= len(lines):
            continue
        lo = max(1, k - EXCERPT)
        out[loc] = [lo, lines[lo - 1:k + EXCERPT]]
    return out
