"""Cost of ``specgraph check`` against a paper spec: a spec of 12 repeated BERT layers held
against a 12-layer PyTorch encoder, measured side by side with the numeric check alone.

    python -m bench.spec_check [--width 256] [--layers 12] [--repeat 5]

"check" is ``check_spec(model, spec)`` given the traced implementation: canonicalizing it,
reading and compiling the spec (three times: as written, with its dims bound, with what it
leaves open filled in), aligning twice, the structural diff, the numbers and the findings
placed at the spec's lines. "numbers" is the numeric comparison alone on the same prepared
pair (``compare_numeric``: both sides layer by layer, every aligned layer compared). Time
is the median of per-round ratios over alternating rounds (the first round, which warms
caches, such as the compiler's shapes of each op, is not timed).

The last line reads ``spec check: check/numbers time R.RR`` (target 1.5; 1.32 on this
2-core CPU at width 256: check 0.46 s, numbers alone 0.33 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "specs" / "bert_layer.spec.yaml"


def _spec(folder: Path, width: int, layers: int) -> Path:
    """bert_layer.spec.yaml with ``layers`` layers of width ``width`` (and no listed
    implementations)."""
    text = SPEC.read_text(encoding="utf-8").split("\nimplementations:")[0]
    text = text.replace("  layers: 2 ", f"  layers: {layers} ").replace(
        "  d_model: 32 ", f"  d_model: {width} ")
    path = folder / "bert12.spec.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _model(width: int, layers: int):
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "specs"))
    from bert_torch import Encoder

    from specgraph.frontends.torch.tracer import trace as trace_module

    torch.manual_seed(0)
    module = Encoder(layers=layers, d_model=width, heads=4, d_ff=4 * width).eval()
    return trace_module(module, (torch.randn(2, 16, width),), reference="bert_torch:Encoder")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from specgraph.align import align
    from specgraph.check import backends
    from specgraph.loading import trace
    from specgraph.numeric.compare import compare_numeric
    from specgraph.numeric.options import NumericOptions
    from specgraph.numeric.pairing import pair
    from specgraph.passes import canonicalize_model
    from specgraph.spec_check import CHECK, check_spec

    with tempfile.TemporaryDirectory() as folder:
        spec = _spec(Path(folder), args.width, args.layers)
        model = _model(args.width, args.layers)
        impl = canonicalize_model(model)
        stated = canonicalize_model(trace(str(spec), dims={"B": 2, "T": 16}))
        pairing = pair(align(impl.graph, stated.graph))
        options = NumericOptions(voice=CHECK)
        sides = backends(impl, stated, options)

        def check() -> None:
            report = check_spec(model, spec)
            assert report.satisfied, [f.finding.message for f in report.findings]

        def numbers() -> None:
            found, _ = compare_numeric(impl, stated, pairing, sides, options)
            assert not found, [f.message for f in found]

        check()
        numbers()
        ratios, times = [], {"check": [], "numbers": []}
        for _ in range(args.repeat):
            start = time.perf_counter()
            numbers()
            alone = time.perf_counter() - start
            start = time.perf_counter()
            check()
            whole = time.perf_counter() - start
            times["check"].append(whole)
            times["numbers"].append(alone)
            ratios.append(whole / alone)
    nodes = len(impl.graph)
    print(f"{args.layers} BERT layers, width {args.width}, {nodes} nodes: check "
          f"{statistics.median(times['check']):.2f} s, numbers alone "
          f"{statistics.median(times['numbers']):.2f} s (medians of {args.repeat})")
    print(f"spec check: check/numbers time {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
