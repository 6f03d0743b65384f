"""A fast subset of the mutation benchmark (bench/mutations.py runs all of it): a planted
mutation in one framework's model, against the golden model written in another, is found,
alone, at the right layer."""

from __future__ import annotations

import functools

import pytest

from specgraph.canonical import canonicalize_model
from specgraph.check import compare_structure

pytest.importorskip("jax")

CASES = {
    "transformer_block": {"missing_activation": "gelu", "eps": "layer_norm",
                          "gelu_approximation": "gelu", "missing_bias": "linear",
                          "missing_residual": "add", "missing_scale": "attention",
                          "causal": "attention", "hidden_size": "linear",
                          "num_heads": "attention"},
    "cnn": {"missing_activation": "relu", "eps": "batch_norm", "stride_moved": "conv",
            "asymmetric_padding": "conv", "missing_bias": "conv", "hidden_size": "conv",
            "batchnorm_to_layernorm": "batch_norm", "swapped_layers": "batch_norm"},
}


@functools.cache
def _traced(framework: str, model: str, mutation: str | None):
    if framework == "torch":
        from specgraph.frontends import torch as frontend
        from tests.zoo.torch_mutants import mutant
    else:
        from specgraph.frontends import jax as frontend
        from tests.zoo.jax_models import mutant
    return canonicalize_model(frontend.trace(*mutant(model, mutation), reference=framework))


@pytest.mark.parametrize("pair", [("torch", "jax"), ("jax", "torch")], ids="->".join)
@pytest.mark.parametrize(("model", "mutation"),
                         [(m, k) for m, muts in CASES.items() for k in muts])
def test_mutation_is_found_alone_at_its_layer(pair, model: str, mutation: str) -> None:
    lhs, rhs = pair
    report = compare_structure(_traced(lhs, model, None), _traced(rhs, model, mutation))
    assert len(report.findings) == 1, [f.message for f in report.findings]
    (finding,) = report.findings
    op = CASES[model][mutation]
    assert finding.op == op or op in finding.message


@pytest.mark.parametrize("model", sorted(CASES))
def test_unmutated_cross_framework_pair_has_no_false_alarm(model: str) -> None:
    assert compare_structure(_traced("torch", model, None),
                             _traced("jax", model, None)).equivalent
