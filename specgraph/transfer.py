"""Parameter pairing along an alignment: which rhs parameter holds each lhs parameter.

Weights move from lhs to rhs for numeric comparison; names differ across frameworks
(``fc1.weight``, ``params.Dense_0.kernel``, ``dense.kernel``), so parameters are paired by
the aligned nodes that read them and the input slot they fill, never by name. Both graphs
are canonical, so a pair has the same shape; anything that cannot be paired is listed in
one error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specgraph.align import Alignment
from specgraph.errors import SpecgraphError
from specgraph.ir import Graph, Node, Value, same_elements
from specgraph.ops import get_spec

__all__ = ["ParamPair", "TransferError", "pair_parameters"]


class TransferError(SpecgraphError):
    """Some parameters of one side have no counterpart on the other."""


@dataclass(frozen=True)
class ParamPair:
    """One lhs parameter, the rhs parameter that plays its role, and their shape."""

    lhs: str
    rhs: str
    shape: tuple[int, ...]


def _by_role(a: Node, b: Node) -> tuple[Value | None, ...] | None:
    """``b``'s inputs in ``a``'s slots by the role each plays, where the two hold different
    optional inputs (a batch norm with a scale against Keras' ``scale=False``: lhs's
    weight has no counterpart, and rhs's bias is lhs's bias, not its weight); None where
    their inputs are the same roles."""
    if a.op != b.op or a.attrs == b.attrs:
        return None
    spec = get_spec(a.op)
    try:
        left = spec.input_names(a.attrs, len(a.inputs))
        right = spec.input_names(b.attrs, len(b.inputs))
    except Exception:  # noqa: BLE001  (an op of any number of inputs: by slot)
        return None
    if left == right:
        return None
    theirs = dict(zip(right, b.inputs))
    return tuple(theirs.get(name) for name in left)


def _operands(alignment: Alignment, a: Node, b: Node) -> tuple[Value | None, ...]:
    """``b``'s inputs in ``a``'s order: by role where their optional inputs differ; the two
    operands of a commutative op swapped where that puts the parameter across from the
    parameter (DINOv2's layer scale, ``λ·x`` in Flax and ``x·λ`` in PyTorch)."""
    roles = _by_role(a, b)
    if roles is not None:
        return roles
    if len(a.inputs) != 2 or len(b.inputs) != 2 or not get_spec(a.op).commutative:
        return tuple(b.inputs)
    left = [alignment.lhs.param_name(v) is not None or
            _weight_behind(alignment.lhs, v, alignment.lhs_to_rhs) is not None for v in a.inputs]
    right = [alignment.rhs.param_name(v) is not None or
             _weight_behind(alignment.rhs, v, alignment.rhs_to_lhs) is not None
             for v in b.inputs]
    if left != right and left == right[::-1]:
        return (b.inputs[1], b.inputs[0])
    return tuple(b.inputs)


def _weight_behind(graph: Graph, value: Value, matched: Mapping[int, int]) -> str | None:
    """The parameter that ``value`` is computed from elementwise with constants alone, by
    ops the other side lacks (Flax DINOv2 multiplies its layer scale by the configured value
    again before using it): the parameter that plays the role of the other side's."""
    for _ in range(4):
        node = graph.producer(value)
        if node is None or graph.index(node) in matched or len(node.outputs) != 1 or \
                get_spec(node.op).category not in ("elementwise", "activation"):
            return None
        free = [v for v in node.inputs if v not in graph.constants]
        if len(free) != 1 or free[0].shape != value.shape:
            return None
        value = free[0]
        name = graph.param_name(value)
        if name is not None:
            return name
    return None


def pair_parameters(alignment: Alignment, *, strict: bool = True) -> tuple[ParamPair, ...]:
    """Pair every parameter of ``alignment.lhs`` with one of ``alignment.rhs``.

    Args:
        alignment: the alignment of two canonical graphs.
        strict: raise TransferError unless every parameter on both sides is paired.

    Returns:
        The pairs, in lhs parameter order.
    """
    lhs, rhs = alignment.lhs, alignment.rhs
    found: dict[str, str] = {}
    problems: list[str] = []
    for i, j in alignment.pairs:
        a, b = lhs.nodes[i], rhs.nodes[j]
        for slot, (va, vb) in enumerate(zip(a.inputs, _operands(alignment, a, b))):
            if vb is None:  # a role the rhs node does not have
                continue
            na, nb = lhs.param_name(va), rhs.param_name(vb)
            if (na is None) != (nb is None):  # one side scales its weight first
                na = na or _weight_behind(lhs, va, alignment.lhs_to_rhs)
                nb = nb or _weight_behind(rhs, vb, alignment.rhs_to_lhs)
                if na is not None and nb is not None:
                    va, vb = lhs.params[na], rhs.params[nb]
            if na is None or nb is None:
                continue
            if va.shape != vb.shape and not same_elements(va.shape, vb.shape):
                problems.append(f"{na} {list(va.shape)} vs {nb} {list(vb.shape)} "
                                f"(input {slot} of {a.op} at {a.scope or '<model>'})")
            elif found.setdefault(na, nb) != nb:
                problems.append(f"{na} plays the role of both {found[na]} and {nb}")
    unpaired_lhs = [n for n in lhs.params if n not in found]
    unpaired_rhs = sorted(set(rhs.params) - set(found.values()))
    if strict and (problems or unpaired_lhs or unpaired_rhs):
        parts = problems[:3]
        if unpaired_lhs:
            parts.append(f"lhs parameters with no counterpart: {', '.join(unpaired_lhs[:5])}")
        if unpaired_rhs:
            parts.append(f"rhs parameters with no counterpart: {', '.join(unpaired_rhs[:5])}")
        raise TransferError(
            "cannot move weights from lhs to rhs: " + "; ".join(parts) +
            "; fix the structural differences first, or compare models that already share "
            "weights without moving them"
        )
    return tuple(ParamPair(n, found[n], lhs.params[n].shape) for n in lhs.params if n in found)
