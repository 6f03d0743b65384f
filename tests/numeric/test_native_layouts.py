"""A PyTorch CNN against its Flax port: Flax's activations are channels-last and its kernels
(in, out), so each of rhs's values is a transposed view of its own array. lhs's values wait
in the store laid out as rhs's will be, and every pair is read in one memory order (two
orders are read in blocks through buffers, at a third of the speed): the comparison finds
the same agreement, layer by layer, as before."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flax")

from specgraph.align import align  # noqa: E402
from specgraph.frontends import jax as jax_frontend  # noqa: E402
from specgraph.frontends import torch as torch_frontend  # noqa: E402
from specgraph.numeric import stats  # noqa: E402
from specgraph.numeric.compare import compare_numeric  # noqa: E402
from specgraph.numeric.layouts import RhsOrders  # noqa: E402
from specgraph.numeric.options import NumericOptions  # noqa: E402
from specgraph.numeric.pairing import pair  # noqa: E402
from specgraph.numeric.store import Store  # noqa: E402
from specgraph.passes import canonicalize_model  # noqa: E402

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
CONV = (0.3 * RNG.standard_normal((32, 3, 3, 3))).astype(np.float32)
HEAD = (0.1 * RNG.standard_normal((128, 32 * 16 * 16))).astype(np.float32)


def _torch():
    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 32, 3, padding=1, bias=False)
            self.head = torch.nn.Linear(32 * 16 * 16, 128, bias=False)

        def forward(self, x):
            h = torch.nn.functional.max_pool2d(torch.tanh(self.conv(x)), 2)
            return self.head(h.permute(0, 2, 3, 1).reshape(x.shape[0], -1))

    m = CNN()
    with torch.no_grad():
        m.conv.weight.copy_(torch.from_numpy(CONV))
        m.head.weight.copy_(torch.from_numpy(HEAD))
    return m, (torch.from_numpy(IMAGE),)


def _flax():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.max_pool(jnp_tanh(nn.Conv(32, (3, 3), padding=1, use_bias=False,
                                             name="conv")(x)), (2, 2), (2, 2))
            return nn.Dense(128, use_bias=False, name="head")(h.reshape(x.shape[0], -1))

    from jax.numpy import tanh as jnp_tanh

    variables = {"params": {"conv": {"kernel": CONV.transpose(2, 3, 1, 0)},
                            "head": {"kernel": HEAD.T}}}
    return CNN(), variables, (IMAGE.transpose(0, 2, 3, 1),)


def test_every_pair_is_read_in_one_memory_order(monkeypatch):
    lhs = canonicalize_model(torch_frontend.trace(*_torch(), reference="torch"))
    rhs = canonicalize_model(jax_frontend.trace_linen(*_flax(), reference="flax"))
    pairing = pair(align(lhs.graph, rhs.graph))
    orders = RhsOrders(lhs.graph, rhs.graph, pairing.values, rhs)
    conv_out = next(v for node in lhs.graph.nodes if node.op == "conv" for v in node.outputs)
    assert orders(("f", conv_out)) == (0, 2, 3, 1)  # NCHW seen through NHWC memory
    assert orders(("grad", "conv.weight")) == (2, 3, 1, 0)  # OIHW through HWIO
    # a dense kernel's canonical layout is (in, out), Flax's own: PyTorch's (out, in)
    # gradient is the transposed view there, to be laid out in C order
    assert orders(("grad", "head.weight")) == (0, 1)

    two_orders = []
    measured = []
    real_flat_pair = stats._flat_pair

    def flat_pair(a, b):
        paired = real_flat_pair(a, b)
        if a.size >= Store.MOVED:
            measured.append(a.shape)
            if paired is None:
                two_orders.append(a.shape)
        return paired

    monkeypatch.setattr(stats, "_flat_pair", flat_pair)
    from specgraph.check import backends

    options = NumericOptions(native=True)
    findings, result = compare_numeric(lhs, rhs, pairing, backends(lhs, rhs, options), options)
    assert findings == []
    assert len(measured) >= 6  # the conv's and the tanh's values and gradients, the kernels'
    assert two_orders == []


def test_values_spilled_and_mapped_back_measure_as_values_kept_in_memory(monkeypatch):
    """With no memory budget every lhs value goes to the spill file, laid out as rhs's; the
    large ones (the head's 4 MiB weight gradient) come back as the file's own pages. Every
    layer, output and gradient measures as when lhs's values are kept in memory."""
    from specgraph.check import backends

    lhs = canonicalize_model(torch_frontend.trace(*_torch(), reference="torch"))
    rhs = canonicalize_model(jax_frontend.trace_linen(*_flax(), reference="flax"))
    pairing = pair(align(lhs.graph, rhs.graph))
    mapped = []
    real_mapped = Store._mapped

    def spy(self, offset):
        out = real_mapped(self, offset)
        if out is not None:
            mapped.append(out.shape)
        return out

    monkeypatch.setattr(Store, "_mapped", spy)
    seen = []
    for budget in (64 << 20, 0):
        options = NumericOptions(native=True, store_budget=budget)
        findings, result = compare_numeric(lhs, rhs, pairing, backends(lhs, rhs, options),
                                           options)
        assert findings == []
        seen.append(result.to_dict())
    assert (8192, 128) in mapped or (128, 8192) in mapped
    assert seen[0] == seen[1]
