"""Symbolic equations: naming, merging of elementwise chains, attributes, LaTeX."""

from __future__ import annotations

import pytest

from specgraph.frontends import torch as torch_frontend
from specgraph.ir import GraphBuilder
from specgraph.symbolic import equations, group_by_scope
from tests.zoo.torch_models import MODELS

F32 = "float32"


def _eqs(name: str):
    model, inputs = MODELS[name]()
    graph = torch_frontend.trace(model, inputs, reference=name).graph
    return graph, equations(graph)


def test_mlp_reads_like_the_paper() -> None:
    _, lines = _eqs("mlp")
    assert [e.text for e in lines] == [
        "h1 = relu(x·W_fc1 + b_fc1)",
        "h2 = tanh(h1·W_fc2 + b_fc2)",
        "output = h2·W_fc3 + b_fc3",
    ]
    assert [e.scope for e in lines] == ["fc1", "fc2", "fc3"]
    assert lines[0].latex == (r"\mathrm{h1} = \operatorname{relu}\left(x \cdot W_{\mathrm{fc1}}"
                              r" + b_{\mathrm{fc1}}\right)")


def test_norm_parameters_and_attributes_are_named() -> None:
    _, lines = _eqs("cnn")
    text = "\n".join(e.text for e in lines)
    assert "batch_norm(h1, μ_bn1, σ²_bn1, γ_bn1, β_bn1; eps=1e-05)" in text
    assert "eps=0.001" in text
    assert "conv2d(x, W_conv1; pad=(1, 1, 1, 1)) + b_conv1" in text
    assert "h4 = conv2d(h3, W_conv2; pad=(1, 1, 1, 1), stride=2×2)" in text


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_node_is_in_exactly_one_equation(name: str) -> None:
    graph, lines = _eqs(name)
    covered = [i for e in lines for i in e.nodes]
    assert sorted(covered) == list(range(len(graph.nodes)))
    assert {e.lhs for e in lines} >= set(graph.output_names)


def test_shared_values_are_not_merged_and_outputs_keep_their_names() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,), F32)
    h = b.add("sigmoid", [x], shape=(3,), dtype=F32)
    b.output("y", b.add("mul", [x, h], shape=(3,), dtype=F32))
    b.output("z", b.add("exp", [h], shape=(3,), dtype=F32))
    lines = [e.text for e in equations(b.build())]
    assert lines == ["h1 = sigmoid(x)", "y = x·h1", "z = exp(h1)"]


def test_variants_stay_visible() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,), F32)
    a = b.add("gelu", [x], {"approximate": "tanh"}, shape=(3,), dtype=F32, scope="a")
    b.output("a", a)
    b.output("e", b.add("gelu", [x], shape=(3,), dtype=F32, scope="e"))
    b.output("s", b.add("softmax", [x], {"axis": 0}, shape=(3,), dtype=F32))
    assert [e.text for e in equations(b.build())] == [
        "a = gelu_tanh(x)", "e = gelu(x)", "s = softmax(x; axis=0)"]


def test_groups_are_consecutive_runs_in_graph_order() -> None:
    _, lines = _eqs("preln_block")
    groups = group_by_scope(lines)
    assert [g for g, _ in groups][:2] == ["ln1", "attn"]
    flat = [e for _, run in groups for e in run]
    assert flat == lines
