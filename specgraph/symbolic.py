"""Symbolic equations: each layer of a Graph as a sympy expression, in Unicode text and LaTeX.

Tensors are non-commutative sympy symbols (so ``x·W`` keeps its order), parameters are named
after the model (``W_fc1``, ``b_fc1``, ``γ_ln``), and a value with a single reader is merged
into that reader when the reader is elementwise, so ``relu(x·W_fc1 + b_fc1)`` is one line.

Example:
    >>> from specgraph.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input("x", (4, 2), "float32")
    >>> w, c = b.param("fc1.weight", (2, 8), "float32"), b.param("fc1.bias", (8,), "float32")
    >>> h = b.add("linear", [x, w, c], shape=(4, 8), dtype="float32", scope="fc1")
    >>> b.output("h", b.add("relu", [h], shape=(4, 8), dtype="float32", scope="act"))
    >>> [e.text for e in equations(b.build())]
    ['h = relu(x·W_fc1 + b_fc1)']
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops._sym import call, literal

__all__ = ["Equation", "equations", "to_text", "to_latex", "escape_latex"]

_MERGE_INTO = frozenset({"elementwise", "activation"})
_NORMS = frozenset({"batch_norm", "layer_norm", "group_norm", "rms_norm"})
_ROLE = {"weight": "W", "kernel": "W", "bias": "b", "running_mean": "μ", "running_var": "σ²",
         "moving_mean": "μ", "moving_variance": "σ²", "mean": "μ", "var": "σ²",
         "embedding": "E", "embeddings": "E", "gamma": "γ", "beta": "β"}
_NORM_ROLE = {"weight": "γ", "scale": "γ", "bias": "β"}


@dataclass(frozen=True)
class Equation:
    """One line: ``lhs = expr``, for the layer at ``scope``.

    Attributes:
        lhs: the defined name (a graph output name, or ``h1``, ``h2``, ...).
        expr: the sympy expression.
        scope: the module path of the layer this line belongs to.
        nodes: indices of the graph nodes merged into this line.
        text: ``lhs = expr`` in Unicode.
        latex: ``lhs = expr`` in LaTeX.
    """

    lhs: str
    expr: Any
    scope: str
    nodes: tuple[int, ...]
    text: str
    latex: str


def _parent(scope: str) -> str:
    return scope.rpartition(".")[0]


def _principal_scope(graph: Graph, merged: list[int]) -> str:
    for i in merged:
        if get_spec(graph.nodes[i].op).category == "layer":
            return graph.nodes[i].scope
    return graph.nodes[merged[-1]].scope


class _Namer:
    """Print-time names for parameters and constants."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def param_symbol(self, name: str) -> sympy.Symbol:
        module, _, leaf = name.rpartition(".")
        for suffix in ("_weight", "_bias"):
            if leaf.endswith(suffix) and leaf != suffix:  # in_proj_weight -> W_attn.in_proj
                module = f"{module}.{leaf[: -len(suffix)]}" if module else leaf[: -len(suffix)]
                leaf = suffix[1:]
        role = _ROLE.get(leaf, leaf)
        users = self.graph.consumers(self.graph.params[name])
        if users and users[0].op in _NORMS:
            role = _NORM_ROLE.get(leaf, role)
        text = f"{role}_{module}" if module else role
        return sympy.Symbol(text, commutative=False)


def _constant_expr(data: np.ndarray, index: int) -> Any:
    if data.size == 1:
        value = data.reshape(()).item()
        if isinstance(value, bool):
            return sympy.true if value else sympy.false
        return literal(float(value))
    return sympy.Symbol(f"C{index}", commutative=False)


