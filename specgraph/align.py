"""Alignment of two canonical graphs: which node of one is which node of the other.

Exact graph edit distance is exponential, so the alignment runs eight near-linear steps,
none of which looks at names (scopes and parameter names are not compared at all). Each
step only pairs nodes that are both unpaired, and ``node_match`` may veto any pair.

1. **Anchors from whole-context hashes** (``anchors``). Each node gets an *upstream* hash
   (its op, its attributes and the upstream hashes of its inputs, slot by slot, in any
   order for a commutative op: Flax's ``1.702·x`` is PyTorch's ``x·1.702``) and a
   *downstream* hash (its op and attributes and the downstream hashes of its readers, with
   the slot it feeds), one pass each over the topological order. A node whose upstream (or
   downstream) hash occurs exactly once in each graph is paired with its twin, unless the
   other hash pairs it elsewhere: everything before a difference matches upstream,
   everything after it downstream, and identical repeated blocks (the 12 layers of an
   encoder) are told apart by their position in the chain. Outputs are keyed by name where
   both sides use the same output names, else not told apart.
2. **Propagation from matched neighbours** (``propagate``). An unpaired producer (or sole
   reader) of a paired node is paired with the counterpart's producer (or sole reader) in
   the same slot when their ops agree; repeated until nothing changes. Then anchors again,
   each paired node hashed as its pair, and propagation from them, until neither pairs
   anything: a stack with a difference below it and one above it (PyTorch's padding row
   under Marian's encoder, an op one side lacks in the decoder over it) has no whole
   context alike on both sides, but its context from the pairs around it is.
3. **Sequence alignment of what is left** (``sequence``). The remaining nodes of each side,
   in graph order, are aligned by op and attributes (difflib's matching blocks), then,
   inside runs that differ, by op name: equal runs pair up, replaced runs of the same
   length pair position by position (an op whose attributes changed), the rest stays
   unpaired (an op one side lacks).
4. **Propagation again**, from the pairs the sequence step made.
5. **Pairing by attributes where it exists** (``relabel``). Where layers of one op are paired
   across different attributes but the two sides hold the same multiset of attribute
   labels for that op (pre-LN against post-LN: each LayerNorm kept its eps but moved), they
   are re-paired by attributes, in graph order: the difference is where they sit.
6. **The same layer wired elsewhere** (``moved``). Unpaired nodes left on both sides with the
   same op and attributes are paired in graph order.
7. **Untangling twins upward** (``untangle``). Walking lhs from the outputs up, two pairings
   of twin producers (same op and attributes: the q, k and v branches of attention) are
   swapped when that makes a paired node read the counterparts of its inputs, looking
   through an unpaired op between them that reads one value besides weights and constants
   (an op one side lacks: a KV cache's concat of the new keys alone).
8. **Untangling twins downward** (``untangle_down``). Walking lhs in order, two pairings of
   twin readers are swapped when each reads what the other's counterpart reads (the
   outputs of a split into q, k and v).

Attribute values are compared by ``specgraph.ops.values.value_key``, the one rule for
"the same value". Hash collisions only ever merge candidates that are then checked by op,
so the result is deterministic for the same pair of graphs.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from specgraph.ir import Graph, Node, Value
from specgraph.ops import get_spec
from specgraph.ops.values import value_key

__all__ = ["Alignment", "align", "leaf_key"]


@dataclass(frozen=True)
class Alignment:
    """Matched node pairs (indices into ``lhs.nodes`` and ``rhs.nodes``) and the rest."""

    lhs: Graph
    rhs: Graph
    pairs: tuple[tuple[int, int], ...]
    lhs_only: tuple[int, ...]
    rhs_only: tuple[int, ...]

    @cached_property
    def lhs_to_rhs(self) -> Mapping[int, int]:
        """lhs node index -> the rhs node index paired with it (computed once)."""
        return MappingProxyType(dict(self.pairs))

    @cached_property
    def rhs_to_lhs(self) -> Mapping[int, int]:
        """rhs node index -> the lhs node index paired with it (computed once)."""
        return MappingProxyType({j: i for i, j in self.pairs})

    @property
    def covers(self) -> bool:
        """Whether every node of both graphs is paired."""
        return not self.lhs_only and not self.rhs_only


def _label(node: Node) -> tuple[Any, ...]:
    """The node's op and attributes, in the form two same nodes share (``value_key``)."""
    return (node.op, tuple(sorted((k, value_key(v)) for k, v in node.attrs.items())))


