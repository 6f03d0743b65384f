"""The ``specgraph`` command line: a thin shell over the library.

Exit codes: 0 equivalent or done, 1 differences found, 2 usage, input or trace error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from specgraph import __version__
from specgraph.errors import SpecgraphError
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.runner import DEVICES, MODES, PRECISIONS, Context

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
    _numeric_arguments(diff)
    return parser


def _seeds(text: str) -> tuple[int, ...]:
    """``3``, ``0-19`` or ``1,5,9``."""
    try:
        out: list[int] = []
        for part in text.split(","):
            low, sep, high = part.partition("-")
            out.extend(range(int(low), int(high) + 1) if sep else [int(low)])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no seed list; pass a number, a range like 0-19 or a list like 1,5,9"
        ) from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds are numbers from 0")
    return tuple(out)


def _numeric_arguments(parser: argparse.ArgumentParser) -> None:
    num = parser.add_argument_group(
        "numbers", "After the structure, both models run layer by layer, forward and "
        "backward, with lhs's weights and inputs, and every aligned layer is compared.")
    which = num.add_mutually_exclusive_group()
    which.add_argument("--no-numeric", action="store_true",
                       help="compare structure only")
    which.add_argument("--numeric-only", action="store_true",
                       help="compare numbers only (structure ignored), even where the "
                            "alignment leaves nodes unmatched")
    num.add_argument("--no-transfer", action="store_true",
                     help="do not move lhs's weights into rhs (both already hold the same "
                          "weights, e.g. a model and its ONNX export)")
    num.add_argument("--no-backward", action="store_true", help="compare outputs only")
    num.add_argument("--isolated", action="store_true",
                     help="feed every rhs layer lhs's inputs, to measure each layer alone")
    num.add_argument("--seed", type=_seeds, default=(0,), metavar="SEEDS",
                     help="input seeds: 0 is the example inputs; e.g. 0-19 (default 0)")
    num.add_argument("--batch", type=int, default=None, metavar="N",
                     help="trace both models with their example inputs resized to N examples")
    num.add_argument("--device", choices=DEVICES, default=None, help="device for both sides")
    num.add_argument("--mode", choices=MODES, default=None,
                     help="eager, or compiled (torch.compile, jax.jit, XLA for TF)")
    num.add_argument("--dtype", choices=PRECISIONS, default=None,
                     help="floating precision for both sides")
    num.add_argument("--lhs-context", default="", metavar="CTX",
                     help="lhs's device,mode,dtype, e.g. cpu,eager (over the flags above)")
    num.add_argument("--rhs-context", default="", metavar="CTX",
                     help="rhs's device,mode,dtype, e.g. cpu,compiled")
    num.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="run every layer N times; results must agree bit for bit")
    num.add_argument("--rtol", type=float, default=None,
                     help="relative tolerance (default: by precision and reduction size)")
    num.add_argument("--atol", type=float, default=None, help="absolute tolerance")
    num.add_argument("--repro", default=None, metavar="DIR",
                     help="write standalone scripts that reproduce the first divergence")


def _numeric_options(args: argparse.Namespace) -> NumericOptions:
    base = Context(device=args.device or "auto", mode=args.mode or "eager",
                   dtype=args.dtype or "float32", repeat=max(1, args.repeat))
    return NumericOptions(
        seeds=args.seed, transfer=not args.no_transfer, isolated=args.isolated,
        backward=not args.no_backward, lhs_context=Context.parse(args.lhs_context, base),
        rhs_context=Context.parse(args.rhs_context, base), rtol=args.rtol, atol=args.atol,
        repro=Path(args.repro) if args.repro else None)


def _diff(args: argparse.Namespace) -> int:
    from specgraph.check import compare
    from specgraph.renderers import get_renderer

    progress = Progress.for_format(args.format)
    mode = "structure" if args.no_numeric else ("numbers" if args.numeric_only else "both")
    report = compare(args.lhs, args.rhs, mode=mode, raw=args.raw,
                     options=_numeric_options(args), batch=args.batch, progress=progress.step)
    for line in report.numeric.repro if report.numeric is not None else ():
        progress.step(line)
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
        from specgraph.passes import canonicalize_model

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
