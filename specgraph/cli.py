"""The ``specgraph`` command line: a thin shell over the library.

Exit codes: 0 equivalent or done, 1 differences found, 2 usage, input or trace error (the
user's mistake), 3 internal error (a specgraph bug), 130 interrupted. With ``--format json``
stdout holds one JSON document on every exit path: the report, or ``{"error": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from specgraph import __version__
from specgraph.cli_files import (check_side_file, check_targets, html_argument,
                                 model_explorer_argument, write_reports, write_side_files)
from specgraph.errors import SpecgraphError, first_line
from specgraph.cli_values import (MAX_BATCH, MAX_SEED, MAX_SEEDS, InputShapes, batch, repeat,
                                  seeds, tolerance)
from specgraph.numeric.options import NumericOptions
from specgraph.numeric.runner import DEVICES, MODES, PRECISIONS, Context
from specgraph.terminal import quiet_frameworks, stdout_to_stderr, strip_controls

__all__ = ["main", "Progress", "UsageError", "MAX_BATCH", "MAX_SEED", "MAX_SEEDS"]

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Progress:
    """Progress lines on stderr, only for a person at a terminal (quiet in JSON and CI)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.last = ""  # the step under way, named when something fails
        self._start = time.perf_counter()

    @classmethod
    def for_format(cls, fmt: str) -> Progress:
        interactive = sys.stderr.isatty() and not os.environ.get("CI")
        return cls(enabled=interactive and fmt == "text")

    def step(self, message: str) -> None:
        self.last = message
        if self.enabled:
            elapsed = time.perf_counter() - self._start
            print(f"[{elapsed:6.1f}s] {message}", file=self.stream, flush=True)


