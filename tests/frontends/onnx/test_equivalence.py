"""A PyTorch model exported with torch.onnx.export(dynamo=True), with and without the
exporter's optimizer, canonicalizes to the same graph as the direct PyTorch trace.

The one exception is inherent: the optimizer folds BatchNorm into the preceding Conv's
weights, so the optimized graph has no batch_norm. A diff then says so in a note, not a
finding: the export's own weights are the model's folded (``specgraph.folds``)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import nn

from specgraph.check import compare
from specgraph.frontends import onnx as onnx_frontend
from specgraph.frontends import torch as torch_frontend
from specgraph.graph_nx import describe, isomorphic
from specgraph.passes import canonicalize_model
from tests.zoo.torch_models import MODELS

pytest.importorskip("onnxscript")

WITHOUT_BATCH_NORM = ["mlp", "transformer_block", "embedding_classifier", "causal_sdpa"]
WITH_BATCH_NORM = ["cnn", "depthwise_separable"]


def _export(name: str, optimize: bool):
    model, inputs = MODELS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, optimize=optimize,
                                    verbose=False)
    traced = onnx_frontend.trace_model(program.model_proto, tuple(t.numpy() for t in inputs),
                                       reference=f"{name}.onnx")
    return canonicalize_model(traced)


def _direct(name: str):
    return canonicalize_model(torch_frontend.trace(*MODELS[name](), reference=name))


@pytest.mark.parametrize("optimize", [False, True], ids=["plain", "optimized"])
@pytest.mark.parametrize("name", WITHOUT_BATCH_NORM + WITH_BATCH_NORM)
def test_onnx_export_canonicalizes_like_the_direct_trace(name: str, optimize: bool) -> None:
    exported, direct = _export(name, optimize), _direct(name)
    if optimize and name in WITH_BATCH_NORM:
        ops = [n.op for n in exported.graph.nodes]
        assert "batch_norm" not in ops  # folded into the conv weights by the optimizer
        assert ops.count("conv") == [n.op for n in direct.graph.nodes].count("conv")
        return
    assert isomorphic(direct.graph, exported.graph), "\n".join(
        ["torch:", *describe(direct.graph), "onnx:", *describe(exported.graph)])


@pytest.mark.parametrize("name", WITH_BATCH_NORM)
def test_a_model_and_its_export_with_batch_norm_folded_are_equivalent(name: str) -> None:
    """The exporter's default folds each BatchNorm into the conv before it: equivalent, in
    a note naming the places; the numbers compare each folded conv with the BatchNorm,
    lhs's weights moved folded; the same read the other way round (the export as lhs, its
    weights moved into the model's conv with the BatchNorm made the identity)."""
    exported, direct = _export(name, True), _direct(name)
    norms = [n.scope for n in direct.graph.nodes if n.op == "batch_norm"]
    for lhs, rhs, folder in ((direct, exported, "rhs"), (exported, direct, "lhs")):
        report = compare(lhs, rhs)
        assert report.equivalent, [f.message for f in report.findings]
        (note,) = [n for n in report.notes if "folds the BatchNorm" in n]
        assert note.startswith(f"{folder} folds") and all(s in note for s in norms), note
        pairs = {(layer.lhs.split(" at ")[0], layer.rhs.split(" at ")[0])
                 for layer in report.numeric.layers}
        want = ("batch_norm", "conv") if folder == "rhs" else ("conv", "batch_norm")
        assert want in pairs, pairs
        assert not any(n.startswith("numbers not compared") for n in report.notes)


class _ConvBN(nn.Module):
    def __init__(self, norm: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6) if norm else nn.Identity()
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def _conv_bn(norm: bool, seed: int):
    torch.manual_seed(seed)
    model = _ConvBN(norm).eval()
    if norm:
        with torch.no_grad():
            model.bn.running_mean.uniform_(-1, 1)
            model.bn.running_var.uniform_(0.5, 2)
            model.bn.weight.uniform_(0.5, 1.5)
            model.bn.bias.uniform_(-0.5, 0.5)
    return model, (torch.randn(2, 3, 8, 8),)


