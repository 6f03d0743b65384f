"""The one exception hierarchy of specgraph: every user-facing failure is a SpecgraphError."""

from __future__ import annotations

__all__ = [
    "SpecgraphError",
    "ModelReferenceError",
    "FactoryError",
    "FrontendMissingError",
    "TraceError",
    "GraphError",
    "ExecutionError",
    "SpecError",
    "first_line",
]


class SpecgraphError(Exception):
    """Base class: its message is one sentence that says what, where, and what to do."""


class ModelReferenceError(SpecgraphError):
    """A model reference (``file.py:factory``, ``.onnx``, ``.yaml``) does not resolve."""


class FactoryError(SpecgraphError):
    """A factory raised, or returned something that is not a model of a known framework."""


class FrontendMissingError(SpecgraphError):
    """The framework a frontend needs is not installed."""


class TraceError(SpecgraphError):
    """A framework could not trace the model into a graph."""


class GraphError(SpecgraphError):
    """A Graph breaks an invariant of the IR (found by ``Graph.verify``)."""


class ExecutionError(SpecgraphError):
    """The reference interpreter failed on a node."""


class SpecError(SpecgraphError):
    """A paper spec (YAML) is malformed or inconsistent: the message starts ``file:line:col:``
    and says what is wrong there and how to fix it."""

    def __init__(self, file: str, line: int, col: int, message: str) -> None:
        super().__init__(f"{file}:{line}:{col}: {message}")
        self.file, self.line, self.col, self.reason = file, line, col, message


def first_line(err: BaseException) -> str:
    """How an exception (the user's, a framework's) is quoted inside a one-sentence error:
    the first line of its message, whitespace collapsed, without a closing period or colon;
    its type's name if it has no message."""
    text = str(err).strip().splitlines()
    return " ".join(text[0].split()).rstrip(".:") if text else type(err).__name__
