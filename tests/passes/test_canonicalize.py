"""canonicalize on traced models: same float64 result, idempotent, no identities left."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.frontends import torch as torch_frontend
from specgraph.graph_nx import isomorphic
from specgraph.interpreter import run
from specgraph.passes import canonicalize
from tests.zoo.torch_models import MODELS


@pytest.mark.parametrize("name", sorted(MODELS))
def test_canonical_graph_computes_the_same(name: str) -> None:
    traced = torch_frontend.trace(*MODELS[name](), reference=name)
    canonical = canonicalize(traced.graph)
    before = run(traced.graph, traced.inputs, traced.weights)
    after = run(canonical, traced.inputs, {k: traced.weights[k] for k in canonical.params})
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-12, atol=1e-12)
    assert not {"identity", "dropout", "squeeze", "unsqueeze"} & {n.op for n in canonical}
    assert isomorphic(canonicalize(canonical), canonical)


def test_isomorphism_ignores_names_but_not_attributes() -> None:
    a = torch_frontend.trace(*MODELS["mlp"](), reference="a").graph
    b = torch_frontend.trace(*MODELS["mlp"](), reference="b").graph
    assert isomorphic(a, b)
    changed = a.replace(nodes=[n.replace(op="gelu", attrs={"approximate": "none"})
                               if n.op == "relu" else n for n in a.nodes])
    assert not isomorphic(a, changed)


def test_passes_that_undo_each_other_stop_where_a_round_ended_before() -> None:
    from specgraph.ir import GraphBuilder
    from specgraph.passes import run_passes
    from specgraph.passes.rewrite import PassResult

    b = GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    b.output("y", b.add("relu", [x], shape=(2, 3), dtype="float32"))
    graph = b.build()
    calls = []

    def swap(to: str):
        def run(g):  # relu -> to; the other pass turns it back
            calls.append(to)
            (node,) = g.nodes
            if node.op == to:
                return PassResult(g, False)
            return PassResult(g.replace(nodes=[node.replace(op=to)]), True)
        return run

    out = run_passes(graph, [swap("sigmoid"), swap("relu")], max_rounds=32)
    assert [n.op for n in out.nodes] == ["relu"]
    assert len(calls) <= 6  # two rounds, then the repeated state ends the run
