"""Resizes written in each framework's words: PyTorch's ``interpolate``, Keras's
``UpSampling2D`` and ``Resizing``, ``tf.image.resize``, ``jax.image.resize`` and the ONNX
export's ``Resize``. A correct port is one graph with numbers that agree; a port that reads
other pixels (aligned corners, another cubic kernel, another nearest rounding) is one finding
that names what differs, and the numbers confirm it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specgraph.check import compare
from specgraph.passes.repeats import repeated_positions
from tests.idioms.catalog import canonical, jax_side, keras_side, onnx_side, torch_side

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
jax = pytest.importorskip("jax")

X = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
X_LAST = np.ascontiguousarray(X.transpose(0, 2, 3, 1))


class Upsampled(torch.nn.Module):
    """``interpolate(**how)`` then a conv and a ReLU (a decoder stage of a U-Net or FPN)."""

    def __init__(self, **how) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.how = how
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(torch.nn.functional.interpolate(x, **self.how)))


def _keras(layer, like: Upsampled):
    """``layer`` then the same conv and ReLU as ``like``'s, channels last, its weights."""
    inp = tf.keras.Input((8, 8, 3))
    conv = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu")
    model = tf.keras.Model(inp, conv(layer(inp)))
    conv.set_weights([like.conv.weight.detach().numpy().transpose(2, 3, 1, 0),
                      like.conv.bias.detach().numpy()])
    return model


def _pair(how: dict, layer) -> tuple:
    model = Upsampled(**how).eval()
    keras = _keras(layer(), model)
    ours = model(torch.from_numpy(X)).detach().numpy().transpose(0, 2, 3, 1)
    return model, keras, float(np.max(np.abs(ours - keras(X_LAST).numpy())))


def _compare(model, keras):
    return compare(torch_side(model, X, name="torch"), keras_side(keras, X_LAST, name="keras"))


@pytest.mark.parametrize("how, layer", [
    ({"scale_factor": 2, "mode": "nearest"}, lambda: tf.keras.layers.UpSampling2D(2)),
    ({"scale_factor": 3, "mode": "nearest"}, lambda: tf.keras.layers.UpSampling2D(3)),
    ({"scale_factor": 2, "mode": "bilinear"},
     lambda: tf.keras.layers.UpSampling2D(2, interpolation="bilinear")),
    ({"size": (12, 12), "mode": "bilinear"},
     lambda: tf.keras.layers.Resizing(12, 12, interpolation="bilinear")),
    ({"scale_factor": 1.5, "mode": "bilinear"},  # the step 1/1.5 is 8/12 in float32
     lambda: tf.keras.layers.Resizing(12, 12, interpolation="bilinear")),
    ({"size": (5, 5), "mode": "bilinear"},
     lambda: tf.keras.layers.Resizing(5, 5, interpolation="bilinear")),
    ({"size": (12, 12), "mode": "nearest-exact"},  # floor((o + ½)·s), TF's half-pixel nearest
     lambda: tf.keras.layers.Resizing(12, 12, interpolation="nearest")),
], ids=["nearest_x2", "nearest_x3", "bilinear_x2", "bilinear_to_12", "bilinear_by_1.5",
        "bilinear_down_to_5", "nearest_exact_to_12"])
def test_a_correct_keras_port_of_an_interpolate_is_one_graph_with_equal_numbers(how, layer):
    """Before, each was a finding: the PyTorch side an opaque op, Keras's nearest a repeat
    (reshape·tile·reshape per axis), its bilinear ``ResizeBilinear``, opaque too and laid
    out channels last, so not even the numbers could be compared."""
    model, keras, apart = _pair(how, layer)
    assert apart < 1e-5
    report = _compare(model, keras)
    assert report.equivalent, [f.message for f in report.findings]
    assert report.numeric is not None and report.numeric.layers
    assert not report.notes or not any("written differently" in n for n in report.notes)


