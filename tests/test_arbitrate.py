"""Numbers arbitrate structural findings, and only those a forward pass can settle: models
built in code, compared through ``compare`` as the CLI does."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from specgraph.frontends.torch.tracer import trace  # noqa: E402
from specgraph.check import compare  # noqa: E402


def _traced(module, *shape: int, name: str):
    torch.manual_seed(0)
    return trace(module.eval(), (torch.randn(*shape),), reference=name)


class _Norms(nn.Module):
    def __init__(self, eps: float) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8, eps=eps)

    def forward(self, x):
        return self.norm(self.fc(x))


def test_an_eps_the_numbers_cannot_see_is_still_a_finding():
    # 1e-5 against 1.001e-5 moves no float32 value on these weights, and is another function
    report = compare(_traced(_Norms(1e-5), 2, 8, name="a"),
                     _traced(_Norms(1.001e-5), 2, 8, name="b"))
    assert [(f.code, f.op, f.attr) for f in report.findings] == [
        ("attr-mismatch", "layer_norm", "eps")]
    assert not any("computes the same" in n for n in report.notes)


class _Blocks(nn.Module):
    """Two residual blocks whose add reads the shortcut first or second, and whose convs
    have a bias or not (as Keras' ResNet50 against HF's)."""

    def __init__(self, shortcut_first: bool, bias: bool) -> None:
        super().__init__()
        self.first = shortcut_first
        self.stem = nn.Conv2d(3, 4, 3, padding=1, bias=bias)
        self.main = nn.ModuleList([nn.Conv2d(4, 4, 1, bias=bias), nn.Conv2d(4, 8, 3, padding=1,
                                                                              bias=bias)])
        self.short = nn.Conv2d(4, 8, 1, bias=bias)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        main = self.main[1](torch.relu(self.main[0](x)))
        short = self.short(x)
        return torch.relu(short + main if self.first else main + short)


def test_a_difference_on_every_layer_leaves_the_residual_operands_aligned():
    # no node is alike on both sides (every conv differs by its bias): the add's operands
    # are told apart by what computes them, so the shortcut pairs with the shortcut
    report = compare(_traced(_Blocks(True, True), 1, 3, 6, 6, name="a"),
                     _traced(_Blocks(False, False), 1, 3, 6, 6, name="b"), mode="structure")
    assert [(f.code, f.attr) for f in report.findings] == [("attr-mismatch", "bias")]
    (finding,) = report.findings
    pairs = {(a.scope, b.scope) for a, b in finding.places}
    assert ("short", "short") in pairs and ("main.1", "main.1") in pairs


class _Strided(nn.Module):
    def __init__(self, first: int) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1, stride=first)
        self.b = nn.Conv2d(4, 4, 3, stride=3 - first, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_a_moved_stride_is_one_finding_that_the_numbers_confirm():
    report = compare(_traced(_Strided(2), 1, 3, 8, 8, name="v1"),
                     _traced(_Strided(1), 1, 3, 8, 8, name="v15"))
    (finding,) = report.findings
    assert (finding.code, finding.op, finding.attr) == ("attr-mismatch", "conv", "stride")
    assert "sits at a in lhs but at b in rhs" in finding.message
    assert "the numbers confirm it" in finding.message
    assert {(a.scope, b.scope) for a, b in finding.places} == {("a", "a"), ("b", "b")}


class _Attention(nn.Module):
    def __init__(self, keep) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        bias = torch.zeros(5, 5).masked_fill(~keep, float("-inf"))
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) / 2.0
        s = s + self.bias
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 8)


def test_a_mask_that_keeps_other_keys_is_said_in_words():
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    diagonal = torch.eye(5, dtype=torch.bool)
    report = compare(_traced(_Attention(causal), 2, 5, 8, name="causal"),
                     _traced(_Attention(diagonal), 2, 5, 8, name="diagonal"))
    (finding,) = report.findings
    assert (finding.code, finding.op, finding.attr) == ("attr-mismatch", "attention", "mask")
    assert "the keys j <= i (causal)" in finding.message
    assert "only its own key j == i" in finding.message
    window = torch.ones(5, 5, dtype=torch.bool).tril() & ~torch.ones(5, 5).tril(-3).bool()
    report = compare(_traced(_Attention(causal), 2, 5, 8, name="causal"),
                     _traced(_Attention(window), 2, 5, 8, name="window"), mode="structure")
    assert "a causal window of 3" in report.findings[0].message


def test_keras_batch_norms_added_into_a_residual_are_each_raised():
    # Keras writes an inference BatchNorm out (x * scale + shift, NHWC); two of them added
    # into a residual are a sum of four terms that must not be put in order before each
    # BatchNorm is raised (then a sum of two)
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    from specgraph.frontends.tf.tracer import trace as trace_tf
    from specgraph.passes.boundary import canonicalize_model

    keras = tf.keras
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 6, 3))
    a = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 1)(x))
    b = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3, padding="same")(x))
    model = keras.Model(x, keras.layers.ReLU()(keras.layers.Add()([a, b])))
    pixels = np.random.default_rng(0).standard_normal((1, 6, 6, 3)).astype(np.float32)
    graph = canonicalize_model(trace_tf(model, (pixels,))).graph
    ops = sorted(n.op for n in graph.nodes)
    assert ops == ["add", "batch_norm", "batch_norm", "conv", "conv", "relu"]


def test_values_of_no_scale_are_said_to_part_by_how_much_and_where() -> None:
    """A reshape of a mask of ones and zeros paired with the reshape of its complement read
    "values part ... by 0.00e+00 of their scale": the scale is zero there, not the gap."""
    from specgraph.arbitrate import _downstream
    from specgraph.report import Finding, Side

    def finding(stats):
        return Finding("numeric-divergence", "", op="reshape",
                       rhs=Side("encoder", "reshape", value=stats))

    said = _downstream(finding({"max_abs": 1.0, "max_rel": 0.0, "mismatch": 0.25,
                                "cosine": 0.0, "scale": 0.0}))
    assert said == "values part at reshape at encoder by 1 in 25% of their elements"
    said = _downstream(finding({"max_abs": 0.2, "max_rel": 0.1, "mismatch": 0.5,
                                "cosine": 0.9, "scale": 2.0}))
    assert said == "values part at reshape at encoder by 1.00e-01 of their scale"


class _Picked(nn.Module):
    """A ReLU beside ones scattered at the two largest of each row (``topk``: opaque to the
    reference interpreter)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return torch.relu(h), torch.zeros_like(h).scatter_(-1, h.topk(2, -1).indices, 1.0)


def test_an_op_the_reference_cannot_run_leaves_its_values_out_not_the_run():
    """Once the numbers ran (GroupViT's logit scale moved), the arbitration ran lhs's graph
    in float64 and stopped at the first opaque op: exit 2 for the whole diff. The values
    downstream of such an op are left out (a region that needs them stays as its findings
    say), the others computed."""
    from specgraph.arbitrate import _lhs_values

    model = _traced(_Picked(), 2, 8, name="picked")
    g = model.graph
    relu = next(n for n in g.nodes if n.op == "relu")
    opaque = [n for n in g.nodes if n.op == "opaque"]
    assert opaque
    needed = {relu.outputs[0], *g.outputs, *(v for n in opaque for v in n.outputs)}
    values = _lhs_values(model, 0, needed)
    assert relu.outputs[0] in values and not any(v in values for n in opaque
                                                 for v in n.outputs)
