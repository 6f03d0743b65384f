"""One root cause, one finding, across layers: the same difference repeated over many
blocks is one finding that counts and lists its places; different differences stay apart."""

from __future__ import annotations

import json

from specgraph.diff import diff
from specgraph.grouping import group_repeated
from specgraph.ir import Graph, GraphBuilder
from specgraph.renderers.json import JsonRenderer
from specgraph.renderers.text import TextRenderer
from specgraph.report import DiffReport, Finding, Side

F = "float32"
BLOCKS = 53


def _resnet(*, eps: float = 1e-5, momentum: float = 0.1, conv_bias: bool = False,
            blocks: int = BLOCKS,
            odd: dict[int, float] | None = None, relu_missing: tuple[int, ...] = ()) -> Graph:
    """A stack of conv → [bias add] → batch_norm → relu blocks, scoped like Keras'
    ResNet50 (``conv2_block1_1_conv``...). ``conv_bias``: every conv followed by a bias add
    (a conv written with its bias as a separate op); ``odd``: some blocks' eps differ."""
    b = GraphBuilder("resnet")
    h = b.input("x", (1, 8, 6, 6), F)
    for i in range(blocks):
        at = f"stage{i // 10 + 1}.{i % 10}"
        h = b.add("conv", [h, b.param(f"{at}.conv.weight", (8, 8, 3, 3), F)],
                  {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1),
                   "bias": False}, shape=(1, 8, 6, 6), dtype=F, scope=f"{at}.conv")
        if conv_bias:
            h = b.add("add", [h, b.param(f"{at}.conv.bias", (8, 1, 1), F)], shape=(1, 8, 6, 6),
                      dtype=F, scope=f"{at}.conv")
        stats = [b.param(f"{at}.bn.{n}", (8,), F) for n in ("mean", "var", "weight", "bias")]
        h = b.add("batch_norm", [h, *stats], {"eps": (odd or {}).get(i, eps),
                                              "momentum": momentum},
                  shape=(1, 8, 6, 6), dtype=F, scope=f"{at}.bn")
        if i not in relu_missing:
            h = b.add("relu", [h], shape=(1, 8, 6, 6), dtype=F, scope=f"{at}.act")
    b.output("y", h)
    return b.build()


def test_the_same_eps_on_every_block_is_one_finding_with_its_places() -> None:
    findings, _ = diff(_resnet(eps=1.001e-5), _resnet())
    (finding,) = findings
    assert (finding.code, finding.op, finding.attr) == ("attr-mismatch", "batch_norm", "eps")
    assert len(finding.places) == BLOCKS
    assert finding.message == (f"batch_norm eps is 1.001e-05 in lhs but 1e-05 in rhs in "
                               f"{BLOCKS} places: batch_norm at stage1.0.bn and "
                               f"{BLOCKS - 1} more")
    assert (finding.lhs, finding.rhs) == finding.places[0]
    assert [a.scope for a, _ in finding.places][:3] == ["stage1.0.bn", "stage1.1.bn",
                                                       "stage1.2.bn"]
    assert all(a.value == 1.001e-5 and b.value == 1e-5 for a, b in finding.places)


def test_a_bias_on_every_conv_is_one_missing_op_finding() -> None:
    findings, _ = diff(_resnet(conv_bias=True), _resnet())
    (finding,) = findings
    assert finding.code == "missing-op" and finding.ops == ("add",)
    assert finding.rhs is None and len(finding.places) == BLOCKS
    assert all(b is None and a.scope.endswith(".conv") for a, b in finding.places)
    assert finding.message == (f"rhs has no add between conv and batch_norm in {BLOCKS} "
                               "places: lhs has it at stage1.0.conv, and 52 more")
    mirrored, _ = diff(_resnet(), _resnet(conv_bias=True))
    (back,) = mirrored
    assert back.lhs is None and back.message.startswith("lhs has no add between conv and "
                                                        f"batch_norm in {BLOCKS} places")


