"""A batch norm's momentum, which only training reads, taken from the framework's layer
where the inference program never mentions it (Keras 3, Flax linen and NNX)."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.check import compare_structure

torch = pytest.importorskip("torch")


def _torch_cnn(momentum: float):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False),
                              torch.nn.BatchNorm2d(4, momentum=momentum), torch.nn.ReLU())
    from specgraph.frontends.torch import trace
    return trace(net.eval(), (torch.randn(2, 3, 8, 8),))


def _keras_cnn(momentum: float):
    keras = pytest.importorskip("keras")
    from specgraph.frontends.tf import trace

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, use_bias=False, name="conv")(inp)
    h = keras.layers.BatchNormalization(momentum=momentum, epsilon=1e-5, name="bn")(h)
    model = keras.Model(inp, keras.layers.ReLU(name="relu")(h))
    return trace(model, (np.zeros((2, 8, 8, 3), np.float32),))


def _linen_cnn(momentum: float):
    pytest.importorskip("flax")
    import flax.linen as nn
    import jax
    from specgraph.frontends.jax import trace_linen

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(4, (3, 3), padding="VALID", use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=True, momentum=momentum, epsilon=1e-5)(x)
            return nn.relu(x)

    x = np.zeros((2, 8, 8, 3), np.float32)
    return trace_linen(CNN(), CNN().init(jax.random.PRNGKey(0), x), (x,))


def _nnx_cnn(momentum: float):
    pytest.importorskip("flax")
    from flax import nnx
    from specgraph.frontends.jax import trace_nnx

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.conv = nnx.Conv(3, 4, (3, 3), padding="VALID", use_bias=False, rngs=rngs)
            self.bn = nnx.BatchNorm(4, use_running_average=True, momentum=momentum,
                                    epsilon=1e-5, rngs=rngs)

        def __call__(self, x):
            return nnx.relu(self.bn(self.conv(x)))

    return trace_nnx(CNN(nnx.Rngs(0)), (np.zeros((2, 8, 8, 3), np.float32),))


@pytest.mark.parametrize("other", [_keras_cnn, _linen_cnn, _nnx_cnn],
                         ids=["keras3", "linen", "nnx"])
def test_momentum_is_read_in_pytorchs_convention(other):
    # Keras and Flax keep `momentum` of the old average: 0.99 there is PyTorch's 0.01
    assert compare_structure(_torch_cnn(0.01), other(0.99)).equivalent
    report = compare_structure(_torch_cnn(0.1), other(0.99))
    (finding,) = report.findings
    assert finding.code == "attr-mismatch"
    assert "momentum is 0.1 in lhs" in finding.message and "0.01 in rhs" in finding.message
    assert "changes training" in finding.message


def test_a_scope_takes_the_longest_recorded_path_it_ends_with():
    # an HF Flax model's scopes carry its root module's name; module paths do not
    from specgraph.ir import GraphBuilder
    from specgraph.passes.layer_attrs import with_layer_attrs

    b = GraphBuilder()
    h = b.input("x", (2, 4, 3, 3), "float32")
    for scope in ("Root.bn", "Root.block.bn"):
        stats = [b.param(f"{scope}.{n}", (4,), "float32") for n in ("mean", "var", "w", "b")]
        h = b.add("batch_norm", [h, *stats], shape=(2, 4, 3, 3), dtype="float32", scope=scope)
    b.output("y", h)
    g = with_layer_attrs(b.build(), {"bn": {"momentum": 0.01}, "block.bn": {"momentum": 0.1,
                                                                           "unknown": 1}})
    assert [n.attrs["momentum"] for n in g.nodes] == [0.01, 0.1]
    assert all("unknown" not in n.attrs for n in g.nodes)  # only what the op declares
