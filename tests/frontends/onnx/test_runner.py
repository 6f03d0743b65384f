"""What the onnxruntime runner alone does: the session cache, no gradients, storage dtypes,
devices, whole-graph runs. Every case's forward (with what onnxruntime computes differently)
is in ``tests/frontends/test_runner_conformance.py``."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from specgraph.frontends.onnx.runner import OnnxRunner  # noqa: E402
from specgraph.interpreter import run as interpret  # noqa: E402
from specgraph.ir import GraphBuilder, Node, Value  # noqa: E402
from specgraph.numeric.runner import Context, RunnerError  # noqa: E402
from tests.frontends.runner_checks import CASES, case_inputs, case_node  # noqa: E402


@pytest.fixture(scope="module")
def runner() -> OnnxRunner:
    return OnnxRunner(Context(device="cpu", mode="eager", dtype="float32"))


def test_identical_nodes_share_one_session() -> None:
    runner = OnnxRunner(Context())
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2

    def relu(shape: tuple[int, ...]) -> Node:
        return Node("relu", (Value(shape, "float32"),), (Value(shape, "float32"),))

    first, second = runner.run(relu((2, 3)), [x]), runner.run(relu((2, 3)), [-x])
    assert runner.sessions_built == 1
    np.testing.assert_array_equal(first[0], np.maximum(x, 0))
    np.testing.assert_array_equal(second[0], np.maximum(-x, 0))
    runner.run(relu((6,)), [x.ravel()])
    assert runner.sessions_built == 2


def test_vjp_raises(runner: OnnxRunner) -> None:
    case = next(c for c in CASES if c.op == "tanh")
    arrays = case_inputs(case)
    assert not runner.differentiable
    with pytest.raises(RunnerError, match="no gradients"):
        runner.vjp(case_node(case, arrays), arrays)


def test_outputs_keep_declared_dtypes(runner: OnnxRunner) -> None:
    a = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    node = Node("greater", (Value((3,), "float32"), Value((3,), "float32")),
                (Value((3,), "bool"),))
    (out,) = runner.run(node, [a, np.zeros(3, np.float32)])
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, a > 0)


def test_float16_storage() -> None:
    runner = OnnxRunner(Context(dtype="float16"))
    x = runner.put(np.linspace(-2, 2, 6).reshape(2, 3), "float32")
    ids = runner.put(np.array([1, 0]), "int64")
    assert x.dtype == np.float16 and ids.dtype == np.int64
    node = Node("gather", (Value((2, 3), "float32"), Value((2,), "int64")),
                (Value((2, 3), "float32"),), {"axis": 0})
    (out,) = runner.run(node, [x, ids])
    assert out.dtype == np.float16 and runner.fetch(out).dtype == np.float32
    np.testing.assert_array_equal(runner.fetch(out), runner.fetch(x)[[1, 0]])


@pytest.mark.gpu
def test_cuda_runs_a_node() -> None:
    import onnxruntime as ort
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime has no CUDA execution provider")
    runner = OnnxRunner(Context(device="cuda"))
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    (out,) = runner.run(Node("tanh", (Value((8,), "float32"),), (Value((8,), "float32"),)), [x])
    np.testing.assert_allclose(out, np.tanh(x), rtol=1e-6)


def test_bfloat16_and_missing_cuda_are_one_sentence_errors() -> None:
    with pytest.raises(RunnerError, match="bfloat16.*--dtype float32"):
        OnnxRunner(Context(dtype="bfloat16"))
    import onnxruntime as ort
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RunnerError, match="no CUDA execution provider"):
            OnnxRunner(Context(device="cuda"))
        assert OnnxRunner(Context(device="auto")).context.device == "cpu"


def _block():
    """linear -> layer_norm -> gelu -> linear + residual, softmax; returns graph, values."""
    b = GraphBuilder("block")
    x = b.input("x", (4, 8), "float32")
    w1, w2 = b.param("fc1.weight", (8, 16), "float32"), b.param("fc2.weight", (16, 8), "float32")
    bias = b.param("fc1.bias", (16,), "float32")
    h = b.add("linear", [x, w1, bias], shape=(4, 16), dtype="float32", scope="fc1")
    n = b.add("layer_norm", [h], {"axis": 1, "scale": False, "bias": False},
              shape=(4, 16), dtype="float32", scope="norm")
    g = b.add("gelu", [n], shape=(4, 16), dtype="float32", scope="act")
    o = b.add("linear", [g, w2], {"bias": False}, shape=(4, 8), dtype="float32", scope="fc2")
    r = b.add("add", [o, x], shape=(4, 8), dtype="float32")
    y = b.add("softmax", [r], {"axis": 1}, shape=(4, 8), dtype="float32")
    b.output("y", y)
    return b.build(), (x, h, n, g, r)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_run_graph_matches_interpreter(mode: str) -> None:
    graph, (x, h, n, g, r) = _block()
    rng = np.random.default_rng(0)
    weights = {k: rng.standard_normal(v.shape).astype(np.float32)
               for k, v in graph.params.items()}
    inputs = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    seen: dict[Value, np.ndarray] = {}

    def capture(node: Node, outs: tuple[np.ndarray, ...]) -> None:
        seen.update(zip(node.outputs, outs))

    want = interpret(graph, inputs, weights, on_node=capture)
    runner = OnnxRunner(Context(mode=mode))
    got = runner.run_graph(graph, weights, inputs, keep=[h, n, g, r, x])
    assert runner.sessions_built == 1
    assert set(got) == {graph.outputs[0], h, n, g, r, x}
    np.testing.assert_allclose(got[graph.outputs[0]], want["y"], rtol=1e-5, atol=1e-6)
    for v in (h, n, g, r):
        assert got[v].dtype == np.float32 and got[v].shape == v.shape
        np.testing.assert_allclose(got[v], seen[v], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[x], inputs["x"])


def test_run_graph_agrees_with_node_by_node(runner: OnnxRunner) -> None:
    graph, (x, h, n, g, r) = _block()
    rng = np.random.default_rng(1)
    weights = {k: rng.standard_normal(v.shape).astype(np.float32)
               for k, v in graph.params.items()}
    xs = rng.standard_normal((4, 8)).astype(np.float32)
    env: dict[Value, np.ndarray] = {x: xs, **{v: weights[k] for k, v in graph.params.items()}}
    for node in graph.nodes:
        env.update(zip(node.outputs, runner.run(node, [env[v] for v in node.inputs])))
    got = runner.run_graph(graph, weights, [xs], keep=[n])
    np.testing.assert_allclose(got[n], env[n], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[graph.outputs[0]], env[graph.outputs[0]], rtol=1e-6,
                               atol=1e-7)


def test_run_graph_keeps_params_constants_and_inputs(runner: OnnxRunner) -> None:
    b = GraphBuilder("scale")
    x = b.input("x", (3,), "float32")
    w = b.param("w", (3,), "float32")
    c = b.constant(np.array([1.0, 2.0, 3.0]), "float32")
    y = b.add("mul", [b.add("add", [x, c], shape=(3,), dtype="float32"), w],
              shape=(3,), dtype="float32")
    b.output("y", y)
    b.output("x", x)
    graph = b.build()
    xs, ws = np.array([1.0, -1.0, 0.5], np.float32), np.array([2.0, 3.0, 4.0], np.float32)
    got = runner.run_graph(graph, {"w": ws}, {"x": xs}, keep=[w, c, x])
    np.testing.assert_array_equal(got[y], (xs + [1, 2, 3]) * ws)
    np.testing.assert_array_equal(got[w], ws)
    np.testing.assert_array_equal(got[c], [1, 2, 3])
    np.testing.assert_array_equal(got[x], xs)
    with pytest.raises(RunnerError, match="input 'x'"):
        runner.run_graph(graph, {"w": ws}, {}, keep=[])