def test_aligned_corners_against_half_pixel_centers_is_the_coordinates_finding() -> None:
    model, keras, apart = _pair({"scale_factor": 2, "mode": "bilinear", "align_corners": True},
                                lambda: tf.keras.layers.UpSampling2D(2, interpolation="bilinear"))
    assert apart > 0.1
    findings = _compare(model, keras).findings
    assert [(f.code, f.attr) for f in findings] == [("attr-mismatch", "coordinates")]
    assert "'align_corners' in lhs" in findings[0].message
    assert "'half_pixel' in rhs" in findings[0].message
    assert "the numbers confirm it" in findings[0].message


def test_pytorchs_bicubic_against_tfs_is_keys_coefficient_and_the_taps_outside() -> None:
    """PyTorch's bicubic is Keys' kernel with a = -0.75, reading the edge for taps outside
    the input; TF's half-pixel bicubic (Keras's ``Resizing``) has a = -0.5 and weighs the
    taps outside 0: a real difference of up to 0.16 here."""
    model, keras, apart = _pair({"size": (16, 16), "mode": "bicubic"},
                                lambda: tf.keras.layers.Resizing(16, 16,
                                                                 interpolation="bicubic"))
    assert apart > 0.05
    findings = _compare(model, keras).findings
    assert sorted(f.attr for f in findings) == ["cubic_coeff", "exclude_outside"]
    assert any("-0.75 in lhs" in f.message and "-0.5 in rhs" in f.message
               and "the numbers confirm it" in f.message for f in findings)


def test_nearest_that_rounds_otherwise_names_the_positions_each_side_reads() -> None:
    """``mode='nearest'`` reads ``floor(o·s)``, TF's half-pixel nearest ``floor((o + ½)·s)``:
    at a non-integer scale they read other pixels."""
    model, keras, apart = _pair({"size": (12, 12), "mode": "nearest"},
                                lambda: tf.keras.layers.Resizing(12, 12,
                                                                 interpolation="nearest"))
    assert apart > 0.1
    findings = _compare(model, keras).findings
    assert len(findings) == 1
    message = findings[0].message
    assert "reads other positions along axis 2: [0, 0, 1, 2, 2, 3" in message
    assert "[0, 1, 1, 2, 3, 3" in message and "the numbers confirm it" in message


def test_bilinear_against_nearest_is_a_finding() -> None:
    model, keras, _ = _pair({"scale_factor": 2, "mode": "bilinear"},
                            lambda: tf.keras.layers.UpSampling2D(2))
    findings = _compare(model, keras).findings
    assert len(findings) == 1 and "resize" in findings[0].message
    assert "gather" in findings[0].message


@pytest.mark.parametrize("how", [
    {"scale_factor": 2, "mode": "nearest"},
    {"size": (11, 13), "mode": "nearest"},
    {"scale_factor": 2, "mode": "bilinear"},
    {"size": (11, 13), "mode": "bicubic", "align_corners": True},
    {"size": (5, 6), "mode": "bilinear", "antialias": True},
], ids=["nearest_x2", "nearest_to_11x13", "bilinear_x2", "bicubic_corners", "antialias_down"])
def test_an_interpolate_against_its_onnx_export_is_one_graph(how) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = compare(torch_side(Upsampled(**how).eval(), X, name="torch"),
                         onnx_side(Upsampled(**how).eval(), X, name="export"))
    assert report.equivalent, [f.message for f in report.findings]


