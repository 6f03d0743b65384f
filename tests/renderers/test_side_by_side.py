"""The side-by-side view on a deep model: identical runs folded as ``diff -U`` folds them,
rows grouped under their block, every row with ``--full``."""

from __future__ import annotations

from specgraph.diff import diff
from specgraph.ir import Graph, GraphBuilder
from specgraph.renderers.side_by_side import CONTEXT, FOLD_AT, Fold, Line, block, layout
from specgraph.renderers.text import TextRenderer
from specgraph.report import DiffReport, Row

F = "float32"
LAYERS = 12


def _stack(eps: dict[int, float] | None = None) -> Graph:
    """A 12-layer encoder, three nodes a layer (dense, gelu, LayerNorm), written as a
    transformer's module paths; ``eps`` changes some layers' LayerNorm eps."""
    b = GraphBuilder("stack")
    h = b.input("x", (2, 16), F)
    for i in range(LAYERS):
        at = f"encoder.layer.{i}"
        h = b.add("linear", [h, b.param(f"{at}.dense.weight", (16, 16), F)], {"bias": False},
                  shape=(2, 16), dtype=F, scope=f"{at}.dense")
        h = b.add("gelu", [h], shape=(2, 16), dtype=F, scope=f"{at}.act")
        h = b.add("layer_norm", [h, b.param(f"{at}.LayerNorm.weight", (16,), F),
                                 b.param(f"{at}.LayerNorm.bias", (16,), F)],
                  {"axis": 1, "eps": (eps or {}).get(i, 1e-12)}, shape=(2, 16), dtype=F,
                  scope=f"{at}.LayerNorm")
    b.output("y", b.add("tanh", [h], shape=(2, 16), dtype=F, scope="pooler"))
    return b.build()


def _report(eps: dict[int, float]) -> DiffReport:
    findings, rows = diff(_stack(), _stack(eps))
    return DiffReport("a.py:bert", "b.py:bert", "torch", "jax", tuple(findings), tuple(rows))


def _table(text: str) -> list[str]:
    """The side-by-side table's lines: from its header to the blank line after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "lhs scope" in line)
    return lines[start:lines.index("", start)]


def test_one_difference_in_twelve_layers_is_folded_around_it() -> None:
    report = _report({5: 1e-5})
    assert len(report.rows) == 3 * LAYERS + 1 and sum(r.differs for r in report.rows) == 1
    table = _table(TextRenderer().render(report))
    assert table == [
        "   lhs scope        lhs                 rhs                 rhs scope",
        "─  ───────────────  ──────────────────  ──────────────────  ───────────────",
        "   … 14 identical rows (encoder.layer.0.dense … encoder.layer.4.act)",
        "   encoder.layer.4                                          encoder.layer.4",
        "     LayerNorm      layer_norm [2, 16]  layer_norm [2, 16]    LayerNorm",
        "   encoder.layer.5                                          encoder.layer.5",
        "     dense          linear [2, 16]      linear [2, 16]        dense",
        "     act            gelu [2, 16]        gelu [2, 16]          act",
        "!    LayerNorm      layer_norm [2, 16]  layer_norm [2, 16]    LayerNorm",
        "   encoder.layer.6                                          encoder.layer.6",
        "     dense          linear [2, 16]      linear [2, 16]        dense",
        "     act            gelu [2, 16]        gelu [2, 16]          act",
        "     LayerNorm      layer_norm [2, 16]  layer_norm [2, 16]    LayerNorm",
        "   … 16 identical rows (encoder.layer.7.dense … pooler)",
    ]
    # 37 rows: the differing one, CONTEXT on each side, the rest in two folds
    assert 14 == 3 * 5 + 2 - CONTEXT and 16 == len(report.rows) - (3 * 5 + 2) - 1 - CONTEXT


def test_folded_rows_keep_their_color_only_where_they_differ() -> None:
    colored = TextRenderer(color=True).render(_report({5: 1e-5}))
    assert colored.count("\033[1;31m") == 2  # the differing row and the verdict


def test_full_shows_every_row_grouped_by_layer() -> None:
    report = _report({5: 1e-5})
    table = _table(TextRenderer(full=True).render(report))
    assert not any("identical rows" in line for line in table)
    rows = [line for line in table[2:] if line[3:5] == "  " or line.startswith("!")]
    assert len(rows) == 3 * LAYERS
    assert len(table) == 2 + 3 * LAYERS + LAYERS + 1  # rows, a heading a layer, pooler


def test_differences_close_together_share_their_context() -> None:
    findings_far = _report({3: 1e-5, 8: 1e-5})
    findings_near = _report({5: 1e-5, 6: 1e-5})
    far = _table(TextRenderer().render(findings_far))
    near = _table(TextRenderer().render(findings_near))
    assert sum("identical rows" in line for line in far) == 3
    assert sum("identical rows" in line for line in near) == 2
    assert sum(line.startswith("!") for line in near) == 2


def test_short_runs_stay_as_they_are() -> None:
    rows = [Row(f"op{i}", f"op{i}", f"s{i}", f"s{i}", i == 4) for i in range(9)]
    lines = layout(rows)
    assert not any(isinstance(item, Fold) for item in lines)  # 4 and 1 hidden: too few
    rows = [Row(f"op{i}", f"op{i}", f"s{i}", f"s{i}", i == 12) for i in range(13)]
    folds = [item for item in layout(rows) if isinstance(item, Fold)]
    assert [f.count for f in folds] == [12 - CONTEXT] and 12 - CONTEXT >= FOLD_AT
    assert folds[0].text == f"… {12 - CONTEXT} identical rows (s0 … s{12 - CONTEXT - 1})"


def test_an_equivalent_deep_model_folds_to_one_line() -> None:
    report = _report({})
    table = _table(TextRenderer().render(report))
    assert table[2:] == [f"  … {3 * LAYERS + 1} identical rows (encoder.layer.0.dense … "
                         "pooler)"]


def test_flat_scopes_are_not_grouped() -> None:
    rows = [Row("linear [4, 8]", "linear [4, 8]", "hidden", "hidden", False),
            Row("relu [4, 8]", "—", "act", "", True)]
    assert [(i.lhs_scope, i.rhs_scope) for i in layout(rows) if isinstance(i, Line)] == [
        ("hidden", "hidden"), ("act", "")]


def test_blocks() -> None:
    assert block("encoder.layer.5.attention.self.query") == "encoder.layer.5"
    assert block("bert.encoder.layer_._5.attention") == "bert.encoder.layer_._5"
    assert block("h.3.attn") == "h.3"
    assert block("embeddings.word_embeddings") == "embeddings"
    assert block("pooler") == "pooler"
    assert block("") == ""
