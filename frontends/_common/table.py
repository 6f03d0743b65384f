"""The converter tables every frontend keeps (native op name -> a small converter), joined."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["Converter", "ConverterTable", "join"]

Converter = Callable[[Any, Any], Any]
T = TypeVar("T")


class ConverterTable(dict[str, Converter]):
    """A dict from native op name to converter; ``table.register(*names)`` decorates one.

    Each module of converters fills a table of its own; the frontend's tracer imports
    them and ``join``s them into the one table its converter reads.
    """

    def register(self, *names: str) -> Callable[[Converter], Converter]:
        def wrap(fn: Converter) -> Converter:
            for name in names:
                self[name] = fn
            return fn

        return wrap


def join(*tables: Mapping[str, T]) -> dict[str, T]:
    """One table holding the entries of ``tables``, each name registered by one of them."""
    joined: dict[str, T] = {}
    for table in tables:
        twice = sorted(set(joined) & set(table))
        assert not twice, f"{twice} registered in two tables"
        joined.update(table)
    return joined
