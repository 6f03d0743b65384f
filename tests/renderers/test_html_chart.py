"""The error chart's SVG and the equations' marks, as markup (the browser tests draw them)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from specgraph.renderers.html_chart import error_chart, fmt_number


def _page(layers):
    return SimpleNamespace(layers=layers, sides=[{"name": "lhs"}, {"name": "rhs"}])


def _row(name, fw, bad=False, tf=1e-5):
    return {"l": "n0", "r": "n0", "name": name, "fw": fw, "tf": tf, "tb": 2 * tf,
            "bad_f": bad}


def _point(svg: str, name: str) -> str:
    return re.search(r'<circle class="([^"]+)" cx="[^"]+" cy="([^"]+)"[^>]*><title>'
                     + re.escape(name), svg).group(0)


def test_points_above_their_tolerance_are_flagged_and_zeros_are_exact():
    svg = error_chart(_page([_row("ok", 2e-6), _row("above", 4e-4), _row("zero", 0.0),
                             _row("bad", 3e-2, bad=True)]))
    assert 'class="pt fw"' in _point(svg, "ok")
    assert 'class="pt fw over"' in _point(svg, "above")
    assert "above its tolerance" in svg
    assert 'class="pt fw bad"' in _point(svg, "bad") and "diverges" in svg
    zero = _point(svg, "zero")
    assert 'class="pt fw exact"' in zero and ": exact</title>" not in zero
    # zero sits in the exact band, below the lowest decade's grid line
    ys = {name: float(re.search(r'cy="([^"]+)"', _point(svg, name)).group(1))
          for name in ("ok", "zero")}
    grid = max(float(y) for y in re.findall(r'<line class="grid"[^>]* y1="([^"]+)"', svg))
    assert ys["zero"] > grid >= ys["ok"]
    assert ">exact<" in svg and "exact: an error of zero" in svg
    assert svg.count('text class="xl"') == 4  # every layer named under the axis
    assert 'width="100%"' in svg and "viewBox=" in svg


def test_numbers_have_three_significant_digits():
    assert [fmt_number(v) for v in (1.23456e-5, 0.000999, 0.001, 0.98765, 4.0, 999.9,
                                    1000.0, -2.5e-9)] == \
        ["1.23e-5", "9.99e-4", "0.001", "0.988", "4", "1e3", "1e3", "-2.5e-9"]


def test_an_extra_term_of_a_sum_is_marked_alone():
    """Sums compare term by term in any order: only the term one side adds is marked."""
    import sympy

    from specgraph.mathml import differing_terms

    x, w, b, c = sympy.symbols("x W_fc b_fc c", commutative=False)
    lhs, rhs = x * w + b, x * w + b + c
    left, right = differing_terms(lhs, rhs)
    assert left == set() and right == {id(c)}
    left, right = differing_terms(sympy.sqrt(x) * w + b, x * w + b)
    assert left == {id(sympy.sqrt(x))} and right == set()  # the root lhs wraps x in
