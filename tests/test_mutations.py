"""A fast subset of the mutation benchmark (``python -m bench.mutations`` runs all of it): a
planted mutation in one framework's model, against the golden model written in another, is
found, alone, at the right layer, by the structural diff and by the numeric check alone. The
mutations and their layers are the one table in tests/zoo/mutations.py."""

from __future__ import annotations

import functools

import pytest

from specgraph.check import compare, compare_structure
from specgraph.numeric.options import NumericOptions
from specgraph.passes import canonicalize_model
from specgraph.transfer import TransferError
from tests.zoo.mutations import (MODELS, MUTATIONS, Mutation, names_mutated_layer,
                                 numerically_located, reshaped_params, structurally_located)

pytest.importorskip("jax")

# the subset run here, PyTorch against JAX: every mutation of the table but the block's
# post_ln and softmax_axis, which the benchmark covers
FAST: tuple[Mutation, ...] = tuple(
    m for m in MUTATIONS
    if (m.model, m.name) not in {("transformer_block", "post_ln"),
                                 ("transformer_block", "softmax_axis")})
PAIRS = [("torch", "jax"), ("jax", "torch")]
# forward only, to stay fast (the benchmark runs both passes): every planted mutation here
# shows in the forward pass, whose findings come first
FORWARD = NumericOptions(backward=False)


@functools.cache
def _traced(framework: str, model: str, mutation: str | None):
    if framework == "torch":
        from specgraph.frontends import torch as frontend
        from tests.zoo.torch_mutants import mutant
    else:
        from specgraph.frontends import jax as frontend
        from tests.zoo.jax_models import mutant
    return canonicalize_model(frontend.trace(*mutant(model, mutation), reference=framework))


def _id(m: Mutation) -> str:
    return f"{m.model}-{m.name}"


@pytest.mark.parametrize("framework", ["torch_mutants", "jax_models", "keras_mutants"])
def test_every_framework_plants_the_table_and_refuses_other_names(framework: str) -> None:
    module = pytest.importorskip(f"tests.zoo.{framework}")
    for mutation in MUTATIONS:
        module.mutant(mutation.model, mutation.name)
    with pytest.raises(KeyError):
        module.mutant("cnn", "no_such_mutation")
    with pytest.raises(KeyError):
        module.mutant("no_such_model", None)


@pytest.mark.parametrize("pair", PAIRS, ids="->".join)
@pytest.mark.parametrize("mutation", FAST, ids=_id)
def test_mutation_is_found_alone_at_its_layer(pair, mutation: Mutation) -> None:
    lhs, rhs = pair
    report = compare_structure(_traced(lhs, mutation.model, None),
                               _traced(rhs, mutation.model, mutation.name))
    assert len(report.findings) == 1, [f.message for f in report.findings]
    (finding,) = report.findings
    assert structurally_located(finding, mutation), (finding.op, finding.message)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_unmutated_cross_framework_pair_has_no_false_alarm(model: str) -> None:
    assert compare_structure(_traced("torch", model, None),
                             _traced("jax", model, None)).equivalent


def _numeric_cases() -> list:
    out = []
    for mutation in FAST:
        for pair in PAIRS:
            why = mutation.missed_numerically(pair[0])
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(pair, mutation, marks=marks,
                                    id=f"{_id(mutation)}-{'->'.join(pair)}"))
    return out


@pytest.mark.parametrize(("pair", "mutation"), _numeric_cases())
def test_numeric_check_alone_finds_the_mutation_at_its_layer(pair, mutation: Mutation) -> None:
    model = mutation.model
    lhs, rhs = _traced(pair[0], model, None), _traced(pair[1], model, mutation.name)
    if mutation.reshapes:
        reshaped = reshaped_params(_traced(pair[1], model, None), rhs)
        with pytest.raises(TransferError) as err:
            compare(lhs, rhs, mode="numbers", options=FORWARD)
        assert reshaped, "no parameter changed shape"
        assert names_mutated_layer(str(err.value), rhs, reshaped, mutation.numeric_ops), \
            str(err.value)
        return
    report = compare(lhs, rhs, mode="numbers", options=FORWARD)
    assert report.findings, "no numeric finding"
    first = report.findings[0]
    assert numerically_located(first, mutation.numeric_ops), first.message


