"""Einsum subscripts in the canonical form (explicit output, no ellipsis), from a framework's
einsum equation or a tensordot's contracted axes."""

from __future__ import annotations

import string
from collections.abc import Sequence

__all__ = ["explicit_einsum", "tensordot_equation"]


def explicit_einsum(equation: str, ranks: Sequence[int]) -> str:
    """``equation`` without ellipses and with its output spelled out (implicit mode: the
    ellipsis axes, then the subscripts used once, in alphabetical order, as NumPy, PyTorch
    and TF read it).

    >>> explicit_einsum("...ij,jk", [3, 2])
    'aij,jk->aik'
    """
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    used = set(equation) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    widest = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t),
                 default=0)
    fill = "".join(spare[:widest])
    terms = [t.replace("...", fill[widest - (r - len(t.replace("...", ""))):]) if "..." in t
             else t for t, r in zip(terms, ranks)]
    if arrow:
        rhs = rhs.replace("...", fill)
    else:
        letters = "".join(terms)
        rhs = fill + "".join(sorted(c for c in set(letters) - set(fill)
                                    if letters.count(c) == 1))
    return ",".join(terms) + "->" + rhs


def tensordot_equation(rank_a: int, rank_b: int, axes_a: Sequence[int],
                       axes_b: Sequence[int]) -> str:
    """The subscripts of a tensordot contracting ``axes_a`` of a with ``axes_b`` of b: the
    output is a's other axes, then b's, each in order.

    >>> tensordot_equation(3, 2, [2], [1])
    'abc,dc->abd'
    """
    letters = iter(string.ascii_letters)
    a = [next(letters) for _ in range(rank_a)]
    b = [""] * rank_b
    for i, j in zip(axes_a, axes_b):
        b[j % rank_b] = a[i % rank_a]
    b = [c or next(letters) for c in b]
    contracted = {i % rank_a for i in axes_a}
    out = [c for i, c in enumerate(a) if i not in contracted]
    out += [c for j, c in enumerate(b) if j not in {k % rank_b for k in axes_b}]
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}"
