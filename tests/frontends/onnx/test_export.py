"""``to_onnx``: every op exports and runs in onnxruntime like the fp64 reference; round trips."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from specgraph.errors import SpecgraphError
from specgraph.interpreter import run
from specgraph.ir import GraphBuilder
from specgraph.frontends.onnx.export import EXPORTERS, UNSUPPORTED, to_onnx
from specgraph.ops import get_spec, registered_ops

OPSETS = (13, 17, 23)


def _ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def _assert_close(got: dict, want: dict, tol: float = 1e-5) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        value, have = np.asarray(value, np.float64), np.asarray(got[key], np.float64)
        assert have.shape == value.shape, key
        scale = max(float(np.max(np.abs(value), initial=0.0)), 1e-30)
        assert np.array_equal(np.isnan(have), np.isnan(value)), key
        finite = ~np.isnan(value)
        err = float(np.max(np.abs(have - value)[finite], initial=0.0)) / scale
        assert err < tol, (key, err)


def _ir_version(opset: int) -> int:
    return 10 if opset > 21 else 8


# --- one graph per op variant ------------------------------------------------------------
def f(*shape):  # standard normal float32 input
    return ("f", shape)


def p(*shape):  # positive float32 input
    return ("p", shape)


def i(high, *shape):  # int64 input in [0, high)
    return ("i", shape, high)


def b(*shape):  # boolean input
    return ("b", shape)


X = f(2, 3, 4)
POOL = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 0, 1, 1), "dilation": (1, 1)}
ATT = (f(1, 4, 5, 8), f(1, 4, 6, 8), f(1, 4, 6, 3))
OP_CASES: dict[str, list[tuple[list, dict]]] = {
    "add": [([X, f(4)], {})], "sub": [([X, X], {})], "mul": [([X, f(3, 1)], {})],
    "maximum": [([X, X], {})], "minimum": [([X, X], {})], "pow": [([p(2, 3), f(2, 3)], {})],
    "div": [([X, p(4)], {}), ([X, p(4)], {"rounding": "floor"}),
            ([X, p(4)], {"rounding": "trunc"}), ([i(9, 6), ("d", (6,))], {}),
            ([("n", (8,)), ("d", (8,))], {"rounding": "floor"}),
            ([("n", (8,)), ("d", (8,))], {"rounding": "trunc"})],
    **{op: [([X], {})] for op in ("abs", "neg", "exp", "erf", "erfc", "sin", "cos", "floor",
                                  "ceil", "sign", "identity", "relu", "sigmoid", "tanh",
                                  "silu", "hardswish", "mish")},
    **{op: [([p(2, 3)], {})] for op in ("log", "sqrt", "rsqrt", "reciprocal")},
    "logical_not": [([b(5)], {})],
    **{op: [([X, X], {})] for op in ("equal", "not_equal", "less", "less_equal", "greater",
                                     "greater_equal")},
    "logical_and": [([b(5), b(5)], {})], "logical_or": [([b(5), b(5)], {})],
    "where": [([b(2, 3, 4), X, f(4)], {})],
    "prelu": [([f(2, 3, 4, 5), f(3, 1, 1)], {}), ([X, f(1)], {})],
    "clip": [([X], {"min": -0.5, "max": 0.7}), ([X], {"max": 0.1})],
    "cast": [([X], {"dtype": "int64"}), ([i(5, 3)], {"dtype": "float32"})],
    "gelu": [([X], {}), ([X], {"approximate": "tanh"})],
    "softplus": [([f(50)], {"beta": 2.0, "threshold": 1.0}), ([f(50)], {"threshold": 0.5})],
    "leaky_relu": [([X], {"alpha": 0.2})], "elu": [([X], {"alpha": 0.7})],
    "hardsigmoid": [([X], {"alpha": 0.2, "beta": 0.4})],
    "softmax": [([X], {"axis": 1})], "log_softmax": [([X], {"axis": 2})],
    "dropout": [([X], {"p": 0.3})],
    "linear": [([f(2, 3), f(3, 5), f(5)], {}), ([X, f(4, 5)], {"bias": False}),
               ([X, f(4, 5), f(5)], {})],
    "matmul": [([X, f(4, 2)], {})], "einsum": [([X, f(4, 2)], {"equation": "bij,jk->bik"})],
    "conv": [([f(1, 4, 7, 6), f(6, 2, 3, 3), f(6)],
              {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2})],
    "conv_transpose": [([f(1, 4, 5), f(4, 3, 3), f(3)],
                        {"stride": (2,), "padding": (1, 0), "dilation": (1,),
                         "output_padding": (1,)})],
    "max_pool": [([f(1, 2, 7, 8)], {**POOL, "ceil_mode": True})],
    "avg_pool": [([f(1, 2, 7, 8)], {**POOL, "ceil_mode": True, "count_include_pad": False}),
                 ([f(1, 2, 7, 8)], {**POOL, "divisor": 4})],
    "resize": [([f(1, 2, 5, 6)], {"axes": (2, 3), "sizes": (10, 9), "mode": "linear",
                                  "coordinates": "half_pixel", "steps": (0.5, 6 / 9)}),
               ([f(1, 2, 5, 6)], {"axes": (2, 3), "sizes": (9, 11), "mode": "cubic",
                                  "coordinates": "align_corners", "steps": (5 / 9, 6 / 11)}),
               ([f(1, 2, 7, 6)], {"axes": (2, 3), "sizes": (10, 9), "mode": "cubic",
                                  "coordinates": "half_pixel", "steps": (1 / 1.5, 1 / 1.5),
                                  "cubic_coeff": -0.5, "exclude_outside": True})],
    "adaptive_avg_pool": [([f(1, 2, 5, 6)], {"output_size": (1, 1)}),
                          ([f(1, 2, 6, 6)], {"output_size": (3, 2)}),
                          ([f(1, 2, 5, 7)], {"output_size": (2, 3)})],
    "adaptive_max_pool": [([f(1, 2, 5, 7)], {"output_size": (2, 3)}),
                          ([f(1, 2, 4, 4)], {"output_size": (1, 1)})],
    "batch_norm": [([f(2, 3, 4), f(3), p(3), f(3), f(3)], {"eps": 1e-3}),
                   ([f(2, 3, 4), f(3), p(3)], {"scale": False, "bias": False})],
    "layer_norm": [([X, f(3, 4), f(3, 4)], {"axis": 1}), ([X], {"axis": 2, "scale": False,
                                                               "bias": False})],
    "group_norm": [([f(2, 4, 3), f(4), f(4)], {"num_groups": 2, "eps": 1e-4}),
                   ([f(2, 4, 3)], {"num_groups": 4, "scale": False, "bias": False})],
    "rms_norm": [([X, f(4)], {"axis": 2, "eps": 1e-6}), ([X], {"axis": 1, "eps": 1e-5,
                                                             "scale": False})],
    "weight_norm": [([f(6, 4, 5), f(1, 1, 5)], {"axes": (0, 1)})],
    "embedding": [([i(7, 2, 3), f(7, 4)], {})],
    "attention": [(list(ATT), {"scale": 0.3}), (list(ATT), {"scale": 0.3, "causal": True}),
                  ([*ATT, b(5, 6)], {"scale": 0.5, "has_mask": True}),
                  ([*ATT, f(1, 1, 5, 6)], {"scale": 0.5, "has_mask": True}),
                  ([f(1, 4, 5, 8), f(1, 2, 6, 8), f(1, 2, 6, 3)], {"scale": 0.3})],
    "rotary_embedding": [([f(2, 6, 3, 8)], {"theta": 10000.0, "dim": 8, "axis": 1}),
                         ([f(2, 3, 5, 10)], {"theta": 500.0, "dim": 6, "axis": 2,
                                             "layout": "interleaved"}),
                         ([f(4, 2, 6)], {"theta": 100.0, "dim": 4, "axis": 0})],
    "reshape": [([X], {"shape": (4, 6)})], "transpose": [([X], {"perm": (2, 0, 1)})],
    "concat": [([X, f(2, 1, 4)], {"axis": 1})], "split": [([X], {"axis": 2, "sizes": (1, 3)})],
    "slice": [([X], {"axes": (2, 1), "starts": (3, 0), "ends": (-5, 3), "steps": (-2, 2)})],
    "gather": [([X, i(3, 2)], {"axis": 1})], "squeeze": [([f(2, 1, 3)], {"axes": (1,)})],
    "unsqueeze": [([f(2, 3)], {"axes": (0, 3)})], "expand": [([f(3, 1)], {"shape": (2, 3, 4)})],
    "tile": [([f(2, 3)], {"repeats": (2, 1)})], "flip": [([X], {"axes": (0, 2)})],
    "pad": [([X], {"pads": (0, 1, 2, 0, -1, 1), "value": 1.5}),
            ([X], {"pads": (0, 0, 1, 0, 0, 2), "mode": "reflect"}),
            ([X], {"pads": (0, 0, 1, 0, 0, 2), "mode": "edge"})],
    "trilu": [([X], {"upper": True, "k": 1}), ([X], {"upper": False, "k": -1})],
    "full": [([], {"shape": (2, 3), "value": 1.5, "dtype": "float32"})],
    "arange": [([], {"start": 1, "limit": 8, "delta": 2, "dtype": "int64"}),
               ([], {"start": 0.5, "limit": 2.0, "delta": 0.25, "dtype": "float32"})],
    **{op: [([X], {"axes": (0, 2), "keepdims": True}), ([X], {})]
       for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")},
    "reduce_var": [([X], {"axes": (1,), "correction": 1}), ([X], {"correction": 0})],
    "argmax": [([X], {"axis": 1})], "argmin": [([X], {"axis": 2, "keepdims": True})],
    "argsort": [([X], {"axis": 1}), ([X], {"axis": 2, "descending": True})],
    "cumsum": [([X], {"axis": 1})],
}


def _array(spec, rng: np.random.Generator) -> np.ndarray:
    kind, shape = spec[0], spec[1]
    if kind == "f":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "p":
        return (np.abs(rng.standard_normal(shape)) + 0.5).astype(np.float32)
    if kind == "i":
        return rng.integers(0, spec[2], shape).astype(np.int64)
    if kind in ("n", "d"):  # signed integers (divisors never zero)
        values = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)
        return values.astype(np.int64)
    return rng.random(shape) > 0.3


def _single_op_graph(op: str, specs: list, attrs: dict):
    rng = np.random.default_rng(0)
    arrays = [_array(s, rng) for s in specs]
    b = GraphBuilder(op)
    values = [b.input(f"in{k}", a.shape, str(a.dtype) if a.dtype != bool else "bool")
              for k, a in enumerate(arrays)]
    spec = get_spec(op)
    normalized = spec.normalize_attrs(attrs)
    reference = spec.reference(*[a.astype(np.float64) if a.dtype == np.float32 else a
                                 for a in arrays], **normalized)
    results = reference if isinstance(reference, tuple) else (reference,)
    dtypes = ["float32" if r.dtype == np.float64 else str(r.dtype) for r in map(np.asarray,
                                                                              results)]
    outs = b.add_multi(op, values, attrs, outputs=[(np.shape(r), d)
                                                   for r, d in zip(results, dtypes)],
                       scope="block.0")
    for k, value in enumerate(outs):
        b.output(f"out{k}", value)
    return b.build(), {f"in{k}": a for k, a in enumerate(arrays)}


def test_every_registered_op_exports_or_is_declared_unsupported() -> None:
    ops = set(registered_ops())
    assert ops - set(EXPORTERS) == set(UNSUPPORTED)
    assert not UNSUPPORTED & set(EXPORTERS) and set(EXPORTERS) <= ops
    assert set(OP_CASES) == set(EXPORTERS)  # every rule is run below


CASES = [pytest.param(op, k, opset, id=f"{op}-{k}-opset{opset}")
         for op in sorted(OP_CASES) for k in range(len(OP_CASES[op])) for opset in OPSETS]


@pytest.mark.parametrize(("op", "variant", "opset"), CASES)
def test_op_runs_in_onnxruntime_like_the_reference(op: str, variant: int, opset: int) -> None:
    specs, attrs = OP_CASES[op][variant]
    graph, inputs = _single_op_graph(op, specs, attrs)
    model = to_onnx(graph, opset=opset, ir_version=_ir_version(opset))
    _assert_close(_ort(model, inputs), run(graph, inputs, {}))


def test_opaque_has_no_rule_and_says_so() -> None:
    b = GraphBuilder("g")
    x = b.input("x", (2,), "float32")
    b.output("y", b.add("opaque", [x], {"target": "aten.weird.default"}, shape=(2,),
                        dtype="float32", scope="head"))
    with pytest.raises(SpecgraphError, match=r"no export rule for op 'opaque' "
                                             r"\(aten.weird.default\) at head"):
        to_onnx(b.build())
    with pytest.raises(SpecgraphError, match="opset 13 or newer"):
        to_onnx(b.build(), opset=11)


def test_parameters_become_inputs_without_weights() -> None:
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "float32")
    w = b.param("fc.weight", (3, 4), "float32")
    b.output("y", b.add("linear", [x, w], {"bias": False}, shape=(2, 4), dtype="float32"))
    model = to_onnx(b.build())
    assert [i.name for i in model.graph.input] == ["x", "fc.weight"]
    assert (model.ir_version, model.opset_import[0].version) == (8, 17)
    with pytest.raises(SpecgraphError, match="no weight for parameter 'fc.weight'"):
        to_onnx(b.build(), {})


# --- whole models ------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _torch_trace(name: str):
    torch_frontend = pytest.importorskip("specgraph.frontends.torch")
    from tests.zoo.torch_models import MODELS

    model, inputs = MODELS[name]()
    return torch_frontend.trace(model, inputs, reference=name)


def _zoo() -> list[str]:
    pytest.importorskip("torch")
    from tests.zoo.torch_models import MODELS

    return sorted(MODELS)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("name", _zoo())
def test_torch_zoo_models_export_and_match_the_reference(name: str, opset: int) -> None:
    traced = _torch_trace(name)
    model = to_onnx(traced.graph, traced.weights, opset=opset)
    _assert_close(_ort(model, dict(traced.inputs)),
                  run(traced.graph, traced.inputs, traced.weights))


def test_onnx_graph_onnx_round_trip() -> None:
    from specgraph.frontends import onnx as onnx_frontend

    rng = np.random.default_rng(3)
    inits = {"W": rng.standard_normal((6, 8)), "b": rng.standard_normal(6),
             "K": rng.standard_normal((4, 1, 3)), "s": rng.standard_normal(6),
             "t": rng.standard_normal(6)}
    N = helper.make_node
    nodes = [N("Gemm", ["x", "W", "b"], ["h"], transB=1, name="/fc/Gemm"),
             N("Relu", ["h"], ["r"], name="/act/Relu"),
             N("LayerNormalization", ["r", "s", "t"], ["n"], epsilon=1e-6, name="/norm/LN"),
             N("Unsqueeze", ["n", "one"], ["u"], name="/conv/Unsqueeze"),
             N("Conv", ["u", "K"], ["c"], pads=[1, 1], name="/conv/Conv"),
             N("Softmax", ["c"], ["y"], axis=1, name="/head/Softmax")]
    arrays = [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits.items()]
    arrays.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    graph = helper.make_graph(nodes, "round", [helper.make_tensor_value_info(
        "x", onnx.TensorProto.FLOAT, [3, 8])], [onnx.ValueInfoProto(name="y")],
        initializer=arrays)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=8)
    first = onnx_frontend.trace_model(original, reference="round")
    exported = to_onnx(first.graph, first.weights)
    _assert_close(_ort(exported, dict(first.inputs)), first.outputs)
    second = onnx_frontend.trace_model(exported, dict(first.inputs), reference="again")
    assert [(n.op, n.scope, dict(n.attrs)) for n in second.graph.nodes] == \
        [(n.op, n.scope, dict(n.attrs)) for n in first.graph.nodes]
    for name, weight in first.weights.items():
        np.testing.assert_array_equal(second.weights[name], weight)