class UsageError(SpecgraphError):
    """The command line itself is wrong (an unknown flag, a missing argument)."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one sentence, exit 2, in main
        raise UsageError(message, self.format_usage())


def _parser() -> argparse.ArgumentParser:
    from specgraph.renderers import CHECK_FORMATS, FORMATS

    parser = _Parser(prog="specgraph", description="Trace models from any framework into one "
                     "graph, show them as equations, and check that two implementations agree.")
    parser.add_argument("--version", action="version", version=f"specgraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    show = sub.add_parser("show", help="print a model's layer table and equations",
                          description="Trace MODEL and print its layers and equations.")
    show.add_argument("model", metavar="MODEL",
                      help="path/to/file.py:factory (the factory returns the model and its "
                           "example inputs), a .onnx file or a paper spec .yaml")
    show.add_argument("--format", choices=FORMATS, default="text", help="output format")
    show.add_argument("--raw", action="store_true",
                      help="show the graph as traced, before canonicalization")
    show.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    _input_shape_argument(show, "")
    diff = sub.add_parser("diff", help="explain how two implementations of a model differ",
                          description="Trace LHS and RHS, canonicalize both, align them and "
                          "explain every difference. Exit 0: equivalent, 1: differences.")
    diff.add_argument("lhs", metavar="LHS", help="the reference model (file.py:factory, "
                      ".onnx or a paper spec .yaml)")
    diff.add_argument("rhs", metavar="RHS", help="the model to check against it")
    diff.add_argument("--format", choices=("text", "json"), default="text",
                      help="output format")
    diff.add_argument("--raw", action="store_true",
                      help="compare the graphs as traced, before canonicalization")
    diff.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    _input_shape_argument(diff, "; sizes the input NAME of each .onnx side that has one")
    diff.add_argument("--full", action="store_true",
                      help="show every row of the side-by-side view (identical runs are "
                           "folded otherwise)")
    diff.add_argument("--accept", action="append", default=[], metavar="CODE:WHERE",
                      help="accept a known difference: findings with this code whose lhs or "
                           "rhs scope matches WHERE (shell wildcards, * for all) do not count; "
                           "repeatable, and read from [tool.specgraph] accept in "
                           "pyproject.toml too")
    html_argument(diff, "--html")
    model_explorer_argument(diff)
    _numeric_arguments(diff)
    report = sub.add_parser(
        "report", help="write the HTML report of two implementations",
        description="Compare LHS and RHS as diff does and write one self-contained HTML page: "
        "both graphs side by side, the findings, the equations and the numbers. Exit 0: "
        "equivalent, 1: differences.")
    report.add_argument("lhs", metavar="LHS", help="the reference model (file.py:factory, "
                        ".onnx or a paper spec .yaml)")
    report.add_argument("rhs", metavar="RHS", help="the model to check against it")
    html_argument(report, "-o", "--output")
    model_explorer_argument(report)
    report.add_argument("--raw", action="store_true",
                        help="compare the graphs as traced, before canonicalization")
    report.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    report.add_argument("--accept", action="append", default=[], metavar="CODE:WHERE",
                        help="accept a known difference (as for diff)")
    _input_shape_argument(report, "; sizes the input NAME of each .onnx side that has one")
    _numeric_arguments(report)
    report.set_defaults(format="text", full=False)
    _check_arguments(sub.add_parser(
        "check", help="check an implementation against a paper spec",
        description="Hold MODEL against the paper spec SPEC.yaml: what the spec states, in "
        "structure, then in numbers (MODEL's weights moved into the spec, the spec run in "
        "float64). Exit 0: the spec is satisfied, 1: differences."), CHECK_FORMATS)
    spec = sub.add_parser("spec", help="work with paper specs (spec init MODEL drafts one)",
                          description="Paper specs: `spec init MODEL` drafts a spec from an "
                          "implementation, to edit into what the paper says.")
    spec_sub = spec.add_subparsers(dest="spec_command", required=True, parser_class=_Parser)
    init = spec_sub.add_parser("init", help="draft a spec from an implementation",
                               description="Trace MODEL and print a spec that states it: its "
                               "sizes as dims and hyperparameters, repeated blocks folded into "
                               "repeat:, each statement's equation; MODEL satisfies it.")
    init.add_argument("model", metavar="MODEL", help="file.py:factory or a .onnx file")
    init.add_argument("-o", "--output", metavar="FILE",
                      help="write the spec to FILE (default: stdout)")
    init.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    init.set_defaults(format="text")
    validate = spec_sub.add_parser(
        "validate", help="check spec files against the schema and compile them",
        description="Read each spec FILE, check it against the JSON Schema of the language "
        "and compile it; every error is one line at file:line:col. Exit 0: all valid, 2: "
        "not. Imports no framework (the pre-commit hook runs it).")
    validate.add_argument("files", metavar="FILE", nargs="+", help="spec .yaml files")
    validate.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    validate.set_defaults(format="text")
    schema = sub.add_parser("schema", help="print the JSON Schema of paper spec files",
                            description="Print the JSON Schema of the paper spec language, "
                            "for editors (# yaml-language-server: $schema=PATH) and "
                            "check-jsonschema.")
    schema.set_defaults(format="text", debug=False)
    return parser


def _check_arguments(check: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    check.add_argument("model", metavar="MODEL", help="the implementation: file.py:factory or "
                       "a .onnx file")
    check.add_argument("--spec", required=True, metavar="SPEC.yaml",
                       help="the paper spec to check MODEL against")
    check.add_argument("--format", choices=formats, default="text",
                       help="output format: text, json, github (annotations on the spec's "
                            "and the model's lines, then the text), junit, sarif (2.1.0), "
                            "markdown (a job summary)")
    check.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE")
    check.add_argument("--sarif", metavar="FILE", help="also write SARIF 2.1.0 to FILE")
    html_argument(check, "--html")
    model_explorer_argument(check)
    check.add_argument("--summary", metavar="FILE",
                       help="also append a Markdown summary to FILE (e.g. "
                            "$GITHUB_STEP_SUMMARY)")
    check.add_argument("--full", action="store_true",
                       help="show every row of the side-by-side view")
    check.add_argument("--accept", action="append", default=[], metavar="CODE:WHERE",
                       help="accept a known difference: findings with this code whose spec "
                            "statement or scope in MODEL matches WHERE (shell wildcards) do "
                            "not fail the check and are shown as accepted; repeatable, and "
                            "read from [tool.specgraph] accept in pyproject.toml too")
    check.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    _numeric_arguments(check)



def _input_shape_argument(parser: argparse.ArgumentParser, also: str) -> None:
    parser.add_argument(
        "--input-shape", action=InputShapes, default={}, metavar="NAME=D1,D2,...",
        help="the sizes of an .onnx model's input NAME, one per dimension, for the inputs "
             f"specgraph makes (symbolic dimensions are 1 otherwise); repeatable{also}")


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
    how = num.add_mutually_exclusive_group()
    how.add_argument("--native", action="store_true",
                     help="take each side's numbers from its own program, run once forward "
                          "and backward, eager or compiled whole, where its frontend keeps "
                          "one (the default; a paper spec replays its graph)")
    how.add_argument("--replay", action="store_true",
                     help="replay each side's canonical graph layer by layer on its "
                          "framework's kernels instead of running its own program")
    num.add_argument("--seed", type=seeds, default=(0,), metavar="SEEDS",
                     help="input seeds: 0 is the example inputs; e.g. 0-19 (default 0)")
    num.add_argument("--batch", type=batch, default=None, metavar="N",
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
    num.add_argument("--repeat", type=repeat, default=1, metavar="N",
                     help="run every layer N times; results must agree bit for bit")
    num.add_argument("--rtol", type=tolerance, default=None,
                     help="relative tolerance (default: by precision and reduction size)")
    num.add_argument("--atol", type=tolerance, default=None, help="absolute tolerance")
    num.add_argument("--repro", default=None, metavar="DIR",
                     help="write standalone scripts that reproduce the first divergence")


def _numeric_options(args: argparse.Namespace) -> NumericOptions:
    base = Context(device=args.device or "auto", mode=args.mode or "eager",
                   dtype=args.dtype or "float32", repeat=args.repeat)
    return NumericOptions(
        seeds=args.seed, transfer=not args.no_transfer, isolated=args.isolated,
        backward=not args.no_backward, lhs_context=Context.parse(args.lhs_context, base),
        rhs_context=Context.parse(args.rhs_context, base), rtol=args.rtol, atol=args.atol,
        repro=Path(args.repro) if args.repro else None, native=not args.replay)


def _diff(args: argparse.Namespace, progress: Progress, color: bool) -> tuple[int, str]:
    from specgraph.accept import accept, rules_from
    from specgraph.check import compare
    from specgraph.renderers import get_renderer

    check_targets(args)
    rules = rules_from(args.accept, Path.cwd())
    mode = "structure" if args.no_numeric else ("numbers" if args.numeric_only else "both")
    report = compare(args.lhs, args.rhs, mode=mode, raw=args.raw,
                     options=_numeric_options(args), batch=args.batch,
                     shapes=args.input_shape, progress=progress.step)
    report = accept(report, rules)
    if args.repro:  # where the scripts went, or why none: on stderr whatever the format
        lines = report.numeric.repro if report.numeric is not None else ()
        why = " (a structural finding alone has no layer to run)" if report.findings else ""
        for line in lines or (f"nothing written to {args.repro}: no layer's numbers "
                              f"diverge{why}",):
            print(f"--repro: {line}", file=progress.stream, flush=True)
    written = write_reports(args, report, progress.step)
    if args.command == "report":
        return (EXIT_OK if report.equivalent else EXIT_DIFFERENT), \
            _verdict_line(report) + "\n" + "".join(f"wrote {w}\n" for w in written)
    text = get_renderer(args.format, color=color, full=args.full).render(report)
    return (EXIT_OK if report.equivalent else EXIT_DIFFERENT), text


def _verdict_line(report: Any) -> str:
    """The verdict in one line, for commands whose report is a file."""
    n = len(report.findings)
    return "equivalent" if report.equivalent else f"different: {n} finding{'s' * (n != 1)}"


def _check(args: argparse.Namespace, progress: Progress, color: bool) -> tuple[int, str]:
    from specgraph.accept import accept, rules_from
    from specgraph.renderers import get_renderer
    from specgraph.spec_check import check_spec

    check_targets(args)
    rules = rules_from(args.accept, Path.cwd())
    mode = "structure" if args.no_numeric else ("numbers" if args.numeric_only else "both")
    report = check_spec(args.model, args.spec, mode=mode, options=_numeric_options(args),
                        batch=args.batch, progress=progress.step)
    report = accept(report, rules)
    write_side_files(args, report)
    write_reports(args, report, progress.step)
    text = get_renderer(args.format, color=color, full=args.full).render(report)
    return (EXIT_OK if report.satisfied else EXIT_DIFFERENT), text


def _show(args: argparse.Namespace, progress: Progress, color: bool) -> tuple[int, str]:
    from specgraph.loading import trace
    from specgraph.renderers import get_renderer
    from specgraph.summary import summarize

    progress.step(f"tracing {args.model}")
    traced = trace(args.model, shapes=args.input_shape)
    if not args.raw:
        from specgraph.passes import canonicalize_model

        progress.step(f"canonicalizing {len(traced.graph)} nodes traced with "
                      f"{traced.framework}")
        traced = canonicalize_model(traced)
    progress.step(f"writing the layer table and equations of {len(traced.graph)} nodes")
    return EXIT_OK, get_renderer(args.format).render(summarize(traced))


_Command = Callable[[argparse.Namespace, Progress, bool], tuple[int, str]]
def _schema(args: argparse.Namespace, progress: Progress, color: bool) -> tuple[int, str]:
    from importlib import resources

    from specgraph.spec.schema import FILE

    return EXIT_OK, resources.files("specgraph.spec").joinpath(FILE).read_text("utf-8")


def _validate(args: argparse.Namespace) -> tuple[int, str]:
    from specgraph.spec import load

    errors = []
    for name in args.files:
        try:
            load(name)
        except SpecgraphError as err:
            errors.append(f"specgraph: error: {err}")
    if errors:
        print("\n".join(strip_controls(e) for e in errors), file=sys.stderr)
        noun = "file" if len(args.files) == 1 else "files"
        return EXIT_ERROR, f"{len(errors)} of {len(args.files)} spec {noun} invalid\n"
    return EXIT_OK, ""


def _spec(args: argparse.Namespace, progress: Progress, color: bool) -> tuple[int, str]:
    if args.spec_command == "validate":
        return _validate(args)
    from specgraph.loading import trace
    from specgraph.passes import canonicalize_model
    from specgraph.spec import loads
    from specgraph.spec.draft import draft

    if args.output is not None:
        check_side_file("output", Path(args.output))
    progress.step(f"tracing {args.model}")
    traced = canonicalize_model(trace(args.model))
    progress.step(f"drafting a spec of {len(traced.graph)} nodes")
    text = draft(traced.graph, reference=args.model, framework=traced.framework)
    try:
        loads(text, name="the draft")
    except SpecgraphError as err:  # a draft that does not compile is a bug in specgraph
        raise RuntimeError(f"the draft does not compile: {err}") from err
    if args.output is None:
        return EXIT_OK, text
    Path(args.output).write_text(text, encoding="utf-8")
    return EXIT_OK, f"wrote {args.output}\n"


_COMMANDS: dict[str, _Command] = {"show": _show, "diff": _diff, "report": _diff,
                                  "check": _check,
                                  "spec": _spec, "schema": _schema}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    The user's code and the frameworks run with stdout sent to stderr and their start-up
    chatter filtered out (see ``specgraph.terminal``); the report is written at the end.
    Every failure is one sentence on stderr and, with ``--format json``, an ``error``
    object on stdout.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except UsageError as err:
        sys.stderr.write(err.usage)
        command = next((a for a in argv if a in _COMMANDS), None)
        return _Failure(_asks_for_json(argv), False, command)("usage", str(err), EXIT_ERROR)
    fail = _Failure(args.format == "json", args.debug, args.command)
    progress = Progress.for_format(args.format)  # asked before stderr goes through a pipe
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    quiet = contextlib.nullcontext() if args.debug else quiet_frameworks()
    try:
        with quiet, stdout_to_stderr():
            code, text = _COMMANDS[args.command](args, progress, color)
    except SpecgraphError as err:
        return fail("input", str(err), EXIT_ERROR)
    except KeyboardInterrupt:
        return fail("interrupted", "interrupted", EXIT_INTERRUPTED)
    except SystemExit as err:  # the user's code called sys.exit outside the guarded steps
        return fail("input", f"the code specgraph {args.command} ran called sys.exit("
                    f"{err.code!r}){_during(progress)}; a model file, its factory and its "
                    "forward must not exit (guard a script's own sys.exit with "
                    "if __name__ == '__main__')", EXIT_ERROR)
    except Exception as err:  # noqa: BLE001  (whatever escapes is a specgraph bug)
        return fail("internal", f"specgraph {args.command} failed with {type(err).__name__}: "
                    f"{first_line(err)}{_during(progress)}; this is a bug in specgraph, "
                    "not in your code: rerun with --debug for the traceback and report it",
                    EXIT_INTERNAL)
    except BaseException as err:  # noqa: BLE001  (a user's BaseException, GeneratorExit)
        return fail("input", f"the code specgraph {args.command} ran raised "
                    f"{type(err).__name__} (a BaseException): {first_line(err)}"
                    f"{_during(progress)}; user code must raise Exceptions, not stop the "
                    "run: rerun with --debug for the traceback", EXIT_ERROR)
    if args.format in ("text", "github"):  # names reach the terminal as text, not commands
        text = strip_controls(text, color=color and args.format == "text")
    sys.stdout.write(text)
    return code


def _during(progress: Progress) -> str:
    return f" (last step: {progress.last})" if progress.last else ""


def _asks_for_json(argv: Sequence[str]) -> bool:
    """``--format json`` on the command line, read before parsing it (argparse accepts
    ``--format=json`` and unambiguous prefixes such as ``--form json``)."""
    for i, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if name.startswith("--fo") and "--format".startswith(name):
            if (value if sep else (argv[i + 1] if i + 1 < len(argv) else "")) == "json":
                return True
    return False


class _Failure:
    """How a failed run ends: one sentence on stderr (after the traceback with --debug),
    the ``error`` object on stdout with --format json, and the exit code."""

    _PREFIX = {"internal": "specgraph: internal error: ", "interrupted": "specgraph: "}

    def __init__(self, json_out: bool, debug: bool, command: str | None) -> None:
        self.json, self.debug, self.command = json_out, debug, command

    def __call__(self, kind: str, message: str, exit_code: int) -> int:
        if self.debug and sys.exc_info()[0] is not None:
            traceback.print_exc()
        print(f"{self._PREFIX.get(kind, 'specgraph: error: ')}{strip_controls(message)}",
              file=sys.stderr)
        if self.json:
            error = {"kind": kind, "message": message, "exit_code": exit_code,
                     "command": self.command}
            sys.stdout.write(json.dumps({"error": error}, indent=2, ensure_ascii=False) + "\n")
        return exit_code


if __name__ == "__main__":
    sys.exit(main())
