"""Mutation benchmark of the structural diff: the golden transformer block and CNN, written
in PyTorch, JAX, Keras and exported to ONNX, against copies with one planted mutation, for
every ordered pair of frameworks.

    python bench/mutations.py [--frameworks torch,jax,keras,onnx] [--models ...] [--quiet]

Scores, over all (model, mutation, lhs framework, rhs framework) cases:
    recall        the diff reports at least one finding;
    precision     it reports exactly one finding (nothing else);
    localization  a finding concerns the mutated layer (its op is the layer's op);
and false alarms: unmutated pairs of different frameworks that report anything.
The last line reads ``mutations: recall R/N, precision P/N, localization L/N, false alarms F/M``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the layer each mutation touches, as canonical ops (localization)
EXPECTED = {
    "transformer_block": {
        "missing_activation": {"gelu"}, "eps": {"layer_norm"},
        "gelu_approximation": {"gelu"}, "missing_bias": {"linear"}, "missing_residual": {"add"},
        "post_ln": {"layer_norm", "add"}, "missing_scale": {"attention"},
        "causal": {"attention"}, "hidden_size": {"linear"}, "num_heads": {"attention"},
        "softmax_axis": {"attention", "softmax"},
    },
    "cnn": {
        "missing_activation": {"relu"}, "eps": {"batch_norm"}, "stride_moved": {"conv"},
        "asymmetric_padding": {"conv"}, "missing_bias": {"conv"},
        "swapped_layers": {"batch_norm", "relu"}, "hidden_size": {"conv"},
        "batchnorm_to_layernorm": {"batch_norm", "layer_norm"},
    },
}


def _factories() -> dict[str, Callable[[str, str | None], Any]]:
    """framework -> (model, mutation) -> canonical TracedModel."""
    from specgraph.canonical import canonicalize_model

    def torch_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import torch as frontend
        from tests.zoo.torch_mutants import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="torch"))

    def jax_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import jax as frontend
        from tests.zoo.jax_models import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="jax"))

    def keras_side(model: str, mutation: str | None) -> Any:
        from specgraph.frontends import tf as frontend
        from tests.zoo.keras_mutants import mutant

        return canonicalize_model(frontend.trace(*mutant(model, mutation), reference="keras"))

    def onnx_side(model: str, mutation: str | None) -> Any:
        import torch

        from specgraph.frontends import onnx as frontend
        from tests.zoo.torch_mutants import mutant

        net, inputs = mutant(model, mutation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(net, inputs, dynamo=True, optimize=False,
                                        verbose=False)
        traced = frontend.trace_model(program.model_proto, tuple(t.numpy() for t in inputs),
                                      reference="onnx")
        return canonicalize_model(traced)

    return {"torch": torch_side, "jax": jax_side, "keras": keras_side, "onnx": onnx_side}


def run(frameworks: list[str], models: list[str], *, say: Callable[[str], None] = print
        ) -> dict[str, int]:
    """Run the benchmark; returns the counts (also printed through ``say``)."""
    from specgraph.check import compare_structure

    make = _factories()
    cache: dict[tuple[str, str, str | None], Any] = {}

    def get(fw: str, model: str, mutation: str | None) -> Any:
        key = (fw, model, mutation)
        if key not in cache:
            cache[key] = make[fw](model, mutation)
        return cache[key]

    counts = dict.fromkeys(["cases", "recall", "precision", "localization", "pairs", "alarms"],
                           0)
    for model in models:
        for a, b in itertools.permutations(frameworks, 2):
            report = compare_structure(get(a, model, None), get(b, model, None))
            counts["pairs"] += 1
            if report.findings:
                counts["alarms"] += 1
                say(f"FALSE ALARM {model} {a}/{b}: {report.findings[0].message}")
        for mutation, ops in EXPECTED[model].items():
            for a, b in itertools.product(frameworks, repeat=2):
                report = compare_structure(get(a, model, None), get(b, model, mutation))
                found = report.findings
                counts["cases"] += 1
                counts["recall"] += bool(found)
                counts["precision"] += len(found) == 1
                located = any(f.op in ops or any(op in f.message for op in ops) for f in found)
                counts["localization"] += located
                if len(found) != 1 or not located:
                    say(f"{model}/{mutation} {a}->{b}: {len(found)} findings: " +
                        " | ".join(f"[{f.code}] {f.message[:110]}" for f in found[:3]))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,jax,keras,onnx")
    parser.add_argument("--models", default="transformer_block,cnn")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)  # the zoo of test models lives in the repository's tests/
    counts = run(args.frameworks.split(","), args.models.split(","),
                 say=(lambda _: None) if args.quiet else print)
    n, m = counts["cases"], counts["pairs"]
    print(f"mutations: recall {counts['recall']}/{n}, precision {counts['precision']}/{n}, "
          f"localization {counts['localization']}/{n}, false alarms {counts['alarms']}/{m}")


if __name__ == "__main__":
    main()
