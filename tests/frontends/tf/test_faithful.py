"""The fp64 reference interpreter, run on the traced graph with the model's own weights,
reproduces TensorFlow within 1e-5 relative for every model of the Keras/TF zoo: the proof
that the TF frontend's graphs are complete and faithful (no opaque nodes)."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from specgraph.frontends import tf as tf_frontend  # noqa: E402
from specgraph.interpreter import run  # noqa: E402
from tests.helpers import relative_error  # noqa: E402
from tests.zoo.keras_models import MODELS  # noqa: E402



@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_reproduces_tf_model(name: str) -> None:
    model, inputs = MODELS[name]()
    traced = tf_frontend.trace(model, inputs, reference=name)
    assert traced.framework == "tf"
    assert not [n.attrs["target"] for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    assert set(got) == set(traced.outputs) == set(traced.graph.output_names)
    for key, want in traced.outputs.items():
        assert got[key].shape == want.shape, key
        assert relative_error(got[key], want) < 1e-5, (name, key, relative_error(got[key], want))


def test_xor_example_is_faithful_and_linear_without_activation(repo_root) -> None:
    from specgraph.loading import trace

    for factory, relus in (("correct", 1), ("forgot_activation", 0)):
        traced = trace(f"examples/xor/model_keras.py:{factory}")
        assert traced.graph.input_names == ("x",)
        assert set(traced.graph.output_names) == {"xor_logit", "regression"}
        assert [n.op for n in traced.graph.nodes].count("relu") == relus
        got = run(traced.graph, traced.inputs, traced.weights)
        for key, want in traced.outputs.items():
            assert relative_error(got[key], want) < 1e-5, (factory, key)