def test_both_root_causes_at_once_are_two_findings() -> None:
    findings, _ = diff(_resnet(eps=1.001e-5, conv_bias=True), _resnet())
    assert sorted((f.code, len(f.places)) for f in findings) == [
        ("attr-mismatch", BLOCKS), ("missing-op", BLOCKS)]


def test_different_values_and_different_neighbours_stay_apart() -> None:
    findings, _ = diff(_resnet(blocks=12), _resnet(blocks=12, odd={2: 1e-3, 7: 1e-3, 9: 1e-4}))
    assert [(f.lhs.scope, len(f.places)) for f in findings] == [("stage1.2.bn", 2),
                                                               ("stage1.9.bn", 0)]
    # relu missing after block 3 (before a conv) and after the last (before the output)
    findings, _ = diff(_resnet(blocks=6), _resnet(blocks=6, relu_missing=(3, 5)))
    assert [f.code for f in findings] == ["missing-op", "missing-op"]
    assert [f.places for f in findings] == [(), ()]


def test_a_difference_found_once_is_unchanged() -> None:
    lhs, rhs = _resnet(blocks=12), _resnet(blocks=12, odd={4: 1e-3})
    (finding,) = diff(lhs, rhs)[0]
    assert finding.places == () and "places" not in finding.to_dict()
    assert finding.message == ("batch_norm eps is 1e-05 in lhs (stage1.4.bn) but 0.001 in "
                               "rhs (stage1.4.bn)")


def test_grouping_reads_structured_fields_not_messages() -> None:
    def eps(i: int, message: str) -> Finding:
        return Finding("attr-mismatch", message, op="batch_norm", attr="eps",
                       lhs=Side(f"bn{i}", f"{i}:batch_norm", value=1e-3),
                       rhs=Side(f"bn{i}", f"{i}:batch_norm", value=1e-5))

    one, two = eps(0, "worded one way"), eps(1, "worded another")
    (grouped,) = group_repeated([one, two])
    assert grouped.places == ((one.lhs, one.rhs), (two.lhs, two.rhs))
    other = Finding("attr-mismatch", "worded one way", op="batch_norm", attr="momentum",
                    lhs=one.lhs, rhs=one.rhs)
    assert group_repeated([one, other]) == [one, other]


def test_a_grouped_difference_that_changes_training_says_so() -> None:
    # Keras' ResNet50 (momentum 0.99, PyTorch's 0.01) against HF's (PyTorch's 0.1)
    findings, _ = diff(_resnet(momentum=0.01), _resnet())
    (finding,) = findings
    assert len(finding.places) == BLOCKS and finding.affects == "training: the running statistics"
    assert finding.message.endswith(
        "; the forward pass is the same, it changes training: the running statistics")


def test_places_in_json_and_text() -> None:
    findings, rows = diff(_resnet(eps=1.001e-5), _resnet())
    report = DiffReport("a.py:keras", "b.py:hf", "tf", "torch", tuple(findings), tuple(rows))
    data = json.loads(JsonRenderer().render(report))
    (finding,) = data["findings"]
    assert len(finding["places"]) == BLOCKS
    assert finding["places"][1] == {
        "lhs": {"scope": "stage1.1.bn", "node": "4:batch_norm", "source": "",
                "value": 1.001e-5},
        "rhs": {"scope": "stage1.1.bn", "node": "4:batch_norm", "source": "",
                "value": 1e-5}}
    text = TextRenderer().render(report)
    assert ("places: stage1.0.bn, stage1.1.bn, stage1.2.bn, stage1.3.bn, stage1.4.bn, "
            f"stage1.5.bn and {BLOCKS - 6} more (--full or --format json lists them all)"
            in text)
    assert "stage6.2.bn" in TextRenderer(full=True).render(report)
    assert "verdict: NOT EQUIVALENT, 1 difference" in text


def test_docstring_example_runs() -> None:
    import doctest

    import specgraph.grouping

    assert doctest.testmod(specgraph.grouping).failed == 0