def test_nearest_in_pytorch_and_jax_image_resize_read_the_same_pixels() -> None:
    class Nearest(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")

    def resized(params, x):
        return jax.image.resize(x, (2, 3, 16, 16), method="nearest")

    lhs, rhs = torch_side(Nearest(), X, name="torch"), jax_side(resized, {}, X, name="jax")
    assert [n.op for n in canonical(lhs).graph.nodes] == ["gather", "gather"]
    report = compare(lhs, rhs)
    assert report.equivalent, [f.message for f in report.findings]


@pytest.mark.parametrize("how, method, size", [
    ({"scale_factor": 2, "mode": "bilinear"}, "linear", 16),
    ({"size": (5, 5), "mode": "bilinear", "antialias": True}, "linear", 5),
], ids=["bilinear_x2", "antialias_down"])
def test_jax_image_resize_in_linear_mode_is_pytorchs_bilinear(how, method, size) -> None:
    """``jax.image.resize`` contracts each axis with a constant matrix of interpolation
    weights: "rhs computes reshape·matmul·reshape·transpose... where lhs computes resize", no
    numbers. A product with a resize's weight matrix is that resize now: PyTorch's
    ``bilinear`` (antialiased where it shrinks, as JAX always is) is one graph with it, with
    numbers."""
    def resized(params, x):
        return jax.image.resize(x, (2, 3, size, size), method=method)

    class Interpolated(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, **how)

    lhs = torch_side(Interpolated(), X, name="torch")
    rhs = jax_side(resized, {}, X, name=f"jax_{method}_{size}")
    assert [n.op for n in canonical(rhs).graph.nodes] == ["resize"]
    for a, b in ((lhs, rhs), (rhs, lhs)):
        report = compare(a, b)
        assert report.equivalent, [f.message for f in report.findings]
        assert report.numeric is not None


def test_jax_image_resize_in_cubic_mode_is_tfs_bicubic_not_pytorchs() -> None:
    """JAX's cubic is Keys' kernel with a = -0.5, the taps outside weighing 0, as TF's
    half-pixel bicubic: against PyTorch's (a = -0.75, the edge read) that is the two
    attributes, confirmed by the numbers."""
    def resized(params, x):
        return jax.image.resize(x, (2, 3, 16, 16), method="cubic")

    class Bicubic(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, size=(16, 16), mode="bicubic")

    rhs = jax_side(resized, {}, X, name="jax_cubic")
    node = canonical(rhs).graph.nodes[0]
    assert node.op == "resize" and node.attrs["cubic_coeff"] == -0.5 and \
        node.attrs["exclude_outside"]
    findings = compare(torch_side(Bicubic(), X, name="torch_bicubic"), rhs).findings
    assert sorted(f.attr for f in findings) == ["cubic_coeff", "exclude_outside"], \
        [f.message for f in findings]


def test_a_product_with_a_matrix_no_resize_makes_stays_a_product() -> None:
    """A constant matrix along one axis that is not a resize's weights (a learned-looking
    mixing of rows) is left as the product it is."""
    w = np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32)

    def mixed(params, x):
        return jax.numpy.einsum("nchw,hk->nckw", x, w)

    ops = [n.op for n in canonical(jax_side(mixed, {}, X, name="jax_mixed")).graph.nodes]
    assert "resize" not in ops and "matmul" in ops, ops


# --- the repeat of positions, found through the axes' sizes ------------------------------
def test_keras_repeat_per_axis_is_a_gather_of_repeated_positions() -> None:
    chain = [("reshape", (2, 8, 1, 8, 3)), ("expand", (2, 8, 3, 8, 3)),
             ("reshape", (2, 24, 8, 1, 3)), ("expand", (2, 24, 8, 2, 3)),
             ("reshape", (2, 24, 16, 3))]
    gathers, perm = repeated_positions((2, 8, 8, 3), chain)
    assert perm == (0, 1, 2, 3)
    assert [a for a, _ in gathers] == [1, 2]
    np.testing.assert_array_equal(gathers[0][1], np.repeat(np.arange(8), 3))
    np.testing.assert_array_equal(gathers[1][1], np.repeat(np.arange(8), 2))
    # the chain's own output, elementwise, is the gathers'
    x = np.arange(2 * 8 * 8 * 3).reshape(2, 8, 8, 3)
    y = x.reshape(2, 8, 1, 8, 3)
    y = np.broadcast_to(y, (2, 8, 3, 8, 3)).reshape(2, 24, 8, 1, 3)
    y = np.broadcast_to(y, (2, 24, 8, 2, 3)).reshape(2, 24, 16, 3)
    np.testing.assert_array_equal(np.take(np.take(x, gathers[0][1], 1), gathers[1][1], 2), y)


