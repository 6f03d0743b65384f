"""Specs compiled: every example makes a Graph that verifies and runs in the fp64 interpreter
with the stated output shapes; what a spec leaves open is in the side table; `show` prints
every example; a spec diffs against a PyTorch model like any model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgraph.cli import main
from specgraph.interpreter import run
from specgraph.spec import Unchecked, load, loads

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "specs"

# example: (output name, shape, parameter count)
EXAMPLES = {
    "bert_layer.spec.yaml": ("hidden", (2, 8, 32), 2 * (12 * 32**2 + 13 * 32)),
    "small_cnn.spec.yaml": ("logits", (2, 10), 1634),
    "xor.spec.yaml": ("xor_logit", (4,), 42),
}


def _random(graph, seed: int = 0) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    weights = {k: rng.standard_normal(v.shape) for k, v in graph.params.items()
               if not k.endswith(".var")}
    weights.update({k: rng.uniform(0.5, 1.5, v.shape) for k, v in graph.params.items()
                    if k.endswith(".var")})
    inputs = {n: rng.standard_normal(v.shape) for n, v in zip(graph.input_names, graph.inputs)}
    return inputs, weights


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_compiles_verifies_and_runs(name: str) -> None:
    output, shape, count = EXAMPLES[name]
    spec = load(SPECS / name)
    graph = spec.graph.verify()
    assert graph.param_count() == count
    inputs, weights = _random(graph)
    outs = run(graph, inputs, weights)
    assert outs[output].shape == shape and np.isfinite(outs[output]).all()
    assert all(n.source.startswith(f"{SPECS / name}:") for n in graph.nodes)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_show_prints_every_example(repo_root, capsys, name: str) -> None:
    assert main(["show", f"examples/specs/{name}"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"examples/specs/{name}  (spec, ")
    assert "Equations" in out and f"examples/specs/{name}:" in out
    assert main(["show", f"examples/specs/{name}", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr()[0])
    assert data["framework"] == "spec" and data["layers"]


def test_bert_scopes_sources_and_sizes(repo_root) -> None:
    spec = load("examples/specs/bert_layer.spec.yaml")
    g = spec.graph
    assert [n.op for n in g.nodes[:3]] == ["linear"] * 3
    assert g.nodes[0].scope == "layer.0.attention.query"
    assert g.nodes[0].source == "examples/specs/bert_layer.spec.yaml:28"
    assert {n.scope.split(".")[1] for n in g.nodes} == {"0", "1"}
    assert "layer.1.output.norm.weight" in g.params
    attention = [n for n in g.nodes if n.op == "attention"]
    assert len(attention) == 2 and attention[0].attrs["scale"] == pytest.approx(8**-0.5)
    norms = [n for n in g.nodes if n.op == "layer_norm"]
    assert {n.attrs["eps"] for n in norms} == {1e-12}
    q = g.nodes[3:5]  # "B T (heads d_head) -> B heads T d_head"
    assert [(n.op, dict(n.attrs)) for n in q] == [("reshape", {"shape": (2, 8, 4, 8)}),
                                                  ("transpose", {"perm": (0, 2, 1, 3)})]
    assert spec.sizes["d_head"] == 8 and spec.dims == ("B", "T")
    assert spec.tolerance.rtol == 1e-4
    stated = {s.scope: s for s in spec.statements}
    assert str(stated["layer.0.attention.self"].equation) == \
        "softmax((scale*q)*transpose(k))*v"


def test_what_a_spec_leaves_open_is_in_the_side_table(repo_root) -> None:
    bert = load("examples/specs/bert_layer.spec.yaml")
    # the GELU's approximation is not stated: not checked; its eps is
    assert not bert.checks("layer.0.intermediate", "gelu", "approximate")
    assert bert.checks("layer.0.attention.norm", "layer_norm", "eps")
    assert not bert.checks("layer.1.attention.self", "attention", "causal")
    assert bert.checks("layer.1.attention.self", "attention", "scale")
    cnn = load("examples/specs/small_cnn.spec.yaml")
    stand_in = [u for u in cnn.unchecked if u.stand_in]
    assert [(u.scope, u.op, u.source) for u in stand_in] == \
        [("stage2.bn", "relu", "examples/specs/small_cnn.spec.yaml:36")]
    assert not cnn.checks("stage2.bn", "relu")
    assert not cnn.checks("head.fc", "linear") and not cnn.checks("head.fc", "linear", "bias")
    assert cnn.checks("stage1.conv", "conv", "padding")
    assert cnn.checks("stage2.bn", "batch_norm", "eps")
    assert not cnn.checks("stage2.bn", "batch_norm", "momentum")


SMALL = """\
dims: {B: 2}
hyper: {d: 4, n: 3}
inputs:
  x: "B d"
