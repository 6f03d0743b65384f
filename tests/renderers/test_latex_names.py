"""Names from a model reach LaTeX output as text: every special character escaped."""

from __future__ import annotations

import pytest

from specgraph.symbolic import escape_latex

SPECIALS = "\\{}$%&#_^~"


def test_escape_latex_escapes_every_special_character() -> None:
    assert escape_latex(SPECIALS) == (r"\text{\textbackslash}\{\}\$\%\&\#\_"
                                      r"\text{\textasciicircum}\text{\textasciitilde}")
    assert escape_latex("a\nb\r") == "a b "


def _unescaped(text: str) -> list[str]:
    """Special characters in ``text`` not produced by escape_latex or our own markup."""
    rest = text.replace(" &= ", " = ")  # align*'s own alignment point
    for safe in (r"\text{\textbackslash}", r"\text{\textasciicircum}",
                 r"\text{\textasciitilde}", r"\{", r"\}", r"\$", r"\%", r"\&", r"\#", r"\_"):
        rest = rest.replace(safe, "")
    return [c for c in "$%&#~^" if c in rest] + (["\\input"] if "\\input" in rest else [])


def test_latex_output_escapes_hostile_scope_and_param_names() -> None:
    pytest.importorskip("sympy")
    from specgraph.ir import GraphBuilder
    from specgraph.model import TracedModel
    from specgraph.renderers import get_renderer
    from specgraph.summary import summarize

    hostile = "x\\input{/etc/passwd}$%&#^~\nq"
    b = GraphBuilder("m")
    x = b.input("x", (2, 2), "float32")
    w = b.param(f"w{hostile}", (2, 2), "float32")
    y = b.add("matmul", [x, w], shape=(2, 2), dtype="float32", scope=f"blk{hostile}")
    b.output("y", y)
    import numpy as np

    traced = TracedModel(graph=b.build(), weights={f"w{hostile}": np.eye(2, dtype="float32")},
                         inputs={"x": np.ones((2, 2), "float32")},
                         outputs={"y": np.ones((2, 2), "float32")}, framework="torch",
                         reference=f"r{hostile}")
    text = get_renderer("latex").render(summarize(traced))
    assert "\nq" not in text  # the newline in the names ends no comment
    body = "\n".join(line for line in text.splitlines() if not line.startswith("%"))
    assert "\\input{" not in body and _unescaped(body) == []
    assert all(line.startswith(("%", "\\", "y ")) for line in text.splitlines())


def test_latex_output_escapes_string_attribute_values() -> None:
    # an ONNX Einsum's equation string reaches the equations as an attribute value
    from specgraph.ir import GraphBuilder
    from specgraph.model import TracedModel
    from specgraph.renderers import get_renderer
    from specgraph.summary import summarize
    import numpy as np

    hostile = "ij\\input{/etc/passwd}$%&#^~->ij"
    b = GraphBuilder("m")
    x = b.input("x", (2, 2), "float32")
    y = b.add("einsum", [x], {"equation": hostile}, shape=(2, 2), dtype="float32")
    z = b.add("pad", [y], {"pads": (0, 0, 0, 0), "mode": "constant"}, shape=(2, 2),
              dtype="float32")
    b.output("z", z)
    traced = TracedModel(graph=b.build(), weights={}, inputs={"x": np.ones((2, 2), "float32")},
                         outputs={"z": np.ones((2, 2), "float32")}, framework="onnx",
                         reference="m.onnx")
    text = get_renderer("latex").render(summarize(traced))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("%"))
    assert "input" in body, body  # the value is shown ...
    assert "\\input{" not in body and _unescaped(body) == []  # ... as text
