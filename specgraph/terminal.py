"""The command line's terminal: frameworks' start-up chatter kept off it, and the user's
prints kept out of the report on stdout.

TensorFlow's C++ start-up lines (``oneDNN custom operations are on``, ``Could not find cuda
drivers``, ``cpu_feature_guard``...) are written to file descriptor 2 before absl's logging
is initialized, whatever ``TF_CPP_MIN_LOG_LEVEL`` says, and they come from the user's own
``import tensorflow`` (or ``import transformers``) as much as from ours. So while a command
runs, descriptor 2 goes through a pipe whose reader drops only those known lines and passes
everything else on at once, real errors included.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
import threading
import warnings
from collections.abc import Iterator

__all__ = ["quiet_frameworks", "stdout_to_stderr", "strip_controls", "NOISE"]

# Lines frameworks write to the terminal that say nothing about the user's models: absl's
# C++ INFO and WARNING lines (TF_CPP_MIN_LOG_LEVEL=2 drops the same ones once absl is up),
# the banner absl writes before that, the hint that follows cpu_feature_guard's line, the
# errors a machine without a GPU driver gets at start-up, and deprecation notices libraries
# log rather than warn (transformers' "TensorFlow and JAX classes are deprecated...").
NOISE = re.compile(
    rb"^(?:WARNING: All log messages before absl::InitializeLog\(\) is called are written "
    rb"to STDERR"
    rb"|[IW]\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+ [^\s\]]+:\d+\] "
    rb"|E\d{4} .*(?:failed call to cuInit|Unable to register cu(?:DNN|FFT|BLAS) factory"
    rb"|computation placer already registered)"
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate "
    rb"compiler flags"
    rb"|.*TF-TRT Warning: Could not find TensorRT"
    rb"|.*An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not "
    rb"installed"
    rb"|.*\b(?:is|are) deprecated and will be removed\b)"
)

# Control characters a name from a model could carry to the terminal (a carriage return
# that overwrites the line, an escape sequence that moves the cursor or sets the title),
# and, kept apart, the colour sequences specgraph writes itself.
_CONTROLS = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def strip_controls(text: str, *, color: bool = False) -> str:
    """``text`` for the terminal: control characters other than newline and tab replaced
    by ``?``; colour sequences (``ESC [ ... m``) kept with ``color``, else replaced too.

    >>> strip_controls("fc\\x1b]0;pwned\\x07\\rok")
    'fc?]0;pwned??ok'
    """
    return _CONTROLS.sub(lambda m: m.group() if color and len(m.group()) > 1 else "?", text)


# Set before the user's file is imported; a value the user set wins.
_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}
_QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


@contextlib.contextmanager
def quiet_frameworks() -> Iterator[None]:
    """Keep frameworks' start-up lines and libraries' deprecation and future warnings off
    the terminal meanwhile; everything else written to stderr passes.

    The environment variables stay set afterwards (a framework reads them once, when it
    loads); the warnings filters are restored. Warnings filters given with ``python -W`` or
    ``PYTHONWARNINGS`` are left as they are.
    """
    for name, value in _ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    with warnings.catch_warnings(), _filtered_stderr():
        if not sys.warnoptions:
            for category in _QUIET_WARNINGS:
                warnings.filterwarnings("ignore", category=category)
        yield


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is written to stdout, by Python or by native code, to stderr meanwhile, so
    that nothing the user's code or a framework prints lands ahead of the report."""
    sys.stdout.flush()
    saved = _dup(1)
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _dup(fd: int) -> int | None:
    try:
        return os.dup(fd)
    except OSError:  # no such descriptor (a daemon, a closed stream)
        return None


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """File descriptor 2 through a pipe whose reader drops the lines NOISE matches."""
    if os.name != "posix":  # select() on pipes: POSIX only; elsewhere nothing is filtered
        yield
        return
    terminal = _dup(2)
    if terminal is None:
        yield
        return
    read, write = os.pipe()
    _widen(write)
    sys.stderr.flush()
    os.dup2(write, 2)
    os.close(write)
    stop = threading.Event()
    pump = threading.Thread(target=_pump, args=(read, terminal, stop), daemon=True,
                            name="specgraph-stderr")
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # the pipe's last writer gone, unless a child process holds it
        stop.set()
        pump.join(timeout=5)
        if not pump.is_alive():
            os.close(read)
            os.close(terminal)


def _widen(fd: int) -> None:
    """A larger pipe (Linux): native code that writes while holding the GIL, so that the
    reader cannot run, blocks only past 1 MiB rather than 64 KiB."""
    with contextlib.suppress(AttributeError, OSError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)


def _pump(read: int, terminal: int, stop: threading.Event) -> None:
    """Copy whole lines from the pipe to the terminal, leaving out noise, until the pipe
    closes or, once ``stop`` is set, nothing more comes for a moment."""
    pending = b""
    while True:
        # ``stop`` read before the wait: what was written before it was set is in the pipe
        # by then, so a wait that finds nothing after it was seen set has lost nothing (a
        # wait that timed out just before the last write, then saw ``stop``, dropped the
        # user's last print on a busy machine)
        stopping = stop.is_set()
        ready, _, _ = select.select([read], [], [], 0.05)
        if not ready:
            if stopping:
                break
            if pending and not NOISE.match(pending):  # a prompt, a progress bar: show it now
                _write(terminal, pending)
                pending = b""
            continue
        try:
            chunk = os.read(read, 65536)
        except OSError:
            break
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        _write(terminal, b"".join(line + b"\n" for line in lines if not NOISE.match(line)))
    if pending and not NOISE.match(pending):
        _write(terminal, pending)


def _write(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:  # the terminal went away: keep draining the pipe regardless
            return
