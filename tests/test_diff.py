"""The structural diff: the XOR pair across frameworks, one finding per planted mutation,
and the properties every diff must have (hypothesis)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgraph.check import compare_structure
from specgraph.cli import main
from specgraph.diff import diff
from specgraph.ir import Graph, GraphBuilder
from specgraph.passes import canonicalize

XOR = {"torch": "examples/xor/model_torch.py", "jax": "examples/xor/model_jax.py",
       "keras": "examples/xor/model_keras.py"}


@pytest.fixture(scope="module")
def xor_models():
    pytest.importorskip("jax")
    pytest.importorskip("tensorflow")
    from specgraph.passes import canonicalize_model
    from specgraph.loading import trace

    models = {(fw, kind): canonicalize_model(trace(f"{path}:{kind}"))
              for fw, path in XOR.items() for kind in ("correct", "forgot_activation")}
    if importlib.util.find_spec("onnxscript") is not None:
        models.update({("onnx", kind): _onnx_xor(kind) for kind in ("correct",
                                                                     "forgot_activation")})
    return models


def _onnx_xor(kind: str):
    """The PyTorch XOR model exported with torch.onnx (dynamo) and traced from ONNX."""
    import warnings

    import torch

    from specgraph.passes import canonicalize_model
    from specgraph.frontends import onnx as onnx_frontend
    from specgraph.loading import call_factory

    _, (model, inputs) = call_factory(f"{XOR['torch']}:{kind}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, optimize=False, verbose=False)
    return canonicalize_model(onnx_frontend.trace_model(
        program.model_proto, tuple(t.numpy() for t in inputs), reference=f"xor-{kind}.onnx"))


SIDES = [*XOR, "onnx"]


@pytest.mark.parametrize(("lhs", "rhs"), list(itertools.permutations(SIDES, 2)) +
                         [(fw, fw) for fw in SIDES])
def test_xor_forgotten_activation_is_one_finding_naming_relu(xor_models, lhs, rhs) -> None:
    report = compare_structure(xor_models[(lhs, "correct")], xor_models[(rhs,
                                                                        "forgot_activation")])
    (finding,) = report.findings
    assert finding.code == "missing-op" and finding.op == "relu"
    assert finding.message.startswith("rhs has no relu between linear at hidden and linear "
                                      "at head")
    assert finding.lhs.scope == "act" and finding.rhs is None
    mirrored = compare_structure(xor_models[(rhs, "forgot_activation")],
                                 xor_models[(lhs, "correct")])
    (back,) = mirrored.findings
    assert back.message.startswith("lhs has no relu") and back.rhs.scope == "act"


@pytest.mark.parametrize(("lhs", "rhs"), list(itertools.combinations(SIDES, 2)))
def test_xor_correct_pairs_are_equivalent(xor_models, lhs, rhs) -> None:
    for kind in ("correct", "forgot_activation"):
        assert compare_structure(xor_models[(lhs, kind)], xor_models[(rhs, kind)]).equivalent


# --- planted mutations on a small transformer block built in the IR -----------------------
F = "float32"


def _block(eps=1e-5, approximate="none", hidden=32, residual=True, axis=2, act="gelu",
           bias=True, pre_ln=True) -> Graph:
    b = GraphBuilder("block")
    x = b.input("x", (2, 5, 16), F)

    def ln(v, name):
        return b.add("layer_norm", [v, b.param(f"{name}.weight", (16,), F),
                                    b.param(f"{name}.bias", (16,), F)],
                     {"axis": 2, "eps": eps}, shape=(2, 5, 16), dtype=F, scope=name)

    def lin(v, name, d_in, d_out, with_bias=True):
        ins = [v, b.param(f"{name}.weight", (d_in, d_out), F)]
        if with_bias:
            ins.append(b.param(f"{name}.bias", (d_out,), F))
        return b.add("linear", ins, {"bias": with_bias}, shape=(2, 5, d_out), dtype=F,
                     scope=name)

    h = ln(x, "ln") if pre_ln else x
    h = lin(h, "fc1", 16, hidden, bias)
    attrs = {"approximate": approximate} if act == "gelu" else {}
    h = b.add(act, [h], attrs, shape=(2, 5, hidden), dtype=F, scope="act")
    h = lin(h, "fc2", hidden, 16)
    h = b.add("softmax", [h], {"axis": axis}, shape=(2, 5, 16), dtype=F, scope="attn")
    if residual:
        h = b.add("add", [x, h], shape=(2, 5, 16), dtype=F, scope="")
    if not pre_ln:
        h = ln(h, "ln")
    b.output("y", h)
    return b.build()


@pytest.mark.parametrize(("mutation", "code", "detail"), [
    ({"eps": 1e-12}, "attr-mismatch", "eps"),
    ({"approximate": "tanh"}, "attr-mismatch", "approximate"),
    ({"axis": 1}, "attr-mismatch", "axis"),
    ({"bias": False}, "attr-mismatch", "bias"),
    ({"act": "relu"}, "op-mismatch", "gelu"),
    ({"hidden": 64}, "param-mismatch", "fc1"),
    ({"residual": False}, "missing-op", "add"),
])
def test_planted_mutation_is_one_finding(mutation, code, detail) -> None:
    findings, _ = diff(_block(), _block(**mutation))
    assert len(findings) == 1, [f.message for f in findings]
    (finding,) = findings
    assert finding.code == code
    assert detail in " ".join([finding.attr or "", finding.op or "", finding.message])


def _heads(eps=1e-5, transposed=False) -> Graph:
    """A LayerNorm, then the features split into 4 heads of 8: as (heads, head_dim), or
    transposed, as (head_dim, heads)."""
    b = GraphBuilder("heads")
    x = b.input("x", (2, 8, 32), F)
    h = b.add("layer_norm", [x, b.param("ln.weight", (32,), F), b.param("ln.bias", (32,), F)],
              {"axis": 2, "eps": eps}, shape=(2, 8, 32), dtype=F, scope="ln")
    split, perm = ((2, 8, 8, 4), (0, 3, 1, 2)) if transposed else ((2, 8, 4, 8), (0, 2, 1, 3))
    h = b.add("reshape", [h], {"shape": split}, shape=split, dtype=F, scope="attn")
    h = b.add("transpose", [h], {"perm": perm}, shape=(2, 4, 8, 8), dtype=F, scope="attn")
    b.output("y", b.add("softmax", [h], {"axis": 3}, shape=(2, 4, 8, 8), dtype=F,
                        scope="attn"))
    return b.build()


def test_heads_split_transposed_is_one_finding_at_the_reshape() -> None:
    findings, _ = diff(_heads(), _heads(transposed=True))
    assert [(f.code, f.op, f.attr) for f in findings] == [("attr-mismatch", "reshape", "shape")]
    assert "then transposed by (0, 2, 1, 3) in lhs but (0, 3, 1, 2) in rhs" in \
        findings[0].message


def test_a_layout_difference_is_not_hidden_by_an_attribute_that_moves_no_data() -> None:
    # an eps changes no shape, so it cannot be what makes the heads split differently
    findings, _ = diff(_heads(), _heads(eps=1e-12, transposed=True))
    assert [(f.op, f.attr) for f in findings] == [("layer_norm", "eps"), ("reshape", "shape")]


def _attention(stacked: bool) -> Graph:
    """Attention over 4 heads of 8, its batch stacked under a leading axis of one or not."""
    b = GraphBuilder("attention")
    x = b.input("x", (2, 4, 8, 8), F)
    shape = (1, 2, 4, 8, 8) if stacked else (2, 4, 8, 8)
    h = b.add("reshape", [x], {"shape": shape}, shape=shape, dtype=F, scope="attn") \
        if stacked else x
    h = b.add("attention", [h, h, h], {"scale": 8 ** -0.5}, shape=shape, dtype=F,
              scope="attn")
    if stacked:
        h = b.add("reshape", [h], {"shape": (2, 4, 8, 8)}, shape=(2, 4, 8, 8), dtype=F,
                  scope="attn")
    b.output("y", h)
    return b.build()


def test_attention_over_the_same_heads_with_another_batch_layout_is_no_heads_finding(
) -> None:
    """It read "4 heads of size 8 in lhs but 4 heads of size 8 in rhs" (``nn.MultiheadAttention``
    against separate projections, before its stacked axis was dropped)."""
    findings, _ = diff(_attention(True), _attention(False))
    assert findings and all(f.attr != "heads" and "heads of size" not in f.message
                            for f in findings), [f.message for f in findings]


def test_pre_ln_versus_post_ln_is_reported_as_wiring() -> None:
    findings, _ = diff(_block(), _block(pre_ln=False))
    assert findings and {f.code for f in findings} <= {"edge-mismatch", "missing-op"}
    assert any(f.op == "layer_norm" or "layer_norm" in f.message for f in findings)


# --- properties ----------------------------------------------------------------------------
def _zoo_graph(name: str) -> Graph:
    from specgraph.frontends import torch as torch_frontend
    from tests.zoo.torch_models import MODELS

    return canonicalize(torch_frontend.trace(*MODELS[name](), reference=name).graph)


ZOO = ["mlp", "cnn", "transformer_block", "embedding_classifier", "causal_sdpa"]
GRAPHS: dict[str, Graph] = {}


def _graph(name: str) -> Graph:
    if name not in GRAPHS:
        GRAPHS[name] = _zoo_graph(name)
    return GRAPHS[name]


def _reorder(graph: Graph, seed: int) -> Graph:
    """A different topological order of the same nodes (independent branches swapped)."""
    rng = random.Random(seed)
    produced = {v for n in graph.nodes for v in n.outputs}
    ready_values = set(graph.inputs) | set(graph.params.values()) | set(graph.constants)
    pending = list(graph.nodes)
    order = []
    while pending:
        ready = [n for n in pending if all(v in ready_values or v not in produced
                                           for v in n.inputs)]
        pick = rng.choice(ready)
        order.append(pick)
        pending.remove(pick)
        ready_values.update(pick.outputs)
    return graph.replace(nodes=order)


def _rename(graph: Graph) -> Graph:
    params = {f"renamed_{i}": v for i, v in enumerate(graph.params.values())}
    nodes = [n.replace(scope=f"other.{n.scope}") for n in graph.nodes]
    return graph.replace(params=params, nodes=nodes, input_names=[f"in{i}" for i, _ in
                                                                  enumerate(graph.inputs)])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ZOO), st.integers(0, 10_000))
def test_diff_of_a_graph_with_itself_reordered_and_renamed_is_empty(name, seed) -> None:
    g = _graph(name)
    assert diff(g, g)[0] == []
    assert diff(g, _reorder(g, seed))[0] == []
    assert diff(g, _rename(g))[0] == []


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(list(_block.__defaults__ and [
    {"eps": 1e-12}, {"approximate": "tanh"}, {"axis": 1}, {"act": "relu"}, {"hidden": 64},
    {"residual": False}, {"pre_ln": False}, {"bias": False}])))
def test_swapping_sides_mirrors_every_finding(mutation) -> None:
    a, b = _block(), _block(**mutation)
    forward, _ = diff(a, b)
    backward, _ = diff(b, a)
    assert sorted(f.code for f in forward) == sorted(f.code for f in backward)
    for f in forward:
        assert any(g.code == f.code and (g.lhs is None) == (f.rhs is None) and
                   (g.rhs is None) == (f.lhs is None) for g in backward)


# --- the command ---------------------------------------------------------------------------
def test_diff_command_exit_codes_and_json(repo_root, capsys) -> None:
    pytest.importorskip("jax")
    code = main(["diff", f"{XOR['torch']}:correct", f"{XOR['jax']}:forgot_activation",
                 "--format", "json"])
    out = capsys.readouterr().out
    assert code == 1
    data = json.loads(out)
    assert data["equivalent"] is False and [f["code"] for f in data["findings"]] == ["missing-op"]
    finding = data["findings"][0]
    assert finding["op"] == "relu" and finding["lhs"]["scope"] == "act"
    assert finding["lhs"]["source"].startswith("examples/xor/model_torch.py:")
    assert finding["rhs"] is None and finding["blame"] == "unknown"
    assert main(["diff", f"{XOR['torch']}:correct", f"{XOR['jax']}:correct"]) == 0
    assert "verdict: EQUIVALENT" in capsys.readouterr().out


def test_diff_command_errors(repo_root, capsys, tmp_path) -> None:
    other = tmp_path / "other.py"
    other.write_text("import torch\n\ndef wide():\n    return torch.nn.Linear(3, 2), "
                     "(torch.ones(4, 3),)\n\ndef broken():\n    raise OSError('no weights')\n")
    code = main(["diff", f"{XOR['torch']}:correct", f"{other}:wide"])
    err = capsys.readouterr().err
    assert code == 2 and "the models take different inputs" in err and "x: [4, 2]" in err
    code = main(["diff", f"{XOR['torch']}:correct", f"{other}:broken"])
    err = capsys.readouterr().err
    assert code == 2 and "the factory raised OSError: no weights" in err
