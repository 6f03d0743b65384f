"""Golden equivalence: the same four models written idiomatically in PyTorch, plain JAX,
Flax linen, Flax NNX and Keras 3 canonicalize to isomorphic graphs (ops, attributes,
shapes and wiring), and each canonical graph, run by the fp64 interpreter with the model's
own weights, reproduces that framework's output."""

from __future__ import annotations

import functools

import pytest

from specgraph.graph_nx import describe, isomorphic
from specgraph.interpreter import run
from specgraph.passes import canonicalize_model
from tests.helpers import relative_error

pytest.importorskip("jax")
pytest.importorskip("tensorflow")

# golden name -> (torch zoo key, JAX zoo prefix, Keras zoo key)
GOLDEN = {
    "mlp": ("mlp", "mlp", "mlp"),
    "cnn": ("cnn", "cnn", "cnn_golden"),
    "transformer_block": ("transformer_block", "preln", "preln_block"),
    "embedding_classifier": ("embedding_classifier", "embed", "embedding_classifier"),
}
VARIANTS = ["jax", "linen", "nnx", "keras"]


@functools.cache
def _canonical(framework: str, key: str):
    if framework == "torch":
        from specgraph.frontends import torch as frontend
        from tests.zoo.torch_models import MODELS

        traced = frontend.trace(*MODELS[key](), reference=key)
    elif framework == "keras":
        from specgraph.frontends import tf as frontend
        from tests.zoo.keras_models import MODELS

        traced = frontend.trace(*MODELS[key](), reference=key)
    else:
        from tests.zoo import jax_models

        traced = jax_models.trace(key)
    return canonicalize_model(traced)


def _variant(golden: str, variant: str):
    _, jax_prefix, keras_key = GOLDEN[golden]
    if variant == "keras":
        return _canonical("keras", keras_key)
    return _canonical("jax", f"{jax_prefix}/{variant}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_canonical_graphs_are_isomorphic_to_pytorch(golden: str, variant: str) -> None:
    reference = _canonical("torch", GOLDEN[golden][0]).graph
    other = _variant(golden, variant).graph
    assert not [n for n in other.nodes if n.op == "opaque"]
    assert isomorphic(reference, other), "\n".join(
        ["pytorch:", *describe(reference), f"{variant}:", *describe(other)])


@pytest.mark.parametrize("variant", ["torch", *VARIANTS])
@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_canonical_graph_reproduces_the_framework(golden: str, variant: str) -> None:
    traced = (_canonical("torch", GOLDEN[golden][0]) if variant == "torch"
              else _variant(golden, variant))
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        err = relative_error(got[key], want)
        assert err < 1e-5, (key, err)


def test_layouts_are_recorded_where_the_boundary_moved() -> None:
    keras_cnn = _canonical("keras", "cnn_golden")
    assert dict(keras_cnn.input_layouts) == {keras_cnn.graph.input_names[0]: (0, 3, 1, 2)}
    assert keras_cnn.graph.inputs[0].shape == (2, 3, 16, 16)
    linen = _canonical("jax", "preln/linen")
    kernels = {k: v for k, v in linen.param_layouts.items() if k.endswith("kernel")}
    assert kernels and all(step[0][0] == "reshape" for step in kernels.values())


@pytest.mark.parametrize("variant", ["torch", *VARIANTS])
@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_canonical_graphs_are_fixed_points_of_the_passes(golden: str, variant: str) -> None:
    """No pass changes a canonical graph any more: two passes that undo each other (the
    scalars and transposes passes did, around Keras' Rescaling) end where the run happens
    to stop, and the canonical form would hang on the passes' order."""
    from specgraph.passes import DEFAULT_PASSES
    from specgraph.passes.manager import FINISHING_PASSES

    graph = (_canonical("torch", GOLDEN[golden][0]) if variant == "torch"
             else _variant(golden, variant)).graph
    assert not [p.name for p in (*DEFAULT_PASSES, *FINISHING_PASSES) if p(graph).modified]
