"""Renderers: one printer per output format, over the public report types only."""

from __future__ import annotations

from specgraph.renderers.base import Renderer

__all__ = ["Renderer", "get_renderer", "FORMATS"]

FORMATS = ("text", "latex", "json")


def get_renderer(fmt: str, *, color: bool = False, full: bool = False) -> Renderer:
    """The renderer for ``fmt`` (one of FORMATS); ``color`` for terminal highlighting,
    ``full`` for every row of a diff's side-by-side view (text only)."""
    if fmt == "text":
        from specgraph.renderers.text import TextRenderer

        return TextRenderer(color=color, full=full)
    if fmt == "latex":
        from specgraph.renderers.latex import LatexRenderer

        return LatexRenderer()
    if fmt == "json":
        from specgraph.renderers.json import JsonRenderer

        return JsonRenderer()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
