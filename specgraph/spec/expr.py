"""Expressions in a spec, read without ``eval``: arithmetic over named sizes and
hyperparameters (``d_model / heads``, ``1 / sqrt(d_head)``), and equations in sympy syntax
(``y = gelu(x*W + b)``).

Both are parsed with Python's ``ast`` and walked here over a whitelist of nodes; anything
else (attributes, subscripts, strings, lambdas, comprehensions) is refused. Arithmetic runs
in floating point, so no expression can build a huge integer; a result that is not finite is
refused. Equations become sympy expressions built with ``evaluate=False``, so sympy computes
nothing while reading them.

Example:
    >>> evaluate("d_model / heads", {"d_model": 512, "heads": 8})
    64
    >>> equation("y = gelu(x*W)", {"x", "W"}, set())
    ('y', gelu(x*W))
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import sympy

__all__ = ["ExprError", "evaluate", "equation", "FUNCTIONS", "suggest"]

MAX_TEXT = 400
MAX_NODES = 200
_EXACT = 2.0**53  # integers beyond this are no longer exact in floating point

FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "floor": math.floor,
    "ceil": math.ceil, "abs": abs, "min": min, "max": max,
}
_ARITY = {"min": (2, 8), "max": (2, 8)}
_SYMPY = {"sqrt": sympy.sqrt, "exp": sympy.exp, "log": sympy.log}
_ALLOWED = ("arithmetic (+ - * / // % **) over numbers, names and "
            + ", ".join(FUNCTIONS))


class ExprError(Exception):
    """An expression that cannot be read or evaluated; the message says why and what to do
    (the caller adds where)."""


def suggest(name: str, known: Collection[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``known``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _parse(text: str) -> ast.expr:
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise ExprError(f"the expression has {len(text)} characters, more than {MAX_TEXT}; "
                        "name its parts as hyperparameters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExprError(f"{text!r} is not an expression; write {_ALLOWED}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"{text!r} is longer than {MAX_NODES} terms; name its parts as "
                        "hyperparameters")
    return tree.body


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _number(value: Any, text: str) -> float:
    text = _show(text)[1:-1]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExprError(f"{text!r} holds {value!r}, which is not a number; write {_ALLOWED}")
    try:
        out = float(value)
    except OverflowError:
        raise ExprError(f"{text!r} holds a number too large to compute with") from None
    if not math.isfinite(out):
        raise ExprError(f"{text!r} holds {value!r}; a value must be a finite number")
    return out


def _tidy(value: float, exact: bool) -> int | float:
    """An integral result of integers as an int (sizes), anything else as a float."""
    if exact and value.is_integer() and abs(value) < _EXACT:
        return int(value)
    return value


def evaluate(expr: Any, names: Mapping[str, int | float]) -> int | float:
    """The value of ``expr``: a number, or text of arithmetic over ``names``.

    Raises:
        ExprError: the text is no arithmetic, names an unknown name, divides by zero or
            overflows.
    """
    if not isinstance(expr, str):
        value = _number(expr, str(expr))
        return _tidy(value, isinstance(expr, int))
    result, exact = _Arithmetic(expr, names).run(_parse(expr))
    return _tidy(result, exact)


class _Arithmetic:
    def __init__(self, text: str, names: Mapping[str, int | float]) -> None:
        self.text, self.names = text, names

    def fail(self, what: str) -> ExprError:
        return ExprError(f"{_show(self.text)}: {what}")

    def run(self, node: ast.expr) -> tuple[float, bool]:
        """(value, whether it is an integer computed from integers only)."""
        if isinstance(node, ast.Constant):
            return _number(node.value, self.text), isinstance(node.value, int)
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise self.fail(f"{node.id} is not defined here{suggest(node.id, self.names)}; "
                                f"names defined here: {known}")
            value = self.names[node.id]
            return _number(value, self.text), isinstance(value, int)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value, exact = self.run(node.operand)
            return (-value if isinstance(node.op, ast.USub) else value), exact
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FUNCTIONS and not node.keywords:
            return self._call(node.func.id, node.args)
        raise self.fail(f"{ast.unparse(node)!r} is not allowed; write {_ALLOWED}")

    def _binary(self, node: ast.BinOp) -> tuple[float, bool]:
        (a, ea), (b, eb) = self.run(node.left), self.run(node.right)
        op = node.op
        try:
            if isinstance(op, ast.Add):
                out = a + b
            elif isinstance(op, ast.Sub):
                out = a - b
            elif isinstance(op, ast.Mult):
                out = a * b
            elif isinstance(op, ast.Div):
                out, ea = a / b, ea and eb and a % b == 0
            elif isinstance(op, ast.FloorDiv):
                out = a // b
            elif isinstance(op, ast.Mod):
                out = a % b
            elif isinstance(op, (ast.Pow, ast.BitXor)):  # x^2 as people write it
                out = math.pow(a, b)
                ea = ea and b >= 0
            else:
                raise self.fail(f"the operator in {ast.unparse(node)!r} is not allowed; "
                                f"write {_ALLOWED}")
        except ZeroDivisionError:
            raise self.fail(f"{ast.unparse(node)!r} divides by zero") from None
        except (OverflowError, ValueError):
            raise self.fail(f"{ast.unparse(node)!r} has no finite value") from None
        if not math.isfinite(out):
            raise self.fail(f"{ast.unparse(node)!r} has no finite value")
        return out, ea and eb

    def _call(self, name: str, args: list[ast.expr]) -> tuple[float, bool]:
        low, high = _ARITY.get(name, (1, 1))
        if not low <= len(args) <= high:
            raise self.fail(f"{name} takes {low if low == high else f'{low} to {high}'} "
                            f"argument{'s' if high > 1 else ''}, got {len(args)}")
        values = [self.run(a) for a in args]
        try:
            out = float(FUNCTIONS[name](*(v for v, _ in values)))
        except (ValueError, OverflowError):
            raise self.fail(f"{name} has no finite value for "
                            f"{', '.join(f'{v:g}' for v, _ in values)}") from None
        exact = all(e for _, e in values) and name in ("abs", "min", "max") or \
            name in ("floor", "ceil")
        if not math.isfinite(out):
            raise self.fail(f"{name} has no finite value here")
        return out, exact


def equation(text: str, tensors: Collection[str], scalars: Collection[str]
             ) -> tuple[str | None, Any]:
    """An equation ``[lhs =] expr`` in sympy syntax, as ``(lhs, sympy expression)``.

    ``tensors`` become non-commutative symbols (``x*W`` keeps its order), ``scalars``
    commutative ones; any other name is refused, except as a function called (``gelu(x)``,
    ``softmax(s)``). ``k.T`` reads as ``transpose(k)`` and ``a^b`` as ``a**b``.

    Raises:
        ExprError: the text is no equation or names an unknown name.
    """
    lhs, sep, rhs = text.partition("=")
    if sep and not rhs.startswith("=") and lhs.strip().isidentifier():
        name: str | None = lhs.strip()
    else:
        name, rhs = None, text
    build = _Sympy(rhs, set(tensors), set(scalars))
    return name, build.run(_parse(rhs))


class _Sympy:
    _OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "mul",
            ast.Div: "div", ast.Pow: "pow", ast.BitXor: "pow"}

    def __init__(self, text: str, tensors: set[str], scalars: set[str]) -> None:
        self.text, self.tensors, self.scalars = text.strip(), tensors, scalars

    def fail(self, what: str) -> ExprError:
        return ExprError(f"the equation {_show(self.text)}: {what}")

    def run(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            value = _number(node.value, self.text)
            return sympy.Integer(int(value)) if isinstance(node.value, int) else \
                sympy.Float(value)
        if isinstance(node, ast.Name):
            return self._symbol(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.run(node.operand)
            return sympy.Mul(-1, inner, evaluate=False) if isinstance(node.op, ast.USub) \
                else inner
        if isinstance(node, ast.BinOp) and type(node.op) in self._OPS:
            return self._binary(self._OPS[type(node.op)], self.run(node.left),
                                self.run(node.right))
        if isinstance(node, ast.Attribute) and node.attr == "T":
            return sympy.Function("transpose")(self.run(node.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and not node.keywords and not node.func.id.startswith("_"):
            args = [self.run(a) for a in node.args]
            if node.func.id in _SYMPY and len(args) == 1:
                return _SYMPY[node.func.id](args[0], evaluate=False)
            return sympy.Function(node.func.id)(*args)
        raise self.fail(f"{ast.unparse(node)!r} is not allowed; write arithmetic "
                        "(+ - * / ** @) over names and numbers, and calls such as gelu(x)")

    def _symbol(self, name: str) -> Any:
        if name in self.tensors:
            return sympy.Symbol(name, commutative=False)
        if name in self.scalars:
            return sympy.Symbol(name)
        known = sorted(self.tensors | self.scalars)
        raise self.fail(f"{name} is not defined here{suggest(name, known)}; an equation uses "
                        f"the statement's inputs, parameters and attributes and the "
                        f"hyperparameters: {', '.join(known)}")

    @staticmethod
    def _binary(kind: str, a: Any, b: Any) -> Any:
        if kind == "add":
            return sympy.Add(a, b, evaluate=False)
        if kind == "sub":
            return sympy.Add(a, sympy.Mul(-1, b, evaluate=False), evaluate=False)
        if kind == "mul":
            return sympy.Mul(a, b, evaluate=False)
        if kind == "div":
            return sympy.Mul(a, sympy.Pow(b, -1, evaluate=False), evaluate=False)
        return sympy.Pow(a, b, evaluate=False)
