"""The files ``specgraph diff``, ``report`` and ``check`` write beside their output (the HTML
report, the Model Explorer folder, JUnit, SARIF, a Markdown summary, the repro scripts):
their arguments, the refusal of a target that cannot be written before anything is traced,
and the writing."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgraph.errors import SpecgraphError

__all__ = ["html_argument", "model_explorer_argument", "check_targets", "write_reports",
           "write_side_files", "check_side_file", "check_folder", "SIDE_FILES"]

# a spec check's extra reports: flag -> the format written there
SIDE_FILES = (("junit", "junit"), ("sarif", "sarif"), ("summary", "markdown"))


def html_argument(parser: argparse.ArgumentParser, *flags: str) -> None:
    """``--html FILE`` (``-o/--output FILE``, required, for ``report``)."""
    required = flags[0] == "-o"
    parser.add_argument(*flags, dest="html", metavar="FILE", required=required,
                        default=None, help="write the HTML report to FILE: one offline page "
                        "with both graphs, the findings, the equations and the numbers"
                        if required else "also write the HTML report to FILE")


def model_explorer_argument(parser: argparse.ArgumentParser) -> None:
    """``--model-explorer DIR``."""
    parser.add_argument(
        "--model-explorer", dest="model_explorer", metavar="DIR", default=None,
        help="also write both graphs, each layer's numeric error and the node pairing into "
             "DIR (made if missing) as files Google's Model Explorer opens, for models too "
             "large for one page; DIR/README.txt says how")


def check_targets(args: argparse.Namespace) -> None:
    """Refuse every output target of ``args`` that cannot be written, and an HTML report
    that cannot be made (dagre not installed), before anything runs."""
    if getattr(args, "repro", None) is not None:
        check_folder("repro", Path(args.repro), "the scripts")
    for flag, _ in SIDE_FILES:
        if getattr(args, flag, None):
            check_side_file(flag, Path(getattr(args, flag)))
    if args.html is not None:
        from specgraph.assets import load

        check_side_file("html" if args.command != "report" else "output", Path(args.html))
        load()
    if args.model_explorer is not None:
        check_folder("model-explorer", Path(args.model_explorer), "Model Explorer's files")


def check_side_file(flag: str, path: Path) -> None:
    """Refuse a side file that cannot be written, before anything runs."""
    if path.is_dir():
        raise SpecgraphError(f"--{flag} {path}: that is a folder; name a file to write")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise SpecgraphError(f"--{flag} {path}: {folder} is not a folder you can write "
                             "into; name a file in one")


def check_folder(flag: str, folder: Path, what: str) -> None:
    """Refuse a target that cannot become a folder to write ``what`` into, before anything
    runs: it or a folder above it is a file, or the nearest existing one is not writable."""
    there = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not there.is_dir():
        found = "a file of that name exists" if there == folder else f"{there} is a file"
        raise SpecgraphError(f"--{flag} {folder}: {found}; --{flag} names a folder to write "
                             f"{what} into (created if missing)")
    if not os.access(there, os.W_OK | os.X_OK):
        raise SpecgraphError(f"--{flag} {folder}: {there} is not writable; name a folder you "
                             "can write into")


def write_reports(args: argparse.Namespace, report: Any, step: Callable[[str], None]
                  ) -> list[str]:
    """Write the HTML report and the Model Explorer folder ``args`` asks for; returns what
    was written, one ``path (size)`` each."""
    written = []
    if args.html is not None:
        from specgraph.page import build_page
        from specgraph.renderers import get_renderer

        step("writing the HTML report")
        text = get_renderer("html").render(build_page(report))
        target = Path(args.html)
        partial = target.with_name(target.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
        written.append(f"{target} ({len(text.encode()) // 1024} KiB)")
    if args.model_explorer is not None:
        from specgraph.renderers.model_explorer import write_model_explorer

        step("writing the Model Explorer files")
        paths = write_model_explorer(report, args.model_explorer)
        size = sum(p.stat().st_size for p in paths)
        written.append(f"{args.model_explorer} ({len(paths)} files, {size // 1024} KiB: "
                       "README.txt says how to open them)")
    return written


def write_side_files(args: argparse.Namespace, report: Any) -> None:
    """A spec check's JUnit, SARIF and Markdown summary (appended), where asked for."""
    from specgraph.renderers import get_renderer

    for flag, fmt in SIDE_FILES:
        target = getattr(args, flag)
        if target:
            text = get_renderer(fmt).render(report)
            with open(target, "a" if flag == "summary" else "w", encoding="utf-8") as out:
                out.write(text)