def test_an_epsilon_that_parts_the_values_only_downstream_is_traced_back_to_its_layer() -> None:
    """Keras's golden block against PyTorch's with ln1's eps 1e-12: on Keras's inputs the two
    ln1s are 2.2e-5 apart, too close to stand out there; ln2, which each program computes as
    well as float32 allows on the inputs it got, amplifies the gap past the tolerance. The
    finding names ln1's definition, not ln2's rounding."""
    pytest.importorskip("tensorflow")
    from specgraph.frontends import tf as keras_frontend
    from tests.zoo.keras_mutants import mutant as keras_mutant

    lhs = canonicalize_model(keras_frontend.trace(*keras_mutant("transformer_block", None),
                                                  reference="keras"))
    rhs = _traced("torch", "transformer_block", "eps")
    for native in (True, False):  # each side's own program, and the replay alike
        report = compare(lhs, rhs, mode="numbers",
                         options=NumericOptions(backward=False, native=native))
        assert report.findings, f"native={native}: no finding"
        first = report.findings[0]
        assert first.op == "layer_norm" and "ln1" in first.message, first.message
        assert "defined differently" in first.message, first.message


@pytest.mark.parametrize("model", sorted(MODELS))
def test_unmutated_cross_framework_pair_has_no_numeric_finding(model: str) -> None:
    report = compare(_traced("torch", model, None), _traced("jax", model, None),
                     mode="numbers")  # forward and backward
    assert not report.findings, [f.message for f in report.findings]


# --- the peer corpus: mutations planted in real models (bench/peer_mutants.py) -----------------

# a few cases, one per kind of plant (a config value, a replaced method), each against
# another framework's unmutated port (the benchmark runs every direction and framework)
CORPUS_FAST = [("bert", "eps", ("tf", None), ("torch", "eps")),
               ("bert", "missing_residual", ("torch", "missing_residual"), ("tf", None)),
               ("gpt2", "heads_transposed", ("torch", None), ("tf", "heads_transposed"))]


@functools.cache
def _corpus_traced(arch: str, framework: str, mutation: str | None):
    from specgraph.loading import trace

    ref = (f"bench/peer_mutants.py:{arch}_{framework}_{mutation}" if mutation
           else f"bench/peer_models.py:{arch}_{framework}")
    return canonicalize_model(trace(ref))


def _corpus_case(arch: str, name: str, lhs, rhs):
    pytest.importorskip("transformers")
    pytest.importorskip("tensorflow")
    from bench.peer_mutants import CORPUS
    from bench.peers import expected

    (mutation,) = [p.mutation for p in CORPUS if (p.mutation.model, p.mutation.name) ==
                   (arch, name)]
    known = expected(arch, lhs[0], rhs[0])
    return (mutation, known, _corpus_traced(arch, *lhs), _corpus_traced(arch, *rhs))


@pytest.mark.parametrize("case", CORPUS_FAST, ids=lambda c: f"{c[0]}-{c[1]}")
def test_corpus_mutation_is_found_alone_at_its_layer(case) -> None:
    mutation, known, lhs, rhs = _corpus_case(*case)
    found = [f for f in compare_structure(lhs, rhs).findings
             if (f.code, f.op, f.attr) not in known]  # PyTorch's padding rows
    assert len(found) == 1, [f.message for f in found]
    assert structurally_located(found[0], mutation), (found[0].op, found[0].message)
    report = compare(lhs, rhs, mode="numbers", options=FORWARD)
    assert report.findings, "no numeric finding"
    assert numerically_located(report.findings[0], mutation.numeric_ops), \
        report.findings[0].message
