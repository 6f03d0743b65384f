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


def test_the_numbers_table_shows_the_first_layer_whose_values_part() -> None:
    """A GELU approximation parts at the GELU; the gradients flowing back from it part at
    every layer upstream, twelve of them filled the table and the GELU was one of "5 more
    layers that part"."""
    from specgraph.numeric.result import LayerResult, NumericResult
    from specgraph.numeric.stats import Stats
    from specgraph.renderers.text import _numeric_lines

    agree, parts = Stats(0.0, 0.0, 0.0, 1.0, 1.0), Stats(1e-3, 7e-4, 0.4, 1.0, 1.0)
    layers = [LayerResult(f"linear at l{k}", f"linear at l{k}", agree, backward=parts)
              for k in range(14)]
    layers.append(LayerResult("gelu at act", "gelu at act", parts, backward=agree))
    result = NumericResult("torch cpu,eager,float32", "jax cpu,eager,float32", (0,), True,
                           False, tuple(layers), {}, {})
    text = "\n".join(_numeric_lines(result))
    assert "gelu at act" in text and "... and 3 more layers that part" in text, text