def _commutative(node: Node) -> bool:
    return len(node.inputs) == 2 and get_spec(node.op).commutative


def leaf_key(graph: Graph, value: Value, *, param_shape: bool = True) -> tuple[Any, ...]:
    """What an input, parameter or constant is, structurally (never its name): a constant
    by shape and scalar value, a parameter by shape (unless ``param_shape`` is false), an
    input by position."""
    if value in graph.constants:
        data = graph.constants[value]
        scalar = value_key(float(data.reshape(()))) if data.size == 1 else None
        return ("const", value.shape, scalar)
    if graph.param_name(value) is not None:
        return ("param", value.shape) if param_shape else ("param",)
    return ("input", graph.inputs.index(value) if value in graph.inputs else -1)


def _up_hashes(graph: Graph, seeds: Mapping[int, int]) -> list[int]:
    """Each node's upstream hash; a node in ``seeds`` (already paired) hashes as its pair's
    token instead, so what reads it is told apart by which pair it reads."""
    made: dict[Value, int] = {}
    out = []
    for i, node in enumerate(graph.nodes):
        if i in seeds:
            h = hash(("paired", seeds[i]))
        else:
            parts = [hash(leaf_key(graph, v)) if v not in made else made[v]
                     for v in node.inputs]
            if _commutative(node):  # x·c and c·x (Flax's quick GELU against PyTorch's)
                parts.sort()
            h = hash((_label(node), tuple(parts)))
        out.append(h)
        for k, v in enumerate(node.outputs):
            made[v] = hash((h, k))
    return out


def _down_hashes(graph: Graph, output_keys: list[Any], seeds: Mapping[int, int]) -> list[int]:
    """Each node's downstream hash; a node in ``seeds`` hashes as its pair's token."""
    out = [0] * len(graph.nodes)
    outputs = dict(zip(graph.outputs, output_keys))
    for i in range(len(graph.nodes) - 1, -1, -1):
        if i in seeds:
            out[i] = hash(("paired", seeds[i]))
            continue
        node = graph.nodes[i]
        readers = []
        for k, v in enumerate(node.outputs):
            for user in graph.consumers(v):
                slots = tuple(s for s, u in enumerate(user.inputs) if u is v)
                readers.append((k, out[graph.index(user)], slots))
            if v in outputs:
                readers.append((k, "output", outputs[v]))
        out[i] = hash((_label(node), tuple(sorted(readers, key=repr))))
    return out


def _unique_pairs(left: list[int], right: list[int]) -> dict[int, int]:
    lc, rc = Counter(left), Counter(right)
    where = {h: j for j, h in enumerate(right) if rc[h] == 1}
    return {i: where[h] for i, h in enumerate(left) if lc[h] == 1 and h in where}


