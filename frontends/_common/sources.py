"""How a source file is shown in ``file:line`` (shared by every frontend): an installed
package's file from its package root (``transformers/models/bert/modeling_bert.py``), a file
inside the working directory relative to it, another file on ``sys.path`` from its entry,
anything else as given."""

from __future__ import annotations

import os
import sys

__all__ = ["display_path"]

_SITE = ("site-packages", "dist-packages")


def display_path(path: str) -> str:
    """``path`` as a person reads it in a report.

    In order: under a ``site-packages`` (or ``dist-packages``) entry of ``sys.path``, from
    that entry (the longest that holds it), even in a virtual environment inside the working
    directory; inside the working directory, relative to it; under another ``sys.path``
    entry (an editable install, the standard library), from the longest that holds it;
    otherwise as given.

    Example:
        >>> import os, sys
        >>> site = os.path.join(os.sep, "opt", "env", "lib", "site-packages")
        >>> sys.path.append(site)
        >>> display_path(os.path.join(site, "transformers", "models", "bert", "x.py"))
        'transformers/models/bert/x.py'
        >>> sys.path.remove(site)
    """
    full = os.path.abspath(path)
    entries = [os.path.abspath(e) for e in sys.path if e and e != os.curdir]
    site = _under([e for e in entries if os.path.basename(e) in _SITE], full)
    if site is not None:
        return site
    try:
        rel = os.path.relpath(full)
    except ValueError:  # another drive on Windows
        rel = os.pardir
    if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
        return rel
    cwd = os.getcwd()
    other = _under([e for e in entries if e != cwd], full)
    return other if other is not None else path


def _under(roots: list[str], full: str) -> str | None:
    """``full`` relative to the longest of ``roots`` that holds it, or None."""
    holding = [r for r in roots if full.startswith(r.rstrip(os.sep) + os.sep)]
    if not holding:
        return None
    root = max(holding, key=len)
    return full[len(root.rstrip(os.sep)) + 1:].replace(os.sep, "/")