def equations(graph: Graph, *, named: Collection[int] = ()) -> list[Equation]:
    """The graph as equations, one per layer, in graph order (see the module docstring).

    Args:
        graph: the graph.
        named: indices of nodes whose outputs get a line of their own even where they would
            merge into their reader (to print two graphs with the same lines).
    """
    namer = _Namer(graph)
    named = frozenset(named)
    exprs: dict[Value, Any] = {}
    for name, v in zip(graph.input_names, graph.inputs):
        exprs[v] = sympy.Symbol(name, commutative=False)
    for name, v in graph.params.items():
        exprs[v] = namer.param_symbol(name)
    for i, (v, data) in enumerate(graph.constants.items()):
        exprs[v] = _constant_expr(np.asarray(data), i)
    outputs = {v: n for n, v in zip(graph.output_names, graph.outputs)}
    pending: dict[Value, list[int]] = {}  # merged values -> nodes merged into them
    picks = _picks(graph)
    depths: dict[Value, int] = {}  # how many ops are merged into a value's expression
    lines: list[Equation] = []
    counter = 0
    for i, node in enumerate(graph.nodes):
        if i in picks:  # a split into pieces of one, each read as one index: said there
            for v in node.outputs:
                pending[v] = [i]
            continue
        merged = sorted({j for v in node.inputs for j in pending.pop(v, [])} | {i})
        piece = picks.get(graph.index(graph.producer(node.inputs[0]))) \
            if node.inputs and graph.producer(node.inputs[0]) is not None else None
        if piece is not None:  # x[:, k] as the model wrote it
            split = graph.producer(node.inputs[0])
            k = split.outputs.index(node.inputs[0])
            expr = call("gather", exprs[split.inputs[0]], literal(k), axis=piece)
        else:
            expr = _apply(node, [exprs[v] for v in node.inputs])
        depth = 1 + max((depths.get(v, 0) for v in node.inputs), default=0)
        if len(node.outputs) == 1 and node.output not in outputs and depth < _DEPTH and \
                i not in named and _mergeable(node, graph):
            depths[node.output] = depth
            exprs[node.output] = expr
            pending[node.output] = merged
            continue
        names = []
        for v in node.outputs:
            if v in outputs:
                names.append(outputs[v])
            else:
                counter += 1
                names.append(f"h{counter}")
            exprs[v] = sympy.Symbol(names[-1], commutative=False)
        lhs = ", ".join(names)
        lines.append(Equation(lhs, expr, _principal_scope(graph, merged), tuple(merged),
                              f"{lhs} = {to_text(expr)}",
                              f"{', '.join(_latex_name(n) for n in names)} = {to_latex(expr)}"))
    return lines


_DEPTH = 32  # ops merged into one expression at most: a longer chain gets named values


def _picks(graph: Graph) -> dict[int, int]:
    """Splits into pieces of one along an axis whose every piece is read only by a reshape
    that drops that axis (``x[:, 0], x[:, 1]``, unpacking, ``unbind``): node index -> axis.
    Their equations say each piece as the index it takes."""
    out: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "split" or any(s != 1 for s in node.attrs.get("sizes", ())):
            continue
        axis = node.attrs["axis"] % node.inputs[0].rank
        dropped = tuple(d for a, d in enumerate(node.inputs[0].shape) if a != axis)
        readers = [graph.consumers(v) for v in node.outputs]
        if all(len(r) == 1 and r[0].op == "reshape" and r[0].outputs[0].shape == dropped
               for r in readers):
            out[i] = axis
    return out


def _mergeable(node: Node, graph: Graph) -> bool:
    users = graph.consumers(node.output)
    if len(users) != 1 or users[0].inputs.count(node.output) != 1:
        return False
    user = users[0]
    category = get_spec(node.op).category
    if category == "shape":
        return True
    if get_spec(user.op).category not in _MERGE_INTO:
        return False
    same_group = node.scope == user.scope or _parent(node.scope) == _parent(user.scope)
    return same_group and category in ("layer", "elementwise", "activation")


def _apply(node: Node, args: list[Any]) -> Any:
    spec = get_spec(node.op)
    if spec.equation is None:
        return call(node.op, *args, **_shown_attrs(node))
    try:
        return spec.equation(*args, **dict(node.attrs))
    except (TypeError, ValueError, AttributeError):  # a rule that cannot take these args
        return call(node.op, *args, **_shown_attrs(node))


def _shown_attrs(node: Node) -> dict[str, Any]:
    return {k: v for k, v in node.attrs.items() if not isinstance(v, bool) or v}


# --- printing ----------------------------------------------------------------------------
_SIZES = frozenset({"shape", "kernel", "stride", "dilation", "out", "sizes"})


