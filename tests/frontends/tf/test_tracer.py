"""TF frontend behaviour: parameter names, scopes, canonical layouts, SAME padding, errors."""

from __future__ import annotations

import functools
import inspect
import re
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import keras  # noqa: E402

from specgraph.errors import FactoryError, TraceError  # noqa: E402
from specgraph.frontends import tf as tf_frontend  # noqa: E402
from specgraph.interpreter import run  # noqa: E402
from tests.zoo import keras_models  # noqa: E402
from tests.zoo.keras_models import MODELS  # noqa: E402


@functools.cache
def _trace(name: str):
    model, inputs = MODELS[name]()
    return model, tf_frontend.trace(model, inputs, reference=name)


def _check_faithful(traced, tol: float = 1e-5) -> None:
    assert not [n for n in traced.graph.nodes if n.op == "opaque"]
    got = run(traced.graph, traced.inputs, traced.weights)
    for key, want in traced.outputs.items():
        np.testing.assert_allclose(got[key], want, rtol=tol, atol=tol * np.abs(want).max())


def _node(traced, scope: str, op: str):
    return next(n for n in traced.graph.nodes if n.scope == scope and n.op == op)


def _weights(model, path: str) -> np.ndarray:
    return next(v.numpy() for v in model.weights if (getattr(v, "path", None) or v.name)
                .split(":")[0].endswith(path))


# --- names and scopes ----------------------------------------------------------------------
def test_params_are_variable_paths_joined_with_dots() -> None:
    model, traced = _trace("mlp")
    assert list(traced.graph.params) == ["fc1.kernel", "fc1.bias", "fc2.kernel", "fc2.bias",
                                         "fc3.kernel", "fc3.bias"]
    np.testing.assert_array_equal(traced.weights["fc1.kernel"], _weights(model, "fc1/kernel"))
    assert traced.graph.params["fc1.kernel"].shape == (6, 16)  # Dense is [in, out] already


@pytest.mark.parametrize(("name", "expected"), [
    ("preln_block", {"ln1.gamma", "attn.query.kernel", "attn.out.bias", "mlp2.kernel"}),
    ("preln_block_mha", {"attn.query.kernel", "attn.attention_output.kernel"}),
    ("embedding_classifier", {"embed.embeddings", "norm.beta", "classifier.kernel"}),
    ("tf_keras_cnn", {"conv.kernel", "bn.moving_mean", "dw.depthwise_kernel"}),
    ("tf_keras_text", {"emb.embeddings", "ln.gamma", "head.kernel"}),
    ("tf_module", {"hidden.w", "hidden.b", "out_w"}),
])
def test_param_names_for_each_kind_of_model(name: str, expected: set[str]) -> None:
    _, traced = _trace(name)
    assert expected <= set(traced.graph.params)


def test_scopes_are_layer_paths_without_keras_suffixes() -> None:
    _, mlp = _trace("mlp")
    assert [n.scope for n in mlp.graph.nodes] == ["fc1"] * 3 + ["fc2"] * 3 + ["fc3"] * 2
    _, block = _trace("preln_block")
    scopes = {n.scope for n in block.graph.nodes}
    assert scopes == {"ln1", "attn", "attn.query", "attn.key", "attn.value", "attn.out", "ln2",
                      "mlp1", "mlp2", ""}
    for name in MODELS:  # no zoo layer name ends in _N, so no scope may
        assert not [n.scope for n in _trace(name)[1].graph.nodes if re.search(r"_\d+(\.|$)",
                                                                                n.scope)], name


@pytest.mark.parametrize("framework", ["keras", "tf_keras"])
def test_layer_names_that_look_like_suffixes_resolve_exactly(framework: str) -> None:
    # Keras 3 opens each scope twice: these layers' ops live under dense_1, dense_1_2,
    # dense_2_1 and dense_1_1_1; tf_keras uses the names as they are.
    mod = keras if framework == "keras" else pytest.importorskip("tf_keras")
    lyr = mod.layers
    model = mod.Sequential([lyr.InputLayer((4,)), lyr.Dense(3, name="dense"),
                            lyr.Dense(3, name="dense_1"), lyr.ReLU(name="dense_2"),
                            lyr.Dense(2, name="dense_1_1")], name="net")
    traced = tf_frontend.trace(model, (np.ones((2, 4), np.float32),))
    assert [(n.op, n.scope) for n in traced.graph.nodes] == [
        ("matmul", "dense"), ("add", "dense"), ("matmul", "dense_1"), ("add", "dense_1"),
        ("relu", "dense_2"), ("matmul", "dense_1_1"), ("add", "dense_1_1")]
    assert list(traced.graph.params)[:2] == ["dense.kernel", "dense.bias"]