class _Matcher:
    def __init__(self, lhs: Graph, rhs: Graph,
                 node_match: Callable[[Node, Node], bool]) -> None:
        self.lhs, self.rhs = lhs, rhs
        self.node_match = node_match
        self.l2r: dict[int, int] = {}
        self.r2l: dict[int, int] = {}
        self.fresh: list[tuple[int, int]] = []  # pairs whose neighbours are not yet tried

    def pair(self, i: int, j: int) -> bool:
        if i in self.l2r or j in self.r2l:
            return False
        if not self.node_match(self.lhs.nodes[i], self.rhs.nodes[j]):
            return False
        self.l2r[i], self.r2l[j] = j, i
        self.fresh.append((i, j))
        return True

    def anchors(self) -> bool:
        """Pair the nodes whose upstream or downstream hash is unique on both sides, the
        nodes paired so far hashed as their pair (a first call has none: whole-context
        hashes). Returns whether any pair was made."""
        lseeds = {i: i for i in self.l2r}  # a pair's token on both sides: its lhs index
        up = _unique_pairs(_up_hashes(self.lhs, lseeds), _up_hashes(self.rhs, self.r2l))
        # outputs are told apart by name where both sides name them alike; otherwise their
        # order is no evidence (JAX sorts dict keys, exporters rename), so they are alike
        same = sorted(self.lhs.output_names) == sorted(self.rhs.output_names)
        keys = [list(g.output_names) if same else ["output"] * len(g.outputs)
                for g in (self.lhs, self.rhs)]
        down = _unique_pairs(_down_hashes(self.lhs, keys[0], lseeds),
                             _down_hashes(self.rhs, keys[1], self.r2l))
        made = False
        for i, j in sorted(up.items()):
            if down.get(i, j) == j:
                made |= self.pair(i, j)
        for i, j in sorted(down.items()):
            if up.get(i, j) == j:
                made |= self.pair(i, j)
        return made

    def propagate(self) -> None:
        """Pair neighbours of matched pairs, each pair visited once (a worklist)."""
        work = sorted(self.l2r.items())
        self.fresh = []
        while work:
            for i, j in work:
                self._neighbours(i, j)
            work, self.fresh = sorted(self.fresh), []

    def _neighbours(self, i: int, j: int) -> bool:
        a, b = self.lhs.nodes[i], self.rhs.nodes[j]
        changed = False
        for va, vb in zip(a.inputs, self._operands(a, b)):  # producers, slot by slot
            pa, pb = self.lhs.producer(va), self.rhs.producer(vb)
            if pa is not None and pb is not None and pa.op == pb.op:
                changed |= self.pair(self.lhs.index(pa), self.rhs.index(pb))
        for va, vb in zip(a.outputs, b.outputs):  # readers with the same op, one each
            ua, ub = self.lhs.consumers(va), self.rhs.consumers(vb)
            if len(ua) == 1 and len(ub) == 1 and ua[0].op == ub[0].op:
                changed |= self.pair(self.lhs.index(ua[0]), self.rhs.index(ub[0]))
        return changed

    def _operands(self, a: Node, b: Node) -> tuple[Value, ...]:
        """``b``'s inputs in the order that matches ``a``'s: slot by slot, except for the
        two operands of a commutative op, which are swapped when their producers resemble
        ``a``'s better that way (a residual add written ``shortcut + main`` against
        ``main + shortcut``, where a difference on every layer leaves no anchor inside)."""
        if len(a.inputs) != 2 or len(b.inputs) != 2 or not get_spec(a.op).commutative:
            return b.inputs
        left = [_shape_of(self.lhs, v, 3) for v in a.inputs]
        right = [_shape_of(self.rhs, v, 3) for v in b.inputs]
        kept = _likeness(left[0], right[0]) + _likeness(left[1], right[1])
        swapped = _likeness(left[0], right[1]) + _likeness(left[1], right[0])
        return (b.inputs[1], b.inputs[0]) if swapped > kept else b.inputs

    def sequence(self) -> None:
        """Align the leftovers in graph order: first by op and attributes (so a moved layer
        pairs with its twin), then, inside runs that differ, by op name alone (so an op whose
        attributes changed still pairs with its counterpart)."""
        left = [i for i in range(len(self.lhs.nodes)) if i not in self.l2r]
        right = [j for j in range(len(self.rhs.nodes)) if j not in self.r2l]
        a = [repr(_label(self.lhs.nodes[i])) for i in left]
        b = [repr(_label(self.rhs.nodes[j])) for j in right]
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for i, j in zip(left[i1:i2], right[j1:j2]):
                    self.pair(i, j)
            elif tag == "replace":
                self._by_op(left[i1:i2], right[j1:j2])

    def _by_op(self, left: list[int], right: list[int]) -> None:
        a = [self.lhs.nodes[i].op for i in left]
        b = [self.rhs.nodes[j].op for j in right]
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        made = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                made += [(i, j) for i, j in zip(left[i1:i2], right[j1:j2]) if self.pair(i, j)]
        for i, j in made:  # by op name alone, in order: kept where the graphs bear it out
            if not self._supported(i, j):
                del self.l2r[i], self.r2l[j]

    def _adjacent(self, graph: Graph, k: int) -> set[int]:
        node = graph.nodes[k]
        out = {graph.index(p) for v in node.inputs if (p := graph.producer(v)) is not None}
        return out | {graph.index(c) for v in node.outputs for c in graph.consumers(v)}

    def _supported(self, i: int, j: int) -> bool:
        """Whether a pair made by op name alone is borne out by its neighbours: where both
        nodes have paired neighbours, one of ``i``'s is paired with one of ``j``'s. Twin
        runs written in another order (LayoutLMv3's bucket truncated before its offset is
        added in PyTorch, after it in TF, twice) otherwise pair the first cast of one side
        with the second of the other."""
        mine = {self.l2r[k] for k in self._adjacent(self.lhs, i) if k in self.l2r}
        theirs = {k for k in self._adjacent(self.rhs, j) if k in self.r2l}
        return not mine or not theirs or bool(mine & theirs)

    def relabel(self) -> None:
        """Where the layers of one op are paired across attributes but a pairing by
        attributes exists (pre-LN vs post-LN: each LayerNorm kept its eps but moved), pair
        them by attributes, in graph order: the difference is where they sit, not what they
        are."""
        ops = {self.lhs.nodes[i].op for i, j in self.l2r.items()
               if _label(self.lhs.nodes[i]) != _label(self.rhs.nodes[j])}
        for op in sorted(ops):
            left = sorted(i for i, n in enumerate(self.lhs.nodes) if n.op == op and (
                i not in self.l2r or _label(n) != _label(self.rhs.nodes[self.l2r[i]])))
            right = sorted(j for j, n in enumerate(self.rhs.nodes) if n.op == op and (
                j not in self.r2l or _label(n) != _label(self.lhs.nodes[self.r2l[j]])))
            if len(left) < 2 or Counter(repr(_label(self.lhs.nodes[i])) for i in left) != \
                    Counter(repr(_label(self.rhs.nodes[j])) for j in right):
                continue
            for i in left:
                self.r2l.pop(self.l2r.pop(i, -1), None)
            for j in right:
                self.l2r.pop(self.r2l.pop(j, -1), None)
            pool = list(right)
            for i in left:
                twin = next(j for j in pool if _label(self.rhs.nodes[j]) ==
                            _label(self.lhs.nodes[i]))
                pool.remove(twin)
                self.pair(i, twin)

    def untangle(self) -> None:
        """Swap two pairings of twin nodes when that makes a matched node read the same
        producers on both sides (the q, k and v branches of attention are twins; graph order
        alone may pair q with k), an op one side lacks between them looked through
        (``_producer``). Walks from the outputs up, so a swap propagates upstream."""
        for i in range(len(self.lhs.nodes) - 1, -1, -1):
            j = self.l2r.get(i)
            if j is None:
                continue
            a, b = self.lhs.nodes[i], self.rhs.nodes[j]
            for va, vb in zip(a.inputs, b.inputs):
                pa, pb = _producer(self.lhs, va, self.l2r), _producer(self.rhs, vb, self.r2l)
                if pa is None or pb is None:
                    continue
                lp, rp = self.lhs.index(pa), self.rhs.index(pb)
                rq, lq = self.l2r.get(lp), self.r2l.get(rp)
                if rq is None or lq is None or rq == rp:
                    continue
                if _label(self.lhs.nodes[lq]) != _label(pa) or _label(self.rhs.nodes[rq]) != \
                        _label(pb):
                    continue
                self.l2r[lp], self.r2l[rp] = rp, lp
                self.l2r[lq], self.r2l[rq] = rq, lq

    def untangle_down(self) -> None:
        """Swap two pairings of twin readers when each reads what the other's partner reads:
        the outputs of a split (q, k, v of a fused projection) or twin producers. Walks the
        lhs in order, so a correction flows downstream."""
        for i in range(len(self.lhs.nodes)):
            j = self.l2r.get(i)
            if j is None:
                continue
            a, b = self.lhs.nodes[i], self.rhs.nodes[j]
            for slot, (va, vb) in enumerate(zip(a.inputs, b.inputs)):
                want = self._counterpart(va)
                if want is None or want is vb:
                    continue
                if self._swap_reader(i, j, slot, want, vb):
                    break

    def _counterpart(self, value: Value) -> Value | None:
        """The rhs value matching lhs ``value``: the same output of the matched producer."""
        p = self.lhs.producer(value)
        if p is None:
            return None
        rp = self.l2r.get(self.lhs.index(p))
        if rp is None:
            return None
        q = self.rhs.nodes[rp]
        k = p.outputs.index(value)
        return q.outputs[k] if k < len(q.outputs) else None

    def _swap_reader(self, i: int, j: int, slot: int, want: Value, got: Value) -> bool:
        a = self.lhs.nodes[i]
        for reader in self.rhs.consumers(want):
            j2 = self.rhs.index(reader)
            i2 = self.r2l.get(j2)
            if i2 is None or j2 == j or _label(reader) != _label(self.rhs.nodes[j]):
                continue
            if slot >= len(reader.inputs) or reader.inputs[slot] is not want:
                continue
            other = self.lhs.nodes[i2]
            if _label(other) != _label(a) or slot >= len(other.inputs):
                continue
            if self._counterpart(other.inputs[slot]) is not got:
                continue
            self.l2r[i], self.r2l[j2] = j2, i
            self.l2r[i2], self.r2l[j] = j, i2
            return True
        return False

    def moved_across(self) -> None:
        """Pair an op one side applies before an aligned node with the same op the other
        applies after it (a cast to an integer before an offset is added, or after): each
        reads or feeds that node where the other feeds or reads it."""
        left = [i for i in range(len(self.lhs.nodes)) if i not in self.l2r]
        right = [j for j in range(len(self.rhs.nodes)) if j not in self.r2l]
        for i in left:
            a = self.lhs.nodes[i]
            if len(a.outputs) != 1:
                continue
            up = {self.l2r[self.lhs.index(p)] for v in a.inputs
                  if (p := self.lhs.producer(v)) is not None and self.lhs.index(p) in self.l2r}
            down = {self.l2r[self.lhs.index(c)] for c in self.lhs.consumers(a.outputs[0])
                    if self.lhs.index(c) in self.l2r}
            for j in right:
                b = self.rhs.nodes[j]
                if j in self.r2l or b.op != a.op or len(b.outputs) != 1:
                    continue
                b_up = {self.rhs.index(p) for v in b.inputs
                        if (p := self.rhs.producer(v)) is not None}
                b_down = {self.rhs.index(c) for c in self.rhs.consumers(b.outputs[0])}
                if (down & b_up) or (up & b_down):
                    self.pair(i, j)
                    break

    def moved(self) -> None:
        left = [i for i in range(len(self.lhs.nodes)) if i not in self.l2r]
        right = [j for j in range(len(self.rhs.nodes)) if j not in self.r2l]
        by_label: dict[Any, list[int]] = {}
        for j in right:
            by_label.setdefault(_label(self.rhs.nodes[j]), []).append(j)
        for i in left:
            candidates = by_label.get(_label(self.lhs.nodes[i]), [])
            while candidates:
                if self.pair(i, candidates.pop(0)):
                    break


