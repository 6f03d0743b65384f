"""How a source file is shown in ``file:line``: relative to the working directory when it
lies inside it, absolute otherwise (shared by every frontend)."""

from __future__ import annotations

import os

__all__ = ["display_path"]


def display_path(path: str) -> str:
    """``path`` relative to the working directory if inside it, else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel
