"""The peer corpus benchmark: real models written by others, every cross-framework pair.

    python -m bench.peers [--archs bert,gpt2,...] [--pairs torch-flax,...] [--quiet]

Every ordered pair of frameworks of every architecture in ``bench/peer_models.py`` (HF
transformers' ports in PyTorch, TensorFlow and Flax, small configs, random weights; Keras
applications against their counterparts) is compared through the CLI's own code path
(``specgraph diff LHS RHS --format json``, in this process), and its verdict held against
``EXPECTED``: equivalent, or different with the findings a person would name. A pair
ends in one of:

    right        the verdict (exit 0 or 1) is the expected one;
    false alarm  expected equivalent, reported different;
    missed       expected different, reported equivalent;
    crash        any other exit (a trace error, an internal error) or an exception.

The last line reads ``peers: verdict right N/M, false alarms F/E, crashes C, median S s per
pair`` (E: the pairs expected equivalent).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

from bench.peer_models import ARCHS

MODELS = "bench/peer_models.py"

# ordered pairs expected to differ, and the finding codes that say how (the README lists
# each as a discovery); every other pair is expected equivalent
EXPECTED: dict[tuple[str, str, str], tuple[str, ...]] = {}


@dataclass(frozen=True)
class Outcome:
    arch: str
    lhs: str
    rhs: str
    exit: int
    seconds: float
    codes: tuple[str, ...]
    detail: str

    @property
    def expected_equivalent(self) -> bool:
        return (self.arch, self.lhs, self.rhs) not in EXPECTED

    @property
    def kind(self) -> str:
        if self.exit not in (0, 1):
            return "crash"
        if self.expected_equivalent:
            return "right" if self.exit == 0 else "false alarm"
        return "missed" if self.exit == 0 else "right"


def pairs(archs: list[str], only: set[str] | None) -> Iterator[tuple[str, str, str]]:
    for name in archs:
        for lhs, rhs in itertools.permutations(ARCHS[name].classes, 2):
            if only is None or f"{lhs}-{rhs}" in only:
                yield name, lhs, rhs


def run_pair(arch: str, lhs: str, rhs: str) -> Outcome:
    """One pair through ``specgraph diff --format json``."""
    from specgraph.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["diff", f"{MODELS}:{arch}_{lhs}", f"{MODELS}:{arch}_{rhs}",
                         "--format", "json"])
    except BaseException as exc:  # every outcome of a pair is scored, crashes included
        seconds = time.perf_counter() - start
        return Outcome(arch, lhs, rhs, -1, seconds, (), f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    codes: tuple[str, ...] = ()
    detail = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
    with contextlib.suppress(ValueError):
        report = json.loads(out.getvalue())
        findings = report.get("findings", [])
        codes = tuple(f["code"] for f in findings)
        detail = "; ".join(f["message"] for f in findings[:3]) or detail
    return Outcome(arch, lhs, rhs, code, seconds, codes, detail)


def summary(outcomes: list[Outcome]) -> str:
    right = sum(o.kind == "right" for o in outcomes)
    equivalent = [o for o in outcomes if o.expected_equivalent]
    alarms = sum(o.kind == "false alarm" for o in equivalent)
    crashes = sum(o.kind == "crash" for o in outcomes)
    median = statistics.median(o.seconds for o in outcomes) if outcomes else 0.0
    return (f"peers: verdict right {right}/{len(outcomes)}, false alarms "
            f"{alarms}/{len(equivalent)}, crashes {crashes}, median {median:.1f} s per pair")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS),
                        help="architectures, comma-separated (default: all)")
    parser.add_argument("--pairs", default=None,
                        help="framework pairs, e.g. torch-flax,flax-torch (default: all)")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    args = parser.parse_args()
    only = set(args.pairs.split(",")) if args.pairs else None
    outcomes = []
    for arch, lhs, rhs in pairs(args.archs.split(","), only):
        outcome = run_pair(arch, lhs, rhs)
        outcomes.append(outcome)
        if not args.quiet:
            print(f"{outcome.kind:11s} {arch} {lhs}->{rhs} (exit {outcome.exit}, "
                  f"{outcome.seconds:.1f} s){': ' + outcome.detail[:300] if outcome.kind != 'right' else ''}",
                  flush=True)
    print(summary(outcomes))


if __name__ == "__main__":
    main()