def _producer(graph: Graph, value: Value, paired: Mapping[int, int]) -> Node | None:
    """What computes ``value``, looking through the unpaired nodes that read one value
    besides parameters and constants: an op one side lacks, such as a KV cache's concat of
    the new keys alone, or a branch scaled by a weight of its own."""
    p = graph.producer(value)
    while p is not None and graph.index(p) not in paired:
        data = [v for v in p.inputs if v not in graph.constants and graph.param_name(v) is None]
        if len(data) != 1:
            break
        p = graph.producer(data[0])
    return p


def _shape_of(graph: Graph, value: Value, depth: int) -> tuple[Any, ...]:
    """What computes ``value``, attributes left out (they may differ on every layer): the
    op, the shapes of its parameters and of its output, and the same of its inputs, to
    ``depth``."""
    p = graph.producer(value)
    if p is None:
        return (leaf_key(graph, value)[0], value.shape)
    params = tuple(v.shape for v in p.inputs if graph.param_name(v) is not None)
    above = tuple(_shape_of(graph, v, depth - 1) for v in p.inputs
                  if graph.param_name(v) is None) if depth > 0 else ()
    return (p.op, params, value.shape, above)


def _likeness(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
    """How many parts of two ``_shape_of`` trees agree, level by level."""
    if len(a) != len(b) or a[0] != b[0]:
        return 0
    if len(a) == 2:
        return 1 + (a[1] == b[1])
    return 1 + (a[1] == b[1]) + (a[2] == b[2]) + sum(
        _likeness(x, y) for x, y in zip(a[3], b[3]))


def _same_kind(a: Node, b: Node) -> bool:
    return True


def align(lhs: Graph, rhs: Graph, *,
          node_match: Callable[[Node, Node], bool] | None = None) -> Alignment:
    """Align two canonical graphs (see the module docstring for the algorithm).

    Args:
        lhs: one graph.
        rhs: the other.
        node_match: an extra veto on pairing two nodes (all pairs allowed by default).

    Returns:
        The alignment; ``pairs`` sorted by lhs index.
    """
    m = _Matcher(lhs, rhs, node_match or _same_kind)
    m.anchors()
    m.propagate()
    while m.anchors():
        m.propagate()
    m.sequence()
    m.propagate()
    m.relabel()
    m.moved()
    m.moved_across()
    m.untangle()
    m.untangle_down()
    pairs = tuple(sorted(m.l2r.items()))
    lhs_only = tuple(i for i in range(len(lhs.nodes)) if i not in m.l2r)
    rhs_only = tuple(j for j in range(len(rhs.nodes)) if j not in m.r2l)
    return Alignment(lhs, rhs, pairs, lhs_only, rhs_only)
