"""Equations in one vocabulary, so that a spec's ``equation:`` and what an implementation
computes can be held against each other: the implementation's nodes as formulas
(``implementation_expr``), both sides rewritten into elementary terms (``normalize``) and
compared (``same``).

The vocabulary: arithmetic, ``sqrt``/``exp``/``log``/``erf``/``tanh``, ``mean(e)`` over the
normalized axis, ``softmax(e)``, ``transpose(e)``, ``relu(e)``, ``@`` products. A layer
norm is ``(x - mean(x))/sqrt(var(x) + eps)·γ + β``, ``var(e)`` is ``mean(e²) - mean(e)²``,
and ``mean`` is linear, so ``mean((x - mean(x))**2)`` and ``var(x)`` are one term. Axes are
not part of the vocabulary (the numbers check them). An op outside it leaves its call in
the formula, and a formula holding one is not decided (``unknown``).

Example:
    >>> x, w = sympy.symbols("x w")
    >>> a = (x - mean(x)) / sympy.sqrt(mean((x - mean(x))**2) + sympy.Rational(1, 10**5)) * w
    >>> b = (x - mean(x)) / sympy.sqrt(call("var", x) + sympy.Float(1e-5)) * w
    >>> same(normalize(a), normalize(b))
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import sympy

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops._sym import fn

__all__ = ["mean", "call", "implementation_expr", "normalize", "same", "unknown",
           "Unreadable", "ROLE_ALIASES", "param_role"]

_MAX_NODES = 96  # nodes walked for one statement at most
_ELEMENTARY = {"sqrt": sympy.sqrt, "exp": sympy.exp, "log": sympy.log, "erf": sympy.erf,
               "tanh": sympy.tanh}
_KNOWN = frozenset({"mean", "softmax", "transpose", "relu", "sigmoid", "log_softmax"})
# names a spec's equation may give a parameter or statistic -> the op's input role
ROLE_ALIASES = {"W": "weight", "gamma": "weight", "γ": "weight",
                "b": "bias", "beta": "bias", "β": "bias", "mu": "mean", "μ": "mean",
                "sigma": "var"}
_PARAM_ROLES = {"weight": "weight", "kernel": "weight", "gamma": "weight", "scale": "weight",
                "w": "weight", "bias": "bias", "beta": "bias", "b": "bias",
                "running_mean": "mean", "moving_mean": "mean", "mean": "mean",
                "running_var": "var", "moving_variance": "var", "var": "var"}


class Unreadable(Exception):
    """The implementation's region cannot be written as a formula (the message says why)."""


def call(name: str, *args: Any) -> Any:
    """``name(args)`` as a plain sympy function application."""
    return sympy.Function(name)(*args)


def mean(e: Any) -> Any:
    return call("mean", e)


def param_role(name: str) -> str:
    """The role of an implementation parameter by its name (``norm.gamma`` -> ``weight``),
    else its own name's last part (``norm.a_2`` -> ``a_2``)."""
    leaf = name.rpartition(".")[2]
    return _PARAM_ROLES.get(leaf.lower(), leaf)


# --- the implementation's nodes as formulas ----------------------------------------------
def _reduced(node: Node) -> int:
    axes = node.attrs.get("axes")
    shape = node.inputs[0].shape
    axes = range(len(shape)) if axes is None else (axes if isinstance(axes, (tuple, list))
                                                  else (axes,))
    return math.prod(shape[a] for a in axes)


def _norm(node: Node, a: list[Any], centred: bool) -> Any:
    x = a[0]
    y = (x - mean(x)) / sympy.sqrt(call("var", x) + node.attrs["eps"]) if centred else \
        x / sympy.sqrt(mean(x**2) + node.attrs["eps"])
    rest = a[1:]
    if node.attrs.get("scale", True) and rest:
        y = y * rest.pop(0)
    if node.attrs.get("bias", True) and rest and centred:
        y = y + rest.pop(0)
    return y


