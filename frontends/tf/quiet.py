"""TensorFlow's native logging kept off the terminal while it starts up."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["quiet_native"]


@contextlib.contextmanager
def quiet_native() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null meanwhile: TensorFlow's C++ logging writes there
    before absl is initialized, whatever TF_CPP_MIN_LOG_LEVEL says."""
    try:
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
