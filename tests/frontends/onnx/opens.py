"""The files Python opens while a test watches: one audit hook for the ONNX tests (an audit
hook cannot be removed, so it is added once and records only inside ``recording``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

_log: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _log is not None and isinstance(args[0], (str, bytes, Path)):
        _log.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextlib.contextmanager
def recording() -> Iterator[list[str]]:
    """A list that gets the path of every file Python opens until the block ends."""
    global _log
    _log = []
    try:
        yield _log
    finally:
        _log = None