def _gelu(node: Node, a: list[Any]) -> Any:
    x = a[0]
    if node.attrs.get("approximate", "none") == "tanh":
        return x * (1 + sympy.tanh(sympy.Float(math.sqrt(2 / math.pi)) *
                                   (x + sympy.Float(0.044715) * x**3))) / 2
    return x * (1 + sympy.erf(x / sympy.sqrt(2))) / 2


def _attention(node: Node, a: list[Any]) -> Any:
    scores = node.attrs.get("scale", 1.0) * a[0] * call("transpose", a[1])
    if len(a) > 3:
        scores = scores + a[3]
    if node.attrs.get("causal"):
        scores = call("causal", scores)
    return call("softmax", scores) * a[2]


def _linear(node: Node, a: list[Any]) -> Any:
    return a[0] * a[1] + a[2] if len(a) > 2 else a[0] * a[1]


def _transpose(node: Node, a: list[Any]) -> Any:
    perm = tuple(node.attrs.get("perm", ()))
    rank = len(perm)
    if rank >= 2 and perm == (*range(rank - 2), rank - 1, rank - 2):
        return call("transpose", a[0])
    return call(f"transpose{list(perm)}", a[0])


def _reshape(node: Node, a: list[Any]) -> Any:
    before = [d for d in node.inputs[0].shape if d != 1]
    after = [d for d in node.outputs[0].shape if d != 1]
    return a[0] if before == after else call("reshape", a[0])


_IDENTITY = lambda node, a: a[0]  # noqa: E731  (shape-only ops on one value)
_DEFINITIONS: dict[str, Callable[[Node, list[Any]], Any]] = {
    "layer_norm": lambda n, a: _norm(n, list(a), True),
    "rms_norm": lambda n, a: _norm(n, list(a), False),
    "batch_norm": lambda n, a: (a[0] - a[1]) / sympy.sqrt(a[2] + n.attrs["eps"]) *
    (a[3] if n.attrs.get("scale", True) else 1) + (a[-1] if n.attrs.get("bias", True) else 0),
    "gelu": _gelu,
    "silu": lambda n, a: a[0] * call("sigmoid", a[0]),
    "attention": _attention,
    "linear": _linear,
    "matmul": lambda n, a: a[0] * a[1],
    "transpose": _transpose,
    "reshape": _reshape,
    "reduce_mean": lambda n, a: mean(a[0]),
    "reduce_sum": lambda n, a: _reduced(n) * mean(a[0]),
    "reduce_var": lambda n, a: fn("var", correction=n.attrs.get("correction", 1),
                                  n=_reduced(n))(a[0]) if n.attrs.get("correction", 1)
    else call("var", a[0]),
    "softmax": lambda n, a: call("softmax", a[0]),
    "unsqueeze": _IDENTITY, "squeeze": _IDENTITY, "expand": _IDENTITY, "cast": _IDENTITY,
    "dropout": _IDENTITY,
}


def implementation_expr(graph: Graph, output: Value, boundary: Mapping[Value, Any],
                        commutative: bool) -> Any:
    """What ``graph`` computes at ``output`` from the values in ``boundary`` (each given
    as its symbol), as a formula; parameters are symbols named after their role.

    Raises:
        Unreadable: the region reaches a graph input outside ``boundary``, a large constant,
            or more than a few dozen nodes.
    """
    exprs: dict[Value, Any] = dict(boundary)
    walked = [0]

    def symbol(name: str) -> Any:
        return sympy.Symbol(name, commutative=commutative)

    def of(value: Value) -> Any:
        if value in exprs:
            return exprs[value]
        name = graph.param_name(value)
        if name is not None:
            exprs[value] = symbol(param_role(name))
        elif value in graph.constants:
            data = np.asarray(graph.constants[value])
            if data.size != 1:
                raise Unreadable("it reads a constant tensor")
            exprs[value] = sympy.Float(float(data.reshape(())))
        else:
            node = graph.producer(value)
            if node is None:
                raise Unreadable("it reads a model input the statement does not")
            walked[0] += 1
            if walked[0] > _MAX_NODES:
                raise Unreadable(f"it spans more than {_MAX_NODES} nodes")
            exprs[value] = _node_expr(node, [of(v) for v in node.inputs])
        return exprs[value]

    return of(output)