class _Twice(keras.Model):
    def __init__(self) -> None:
        super().__init__(name="twice")
        self.fc = keras.layers.Dense(4, name="fc")
        self.fc_1 = keras.layers.Dense(4, name="fc_1")

    def call(self, x):
        return self.fc_1(self.fc(self.fc(x)))


def test_a_layer_called_twice_keeps_its_scope() -> None:
    x = np.ones((2, 4), np.float32)
    model = _Twice()
    model(x)
    traced = tf_frontend.trace(model, (x,))
    assert [n.scope for n in traced.graph.nodes if n.op == "matmul"] == ["fc", "fc", "fc_1"]
    assert list(traced.graph.params) == ["fc.kernel", "fc.bias", "fc_1.kernel", "fc_1.bias"]


def test_source_points_at_the_user_code() -> None:
    _, traced = _trace("preln_block")
    lines, start = inspect.getsourcelines(keras_models.SelfAttention.call)
    line = start + next(i for i, text in enumerate(lines) if "ops.softmax" in text)
    softmax = _node(traced, "attn", "softmax")
    assert softmax.source.endswith(f"keras_models.py:{line}") and softmax.origin == "Softmax"
    _, mlp = _trace("mlp")
    assert {n.source for n in mlp.graph.nodes} == {""}  # Sequential: no user code ran


_FACTORY = """\
import keras, numpy as np
from keras import layers


class Block(layers.Layer):
    def __init__(self):
        super().__init__(name="block")
        self.dense = layers.Dense(4, name="inner")

    def call(self, x):
        return self.dense(x)


def functional():
    x = keras.Input((4,), name="x")
    h = layers.Dense(8, name="hidden")(x)
    h = layers.ReLU(name="act")(h)
    h = Block()(h)
    return keras.Model(x, layers.Dense(2, name="head")(h)), (np.ones((3, 4), "float32"),)


def sequential():
    model = keras.Sequential([layers.Dense(8, name="hidden"),
                              layers.Dense(2, name="head")])
    model.build((None, 4))
    return model, (np.ones((3, 4), "float32"),)
"""


