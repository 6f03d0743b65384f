"""Alignment speed: transformer graphs of about 1k, 5k, 20k and 50k nodes, each aligned
against a copy with one layer's activation removed and one eps changed.

    python -m bench.align [--sizes 1000,5000,20000,50000] [--repeat 3]

Prints one line per size and, last, ``align 20000 nodes: S.SS s; growth exponent E.EE``
(the exponent is the slope of log time against log nodes over all sizes; 1.0 is linear).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from specgraph.align import align
from specgraph.ir import Graph, GraphBuilder

F = "float32"
B, T, D, H = 2, 16, 64, 4


def _layer(b: GraphBuilder, x, i: int, *, gelu: bool = True, eps: float = 1e-5):
    def p(name, *shape):
        return b.param(f"layer{i}.{name}", shape, F)

    def lin(v, name, d_in, d_out):
        return b.add("linear", [v, p(f"{name}.weight", d_in, d_out), p(f"{name}.bias", d_out)],
                     shape=(B, T, d_out), dtype=F, scope=f"layer{i}.{name}")

    h = b.add("layer_norm", [x, p("ln1.weight", D), p("ln1.bias", D)], {"axis": 2, "eps": eps},
              shape=(B, T, D), dtype=F, scope=f"layer{i}.ln1")
    heads = []
    for name in ("q", "k", "v"):
        z = lin(h, name, D, D)
        z = b.add("reshape", [z], {"shape": (B, T, H, D // H)}, shape=(B, T, H, D // H),
                  dtype=F, scope=f"layer{i}.attn")
        heads.append(b.add("transpose", [z], {"perm": (0, 2, 1, 3)}, shape=(B, H, T, D // H),
                           dtype=F, scope=f"layer{i}.attn"))
    a = b.add("attention", heads, {"scale": (D // H) ** -0.5}, shape=(B, H, T, D // H),
              dtype=F, scope=f"layer{i}.attn")
    a = b.add("transpose", [a], {"perm": (0, 2, 1, 3)}, shape=(B, T, H, D // H), dtype=F,
              scope=f"layer{i}.attn")
    a = b.add("reshape", [a], {"shape": (B, T, D)}, shape=(B, T, D), dtype=F,
              scope=f"layer{i}.attn")
    x = b.add("add", [x, lin(a, "out", D, D)], shape=(B, T, D), dtype=F, scope=f"layer{i}")
    h = b.add("layer_norm", [x, p("ln2.weight", D), p("ln2.bias", D)], {"axis": 2, "eps": 1e-6},
              shape=(B, T, D), dtype=F, scope=f"layer{i}.ln2")
    h = lin(h, "fc1", D, 4 * D)
    if gelu:
        h = b.add("gelu", [h], shape=(B, T, 4 * D), dtype=F, scope=f"layer{i}.act")
    return b.add("add", [x, lin(h, "fc2", 4 * D, D)], shape=(B, T, D), dtype=F,
                 scope=f"layer{i}")


def transformer(layers: int, *, mutate_at: int | None = None) -> Graph:
    b = GraphBuilder(f"transformer{layers}")
    x = b.input("x", (B, T, D), F)
    for i in range(layers):
        mutated = i == mutate_at
        x = _layer(b, x, i, gelu=not mutated, eps=1e-12 if i == (mutate_at or 0) // 2 and
                   mutate_at is not None else 1e-5)
    b.output("y", x)
    return b.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000,50000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    per_layer = len(transformer(1).nodes)
    points = []
    for target in (int(s) for s in args.sizes.split(",")):
        layers = max(1, round(target / per_layer))
        lhs, rhs = transformer(layers), transformer(layers, mutate_at=layers // 2)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = align(lhs, rhs)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        points.append((len(lhs.nodes), t))
        print(f"{len(lhs.nodes):6d} nodes ({layers} layers): align {t:.3f} s, "
              f"{len(result.pairs)} pairs, {len(result.lhs_only)} lhs-only, "
              f"{len(result.rhs_only)} rhs-only")
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    nearest = min(points, key=lambda p: abs(p[0] - 20000))
    print(f"align {nearest[0]} nodes: {nearest[1]:.2f} s; growth exponent {slope:.2f}")


if __name__ == "__main__":
    main()