def test_a_batch_norm_forgotten_is_no_fold() -> None:
    """A conv with a bias and no BatchNorm after it, holding weights of its own, has the
    shape of a fold: the weights say it is a BatchNorm forgotten, which stays a finding."""
    with_norm = canonicalize_model(torch_frontend.trace(*_conv_bn(True, 0), reference="bn"))
    forgot = canonicalize_model(torch_frontend.trace(*_conv_bn(False, 1), reference="no"))
    report = compare(with_norm, forgot, mode="structure")
    assert [f.code for f in report.findings] == ["missing-op"]
    assert report.findings[0].ops == ("batch_norm",)
    assert any("could hold the BatchNorm" in n and "not lhs's folded" in n
               for n in report.notes), report.notes
    assert not any("folds the BatchNorm" in n for n in report.notes)
    # a fresh BatchNorm (unit statistics) folds into the weights as they are: the same
    # weights without it cannot tell a fold from a BatchNorm forgotten, so it stays one
    torch.manual_seed(0)
    fresh = _ConvBN(True).eval()
    torch.manual_seed(0)
    bare = _ConvBN(False).eval()
    x = (torch.randn(2, 3, 8, 8),)
    report = compare(canonicalize_model(torch_frontend.trace(fresh, x, reference="a")),
                     canonicalize_model(torch_frontend.trace(bare, x, reference="b")))
    assert "missing-op" in [f.code for f in report.findings]


def test_a_fold_with_the_wrong_epsilon_is_caught() -> None:
    """An export whose folded weights are not the model's (a folding with another eps)
    is no fold: the BatchNorm stays missing; read with its own weights, the numbers part
    at the folded conv."""
    model, inputs = _conv_bn(True, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    proto = program.model_proto
    direct = canonicalize_model(torch_frontend.trace(model, inputs, reference="m"))
    exported = canonicalize_model(onnx_frontend.trace_model(
        proto, tuple(t.numpy() for t in inputs), reference="m.onnx"))
    assert compare(direct, exported).equivalent  # the exporter's own fold
    bn = model.bn
    scale = (bn.weight / torch.sqrt(bn.running_var + 1e-3)).detach().numpy()  # eps 1e-3
    layer = next(n for n in exported.graph.nodes if n.op == "conv")
    w_name = exported.graph.param_name(layer.inputs[1])
    weights = dict(exported.weights)
    weights[w_name] = (model.conv.weight.detach().numpy() * scale[:, None, None, None]
                       ).astype("float32")
    wrong = dataclasses.replace(exported, weights=weights)
    report = compare(direct, wrong)
    assert "missing-op" in [f.code for f in report.findings]
    assert not any("folds the BatchNorm" in n for n in report.notes)


def test_hf_resnet_and_its_export_are_equivalent_with_every_batch_norm_folded() -> None:
    """HF transformers' PyTorch ResNet (a model written by others: conv-BatchNorm in the stem,
    every bottleneck and the shortcut), trained statistics, against its default export."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32],
                                       depths=[1, 1], layer_type="bottleneck")
    net = transformers.ResNetModel(config).eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x).last_hidden_state

    model, inputs = Hidden().eval(), (torch.randn(1, 3, 32, 32),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    direct = canonicalize_model(torch_frontend.trace(model, inputs, reference="resnet"))
    exported = canonicalize_model(onnx_frontend.trace_model(
        program.model_proto, (inputs[0].numpy(),), reference="resnet.onnx"))
    report = compare(direct, exported)
    assert report.equivalent, [f.message for f in report.findings]
    (note,) = [n for n in report.notes if "folds the BatchNorm" in n]
    assert "(8 places:" in note and "shortcut.normalization" in note
    assert report.numeric.outputs and all(not s.diverges for s in report.numeric.outputs.values())