def _node_expr(node: Node, args: list[Any]) -> Any:
    rule = _DEFINITIONS.get(node.op)
    if rule is not None:
        return rule(node, args)
    spec = get_spec(node.op)
    if spec.equation is not None and spec.category in ("elementwise", "activation"):
        try:
            return spec.equation(*args, **dict(node.attrs))
        except (TypeError, ValueError, AttributeError):
            pass
    return call(node.op, *args)


# --- one vocabulary, and the comparison ---------------------------------------------------
def normalize(expr: Any, commutative: bool = True) -> Any:
    """``expr`` in the vocabulary of the module docstring: functions by name, floats to six
    significant digits as exact rationals, ``var`` and ``silu``/``sigmoid`` spelled out,
    ``mean`` expanded by linearity (commutative formulas only)."""
    expr = _plain(expr)
    if commutative:
        expr = expr.subs({s: sympy.Symbol(s.name) for s in expr.free_symbols
                          if not s.is_commutative})
        for _ in range(8):
            step = expr.replace(lambda e: _named(e) == "mean", lambda e: _linear_mean(e.args[0]))
            if step == expr:
                break
            expr = step
    return expr


def _named(e: Any) -> str | None:
    return type(e).__name__ if isinstance(e, sympy.core.function.AppliedUndef) else None


def _plain(expr: Any) -> Any:
    """Function classes with attributes as plain names; elementary functions as sympy's."""
    if isinstance(expr, sympy.Float):
        return sympy.Rational(f"{float(expr):.6g}")
    if not expr.args:
        return expr
    args = [_plain(a) for a in expr.args]
    name = _named(expr)
    if name is None:
        return expr.func(*args)
    if name in _ELEMENTARY and len(args) == 1:
        return _ELEMENTARY[name](args[0])
    if name == "var" and len(args) == 1:
        attrs = dict(getattr(type(expr), "sg_attrs", ()))
        size, correction = attrs.get("n", 2), attrs.get("correction", 0)
        factor = sympy.Rational(size, max(size - correction, 1))
        return factor * (call("mean", args[0]**2) - call("mean", args[0])**2)
    if name == "silu" and len(args) == 1:
        return args[0] * _sigmoid(args[0])
    if name == "sigmoid" and len(args) == 1:
        return _sigmoid(args[0])
    return call(name, *args)


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + sympy.exp(-x))


def _constant_over_axis(e: Any) -> bool:
    """A factor the mean over the normalized axis leaves as it is: numbers, scalars and
    other means."""
    if e.is_number:
        return True
    means = [a for a in sympy.preorder_traversal(e) if _named(a) == "mean"]
    rest = e.subs({m: 1 for m in means}) if means else e
    return not rest.free_symbols


def _linear_mean(e: Any) -> Any:
    e = sympy.expand(e)
    if isinstance(e, sympy.Add):
        return sympy.Add(*(_linear_mean(t) for t in e.args))
    factors = e.args if isinstance(e, sympy.Mul) else (e,)
    constant = [f for f in factors if _constant_over_axis(f)]
    varying = [f for f in factors if not _constant_over_axis(f)]
    if not varying:
        return e
    return sympy.Mul(*constant) * call("mean", sympy.Mul(*varying))


def unknown(expr: Any) -> list[str]:
    """The functions in ``expr`` outside the vocabulary (ops no rule writes out)."""
    names = {_named(e) for e in sympy.preorder_traversal(expr)} - {None}
    return sorted(n for n in names if n not in _KNOWN)


def same(a: Any, b: Any) -> bool:
    """Whether two normalized formulas are equal (their difference simplifies to zero)."""
    if a == b:
        return True
    try:
        return sympy.simplify(sympy.expand(a - b)) == 0
    except (TypeError, ValueError, RecursionError):
        return False
