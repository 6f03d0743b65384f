"""Cost of the layerwise numeric check: a BERT-base-sized encoder and a ResNet-50-sized CNN,
PyTorch against JAX (Flax linen), measured side by side with plain forward + backward.

    python -m bench.numeric [--models bert,resnet50] [--repeat 3] [--device cpu] [--replay]
                             [--mode eager|compiled] [--no-memory] [--profile DIR]

"plain" is one forward + backward of each model in its own framework, as a training step
runs it in the mode measured: eager (the default) is PyTorch eager against JAX op by op
(``jax.value_and_grad`` without ``jax.jit``); ``--mode compiled`` is ``torch.compile``'d
PyTorch against ``jax.jit``'ed JAX, after their compiles. "check" is specgraph's full
numeric comparison of the pair in the same mode, seed 0: each side's own program runs once,
forward and backward, observed at its layers (``--replay``: both canonical graphs replayed
layer by layer), every aligned layer's output and gradients compared (tracing,
canonicalization and alignment are done beforehand and not timed; the check's first run,
which warms caches and compiles, is not timed either). Time is the median of per-round
ratios over alternating rounds. Memory is measured in a fresh process per figure: the peak
resident memory (VmHWM, reset through /proc/self/clear_refs after set-up) over two runs,
above the resident memory once both models are built (for the check: traced, canonicalized
and aligned too); before each run, what earlier work freed is given back to the system
(garbage collected, ``malloc_trim``), for both figures alike. With ``--device cuda`` it is
the GPU's: PyTorch's allocator's peak plus JAX's (which counts from the start of the
process: the bench sets XLA_PYTHON_CLIENT_PREALLOCATE=false unless it is set, else JAX
takes three quarters of the GPU at its start and the fresh processes find none), above what
both hold once the models are built.

The last line reads ``numeric: check/plain time T.TT, memory M.MM`` (the worst model of
each; targets 1.3 and 1.3).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the memory runs import bench.numeric from here


def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def _plain(name: str, device: str) -> Callable[[], Any]:
    from bench._models import JAX, TORCH, jax_step, torch_step

    module, example = TORCH[name]()
    if MODE == "compiled":  # the training step compiled whole (JAX's step is jitted always)
        import torch

        module = torch.compile(module)
    torch_fn = torch_step(module, example, device=device)
    jax_fn = jax_step(*JAX[name](), jit=MODE == "compiled")

    def both() -> None:
        torch_fn()
        jax_fn()

    return both


NATIVE = True  # each side's own program gives the numbers where it has one (--replay: not)
MODE = "eager"  # --mode compiled: both plain steps and both sides' programs compiled whole


def _check(name: str, device: str) -> Callable[[], Any]:
    from bench._models import JAX, TORCH
    from specgraph.align import align
    from specgraph.passes import canonicalize_model
    from specgraph.frontends import jax as jax_frontend
    from specgraph.frontends import torch as torch_frontend
    from specgraph.check import backends
    from specgraph.numeric.compare import compare_numeric
    from specgraph.numeric.options import NumericOptions
    from specgraph.numeric.pairing import pair
    from specgraph.numeric.runner import Context

    lhs = canonicalize_model(torch_frontend.trace(*TORCH[name](), reference="torch"))
    rhs = canonicalize_model(jax_frontend.trace_linen(*JAX[name](), reference="jax"))
    pairing = pair(align(lhs.graph, rhs.graph))
    context = Context(device=device, mode=MODE)
    options = NumericOptions(lhs_context=context, rhs_context=context, native=NATIVE)

    def check() -> None:
        findings, result = compare_numeric(lhs, rhs, pairing, backends(lhs, rhs, options),
                                           options)
        if findings:
            raise SystemExit(f"{name}: the check reports {findings[0].message}")
        check.layers = len(result.layers)  # type: ignore[attr-defined]
        check.notes = result.notes  # type: ignore[attr-defined]

    return check


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _profile(check: Callable[[], Any], path: Path) -> None:
    """One more check under cProfile: where its time goes, by own time and by cumulative."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(check)
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(45)
    notes = getattr(check, "notes", ())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{len(notes)} notes:\n" + "".join(f"  {n}\n" for n in notes)
                    + out.getvalue(), encoding="utf-8")


