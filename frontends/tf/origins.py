"""Where the user's code is, for the TF frontend: the file:line an op's traceback names, and
the line where each Keras layer was made.

An op a subclassed model computes in its ``call`` has a user frame in its traceback. A
functional model's ops do not: Keras replays its layer graph from its own code, so the only
user line a layer has is where it was made (``layers.Dense(8, name="hidden")(x)``). While
the user's factory runs, ``recording`` keeps a profiling hook (``sys.setprofile``) that
fires on Keras' ``Layer.__init__`` and records, for the layer being made, the innermost
frame of user code outside that layer's own ``__init__``s. Nothing of Keras is patched: the
hook is removed when the factory returns, and a layer is looked up later with ``made_at``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from types import CodeType, FrameType
from typing import Any

import tensorflow as tf

import specgraph
from specgraph.frontends._common.sources import display_path

__all__ = ["recording", "made_at", "traceback_source", "framework_dirs", "classify"]

_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CORE_DIR = os.path.dirname(os.path.abspath(specgraph.__file__)) + os.sep
_MADE: dict[int, tuple[weakref.ref, str, int]] = {}  # id(layer) -> (the layer, file, line)
_LAYERS = (("keras", "keras.src.layers.layer"), ("tf_keras", "tf_keras.src.engine.base_layer"))


def framework_dirs() -> tuple[str, ...]:
    """Folders of TensorFlow, Keras, tf_keras and the standard library (looked up on each
    trace: Keras may be imported after this module)."""
    modules = (tf, sys.modules.get("keras"), sys.modules.get("tf_keras"), os)
    return _dirs(tuple(m.__file__ for m in modules if m is not None and
                       getattr(m, "__file__", None)))


@functools.lru_cache(maxsize=8)
def _dirs(files: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(os.path.dirname(f) + os.sep for f in files)


@functools.lru_cache(maxsize=4096)
def classify(file: str, framework: tuple[str, ...]) -> str:
    """"frontend", "skip" (framework or generated code), or the path to show for ``file``."""
    path = os.path.abspath(file)
    if path.startswith(_FRONTEND_DIR):
        return "frontend"
    if file.startswith("<") or "autograph_generated" in file or path.startswith(framework):
        return "skip"
    return display_path(file)


def traceback_source(frames: Sequence[Any]) -> str:
    """The innermost user frame of an op's traceback as ``file:line`` (frames outside the
    model call, before the frontend's own, do not count), or ""."""
    framework = framework_dirs()
    for index in range(len(frames) - 1, -1, -1):  # innermost first, reading frames one by one
        frame = frames[index]
        kind = classify(frame.filename, framework)
        if kind == "frontend":
            return ""
        if kind == "skip":
            continue
        return f"{kind}:{frame.lineno}"
    return ""


def _init_codes() -> frozenset[int]:
    """ids of the code of ``Layer.__init__`` of each Keras already imported."""
    codes = set()
    for top, module in _LAYERS:
        if top not in sys.modules:
            continue
        layer = getattr(sys.modules.get(module), "Layer", None)
        code = getattr(getattr(layer, "__init__", None), "__code__", None)
        if isinstance(code, CodeType):
            codes.add(id(code))
    return frozenset(codes)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record where each Keras layer made meanwhile was made (in this thread). Does nothing
    when no Keras is imported or another profiler holds the hook."""
    codes = _init_codes()
    if not codes or sys.getprofile() is not None:
        yield
        return
    framework = framework_dirs()

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and id(frame.f_code) in codes:
            _record(frame, framework)

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def _record(frame: FrameType, framework: tuple[str, ...]) -> None:
    layer = frame.f_locals.get("self")
    if layer is None or id(layer) in _MADE:
        return
    caller = frame.f_back
    while caller is not None:
        kind = classify(caller.f_code.co_filename, framework)
        if kind == "frontend" or os.path.abspath(caller.f_code.co_filename).startswith(
                _CORE_DIR):
            return
        own = caller.f_code.co_name == "__init__" and caller.f_locals.get("self") is layer
        if kind != "skip" and not own:
            break
        caller = caller.f_back
    if caller is None:
        return
    key = id(layer)
    try:
        ref = weakref.ref(layer, lambda _: _MADE.pop(key, None))
    except TypeError:  # a layer class without weak references
        return
    _MADE[key] = (ref, caller.f_code.co_filename, caller.f_lineno)


def made_at(layer: Any) -> str:
    """``file:line`` where ``layer`` was made in the user's code, or "" (not recorded)."""
    entry = _MADE.get(id(layer))
    if entry is None or entry[0]() is not layer:
        return ""
    return f"{display_path(entry[1])}:{entry[2]}"