def _fmt(value: Any, times: str = "×", key: str = "shape",
         escape: Callable[[str], str] = str) -> str:
    if isinstance(value, tuple):
        if key not in _SIZES or not value:
            return "(" + ", ".join(_fmt(v, times, escape=escape) for v in value) + ")"
        return times.join(_fmt(v, times, escape=escape) for v in value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return escape(str(value))


class _TextPrinter(StrPrinter):
    """Single-line Unicode: ``·`` for products, ``√`` for roots, attributes after ``;``."""

    def _print_Mul(self, expr: Any) -> str:
        if expr.is_commutative:
            return super()._print_Mul(expr)
        coeff, factors = expr.args_cnc()
        parts = [self.parenthesize(f, 50) for f in coeff + factors]
        return "·".join(parts)

    def _print_Pow(self, expr: Any, rational: bool = False) -> str:
        base, exp = expr.args
        if exp == sympy.Rational(1, 2):
            return f"√({self._print(base)})"
        if exp == sympy.Rational(-1, 2):
            return f"1/√({self._print(base)})"
        if exp == -1:
            return f"1/{self.parenthesize(base, 60)}"
        return super()._print_Pow(expr, rational)

    def _print_Function(self, expr: Any) -> str:
        attrs = getattr(type(expr), "sg_attrs", ())
        args = ", ".join(self._print(a) for a in expr.args)
        if attrs:
            shown = ", ".join(f"{k}={_fmt(v, key=k)}" for k, v in attrs)
            args = f"{args}; {shown}" if args else shown
        return f"{expr.func.__name__}({args})"

    def _print_Float(self, expr: Any) -> str:
        return f"{float(expr):.6g}"


class _LatexPrinter(LatexPrinter):
    """LaTeX with ``\\cdot`` products, named parameters and attributes after ``;``."""

    def _print_Symbol(self, expr: Any, style: str = "plain") -> str:
        return _latex_name(expr.name)

    def _print_Mul(self, expr: Any) -> str:
        if expr.is_commutative:
            return super()._print_Mul(expr)
        coeff, factors = expr.args_cnc()
        return r" \cdot ".join(self.parenthesize(f, 50) for f in coeff + factors)

    def _print_Function(self, expr: Any, exp: Any = None) -> str:
        attrs = getattr(type(expr), "sg_attrs", ())
        name = escape_latex(expr.func.__name__)
        args = ", ".join(self._print(a) for a in expr.args)
        if attrs:
            shown = ", ".join(rf"\mathrm{{{escape_latex(k.replace('_', '-'))}}}="
                              rf"{_fmt(v, _LATEX_TIMES, k, _latex_text)}" for k, v in attrs)
            args = f"{args};\\ {shown}" if args else shown
        out = rf"\operatorname{{{name}}}\left({args}\right)"
        return f"{out}^{{{exp}}}" if exp else out

    def _print_Float(self, expr: Any) -> str:
        return f"{float(expr):.6g}"


_LATEX_TIMES = r" \times "
_GREEK = {"γ": r"\gamma", "β": r"\beta", "μ": r"\mu", "σ²": r"\sigma^2"}


# Every character LaTeX reads as markup, as something that prints it, in text and in math
# mode alike (``\text`` is amsmath's, which ``align*`` needs anyway); control characters
# (a newline would end a ``%`` comment) become spaces.
_LATEX_ESCAPES = str.maketrans({
    "\\": r"\text{\textbackslash}", "{": r"\{", "}": r"\}", "$": r"\$", "%": r"\%",
    "&": r"\&", "#": r"\#", "_": r"\_", "^": r"\text{\textasciicircum}",
    "~": r"\text{\textasciitilde}",
    **{chr(c): " " for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}})


def escape_latex(text: str) -> str:
    """``text`` (a name from a model) as LaTeX that prints it: ``\\ { } $ % & # _ ^ ~``
    escaped, control characters as spaces.

    >>> escape_latex(r"a_b\\input{x}")
    'a\\\\_b\\\\text{\\\\textbackslash}input\\\\{x\\\\}'
    """
    return text.translate(_LATEX_ESCAPES)


def _latex_text(text: str) -> str:
    """An attribute's words (a mode, an opaque node's string attribute) as upright text."""
    return rf"\text{{{escape_latex(text)}}}" if any(c.isalpha() for c in text) else \
        escape_latex(text)


def _latex_name(name: str) -> str:
    base, sep, sub = name.partition("_")
    greek = _GREEK.get(base)
    base = greek or escape_latex(base)
    if len(base) > 1 and greek is None:
        base = rf"\mathrm{{{base}}}"
    if not sep:
        return base
    return rf"{base}_{{\mathrm{{{escape_latex(sub)}}}}}"


_TEXT = _TextPrinter({"order": "none"})
_LATEX = _LatexPrinter({"order": "none"})


def to_text(expr: Any) -> str:
    """``expr`` as one line of Unicode text."""
    return _TEXT.doprint(expr)


def to_latex(expr: Any) -> str:
    """``expr`` as LaTeX."""
    return _LATEX.doprint(expr)


def group_by_scope(lines: list[Equation]) -> list[tuple[str, list[Equation]]]:
    """Consecutive equations of the same scope as ``(scope, lines)`` groups, in graph order."""
    groups: list[tuple[str, list[Equation]]] = []
    for line in lines:
        if groups and groups[-1][0] == line.scope:
            groups[-1][1].append(line)
        else:
            groups.append((line.scope, [line]))
    return groups
