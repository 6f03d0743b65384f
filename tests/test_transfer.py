"""Parameter pairing along the alignment: by role, never by name."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.align import align
from specgraph.interpreter import run
from specgraph.passes import canonicalize_model
from specgraph.transfer import TransferError, pair_parameters

pytest.importorskip("jax")


def _torch(name: str):
    from specgraph.frontends import torch as frontend
    from tests.zoo.torch_models import MODELS

    return canonicalize_model(frontend.trace(*MODELS[name](), reference=name))


def _jax(name: str):
    from tests.zoo import jax_models

    return canonicalize_model(jax_models.trace(name))


@pytest.mark.parametrize(("torch_name", "jax_name"), [
    ("mlp", "mlp/linen"), ("cnn", "cnn/nnx"), ("transformer_block", "preln/jax"),
    ("embedding_classifier", "embed/linen")])
def test_every_parameter_pairs_by_role(torch_name: str, jax_name: str) -> None:
    lhs, rhs = _torch(torch_name), _jax(jax_name)
    pairs = pair_parameters(align(lhs.graph, rhs.graph))
    assert {p.lhs for p in pairs} == set(lhs.graph.params)
    assert {p.rhs for p in pairs} == set(rhs.graph.params)
    # moving lhs's weights into rhs's graph reproduces lhs exactly: the pairing is right
    moved = {p.rhs: lhs.weights[p.lhs] for p in pairs}
    got = run(rhs.graph, list(lhs.inputs.values()), moved)
    want = run(lhs.graph, lhs.inputs, lhs.weights)
    for (_, a), (_, b) in zip(sorted(got.items()), sorted(want.items())):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_structural_differences_are_listed_in_one_error() -> None:
    from tests.zoo.torch_mutants import mutant
    from specgraph.frontends import torch as frontend

    golden = canonicalize_model(frontend.trace(*mutant("transformer_block", None)))
    wider = canonicalize_model(frontend.trace(*mutant("transformer_block", "hidden_size")))
    with pytest.raises(TransferError, match=r"^cannot move weights from lhs to rhs: "
                                            r"fc1.weight \[16, 64\] vs fc1.weight \[16, 48\]"):
        pair_parameters(align(golden.graph, wider.graph))
    loose = pair_parameters(align(golden.graph, wider.graph), strict=False)
    assert "fc1.weight" not in {p.lhs for p in loose} and len(loose) > 10