@pytest.mark.parametrize("chain", [
    [("reshape", (1, 4, 3)), ("expand", (2, 4, 3)), ("reshape", (8, 3))],  # a tile of rows
    [("reshape", (4, 1, 3)), ("expand", (4, 2, 3))],  # a new axis broadcast: an expand
    [("reshape", (2, 2, 3)), ("reshape", (12,))],  # no expand at all
    [("reshape", (4, 3, 1)), ("expand", (4, 3, 2)), ("reshape", (4, 6))],  # cuts no axis, but
    # repeats the last axis's positions: a repeat (kept below as the one that is)
], ids=["tile", "expand", "no_expand", "repeat_last"])
def test_what_is_no_repeat_of_positions_is_left_as_written(chain) -> None:
    found = repeated_positions((4, 3), chain)
    if chain[-1] == ("reshape", (4, 6)):
        assert found is not None and [a for a, _ in found[0]] == [1]
    else:
        assert found is None


def test_a_repeat_that_also_drops_a_size_one_axis_is_still_a_gather() -> None:
    # Keras's GroupNormalization(groups=-1) leaves [N, C, H, W, 1] to the activation after
    # it, and UpSampling2D's reshapes drop that axis as they repeat rows and columns
    chain = [("transpose", (0, 2, 3, 1, 4)), ("reshape", (2, 5, 1, 5, 8)),
             ("expand", (2, 5, 2, 5, 8)), ("reshape", (2, 10, 5, 1, 8)),
             ("expand", (2, 10, 5, 2, 8)), ("reshape", (2, 10, 10, 8))]
    gathers, perm = repeated_positions((2, 8, 5, 5, 1), chain)
    assert [a for a, _ in gathers] == [2, 3]
    assert perm[:4] == (0, 2, 3, 1)
    x = np.arange(2 * 8 * 5 * 5).reshape(2, 8, 5, 5, 1)
    y = np.broadcast_to(x.transpose(0, 2, 3, 1, 4).reshape(2, 5, 1, 5, 8),
                        (2, 5, 2, 5, 8)).reshape(2, 10, 5, 1, 8)
    y = np.broadcast_to(y, (2, 10, 5, 2, 8)).reshape(2, 10, 10, 8)
    # what the pass emits: the size-1 axis dropped, the gathers, then the source's axes in
    # the chain's order
    z = np.take(np.take(x.reshape(2, 8, 5, 5), gathers[0][1], 2), gathers[1][1], 3)
    np.testing.assert_array_equal(z.transpose(0, 2, 3, 1), y)


class NormedUpsampled(torch.nn.Module):
    """An instance norm, a ReLU, a nearest upsampling and a conv (a generator's stage)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.InstanceNorm2d(3, affine=True)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        up = torch.nn.functional.interpolate(torch.relu(self.norm(x)), scale_factor=2)
        return self.conv(up)


def test_keras_group_norm_of_one_channel_per_group_then_upsampling_is_instance_norm() -> None:
    model = NormedUpsampled().eval()
    inp = tf.keras.Input((8, 8, 3))
    norm = tf.keras.layers.GroupNormalization(groups=-1, epsilon=1e-5)
    conv = tf.keras.layers.Conv2D(4, 3, padding="same")
    out = conv(tf.keras.layers.UpSampling2D(2)(tf.keras.layers.ReLU()(norm(inp))))
    keras = tf.keras.Model(inp, out)
    conv.set_weights([model.conv.weight.detach().numpy().transpose(2, 3, 1, 0),
                      model.conv.bias.detach().numpy()])
    ours = model(torch.from_numpy(X)).detach().numpy().transpose(0, 2, 3, 1)
    assert np.max(np.abs(ours - keras(X_LAST).numpy())) < 1e-5
    report = _compare(model, keras)
    assert report.equivalent, [f.message for f in report.findings]
