"""The ``specgraph`` command line: a thin shell over the library.

Exit codes: 0 equivalent or done, 1 differences found, 2 usage, input or trace error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from specgraph import __version__
from specgraph.errors import SpecgraphError

__all__ = ["main", "Progress"]

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2


class Progress:
    """Progress lines on stderr, only for a person at a terminal (quiet in JSON and CI)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._start = time.perf_counter()

    @classmethod
    def for_format(cls, fmt: str) -> Progress:
        interactive = sys.stderr.isatty() and not os.environ.get("CI")
        return cls(enabled=interactive and fmt == "text")

    def step(self, message: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self._start
            print(f"[{elapsed:6.1f}s] {message}", file=self.stream, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one sentence, exit 2
        self.print_usage(sys.stderr)
        print(f"specgraph: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def _parser() -> argparse.ArgumentParser:
    from specgraph.renderers import FORMATS

    parser = _Parser(prog="specgraph", description="Trace models from any framework into one "
                     "graph, show them as equations, and check that two implementations agree.")
    parser.add_argument("--version", action="version", version=f"specgraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    show = sub.add_parser("show", help="print a model's layer table and equations",
                          description="Trace MODEL and print its layers and equations.")
    show.add_argument("model", metavar="MODEL",
                      help="path/to/file.py:factory (the factory returns the model and its "
                           "example inputs)")
    show.add_argument("--format", choices=FORMATS, default="text", help="output format")
    show.add_argument("--raw", action="store_true",
                      help="show the graph as traced, before canonicalization")
    show.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    diff = sub.add_parser("diff", help="explain how two implementations of a model differ",
                          description="Trace LHS and RHS, canonicalize both, align them and "
                          "explain every difference. Exit 0: equivalent, 1: differences.")
    diff.add_argument("lhs", metavar="LHS", help="the reference model (file.py:factory or "
                      ".onnx)")
    diff.add_argument("rhs", metavar="RHS", help="the model to check against it")
    diff.add_argument("--format", choices=("text", "json"), default="text",
                      help="output format")
    diff.add_argument("--raw", action="store_true",
                      help="compare the graphs as traced, before canonicalization")
    diff.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return parser


def _diff(args: argparse.Namespace) -> int:
    from specgraph.check import compare_structure
    from specgraph.renderers import get_renderer

    progress = Progress.for_format(args.format)
    report = compare_structure(args.lhs, args.rhs, raw=args.raw, progress=progress.step)
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    sys.stdout.write(get_renderer(args.format, color=color).render(report))
    return EXIT_OK if report.equivalent else EXIT_DIFFERENT


def _show(args: argparse.Namespace) -> int:
    from specgraph.loading import trace
    from specgraph.renderers import get_renderer
    from specgraph.summary import summarize

    progress = Progress.for_format(args.format)
    progress.step(f"tracing {args.model}")
    traced = trace(args.model)
    progress.step(f"traced {len(traced.graph)} nodes with {traced.framework}")
    if not args.raw:
        from specgraph.canonical import canonicalize_model

        traced = canonicalize_model(traced)
        progress.step(f"canonical graph has {len(traced.graph)} nodes; writing equations")
    summary = summarize(traced)
    sys.stdout.write(get_renderer(args.format).render(summary))
    return EXIT_OK


_COMMANDS = {"show": _show, "diff": _diff}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except SpecgraphError as err:
        if getattr(args, "debug", False):
            raise
        print(f"specgraph: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("specgraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
