"""Equations as presentation MathML (which Chromium renders; it renders no content MathML),
with the terms that differ from the other side's equation marked.

Every name from a model is escaped: a parameter called ``<script>`` prints as text. Marked
terms are wrapped in ``<mrow class="d" mathbackground="...">``.

Example:
    >>> import sympy
    >>> x, w = sympy.symbols("x W_fc", commutative=False)
    >>> to_mathml("h", x * w)
    '<math display="block"><mi>h</mi><mo>=</mo><mrow><mi>x</mi><mo>·</mo><msub><mi>W</mi><mi>fc</mi></msub></mrow></math>'
"""

from __future__ import annotations

from collections.abc import Set
from html import escape
from typing import Any

import sympy

__all__ = ["to_mathml", "differing_terms", "MARK"]

MARK = "#ffd9d4"  # the background of a term that differs from the other side


def _esc(text: str) -> str:
    return escape(text, quote=True)


def _name(name: str) -> str:
    base, sep, sub = name.partition("_")
    if not sep or not base or not sub:
        return f"<mi>{_esc(name)}</mi>"
    return f"<msub><mi>{_esc(base)}</mi><mi>{_esc(sub)}</mi></msub>"


def _number(value: Any) -> str:
    if isinstance(value, sympy.Integer) or (isinstance(value, int)):
        text = str(int(value))
    elif isinstance(value, sympy.Rational):
        return (f"<mfrac><mn>{abs(value.p)}</mn><mn>{value.q}</mn></mfrac>" if value.p >= 0
                else f"<mrow><mo>−</mo><mfrac><mn>{-value.p}</mn><mn>{value.q}</mn></mfrac>"
                     "</mrow>")
    else:
        text = f"{float(value):.6g}"
    if "e" in text:
        mant, _, exp = text.partition("e")
        return (f"<mrow><mn>{_esc(mant)}</mn><mo>·</mo><msup><mn>10</mn>"
                f"<mn>{int(exp)}</mn></msup></mrow>")
    if text.startswith("-"):
        return f"<mrow><mo>−</mo><mn>{_esc(text[1:])}</mn></mrow>"
    return f"<mn>{_esc(text)}</mn>"


def _attr(value: Any) -> str:
    if isinstance(value, tuple):
        return "<mo>(</mo>" + "<mo>,</mo>".join(_attr(v) for v in value) + "<mo>)</mo>"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"<mtext>{_esc(str(value))}</mtext>"
    return _number(value)


class _Printer:
    def __init__(self, marks: Set[Any]) -> None:
        self.marks = marks

    def __call__(self, expr: Any, paren: bool = False) -> str:
        out = self._print(expr)
        if paren and self._compound(expr):
            out = f"<mrow><mo>(</mo>{out}<mo>)</mo></mrow>"
        return self._marked(out, id(expr))

    def _marked(self, out: str, key: Any) -> str:
        if key in self.marks:
            return f'<mrow class="d" mathbackground="{MARK}">{out}</mrow>'
        return out

    @staticmethod
    def _compound(expr: Any) -> bool:
        return isinstance(expr, (sympy.Add, sympy.Mul)) or (
            isinstance(expr, sympy.Number) and expr.is_negative)

    def _print(self, expr: Any) -> str:
        if isinstance(expr, sympy.Symbol):
            return _name(expr.name)
        if isinstance(expr, sympy.Number):
            return _number(expr)
        if isinstance(expr, sympy.Add):
            parts = []
            for k, term in enumerate(expr.args):
                coeff, rest = (term.as_coeff_Mul() if isinstance(term, sympy.Mul)
                               else (None, term))
                if k and coeff is not None and coeff.is_negative:
                    positive = rest if coeff == -1 else sympy.Mul(-coeff, rest,
                                                                  evaluate=False)
                    parts.append(f"<mo>−</mo>{self(positive, paren=isinstance(rest, sympy.Add))}")
                else:
                    parts.append(("<mo>+</mo>" if k else "") + self(term))
            return f"<mrow>{''.join(parts)}</mrow>"
        if isinstance(expr, sympy.Mul):
            factors = list(expr.args)
            if factors and factors[0] == -1:
                rest = sympy.Mul(*factors[1:], evaluate=False)
                return f"<mrow><mo>−</mo>{self(rest, paren=True)}</mrow>"
            return "<mrow>" + "<mo>·</mo>".join(self(f, paren=True) for f in factors) + \
                "</mrow>"
        if isinstance(expr, sympy.Pow):
            base, exp = expr.args
            if exp == sympy.Rational(1, 2):
                return f"<msqrt>{self(base)}</msqrt>"
            if exp == sympy.Rational(-1, 2):
                return f"<mfrac><mn>1</mn><msqrt>{self(base)}</msqrt></mfrac>"
            if exp == -1:
                return f"<mfrac><mn>1</mn>{self(base)}</mfrac>"
            return f"<msup>{self(base, paren=True)}{self(exp)}</msup>"
        if isinstance(expr, sympy.Function) or isinstance(expr, sympy.core.function.Application):
            attrs = getattr(type(expr), "sg_attrs", ())
            args = "<mo>,</mo>".join(self(a) for a in expr.args)
            if attrs:
                shown = "<mo>,</mo>".join(
                    f"<mi>{_esc(k)}</mi><mo>=</mo>{self._marked(_attr(v), (id(expr), k))}"
                    for k, v in attrs)
                args = f"{args}<mo>;</mo>{shown}" if args else shown
            name = getattr(expr.func, "__name__", str(expr.func))
            return (f"<mrow><mi>{_esc(name)}</mi><mo>&#x2061;</mo><mrow><mo>(</mo>{args}"
                    "<mo>)</mo></mrow></mrow>")
        return f"<mtext>{_esc(str(expr))}</mtext>"


