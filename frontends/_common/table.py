"""The converter table every frontend keeps: native op name -> a small converter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Converter", "ConverterTable"]

Converter = Callable[[Any, Any], Any]


class ConverterTable(dict[str, Converter]):
    """A dict from native op name to converter; ``table.register(*names)`` decorates one."""

    def register(self, *names: str) -> Callable[[Converter], Converter]:
        def wrap(fn: Converter) -> Converter:
            for name in names:
                self[name] = fn
            return fn

        return wrap