def test_a_functional_model_names_where_each_layer_was_made(tmp_path, monkeypatch) -> None:
    from specgraph.loading import trace

    (tmp_path / "net.py").write_text(_FACTORY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    sources = {(n.scope, n.op): n.source for n in trace("net.py:functional").graph.nodes}
    assert sources[("hidden", "matmul")] == "net.py:16" and sources[("act", "relu")] == \
        "net.py:17"
    assert sources[("block.inner", "matmul")] == "net.py:11"  # the user's call(): its line
    assert sources[("head", "matmul")] == "net.py:19"
    sequential = trace("net.py:sequential").graph.nodes
    assert [n.source for n in sequential if n.op == "matmul"] == ["net.py:23", "net.py:24"]
    assert sys.getprofile() is None  # the hook is gone once the factory returns


def test_inputs_and_outputs_are_named() -> None:
    _, traced = _trace("conv_variety")
    assert traced.graph.input_names == ("seq", "img")  # the names of the keras.Input layers
    assert traced.graph.output_names == ("img", "seq")  # dict keys, sorted as tf.nest does
    assert _trace("tf_module")[1].graph.input_names == ("x",)
    assert _trace("preln_block")[1].graph.input_names == ("x",)


# --- layouts and padding -------------------------------------------------------------------
def test_conv_kernels_are_stored_in_canonical_layout() -> None:
    model, cnn = _trace("cnn")
    kernel = _weights(model, "conv1/kernel")  # HWIO
    assert cnn.graph.params["conv1.kernel"].shape == (8, 3, 3, 3)
    np.testing.assert_array_equal(cnn.weights["conv1.kernel"], kernel.transpose(3, 2, 0, 1))
    model, variety = _trace("conv_variety")
    depthwise = _weights(model, "dw/kernel")  # [H, W, C, M]
    stored = variety.weights["dw.kernel"]
    assert stored.shape == (8, 1, 3, 3)
    np.testing.assert_array_equal(stored[2 * 2 + 1, 0], depthwise[:, :, 2, 1])  # c*M + m
    assert _node(variety, "dw", "conv").attrs["groups"] == 4
    np.testing.assert_array_equal(variety.weights["up.kernel"],  # [H, W, out, in] -> [in, out]
                                  _weights(model, "up/kernel").transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(variety.weights["c1.kernel"],  # Conv1D [K, I, O] -> [O, I, K]
                                  _weights(model, "c1/kernel").transpose(2, 1, 0))


def test_conv1d_is_a_one_dimensional_conv() -> None:
    """Keras' Conv1D runs as ExpandDims, a Conv2D of height 1 and Squeeze: it is the 1-D
    conv PyTorch's Conv1d is, its kernel [O, I, K]."""
    _, variety = _trace("conv_variety")
    conv = _node(variety, "c1", "conv")
    assert (conv.attrs["stride"], conv.attrs["dilation"], conv.attrs["padding"]) == \
        ((2,), (1,), (1, 1))
    assert conv.inputs[1].shape == (6, 4, 3)
    _check_faithful(variety)


def test_nhwc_ops_are_wrapped_in_transposes_to_nchw() -> None:
    _, cnn = _trace("cnn")
    first = cnn.graph.nodes[:3]
    assert [n.op for n in first] == ["transpose", "conv", "transpose"]
    assert first[0].attrs["perm"] == (0, 3, 1, 2) and first[2].attrs["perm"] == (0, 2, 3, 1)
    assert first[1].outputs[0].shape == (2, 8, 16, 16)


def test_same_padding_is_explicit_with_the_odd_pixel_at_the_end() -> None:
    _, cnn = _trace("cnn")
    assert _node(cnn, "conv1", "conv").attrs["padding"] == (1, 1, 1, 1)
    assert _node(cnn, "conv2", "conv").attrs["padding"] == (0, 0, 1, 1)  # 8 -> 4, stride 2
    _, variety = _trace("conv_variety")
    avg = _node(variety, "avg", "avg_pool")
    assert avg.attrs["padding"] == (0, 0, 1, 1) and avg.attrs["count_include_pad"] is False
    assert _node(variety, "maxp", "max_pool").attrs["padding"] == (0, 0, 1, 0)


class _SamePadding(tf.Module):
    def __init__(self, kernel, stride, dilation) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.k = tf.Variable(rng.standard_normal((*kernel, 2, 3)).astype("float32"))
        self.dk = tf.Variable(rng.standard_normal((*kernel, 2, 2)).astype("float32"))
        self.kernel, self.stride, self.dilation = kernel, stride, dilation

    def __call__(self, x):
        conv = tf.nn.conv2d(x, self.k, self.stride, "SAME", dilations=self.dilation)
        depthwise = tf.nn.depthwise_conv2d(x, self.dk, (1, *self.stride, 1), "SAME")
        return {"conv": conv + tf.reduce_sum(self.k), "depthwise": depthwise * self.dk[0, 0, 0, 1],
                "max": tf.nn.max_pool2d(x, self.kernel, self.stride, "SAME"),
                "avg": tf.nn.avg_pool2d(x, self.kernel, self.stride, "SAME")}


@pytest.mark.parametrize(("kernel", "stride", "dilation"), [
    ((4, 3), (2, 3), (1, 1)), ((3, 2), (1, 1), (2, 1)), ((2, 5), (3, 2), (1, 1))])
def test_same_padding_and_pools_match_tensorflow(kernel, stride, dilation) -> None:
    x = np.random.default_rng(1).standard_normal((2, 7, 6, 2)).astype("float32")
    traced = tf_frontend.trace(_SamePadding(kernel, stride, dilation), (x,))
    _check_faithful(traced)  # also: kernels read both in canonical and in native layout
    assert traced.graph.params["k"].shape == (3, 2) + kernel


def test_expected_padding_for_one_odd_case() -> None:
    x = np.zeros((1, 7, 6, 2), np.float32)
    traced = tf_frontend.trace(_SamePadding((4, 3), (2, 3), (1, 1)), (x,))
    conv = next(n for n in traced.graph.nodes if n.op == "conv" and n.attrs["groups"] == 1)
    assert conv.attrs["padding"] == (1, 0, 2, 0)  # height: 7 -> 4 needs 3, the 2 at the end


# --- ops worth a look ----------------------------------------------------------------------
def test_fused_batch_norm_from_tf_keras_is_batch_norm() -> None:
    _, traced = _trace("tf_keras_cnn")
    bn = _node(traced, "bn", "batch_norm")
    assert bn.attrs["eps"] == pytest.approx(1e-3) and bn.attrs["momentum"] == pytest.approx(0.01)
    assert [traced.graph.param_name(v) for v in bn.inputs[1:]] == [
        "bn.moving_mean", "bn.moving_variance", "bn.gamma", "bn.beta"]


def test_a_tf_keras_model_inside_a_keras_3_model_keeps_its_paths_and_momentum() -> None:
    """Keras 3 does not track a tf_keras model held in an attribute (HF's TF models, wrapped
    where ``tf.keras`` is Keras 3) as a layer: its layers' paths were lost and its batch
    normalization read PyTorch's default momentum, hiding a true momentum difference."""
    tf_keras = pytest.importorskip("tf_keras")
    inner = tf_keras.Sequential([
        tf_keras.layers.Conv2D(4, 3, padding="same", input_shape=(6, 6, 4), name="conv"),
        tf_keras.layers.BatchNormalization(momentum=0.5, name="bn")], name="backbone")

    class Wrapper(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = inner

        def call(self, x):
            return self.backbone(x, training=False)

    x = np.random.default_rng(0).standard_normal((2, 6, 6, 4)).astype(np.float32)
    traced = tf_frontend.trace(Wrapper(), (x,), reference="wrapped")
    bn = _node(traced, "backbone.bn", "batch_norm")
    assert bn.attrs["momentum"] == pytest.approx(0.5)
    assert traced.layer_attrs == {"backbone.bn": {"momentum": 0.5}}
    assert _node(traced, "backbone.conv", "conv") is not None


def test_keras_gelu_attention_and_embedding_ops() -> None:
    _, block = _trace("preln_block")
    assert "erfc" in [n.op for n in block.graph.nodes]  # Keras' exact GELU
    _, mha = _trace("preln_block_mha")
    assert [n.attrs["equation"] for n in mha.graph.nodes if n.op == "einsum"] == [
        "BTNH,BSNH->BNTS", "BNTS,BSNH->BTNH"]
    _, emb = _trace("embedding_classifier")
    lookup = _node(emb, "embed", "embedding")
    assert emb.graph.param_name(lookup.inputs[1]) == "embed.embeddings"
    _, text = _trace("tf_keras_text")  # ResourceGather
    assert text.graph.param_name(_node(text, "emb", "embedding").inputs[1]) == "emb.embeddings"


class _Inner(tf.Module):
    def __init__(self) -> None:
        super().__init__(name="inner")
        self.w = tf.Variable(np.arange(9, dtype=np.float32).reshape(3, 3) / 9)

    @tf.function
    def __call__(self, x):
        return tf.matmul(x, self.w)


class _Outer(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = _Inner()
        self.stack = [_Inner(), _Inner()]

    @tf.function(input_signature=[tf.TensorSpec((2, 3), tf.float32)])
    def __call__(self, x):
        return tf.math.cumprod(self.first(x) + self.stack[1](x), axis=1)


def test_nested_tf_functions_are_inlined_and_unknown_ops_are_opaque() -> None:
    traced = tf_frontend.trace(_Outer(), (np.ones((2, 3), np.float32),))
    assert set(traced.graph.params) == {"first.w", "stack.1.w"}
    (node,) = [n for n in traced.graph.nodes if n.op == "opaque"]
    assert node.attrs["target"] == "Cumprod" and node.outputs[0].shape == (2, 3)
    assert [n.op for n in traced.graph.nodes] == ["matmul", "matmul", "add", "opaque"]


# --- errors and inputs ---------------------------------------------------------------------
class DataDependent(keras.Model):
    def call(self, x):
        if keras.ops.sum(x) > 0:
            return x * 2
        return x


def test_python_control_flow_on_tensors_is_one_sentence() -> None:
    with pytest.raises(TraceError, match=r"^ddc: TensorFlow could not trace the model into a "
                       r"graph: OperatorNotAllowedInGraphError: Using a symbolic `tf.Tensor` "
                       r"as a Python `bool` is not allowed; .*tf\.cond.*--debug"):
        tf_frontend.trace(DataDependent(), (np.ones((2, 3), np.float32),), reference="ddc")


class _Windowed(tf.Module):
    """Branches in Python on tensors known at trace time, as HF's TF Swin does with
    ``tf.reduce_min`` of its window sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))

    def __call__(self, x):
        size = tf.reduce_min(tf.shape(x)[1:])
        window = size if size <= 4 else 4
        if window > 2:
            x = tf.nn.relu(x - 20.0)
        return tf.reshape(x, (-1, window, 4)) @ self.w


class _DataDependent(tf.Module):
    def __call__(self, x):
        if tf.reduce_sum(x) > 0:
            return x * 2.0
        return x


def test_python_branches_on_values_known_at_trace_time_keep_the_branch_taken() -> None:
    traced = tf_frontend.trace(_Windowed(), (np.arange(48, dtype=np.float32).reshape(2, 6, 4),))
    assert "opaque" not in [n.op for n in traced.graph.nodes]
    assert traced.outputs["output"].shape == (3, 4, 3)
    _check_faithful(traced)


def test_a_branch_on_a_value_known_only_when_the_model_runs_is_opaque() -> None:
    traced = tf_frontend.trace(_DataDependent(), (np.ones((2, 3), np.float32),))
    (node,) = [n for n in traced.graph.nodes if n.op == "opaque"]
    assert node.attrs["target"] in ("If", "StatelessIf")
    assert (2, 3) in [v.shape for v in node.outputs]


def test_model_that_fails_on_its_inputs() -> None:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(TraceError, match=r"^bad: the model failed on its example inputs with "
                       r"ValueError: Input 0 .*expected axis -1 .* value 4"):
        tf_frontend.trace(model, (np.ones((2, 6), np.float32),), reference="bad")


def test_a_keras_model_of_two_inputs_given_them_apart_says_to_list_them() -> None:
    """A functional model of two inputs takes them as one list; given as two example
    inputs, the second lands on Keras's ``training`` argument ("got multiple values for
    argument 'training'" before, which says nothing of the fix)."""
    a, b = keras.Input((4,)), keras.Input((4,))
    model = keras.Model([a, b], keras.layers.Dense(3)(keras.layers.Add()([a, b])))
    x = np.ones((2, 4), np.float32)
    with pytest.raises(TraceError, match=r"^two: the Keras model takes its 2 inputs as one "
                       r"argument, a list, .* return \(model, \(\[x1, x2\],\)\)"):
        tf_frontend.trace(model, (x, x), reference="two")
    assert len(tf_frontend.trace(model, ([x, x],), reference="listed").graph.inputs) == 2


def test_not_a_tensorflow_model_and_inputs_not_a_tuple() -> None:
    with pytest.raises(FactoryError, match=r"^f: expected a Keras model.*got function"):
        tf_frontend.trace(lambda x: x, (np.ones(2),), reference="f")
    with pytest.raises(FactoryError, match="example_inputs must be a tuple"):
        tf_frontend.trace(_trace("mlp")[0], [np.ones((4, 6), np.float32)], reference="list")


def test_single_array_input_and_a_quiet_trace(capfd) -> None:
    model, _ = MODELS["mlp"]()
    capfd.readouterr()
    traced = tf_frontend.trace(model, np.ones((4, 6), np.float32))
    assert traced.graph.input_names == ("inputs",)
    assert capfd.readouterr() == ("", "")