def to_mathml(lhs: str, expr: Any, marks: Set[Any] = frozenset()) -> str:
    """``lhs = expr`` as a block ``<math>`` element; the subexpressions whose ``id`` is in
    ``marks`` highlighted."""
    names = "<mo>,</mo>".join(_name(n.strip()) for n in lhs.split(","))
    return f'<math display="block">{names}<mo>=</mo>{_Printer(marks)(expr)}</math>'


def _shape(expr: Any) -> Any:
    """The expression with every symbol the same: two sides name parameters differently."""
    if isinstance(expr, sympy.Symbol):
        return "sym"
    if isinstance(expr, sympy.Number):
        return ("num", float(f"{float(expr):.6g}"))
    head = (type(expr).__name__, getattr(expr.func, "__name__", ""),
            getattr(type(expr), "sg_attrs", ()))
    return (head, tuple(_shape(a) for a in expr.args))


def differing_terms(a: Any, b: Any) -> tuple[set[Any], set[Any]]:
    """The subexpressions of ``a`` and of ``b`` (as ``id``; an attribute of a function as
    ``(id, key)``) where the two differ, symbols
    compared by position only (two sides name their parameters differently): the smallest
    terms that explain the difference; nothing when the two are the same."""
    left: set[Any] = set()
    right: set[Any] = set()
    _walk(a, b, left, right)
    return left, right


def _head(expr: Any) -> tuple[str, str]:
    """What an expression applies, its attributes aside (each attribute set of a named
    function makes another sympy class)."""
    if isinstance(expr, sympy.core.function.AppliedUndef):
        return ("fn", expr.func.__name__)
    return (type(expr).__name__, "")


def _walk(a: Any, b: Any, left: set[Any], right: set[Any]) -> None:
    if _shape(a) == _shape(b):
        return
    atoms = (sympy.Symbol, sympy.Number)
    if isinstance(a, sympy.Add) and isinstance(b, sympy.Add):
        _walk_sum(a, b, left, right)
        return
    same_head = not isinstance(a, atoms) and not isinstance(b, atoms) and \
        _head(a) == _head(b) and len(a.args) == len(b.args)
    if same_head:
        for x, y in zip(a.args, b.args):
            _walk(x, y, left, right)
        ka, kb = dict(getattr(type(a), "sg_attrs", ())), dict(getattr(type(b), "sg_attrs", ()))
        for k in sorted(set(ka) | set(kb)):
            if ka.get(k) != kb.get(k):  # an attribute that differs (an eps): marked alone
                (left.add((id(a), k)) if k in ka else None)
                (right.add((id(b), k)) if k in kb else None)
        return
    # one side wraps the other (an activation one side lacks): mark the wrapper's head only
    if not isinstance(a, atoms) and any(_shape(x) == _shape(b) for x in a.args):
        left.add(id(a))
        return
    if not isinstance(b, atoms) and any(_shape(y) == _shape(a) for y in b.args):
        right.add(id(b))
        return
    left.add(id(a))
    right.add(id(b))


def _walk_sum(a: Any, b: Any, left: set[Any], right: set[Any]) -> None:
    """Two sums, their terms in any order (sympy sorts them by name, and the two sides name
    things differently): terms alike on both sides are paired off, one odd term a side is
    compared inside, more are marked one by one."""
    rest = list(b.args)
    odd_a = []
    for x in a.args:
        k = next((k for k, y in enumerate(rest) if _shape(y) == _shape(x)), None)
        if k is None:
            odd_a.append(x)
        else:
            rest.pop(k)
    if len(odd_a) == 1 and len(rest) == 1:
        _walk(odd_a[0], rest[0], left, right)
        return
    left.update(id(x) for x in odd_a)
    right.update(id(y) for y in rest)