layers:
"""


def test_repeat_carries_its_input_and_names_every_iteration() -> None:
    spec = loads(SMALL + '  - name: "block.{i}"\n    repeat: n\n    in: x\n    layers:\n'
                 "      - {name: fc, linear: x, out: d, activation: tanh}\n"
                 '  - {name: skip, add: ["block.0", "block.{n - 1}"]}\n')
    g = spec.graph
    linears = [n for n in g.nodes if n.op == "linear"]
    assert [n.scope for n in linears] == ["block.0.fc", "block.1.fc", "block.2.fc"]
    for before, after in zip(linears, linears[1:]):  # iteration i reads iteration i-1
        tanh = g.consumers(before.output)[0]
        assert tanh.op == "tanh" and g.consumers(tanh.output)[0] is after
    add = g.nodes[-1]
    assert add.op == "add" and g.output_names == ("skip",)
    assert g.producer(add.inputs[0]).scope == "block.0.fc"


def test_an_index_may_size_and_name_things_inside_a_repeat() -> None:
    spec = loads(SMALL + '  - name: "grow.{j}"\n    repeat: 2\n    index: j\n    layers:\n'
                 '      - {name: "fc{j}", linear: x, out: "d + j"}\n'
                 "outputs: [grow.0, grow.1]\n")
    assert sorted(spec.graph.params) == ["grow.0.fc0.bias", "grow.0.fc0.weight",
                                         "grow.1.fc1.bias", "grow.1.fc1.weight"]
    assert [v.shape for v in spec.graph.outputs] == [(2, 4), (2, 5)]


def test_multi_output_statements_and_explicit_unspecified() -> None:
    spec = loads(SMALL + "  - {name: parts, split: x, axis: -1, sizes: [1, 3]}\n"
                 '  - {name: n, layer_norm: "parts[1]", eps: unspecified}\n')
    norm = spec.graph.nodes[-1]
    assert norm.attrs["axis"] == 1 and norm.inputs[0] is spec.graph.nodes[0].outputs[1]
    assert not spec.checks("n", "layer_norm", "eps")
    assert spec.graph.params["n.weight"].shape == (3,)


def test_merge_keys_and_anchors_share_attributes() -> None:
    spec = loads(SMALL + "  - &fc {name: a, linear: x, out: 2 * d, bias: false}\n"
                 "  - {<<: *fc, name: b, linear: a}\n")
    assert sorted(spec.graph.params) == ["a.weight", "b.weight"]
    assert spec.graph.params["b.weight"].shape == (8, 8)


def test_the_spec_package_imports_no_framework() -> None:
    code = ("import sys, specgraph.spec, specgraph.spec.compiler\n"
            "specgraph.spec.load('examples/specs/bert_layer.spec.yaml')\n"
            "bad = {'torch', 'jax', 'tensorflow', 'onnx', 'flax', 'keras', 'onnxruntime'}\n"
            "print(sorted(bad & {m.split('.')[0] for m in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_spec_exports_to_onnx_and_runs_there(repo_root, name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    from specgraph.frontends.onnx.export import to_onnx
    from specgraph.loading import trace

    traced = trace(f"examples/specs/{name}")
    session = ort.InferenceSession(to_onnx(traced.graph, traced.weights).SerializeToString())
    outs = session.run(None, dict(traced.inputs))
    for out, name_ in zip(outs, traced.graph.output_names):
        np.testing.assert_allclose(out, traced.outputs[name_], rtol=1e-4, atol=1e-5)


def test_the_spec_diffs_against_pytorch_structurally(repo_root, capsys) -> None:
    pytest.importorskip("torch")
    spec = "examples/specs/bert_layer.spec.yaml"
    assert main(["diff", spec, "examples/specs/bert_torch.py:encoder", "--no-numeric"]) == 0
    assert "verdict: EQUIVALENT (same canonical graph)" in capsys.readouterr()[0]
    assert main(["diff", spec, "examples/specs/bert_torch.py:encoder_eps", "--no-numeric",
                 "--format", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr()[0])["findings"]
    assert (finding["code"], finding["attr"]) == ("attr-mismatch", "eps")
    assert finding["lhs"]["source"] == "examples/specs/bert_layer.spec.yaml:41"
