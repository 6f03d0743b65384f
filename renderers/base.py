"""``Renderer``: a printer that dispatches on the type of what it renders."""

from __future__ import annotations

from typing import Any

__all__ = ["Renderer"]


class Renderer:
    """Render report objects to text; subclasses define ``_render_<ClassName>`` methods.

    Dispatch follows the object's MRO, so a renderer for a base class serves subclasses.
    """

    format: str = ""

    def render(self, obj: Any) -> str:
        for cls in type(obj).__mro__:
            method = getattr(self, f"_render_{cls.__name__}", None)
            if method is not None:
                return method(obj)
        raise TypeError(f"{type(self).__name__} cannot render {type(obj).__name__}")
