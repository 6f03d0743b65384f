"""The terminal renderer: the side-by-side view and the verdict, colored only when asked."""

from __future__ import annotations

from specgraph.diff import diff
from specgraph.ir import Graph, GraphBuilder
from specgraph.renderers.text import TextRenderer
from specgraph.report import DiffReport


def _mlp(act: str) -> Graph:
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4), "float32")
    h = b.add("linear", [x, b.param("fc1.weight", (4, 8), "float32")], {"bias": False},
              shape=(2, 8), dtype="float32", scope="fc1")
    h = b.add(act, [h], shape=(2, 8), dtype="float32", scope="act")
    b.output("y", b.add("linear", [h, b.param("fc2.weight", (8, 3), "float32")],
                        {"bias": False}, shape=(2, 3), dtype="float32", scope="fc2"))
    return b.build()


def test_text_view_highlights_differing_rows_only_when_asked() -> None:
    findings, rows = diff(_mlp("gelu"), _mlp("relu"))
    report = DiffReport("a.py:f", "b.py:g", "torch", "jax", tuple(findings), tuple(rows))
    plain = TextRenderer().render(report)
    colored = TextRenderer(color=True).render(report)
    assert "\033[" not in plain and "verdict: NOT EQUIVALENT, 1 difference" in plain
    assert colored.count("\033[1;31m") == 2  # the differing row and the verdict
    assert "[op-mismatch] lhs computes gelu where rhs computes relu" in plain
