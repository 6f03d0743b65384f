"""One root cause, one finding, across layers: the same difference repeated in many places
becomes one finding that counts and lists its places.

Two findings are the same difference when their structured fields agree, never their
words: an attribute mismatch on the same op and attribute with the same two values (every
BatchNorm's eps 1.001e-5 against 1e-5); an op, shape or parameter mismatch with the same op
and the same two values; a run of the same ops missing on the same side between the same
kinds of neighbours (every conv followed by a bias add on one side only). Wiring findings
are merged by the diff itself; numeric findings name one layer and are never grouped.

Example:
    >>> from specgraph.report import Finding, Side
    >>> eps = [Finding("attr-mismatch", "...", op="batch_norm", attr="eps",
    ...                lhs=Side(f"bn{i}", f"{i}:batch_norm", value=1e-3),
    ...                rhs=Side(f"bn{i}", f"{i}:batch_norm", value=1e-5)) for i in range(3)]
    >>> [grouped] = group_repeated(eps)
    >>> grouped.message
    'batch_norm eps is 0.001 in lhs but 1e-05 in rhs in 3 places: batch_norm at bn0 and 2 more'
    >>> len(grouped.places)
    3
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from specgraph.align import Alignment
from specgraph.ir import Graph, Node, Value
from specgraph.report import CONFIRMED, DIFF, Finding, Side, Voice, chain

__all__ = ["group_repeated", "leaf_words"]

_PAIRED = ("op-mismatch", "shape-mismatch", "param-mismatch")


def group_repeated(findings: Sequence[Finding], alignment: Alignment | None = None,
                   voice: Voice = DIFF) -> list[Finding]:
    """``findings`` with each difference found in several places made one finding, at the
    place of its first occurrence; a difference found once is returned unchanged.

    Args:
        findings: the diff's findings, in lhs graph order.
        alignment: the alignment they come from, which says what a missing run sits
            between; without it, missing runs are never grouped.
        voice: how messages name the two sides.
    """
    groups: dict[Hashable, list[Finding]] = {}
    order: list[Hashable | Finding] = []
    for finding in findings:
        key = _key(finding, alignment)
        if key is None:
            order.append(finding)
            continue
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(finding)
    out: list[Finding] = []
    for item in order:
        if isinstance(item, Finding):
            out.append(item)
        else:
            same = groups[item]
            out.append(same[0] if len(same) == 1 else _grouped(same, item, voice, alignment))
    return out


def _key(f: Finding, alignment: Alignment | None) -> Hashable | None:
    """What makes two findings the same difference, from structured fields only."""
    if f.code == "attr-mismatch" and f.lhs and f.rhs:
        return (f.code, f.op, f.attr, _frozen(f.lhs.value), _frozen(f.rhs.value))
    if f.code in _PAIRED and f.lhs and f.rhs:
        return (f.code, f.op, _frozen(f.lhs.value), _frozen(f.rhs.value))
    if f.code == "missing-op" and f.ops and alignment is not None and (f.lhs is None) != (
            f.rhs is None):
        side = "lhs" if f.lhs is not None else "rhs"
        # a run that starts from a weight is the same wherever its weight's name differs
        # (each block's layer scale scaled again on one side)
        return (f.code, side, f.ops, *(_WEIGHT if w.startswith(_WEIGHT) else w
                                       for w in _neighbours(alignment, side, f.lhs or f.rhs)))
    return None


_WEIGHT = "the weight "


def _frozen(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _neighbours(al: Alignment, side: str, where: Side | None) -> tuple[str, str]:
    """The ops of the matched nodes a missing run sits between on its own side (or the
    model's input and output)."""
    graph, matched = (al.lhs, al.lhs_to_rhs) if side == "lhs" else (al.rhs, al.rhs_to_lhs)
    index = int(where.node.partition(":")[0]) if where is not None else -1
    if not 0 <= index < len(graph.nodes):
        return ("?", "?")
    node = graph.nodes[index]
    return _above(graph, node, matched), _below(graph, node, matched)


def leaf_words(graph: Graph, value: Value | None) -> str:
    """What a run of missing ops starts from where no op makes its input: a weight (a
    position table a layer projects), a constant, or the model's input."""
    if value is not None:
        name = graph.param_name(value)
        if name is not None:
            return f"the weight {name}"
        if value in graph.constants:
            return "a constant"
    return "the model's input"


def _above(graph: Graph, node: Node, matched: Mapping[int, int]) -> str:
    for _ in range(256):
        producer = graph.producer(node.inputs[0]) if node.inputs else None
        if producer is None:
            return leaf_words(graph, node.inputs[0] if node.inputs else None)
        if graph.index(producer) in matched:
            return producer.op
        node = producer
    return "?"


def _below(graph: Graph, node: Node, matched: Mapping[int, int]) -> str:
    for _ in range(256):
        users = graph.consumers(node.outputs[0]) if node.outputs else []
        if not users:
            return "the model's output"
        if graph.index(users[0]) in matched:
            return users[0].op
        node = users[0]
    return "?"


def _say(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_say(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


def _at(lhs: Side | None, rhs: Side | None, op: str | None = None, v: Voice = DIFF) -> str:
    """The first place, in words: ``conv at stage1.0`` (and rhs's scope where it differs)."""
    what = f"{op} at " if op else "at "
    if lhs is None or rhs is None:
        side = lhs or rhs
        return f"{what}{side.scope if side else '?'}"
    return f"{what}{lhs.scope}" + (f" ({v.rhs}: {rhs.scope})" if rhs.scope != lhs.scope
                                   else "")


def _grouped(same: list[Finding], key: Any, v: Voice, alignment: Alignment | None = None
             ) -> Finding:
    first = same[0]
    n, a, b = len(same), first.lhs, first.rhs
    more = f"and {n - 1} more"
    if first.code == "missing-op":
        side, other = ("lhs", "rhs") if a is not None else ("rhs", "lhs")
        at = a or b
        before, after = key[-2:]
        if before == _WEIGHT and alignment is not None:  # the first place's, named
            before = f"its weight ({_neighbours(alignment, side, at)[0][len(_WEIGHT):]} " \
                "at the first)"
        source = f", {at.source}" if at.source else ""
        message = (f"{v.name(other)} has no {chain(first.ops)} between {before} and "
                   f"{after} in {n} places: {v.name(side)} has it at {at.scope}{source}, "
                   f"{more}")
    elif first.code == "attr-mismatch":
        message = (f"{first.op} {first.attr} is {_say(a.value)} in {v.lhs} but "
                   f"{_say(b.value)} in {v.rhs} in {n} places: {_at(a, b, first.op, v)} {more}")
        if first.affects:
            message += f"; the forward pass is the same, it changes {first.affects}"
    elif first.code == "op-mismatch":
        message = (f"{v.lhs} computes {a.value} where {v.rhs} computes {b.value} in {n} "
                   f"places: {_at(a, b, None, v)} {more}")
    elif first.code == "shape-mismatch":
        message = (f"{first.op} produces {_say(a.value)} in {v.lhs} but {_say(b.value)} in "
                   f"{v.rhs} from inputs of the same shape in {n} places: "
                   f"{_at(a, b, first.op, v)} {more}")
    else:  # param-mismatch
        message = (f"{first.op} parameters differ in shape, {_say(a.value)} in {v.lhs} but "
                   f"{_say(b.value)} in {v.rhs}, in {n} places: {_at(a, b, first.op, v)} "
                   f"{more}")
    # the numbers that confirm one place confirm the difference
    message += next((f.message[f.message.index(CONFIRMED):] for f in same
                     if CONFIRMED in f.message), "")
    return Finding(first.code, message, op=first.op, attr=first.attr, lhs=a, rhs=b,
                   blame=first.blame, ops=first.ops, affects=first.affects,
                   places=tuple((f.lhs, f.rhs) for f in same))
