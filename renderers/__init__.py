"""Renderers: one printer per output format, over the public report types only."""

from __future__ import annotations

import importlib

from specgraph.renderers.base import Renderer

__all__ = ["Renderer", "get_renderer", "FORMATS", "CHECK_FORMATS"]

FORMATS = ("text", "latex", "json")  # a model's table and equations (show)
CHECK_FORMATS = ("text", "json", "github", "junit", "sarif", "markdown")  # a spec check

# format -> the module and class that print it (imported when asked for)
_PRINTERS = {
    "text": ("text", "TextRenderer"),
    "latex": ("latex", "LatexRenderer"),
    "json": ("json", "JsonRenderer"),
    "github": ("github", "GithubRenderer"),
    "junit": ("junit", "JunitRenderer"),
    "sarif": ("sarif", "SarifRenderer"),
    "markdown": ("markdown", "MarkdownRenderer"),
    "html": ("html", "HtmlRenderer"),
}


def get_renderer(fmt: str, *, color: bool = False, full: bool = False) -> Renderer:
    """The renderer for ``fmt`` (one of FORMATS or CHECK_FORMATS); ``color`` for terminal
    highlighting, ``full`` for every row of a diff's side-by-side view (text only)."""
    if fmt not in _PRINTERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(_PRINTERS)}")
    module, name = _PRINTERS[fmt]
    cls = getattr(importlib.import_module(f"specgraph.renderers.{module}"), name)
    return cls(color=color, full=full) if fmt == "text" else cls()
