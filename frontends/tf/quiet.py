"""TensorFlow's logging kept off the terminal while it starts up, traces and runs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

__all__ = ["quiet_native", "quiet_tf"]


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


@contextlib.contextmanager
def quiet_tf() -> Iterator[None]:
    """Keep TensorFlow's, Keras' and absl's log lines and warnings off the terminal while the
    model is traced or its program runs; their reasons reach the user through the
    one-sentence error."""
    loggers = [logging.getLogger(n) for n in ("tensorflow", "absl", "keras", "tf_keras")]
    levels = [(lg, lg.level) for lg in loggers]
    for lg, _ in levels:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), quiet_native():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in levels:
            lg.setLevel(level)
