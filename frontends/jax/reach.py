"""Which values of a jaxpr the loss's gradient reaches: those the outputs depend on
differentiably.

``jax.vjp`` gives every value it is asked about a gradient, zeros where the outputs do not
depend on it through differentiable operations: a value cut off by ``stop_gradient`` (a
frozen positional table), or one read only through integer operations (indices, a mask
cast to integers). A zero there is not the model's gradient but the absence of one, and
held against a framework that trains the same value it reads as a divergence. ``reaching``
walks the jaxpr backward from its floating outputs, into the bodies of calls, and names the
equation outputs (by the keys of ``specgraph.frontends.jax.walk``) and inputs that a
gradient reaches.

    >>> import jax
    >>> closed = jax.make_jaxpr(lambda w, x: jax.lax.stop_gradient(w * 2.0) + x)(1.0, 1.0)
    >>> found = reaching(closed.jaxpr)
    >>> sorted(found.keys), found.inputs
    ([(1, 0), (2, 0)], [False, True])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
from jax.extend.core import ClosedJaxpr, DropVar, Jaxpr, Literal

from specgraph.frontends.jax.walk import CALL_JAXPR_PARAMS

__all__ = ["Reach", "reaching"]

Key = tuple[int, ...]
_CUT = frozenset({"stop_gradient"})  # primitives through which no gradient flows


@dataclass
class Reach:
    """What a gradient from the outputs reaches.

    Attributes:
        keys: the equation outputs it reaches, by key (path of equation indices, then the
            output index).
        inputs: for each input of the jaxpr, whether it reaches it.
    """

    keys: set[Key] = field(default_factory=set)
    inputs: list[bool] = field(default_factory=list)


def _inexact(var: Any) -> bool:
    return bool(jnp.issubdtype(var.aval.dtype, jnp.inexact))


def reaching(jaxpr: Jaxpr, outputs: Sequence[bool] | None = None) -> Reach:
    """The values of ``jaxpr`` that a gradient of its outputs reaches.

    Args:
        jaxpr: the program.
        outputs: which outputs the gradient starts from (default: every floating one).

    Returns:
        The keys of the equation outputs reached, and which inputs are.
    """
    found = Reach()
    if outputs is None:
        outputs = [_inexact(v) for v in jaxpr.outvars]
    found.inputs = _walk(jaxpr, outputs, (), found.keys)
    return found


def _walk(jaxpr: Jaxpr, outputs: Sequence[bool], path: Key, keys: set[Key]) -> list[bool]:
    """Mark the equation outputs of ``jaxpr`` (at ``path``) a gradient reaches into
    ``keys``; returns which of its inputs it reaches."""
    live: set[Any] = {v for v, on in zip(jaxpr.outvars, outputs)
                      if on and not isinstance(v, Literal) and _inexact(v)}
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        eqn = jaxpr.eqns[i]
        outs = [not isinstance(v, DropVar) and v in live and _inexact(v) for v in eqn.outvars]
        if not any(outs):
            continue
        keys.update((*path, i, k) for k, on in enumerate(outs) if on)
        for var, on in zip(eqn.invars, _inputs_reached(eqn, outs, (*path, i), keys)):
            if on and not isinstance(var, Literal) and _inexact(var):
                live.add(var)
    return [v in live for v in jaxpr.invars]


def _inputs_reached(eqn: Any, outs: list[bool], here: Key, keys: set[Key]) -> list[bool]:
    """Which operands of ``eqn`` a gradient at its outputs ``outs`` reaches."""
    name = eqn.primitive.name
    if name in _CUT:
        return [False] * len(eqn.invars)
    param = CALL_JAXPR_PARAMS.get(name)
    body = eqn.params.get(param) if param is not None else None
    if isinstance(body, ClosedJaxpr):
        body = body.jaxpr
    if isinstance(body, Jaxpr) and len(body.invars) == len(eqn.invars) and \
            len(body.outvars) == len(eqn.outvars):
        return _walk(body, outs, here, keys)
    return [True] * len(eqn.invars)  # any other primitive: each floating operand