def time_ratio(name: str, repeat: int, device: str,
               profile: Path | None = None) -> dict[str, float]:
    plain, check = _plain(name, device), _check(name, device)
    plain()  # JAX compiles, PyTorch warms up
    check()  # JAX's per-op caches warm up
    t_plain, t_check, ratios = [], [], []
    for _ in range(repeat):
        a, b = _timed(plain), _timed(check)
        t_plain.append(a)
        t_check.append(b)
        ratios.append(b / a)
    if profile is not None:
        _profile(check, profile / f"{name}-{MODE}-{device}.txt")
    return {"plain s": statistics.median(t_plain), "check s": statistics.median(t_check),
            "time ratio": statistics.median(ratios),
            "layers": float(getattr(check, "layers", 0))}


def memory_child(kind: str, name: str, device: str) -> None:
    """In a fresh process: build both models (and, for the check, trace, canonicalize and
    align them), then the peak memory of the work itself from its first run (compiles
    included: warmed-up allocators would hide what a run needs)."""
    fn = (_plain if kind == "plain" else _check)(name, device)
    if device == "cuda":  # the GPU's memory: PyTorch's allocator's peak and JAX's
        import jax
        import torch

        torch.cuda.synchronize()
        gpu = jax.devices("gpu")[0]
        base = torch.cuda.memory_allocated() + gpu.memory_stats()["bytes_in_use"]
        torch.cuda.reset_peak_memory_stats()
        fn()
        fn()
        torch.cuda.synchronize()
        # JAX's peak cannot be reset: it counts from the start (set-up included)
        peak = torch.cuda.max_memory_allocated() + gpu.memory_stats()["peak_bytes_in_use"]
        print(json.dumps({"peak_mib": (peak - base) / 2**20}))
        return
    from specgraph.numeric.store import return_freed_memory

    def settled() -> None:  # what earlier work freed goes back first, for both figures
        gc.collect()
        return_freed_memory()

    settled()
    base = _rss_kib("VmRSS")
    _reset_peak()
    fn()
    settled()
    fn()
    print(json.dumps({"peak_mib": (_rss_kib("VmHWM") - base) / 1024}))


def memory(kind: str, name: str, device: str) -> float:
    done = subprocess.run([sys.executable, "-m", "bench.numeric", "--memory-child", kind,
                           "--models", name, "--device", device,
                           "--mode", MODE, *([] if NATIVE else ["--replay"])],
                          capture_output=True,
                          text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {name} memory run failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--replay", action="store_true",
                        help="the check replays each side's canonical graph layer by layer "
                             "instead of running its own program")
    parser.add_argument("--mode", choices=("eager", "compiled"), default="eager",
                        help="compiled: torch.compile's training step against the check of "
                             "each side's compiled program")
    parser.add_argument("--no-memory", action="store_true",
                        help="time only: skip the four fresh processes that measure memory "
                             "(each builds and traces both models again)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="after timing, profile one more check of each model and write "
                             "the profile to DIR/<model>-<mode>-<device>.txt")
    parser.add_argument("--memory-child", choices=("plain", "check"), default=None,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    global NATIVE, MODE
    NATIVE, MODE = not args.replay, args.mode
    if args.device == "cuda":  # before JAX starts: its peak must be what it uses, and the
        # memory runs' fresh processes need the memory this one's JAX would take at its start
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if args.memory_child:
        memory_child(args.memory_child, args.models, args.device)
        return
    worst_time, worst_memory = 0.0, 0.0
    for name in args.models.split(","):
        figures = time_ratio(name, args.repeat, args.device, args.profile)
        line = (f"{name}: plain fwd+bwd {figures['plain s']:.2f} s, check "
                f"{figures['check s']:.2f} s ({int(figures['layers'])} layers compared), "
                f"time ratio {figures['time ratio']:.2f}")
        worst_time = max(worst_time, figures["time ratio"])
        print(line, flush=True)  # before the memory runs: a failed one keeps these figures
        if not args.no_memory:
            plain_mib = memory("plain", name, args.device)
            check_mib = memory("check", name, args.device)
            mem_ratio = check_mib / plain_mib
            print(f"{name}: peak memory plain {plain_mib:.0f} MiB, check {check_mib:.0f} MiB, "
                  f"ratio {mem_ratio:.2f}", flush=True)
            worst_memory = max(worst_memory, mem_ratio)
    print(f"numeric: check/plain time {worst_time:.2f}"
          + ("" if args.no_memory else f", memory {worst_memory:.2f}"))


if __name__ == "__main__":
    main()
