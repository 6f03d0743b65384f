"""A PyTorch model exported with torch.onnx.export(dynamo=True), with and without the
exporter's optimizer, canonicalizes to the same graph as the direct PyTorch trace.

The one exception is inherent: the optimizer folds BatchNorm into the preceding Conv's
weights, so the optimized graph has no batch_norm (a diff reports it as missing)."""

from __future__ import annotations

import warnings

import pytest
import torch

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
