"""How a framework's exception is quoted inside our one-sentence errors."""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message, whitespace collapsed and without a closing
    period or colon; the exception's type name if it has no message."""
    text = str(err).strip().splitlines()
    return " ".join(text[0].split()).rstrip(".:") if text else type(err).__name__
