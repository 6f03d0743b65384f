"""Implicit rank promotion is canonical: JAX's reshape adding leading size-1 axes before a
broadcasting op is dropped, so it diffs equal to PyTorch's broadcasting, which records none."""

from __future__ import annotations

import flax.linen as fnn
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn

from specgraph.check import compare_structure
from specgraph.frontends import jax as jax_frontend
from specgraph.frontends import torch as torch_frontend
from specgraph.interpreter import run
from specgraph.ir import Graph, GraphBuilder, Value
from specgraph.passes import canonicalize

RNG = np.random.default_rng(0)
POS = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 3)).astype(np.float32)
X = RNG.standard_normal((2, 4, 8)).astype(np.float32)


class TorchPositions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.tensor(POS))
        self.dense = nn.Linear(8, 3, bias=False)
        with torch.no_grad():
            self.dense.weight.copy_(torch.tensor(W.T))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(torch.relu(x + self.pos))  # (2, 4, 8) + (4, 8)


class LinenPositions(fnn.Module):
    @fnn.compact
    def __call__(self, x):
        pos = self.param("pos", lambda key: jnp.asarray(POS))
        return fnn.Dense(3, use_bias=False, name="dense")(fnn.relu(x + pos))


def test_rank_promotion_in_jax_diffs_equal_to_torch_broadcasting() -> None:
    lhs = torch_frontend.trace(TorchPositions().eval(), (torch.tensor(X),), reference="torch")
    rhs = jax_frontend.trace_linen(LinenPositions(), {"params": {"pos": POS,
                                                                 "dense": {"kernel": W}}},
                                   (X,), reference="jax")
    reshape = [n for n in rhs.graph.nodes if n.op == "reshape"]
    assert [n.outputs[0].shape for n in reshape] == [(1, 4, 8)]  # what JAX records
    assert not any(n.op == "reshape" for n in lhs.graph.nodes)  # what PyTorch records
    report = compare_structure(lhs, rhs)
    assert report.equivalent, [f.message for f in report.findings]


def _graph(build) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (2, 4, 8), "float32")
    p = b.param("p", (4, 8), "float32")
    up = b.add("reshape", [p], {"shape": (1, 4, 8)}, shape=(1, 4, 8), dtype="float32")
    for name, value in build(b, x, up).items():
        b.output(name, value)
    return b.build()


def _reshapes(g: Graph) -> int:
    return sum(n.op == "reshape" for n in g.nodes)


def _same(before: Graph, after: Graph) -> None:
    weights = {"p": RNG.standard_normal((4, 8))}
    want = run(before, [X.astype(np.float64)], weights)
    got = run(after, [X.astype(np.float64)], {k: weights[k] for k in after.params})
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def _add(b: GraphBuilder, *inputs: Value) -> Value:
    return b.add("add", list(inputs), shape=(2, 4, 8), dtype="float32")


def test_promotion_read_only_by_broadcasting_ops_is_dropped() -> None:
    g = _graph(lambda b, x, up: {"y": b.add("where", [b.add("greater", [x, up], shape=(
        2, 4, 8), dtype="bool"), x, up], shape=(2, 4, 8), dtype="float32"),
        "z": _add(b, up, x)})
    c = canonicalize(g)
    assert _reshapes(c) == 0
    _same(g, c)


def test_promotion_kept_where_the_leading_axes_show() -> None:
    cases = {
        "unary op": lambda b, x, up: {"y": b.add("relu", [up], shape=(1, 4, 8),
                                                 dtype="float32")},
        "graph output": lambda b, x, up: {"y": _add(b, x, up), "up": up},
        "matmul": lambda b, x, up: {"y": _add(b, x, up), "m": b.add(
            "matmul", [up, b.input("w", (8, 2), "float32")], shape=(1, 4, 2),
            dtype="float32")},
        "no wider operand": lambda b, x, up: {"y": b.add("add", [up, up], shape=(1, 4, 8),
                                                         dtype="float32")},
    }
    for name, build in cases.items():
        assert _reshapes(canonicalize(_graph(build))) == 1, name


def test_a_dropped_promotion_leaves_its_native_reshaped() -> None:
    """The native value of the [1, 4, 8] promotion stands, reshaped, for the [4, 8] value
    that replaces it once the reshape is dropped; the sum keeps its own."""
    def build(b: GraphBuilder, x: Value, up: Value) -> dict[str, Value]:
        y = _add(b, x, up)
        b.native(up, "promoted")
        b.native(y, "sum")
        return {"y": y}

    g = canonicalize(_graph(build))
    assert _reshapes(g) == 0
    assert {v.shape: (n.key, n.shape) for v, n in g.natives.items()} == {
        (2, 4, 8): ("sum", None), (4, 8): ("promoted", (4, 8))}
