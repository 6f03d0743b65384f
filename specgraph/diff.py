"""Structural diff: explain every difference between two aligned canonical graphs.

One root cause is one finding: a node whose inputs already differ in shape does not also
report its own shape or parameter shapes, and a connection that differs only because the
other side lacks an op in between is explained by that missing op alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from specgraph.align import Alignment, align, leaf_key
from specgraph.folds import Fold, Folded
from specgraph.grouping import group_repeated, leaf_words
from specgraph.ir import Graph, Node, Value, same_elements
from specgraph.ops import get_spec
from specgraph.ops.values import same_numbers, same_value
from specgraph.passes.drowned import DROWN, drowning
from specgraph.report import DIFF, Finding, Row, Side, Voice, chain

__all__ = ["diff", "describe_node", "node_side", "side_index"]


def describe_node(node: Node) -> str:
    return f"{node.op} at {node.scope or '<model>'}"


def node_side(graph: Graph, node: Node, value: Any = None) -> Side:
    """Where ``node`` sits in ``graph``, as a finding's Side (node named ``index:op``)."""
    index = graph.index(node)
    return Side(node.scope or "<model>", f"{index}:{node.op}", node.source, value)


def side_index(side: Side | None) -> int | None:
    """The node index of a finding's Side (``node`` is ``index:op``: ``node_side``)."""
    if side is None or not side.node:
        return None
    head = side.node.split(":", 1)[0]
    return int(head) if head.isdigit() else None


# bits an integer type holds its values in (a sign bit apart); bool holds 0 and 1
_INT_BITS = {"bool": 1, "uint8": 8, "int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _exact_casts(a: Node, b: Node) -> bool:
    """Whether two casts to integer types of different widths both keep every value of
    their inputs exactly (a boolean mask counted as int64 in PyTorch, as int32 in TF: the
    same counts)."""
    into = [_INT_BITS.get(n.attrs["dtype"]) for n in (a, b)]
    source = [_INT_BITS.get(n.inputs[0].dtype) if n.inputs else None for n in (a, b)]
    return None not in into and None not in source and \
        max(source) <= min(into)  # type: ignore[type-var]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


def _crop(node: Node) -> tuple[int, ...]:
    """What a transposed conv crops from each end of its full output: PyTorch's padding 1
    and output_padding 1 keep what Flax's (and ONNX's) padding 1 at the start, 0 at the end
    keep."""
    pads, extra = node.attrs["padding"], node.attrs["output_padding"]
    rank = len(pads) // 2
    extra = tuple(extra) or (0,) * rank
    return tuple(pads[:rank]) + tuple(e - o for e, o in zip(pads[rank:], extra))


def _undrowned(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two masks with the keys both drown (at or below ``DROWN`` on both sides) made 0."""
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if a.shape != b.shape:
        return a, b
    both = (a <= DROWN) & (b <= DROWN)
    return np.where(both, 0.0, a), np.where(both, 0.0, b)


class _Differ:
    def __init__(self, al: Alignment, voice: Voice = DIFF, folds: Sequence[Fold] = (),
                 folded: Sequence[Folded] = ()) -> None:
        self.al, self.v = al, voice
        # what one side computes from its weights alone and the other holds as constants
        # (``specgraph.folds.find_folded``): not missing, not wired otherwise
        self.cones = {(f.side, k) for f in folded for k in f.cone}
        self.folded_slots = {(f.lhs_node, f.slot) for f in folded}
        # BatchNorms the other side folded into the layer before (``specgraph.folds``):
        # not missing, and the folded layer's bias is where their shift went
        self.folded_norms = {(f.side, f.norm): f for f in folds}
        self.folded_pairs = {f.aligned for f in folds}
        self.lhs, self.rhs = al.lhs, al.rhs
        self.l2r, self.r2l = al.lhs_to_rhs, al.rhs_to_lhs
        self.findings: list[tuple[int, Finding]] = []  # (sort key, finding)
        self.flagged_l: set[int] = set()
        self.flagged_r: set[int] = set()
        self._drowning: tuple[frozenset[Value], frozenset[Value]] | None = None

    # --- helpers -------------------------------------------------------------------------
    def _matched_above(self, graph: Graph, value: Value, matched: Mapping[int, int]) -> Any:
        """The nearest matched producer of ``value`` through unmatched nodes (or a leaf)."""
        seen = 0
        while True:
            node = graph.producer(value)
            if node is None:
                return ("leaf", _leaf_key(graph, value))
            i = graph.index(node)
            if i in matched or not node.inputs or seen > 64:
                return ("node", i)
            value = node.inputs[0]
            seen += 1

    def _sources(self, graph: Graph, value: Value, matched: Mapping[int, int]) -> set[Any]:
        """Matched producers and leaves reachable from ``value`` through unmatched nodes."""
        out: set[Any] = set()
        stack, seen = [value], set()
        while stack and len(seen) < 256:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            node = graph.producer(v)
            if node is None:
                out.add(("leaf", _leaf_key(graph, v)))
            elif graph.index(node) in matched:
                out.add(("node", graph.index(node)))
            else:
                stack.extend(node.inputs)
        return out

    def _neighbour_scopes(self, graph: Graph, node: Node, matched: Mapping[int, int]) -> tuple[str, str]:
        before = leaf_words(graph, None)
        if node.inputs:
            kind, where = self._matched_above(graph, node.inputs[0], matched)
            if kind == "node":
                before = describe_node(graph.nodes[where])
            else:  # the leaf the walk reached: through the first inputs, as it went
                value = node.inputs[0]
                while (producer := graph.producer(value)) is not None and producer.inputs:
                    value = producer.inputs[0]
                before = leaf_words(graph, value)
        after = "the model's output"
        value = node.outputs[0]
        for _ in range(64):
            users = graph.consumers(value)
            if not users:
                break
            user = users[0]
            if graph.index(user) in matched:
                after = describe_node(user)
                break
            value = user.outputs[0]
        return before, after

    # --- findings ------------------------------------------------------------------------
    def _components(self, graph: Graph, only: tuple[int, ...]) -> list[list[int]]:
        """Unmatched nodes of one side grouped into connected runs."""
        members = set(only)
        parent = {i: i for i in only}

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in only:
            for v in graph.nodes[i].inputs:
                p = graph.producer(v)
                if p is not None and graph.index(p) in members:
                    parent[root(i)] = root(graph.index(p))
        groups: dict[int, list[int]] = {}
        for i in only:
            groups.setdefault(root(i), []).append(i)
        return sorted(groups.values())

    def _boundary(self, graph: Graph, comp: list[int], matched: Mapping[int, int],
                  to_lhs: Any) -> tuple[frozenset, frozenset]:
        inside = set(comp)
        ups, downs = set(), set()
        for i in comp:
            node = graph.nodes[i]
            for v in node.inputs:
                for ref in self._sources(graph, v, matched):
                    if not (ref[0] == "leaf" and ref[1][0] == "const"):
                        ups.add(to_lhs(ref))
            for v in node.outputs:
                for user in graph.consumers(v):
                    j = graph.index(user)
                    if j not in inside and j in matched:
                        downs.add(to_lhs(("node", j)))
                if v in graph.outputs:
                    downs.add(("output", graph.outputs.index(v)))
        return frozenset(ups), frozenset(downs)

    def missing(self) -> None:
        """One finding per run of ops one side lacks; a run each side has in the same place
        is one op-mismatch (BatchNorm where the other has transpose·LayerNorm·transpose)."""
        l_comps = self._components(self.lhs, self.al.lhs_only)
        r_comps = self._components(self.rhs, self.al.rhs_only)

        def lhs_ref(ref: Any) -> Any:
            return ref

        def rhs_ref(ref: Any) -> Any:
            kind, x = ref
            return ("node", self.r2l[x]) if kind == "node" else ref

        l_bounds = [self._boundary(self.lhs, c, self.l2r, lhs_ref) for c in l_comps]
        r_bounds = [self._boundary(self.rhs, c, self.r2l, rhs_ref) for c in r_comps]
        used_r: set[int] = set()
        for lc, lb in zip(l_comps, l_bounds):
            partner = next((k for k, rb in enumerate(r_bounds) if k not in used_r and
                            rb == lb), None)
            if partner is None:
                self._missing_run(self.lhs, lc, "lhs")
                continue
            used_r.add(partner)
            self._replaced_run(lc, r_comps[partner])
        for k, rc in enumerate(r_comps):
            if k not in used_r:
                self._missing_run(self.rhs, rc, "rhs")

    def _missing_run(self, graph: Graph, comp: list[int], side: str) -> None:
        if len(comp) == 1 and (side, comp[0]) in self.folded_norms:
            return  # folded into the layer before, on the other side
        if all((side, k) in self.cones for k in comp):
            return  # folded into a constant on the other side
        other = self.v.other(side)
        matched = self.l2r if side == "lhs" else self.r2l
        first, last = graph.nodes[comp[0]], graph.nodes[comp[-1]]
        before, _ = self._neighbour_scopes(graph, first, matched)
        _, after = self._neighbour_scopes(graph, last, matched)
        ops = tuple(self.v.op_name(side, graph.nodes[i]) for i in comp)
        where = node_side(graph, first)
        message = self._untied(graph, comp, side) or (
            f"{other} has no {chain(ops)} between {before} and {after} "
            f"({self.v.name(side)} has it at {first.scope or '<model>'}"
            f"{', ' + first.source if first.source else ''})")
        finding = Finding("missing-op", message, op=first.op,
                          lhs=where if side == "lhs" else None,
                          rhs=where if side == "rhs" else None, ops=ops)
        self.findings.append((comp[0] if side == "lhs" else self._rhs_key(comp[0]), finding))
        (self.flagged_l if side == "lhs" else self.flagged_r).update(comp)

    def _untied(self, graph: Graph, comp: list[int], side: str) -> str | None:
        """The run lays out a weight another layer reads too (a head tied to the token
        embedding) for a layer whose counterpart reads a weight of its own that nothing
        else reads: that, in words (TF's XGLM has an LM head of its own)."""
        nodes = [graph.nodes[i] for i in comp]
        name = graph.param_name(nodes[0].inputs[0])
        if name is None or any(n.op not in ("transpose", "reshape") for n in nodes) or \
                len(graph.consumers(nodes[0].inputs[0])) < 2:
            return None
        out = nodes[-1].outputs[0]
        readers = graph.consumers(out)
        matched = self.l2r if side == "lhs" else self.r2l
        if len(readers) != 1 or graph.index(readers[0]) not in matched:
            return None
        reader = readers[0]
        other_graph = self.rhs if side == "lhs" else self.lhs
        twin = other_graph.nodes[matched[graph.index(reader)]]
        slot = reader.inputs.index(out)
        if slot >= len(twin.inputs):
            return None
        own = other_graph.param_name(twin.inputs[slot])
        if own is None or len(other_graph.consumers(twin.inputs[slot])) != 1:
            return None
        tied = [u for u in graph.consumers(nodes[0].inputs[0]) if u is not nodes[0]]
        return (f"{reader.op} at {reader.scope or '<model>'} reads the weight {name} in "
                f"{self.v.name(side)}, which {tied[0].op} at {tied[0].scope or '<model>'} "
                f"reads too (tied), but a weight of its own, {own}, in "
                f"{self.v.other(side)} ({twin.scope or '<model>'}): not tied there")

    def _replaced_run(self, lc: list[int], rc: list[int]) -> None:
        a, b = self.lhs.nodes[lc[0]], self.rhs.nodes[rc[0]]
        l_ops = chain([self.v.op_name("lhs", self.lhs.nodes[i]) for i in lc])
        r_ops = chain([self.v.op_name("rhs", self.rhs.nodes[j]) for j in rc])
        before, after = self._neighbour_scopes(self.lhs, a, self.l2r)
        detail = "; ".join(self._said(self.rhs.nodes[j], "attention" in l_ops)
                           for j in rc if self.rhs.nodes[j].op in ("softmax", "layer_norm",
                                                                    "batch_norm"))
        message = (f"{self.v.lhs} computes {l_ops} where {self.v.rhs} computes {r_ops}, "
                   f"between {before} and "
                   f"{after} ({a.scope or '<model>'} / {b.scope or '<model>'})"
                   f"{': ' + detail if detail else ''}")
        self.findings.append((lc[0], Finding("op-mismatch", message, op=a.op,
                                             lhs=node_side(self.lhs, a, l_ops),
                                             rhs=node_side(self.rhs, b, r_ops))))
        self.flagged_l.update(lc)
        self.flagged_r.update(rc)

    def _said(self, node: Node, attention: bool) -> str:
        """A softmax or norm of a run the other side computes otherwise, in words: a
        softmax by the axis it runs over (not the keys', where the other side is
        attention), a norm by its attributes."""
        if node.op == "softmax":
            shape, axis = node.inputs[0].shape, node.attrs["axis"] % max(node.inputs[0].rank, 1)
            words = f"{self.v.rhs}'s softmax runs over axis {axis} of {list(shape)}"
            if attention and axis != len(shape) - 1:
                words += ", not the last (attention's runs over the keys)"
            return words
        attrs = ", ".join(f"{k}={_fmt(x)}" for k, x in sorted(node.attrs.items()))
        return f"{self.v.rhs}'s {node.op} with {attrs}"

    def _rhs_key(self, j: int) -> int:
        for k in range(j, -1, -1):
            if k in self.r2l:
                return self.r2l[k]
        return 0

    def matched(self) -> None:
        for i, j in self.al.pairs:
            a, b = self.lhs.nodes[i], self.rhs.nodes[j]
            before = len(self.findings)
            if a.op != b.op:
                self._add(i, Finding(
                    "op-mismatch",
                    f"{self.v.lhs} computes {self.v.op_name('lhs', a)} where {self.v.rhs} "
                    f"computes {self.v.op_name('rhs', b)} "
                    f"({a.scope or '<model>'} / {b.scope or '<model>'})",
                    op=a.op, lhs=node_side(self.lhs, a, a.op), rhs=node_side(self.rhs, b, b.op)))
            elif not (a.op == "attention" and self._heads(i, a, b)):
                self._attrs(i, a, b)
            inputs_differ = any(va.shape != vb.shape for va, vb in zip(a.inputs, b.inputs)
                                if self.lhs.param_name(va) is None)
            if not inputs_differ:
                self._params(i, a, b)
                if len(self.findings) == before and any(
                        va.shape != vb.shape for va, vb in zip(a.outputs, b.outputs)) and \
                        not self._as_its_params(a, b):
                    self._add(i, Finding(
                        "shape-mismatch",
                        f"{a.op} produces {a.outputs[0].shape} in {self.v.lhs} "
                        f"({a.scope or '<model>'}) but {b.outputs[0].shape} in {self.v.rhs} "
                        f"({b.scope or '<model>'}) from inputs of the same shape",
                        op=a.op, lhs=node_side(self.lhs, a, a.outputs[0].shape),
                        rhs=node_side(self.rhs, b, b.outputs[0].shape)))
            self._edges(i, a, b)
            if len(self.findings) > before:
                self.flagged_l.add(i)
                self.flagged_r.add(j)

    @staticmethod
    def _as_its_params(a: Node, b: Node) -> bool:
        """Outputs that differ only in axes of size one, as a parameter read does (a scalar
        gain against TF's [1]): the same numbers, no shape difference to report."""
        return all(same_elements(va.shape, vb.shape) for va, vb in zip(a.outputs, b.outputs)) \
            and any(va.shape != vb.shape for va, vb in zip(a.inputs, b.inputs))

    def _add(self, key: int, finding: Finding) -> None:
        self.findings.append((key, finding))

    def _heads(self, i: int, a: Node, b: Node) -> bool:
        """Attention over another split into heads: one finding, the default scale that
        follows from it is not a second one."""
        qa, qb = a.inputs[0].shape, b.inputs[0].shape
        if len(qa) < 3 or len(qb) < 3 or (qa[-3], qa[-1]) == (qb[-3], qb[-1]):
            return False  # the same heads (the batch laid out otherwise is no heads' matter)
        self._add(i, Finding(
            "attr-mismatch",
            f"attention uses {qa[-3]} heads of size {qa[-1]} in {self.v.lhs} "
            f"({a.scope or '<model>'}) but {qb[-3]} heads of size {qb[-1]} in {self.v.rhs} "
            f"({b.scope or '<model>'})",
            op="attention", attr="heads", lhs=node_side(self.lhs, a, (qa[-3], qa[-1])),
            rhs=node_side(self.rhs, b, (qb[-3], qb[-1]))))
        for key in ("causal", "has_mask"):
            if a.attrs[key] != b.attrs[key]:
                self._attrs(i, a, b)
                return True
        default = [same_value(n.attrs["scale"], q[-1] ** -0.5) for n, q in ((a, qa), (b, qb))]
        if not all(default):
            self._attrs(i, a, b)
        return True

    def _attrs(self, i: int, a: Node, b: Node) -> None:
        said: set[str] = set()
        if a.op == "attention" and not all(same_value(a.attrs.get(k), b.attrs.get(k))
                                           for k in ("causal", "has_mask")):
            x, y = _keys_kept(self.lhs, a), _keys_kept(self.rhs, b)
            if x is not None and y is not None and x != y:
                said = {"causal", "has_mask"}
                self._add(i, Finding(
                    "attr-mismatch",
                    f"attention at {a.scope or '<model>'} lets each query see {x} in "
                    f"{self.v.lhs} but {y} in {self.v.rhs} ({b.scope or '<model>'})", op=a.op, attr="mask",
                    lhs=node_side(self.lhs, a, x), rhs=node_side(self.rhs, b, y)))
        if a.op == b.op == "conv_transpose" and _crop(a) == _crop(b):
            said |= {"padding", "output_padding"}  # the same rows cropped, said otherwise
        folded = (i, self.l2r[i]) in self.folded_pairs
        for key in sorted(set(a.attrs) | set(b.attrs)):
            x, y = a.attrs.get(key), b.attrs.get(key)
            if same_value(x, y) or key in said or (folded and key == "bias") or (
                    key == "dtype" and a.op == "cast" and _exact_casts(a, b)):
                continue
            schema = get_spec(a.op).attrs.get(key)
            affects = schema.affects if schema is not None and schema.affects else None
            self._add(i, Finding(
                "attr-mismatch",
                f"{a.op} {key} is {_fmt(x)} in {self.v.lhs} ({a.scope or '<model>'}) but "
                f"{_fmt(y)} in {self.v.rhs} ({b.scope or '<model>'})"
                + (f"; the forward pass is the same, it changes {affects}" if affects else ""),
                op=a.op, attr=key, lhs=node_side(self.lhs, a, x), rhs=node_side(self.rhs, b, y),
                affects=affects))

    def _params(self, i: int, a: Node, b: Node) -> None:
        """One finding per layer, naming every parameter whose shape differs."""
        diffs = []
        for va, vb in zip(a.inputs, b.inputs):
            na, nb = self.lhs.param_name(va), self.rhs.param_name(vb)
            if na is not None and nb is not None and va.shape != vb.shape and \
                    not same_elements(va.shape, vb.shape):  # a scalar against [1]: alike
                diffs.append((na, va.shape, nb, vb.shape))
        if not diffs:
            return
        said = "; ".join(f"{na} {list(sa)} vs {nb} {list(sb)}" for na, sa, nb, sb in diffs)
        self._add(i, Finding(
            "param-mismatch",
            f"{a.op} parameters differ in shape between {self.v.lhs} ({a.scope or '<model>'}) "
            f"and {self.v.rhs} "
            f"({b.scope or '<model>'}): {said}",
            op=a.op, lhs=node_side(self.lhs, a, [list(d[1]) for d in diffs]),
            rhs=node_side(self.rhs, b, [list(d[3]) for d in diffs])))

    def _edges(self, i: int, a: Node, b: Node) -> None:
        left = [self._matched_above(self.lhs, v, self.l2r) for v in a.inputs]
        right = [self._matched_above(self.rhs, v, self.r2l) for v in b.inputs]
        mapped = [("node", self.l2r[x]) if kind == "node" and x in self.l2r else (kind, x)
                  for kind, x in left]
        for slot in range(min(len(left), len(right))):
            if (i, slot) in self.folded_slots:  # one side holds it folded: the same value
                mapped[slot] = right[slot]
        commutative = get_spec(a.op).commutative
        same = (sorted(map(repr, mapped)) == sorted(map(repr, right)) if commutative
                else mapped == right)
        if same and len(left) == len(right):
            self._constants(i, a, b)
            return
        if len(left) != len(right):
            # an optional input one side has (a BatchNorm's scale against Keras'
            # scale=False; its own finding): the data it reads is still compared
            data = [k for k, ref in enumerate(left) if not _weight_ref(ref)]
            rdata = [k for k, ref in enumerate(right) if not _weight_ref(ref)]
            if len(data) != len(rdata) or [mapped[k] for k in data] == \
                    [right[k] for k in rdata] or self._explained(a, b, zip(data, rdata)):
                return
            lm, rm = next((left[k], right[m]) for k, m in zip(data, rdata)
                          if mapped[k] != right[m])
        elif self._explained(a, b):
            return
        else:
            if a.op == b.op == "concat" and sorted(map(repr, mapped)) == \
                    sorted(map(repr, right)):  # the same pieces joined in another order
                order = [mapped.index(r) + 1 for r in right]
                self._add(i, Finding(
                    "edge-mismatch",
                    f"concat at {a.scope or '<model>'} joins the same {len(left)} pieces in "
                    f"another order: {self.v.rhs} ({b.scope or '<model>'}) puts {self.v.lhs}'s "
                    f"pieces in the order {', '.join(map(str, order))} along axis "
                    f"{b.attrs['axis']}",
                    op=a.op, lhs=node_side(self.lhs, a), rhs=node_side(self.rhs, b)))
                return
            lm, rm = next((lref, r) for lref, m, r in zip(left, mapped, right) if m != r)
        scalars = all(k == "leaf" and x[0] == "const" and x[2] is not None
                      for k, x in (lm, rm))  # the same op with another number in it
        self._add(i, Finding(
            "edge-mismatch",
            f"{a.op} at {a.scope or '<model>'} reads {self._say(lm, self.lhs)} in {self.v.lhs} "
            f"but {self._say(rm, self.rhs)} in {self.v.rhs} ({b.scope or '<model>'})" +
            (": the same op with another constant" if scalars else
             ": the two sides are wired differently here"),
            op=a.op, lhs=node_side(self.lhs, a), rhs=node_side(self.rhs, b)))

    def _constants(self, i: int, a: Node, b: Node) -> None:
        """Constant tensors read in the same slot that hold other numbers (a frequency table
        built from another theta): the wiring is the same, what it reads is not."""
        for slot, (va, vb) in enumerate(zip(a.inputs, b.inputs)):
            x, y = self.lhs.constants.get(va), self.rhs.constants.get(vb)
            if x is None or y is None or np.size(x) <= 1 or same_numbers(x, y):
                continue
            if a.op == b.op == "add" and self._drowns(a, b) and \
                    same_numbers(*_undrowned(x, y)):
                continue  # a mask filled with -inf on one side, the lowest float on the other
            gap = float(np.max(np.abs(np.asarray(x, float) - np.asarray(y, float))))
            if a.op == b.op == "gather" and slot == 1 and np.ndim(x) == np.ndim(y) == 1:
                # positions read along one axis: a nearest resize's, which differ in their
                # coordinates or rounding
                message = (f"gather at {a.scope or '<model>'} reads other positions along "
                           f"axis {a.attrs['axis']}: {_positions(x)} in {self.v.lhs}, "
                           f"{_positions(y)} in {self.v.rhs} ({b.scope or '<model>'})")
                if all(np.all(np.diff(np.asarray(p)) >= 0) for p in (x, y)):
                    message += ("; a nearest resize reads so where the two round the input "
                                "coordinate differently or map positions to it differently "
                                "(half-pixel centers or not)")
            elif (windows := (_window(x), _window(y)))[0] is not None and \
                    windows[1] is not None:  # a local attention's band of keys
                message = (f"the keys each query may see at {a.scope or '<model>'} are a "
                           f"window of its last {windows[0]} positions in {self.v.lhs} but "
                           f"its last {windows[1]} in {self.v.rhs} ({b.scope or '<model>'})")
            else:
                message = (f"{a.op} at {a.scope or '<model>'} reads a constant tensor "
                           f"{list(va.shape)} in {self.v.lhs} whose numbers differ from "
                           f"{self.v.rhs}'s ({b.scope or '<model>'}) by up to {gap:.3g}")
            self._add(i, Finding("edge-mismatch", message, op=a.op,
                                 lhs=node_side(self.lhs, a, slot),
                                 rhs=node_side(self.rhs, b, slot)))
            return

    def _drowns(self, a: Node, b: Node) -> bool:
        """Whether both sums go into softmax scores alone, where a key masked by -inf and
        one masked by the lowest float are both drowned (``specgraph.passes.drowned``)."""
        if self._drowning is None:
            self._drowning = drowning(self.lhs), drowning(self.rhs)
        return a.outputs[0] in self._drowning[0] and b.outputs[0] in self._drowning[1]

    def _explained(self, a: Node, b: Node, slots: Iterable[tuple[int, int]] | None = None
                   ) -> bool:
        """Every differing input (of ``slots``, pairs of input positions; all by default) is
        accounted for by ops one side lacks (a missing residual add, a missing activation)
        rather than by different wiring."""
        pairs = zip(a.inputs, b.inputs) if slots is None else \
            [(a.inputs[k], b.inputs[m]) for k, m in slots]
        for va, vb in pairs:
            la = {("node", self.l2r[x]) if k == "node" else (k, x)
                  for k, x in self._sources(self.lhs, va, self.l2r)}
            rb = self._sources(self.rhs, vb, self.r2l)
            direct_a = self.lhs.producer(va)
            direct_b = self.rhs.producer(vb)
            unmatched_between = (direct_a is not None and self.lhs.index(direct_a) not in
                                 self.l2r) or (direct_b is not None and
                                               self.rhs.index(direct_b) not in self.r2l)
            if la == rb:
                continue
            if unmatched_between and (la & rb):
                continue
            return False
        return True

    def _say(self, ref: Any, graph: Graph) -> str:
        """What a reference (a node of ``graph``, or a leaf) is, in words."""
        kind, x = ref
        if kind == "node":
            return f"the output of {describe_node(graph.nodes[x])}"
        if x[0] == "const":
            return f"the constant {_fmt(x[2])}" if x[2] is not None else \
                f"a constant tensor {list(x[1])}"
        if x[0] == "input":
            return f"model input {x[1]}"
        return "a parameter" if x[0] == "param" else "a value"

    def rows(self) -> list[Row]:
        rows: list[Row] = []
        rhs_after: dict[int, list[int]] = {}
        last = -1
        for j in range(len(self.rhs.nodes)):
            if j in self.r2l:
                last = self.r2l[j]
            else:
                rhs_after.setdefault(last, []).append(j)
        for j in rhs_after.get(-1, []):
            rows.append(self._row(None, j))
        for i in range(len(self.lhs.nodes)):
            rows.append(self._row(i, self.l2r.get(i)))
            for j in rhs_after.get(i, []):
                rows.append(self._row(None, j))
        return rows

    def _row(self, i: int | None, j: int | None) -> Row:
        return dataclasses.replace(self._row_text(i, j), lhs_node=i, rhs_node=j)

    def _row_text(self, i: int | None, j: int | None) -> Row:
        a = self.lhs.nodes[i] if i is not None else None
        b = self.rhs.nodes[j] if j is not None else None
        if (j is None and ("lhs", i) in self.cones) or (i is None and ("rhs", j) in self.cones):
            text = "(folded into a constant)"
            return Row(_short(a) if a else text, _short(b) if b else text,
                       a.scope if a else "", b.scope if b else "", True)
        fold = (self.folded_norms.get(("lhs", i)) if j is None else
                self.folded_norms.get(("rhs", j)) if i is None else None)
        if fold is not None:  # a BatchNorm the other side folded into the layer before
            other = self.rhs if fold.side == "lhs" else self.lhs
            text = f"(folded into {other.nodes[fold.folded].op})"
            where = other.nodes[fold.folded].scope
            return Row(_short(a) if a else text, _short(b) if b else text,
                       a.scope if a else where, b.scope if b else where, True)
        differs = (i is None or j is None or i in self.flagged_l or j in self.flagged_r)
        return Row(_short(a), _short(b), a.scope if a else "", b.scope if b else "", differs)


def _short(node: Node | None) -> str:
    if node is None:
        return "—"
    return f"{node.op} {list(node.outputs[0].shape)}"


def _window(pattern: Any) -> int | None:
    """The width w of a boolean keep pattern [..., L, S] (repeated over its leading axes)
    that lets each query i see keys i-w+1 .. i alone, as a local attention's band does;
    None for any other pattern (the causal one included: a window as long as the rows)."""
    keep = np.asarray(pattern)
    if keep.dtype != bool or keep.ndim < 2:
        return None
    rows, keys = keep.shape[-2:]
    flat = keep.reshape(-1, rows, keys)
    if not (flat == flat[:1]).all():
        return None
    i, j = np.ogrid[:rows, :keys]
    for width in range(1, rows):
        if np.array_equal(flat[0], (j <= i) & (j > i - width)):
            return width
    return None


def _weight_ref(ref: Any) -> bool:
    """Whether a reference ``_matched_above`` gives is a parameter or a constant, not the
    data an op reads."""
    return ref[0] == "leaf" and ref[1][0] in ("param", "const")


def _leaf_key(graph: Graph, value: Value) -> tuple[Any, ...]:
    """Leaves for wiring comparisons: parameter shapes are compared as param-mismatch."""
    return leaf_key(graph, value, param_shape=False)


_LAYOUT = frozenset({"transpose", "reshape", "expand"})


def _is_layout(f: Finding) -> bool:
    """A difference in data movement only, which other findings already explain."""
    if f.code == "attr-mismatch":
        return f.op in _LAYOUT
    if f.code == "missing-op":
        return bool(f.ops) and all(op in _LAYOUT for op in f.ops)
    return False


def _explains_layout(f: Finding, lhs: Graph, rhs: Graph) -> bool:
    """Whether a finding can explain differences in data movement elsewhere: any but a
    layout finding, save an attribute that leaves its layer's output shapes as they are (an
    eps, a padding row, a GELU's approximation move no data: a reshape that differs beside
    them is a difference of its own)."""
    if _is_layout(f):
        return False
    if f.code != "attr-mismatch" or f.lhs is None or f.rhs is None:
        return True
    a = lhs.nodes[int(f.lhs.node.split(":", 1)[0])]
    b = rhs.nodes[int(f.rhs.node.split(":", 1)[0])]
    return [v.shape for v in a.outputs] != [v.shape for v in b.outputs]


def _merge_relayout(findings: list[Finding], lhs: Graph, rhs: Graph, v: Voice
                    ) -> list[Finding]:
    """A reshape whose shape differs and the transpose that reads it, whose permutation
    differs, are one relayout written another way (heads split as (head_dim, heads) where
    the other side splits (heads, head_dim)): the transpose's finding joins the reshape's."""
    def node(graph: Graph, side: Side | None) -> Node | None:
        return None if side is None else graph.nodes[int(side.node.split(":", 1)[0])]

    reshapes = {(f.lhs.node, f.rhs.node): k for k, f in enumerate(findings)
                if f.code == "attr-mismatch" and f.op == "reshape" and f.attr == "shape"
                and f.lhs and f.rhs}
    out = list(findings)
    dropped: set[int] = set()
    for k, f in enumerate(findings):
        if not (f.code == "attr-mismatch" and f.op == "transpose" and f.attr == "perm"):
            continue
        a, b = node(lhs, f.lhs), node(rhs, f.rhs)
        pa, pb = lhs.producer(a.inputs[0]), rhs.producer(b.inputs[0])
        if pa is None or pb is None or pa.op != "reshape" or pb.op != "reshape":
            continue
        r = reshapes.get((node_side(lhs, pa).node, node_side(rhs, pb).node))
        if r is None or a.outputs[0].shape != b.outputs[0].shape:
            continue
        g = out[r]
        out[r] = dataclasses.replace(g, message=f"{g.message}, then transposed by "
                                     f"{_fmt(f.lhs.value)} in {v.lhs} but "
                                     f"{_fmt(f.rhs.value)} in {v.rhs}")
        dropped.add(k)
    return [f for k, f in enumerate(out) if k not in dropped]


_FILLS = {"zeros": "with zeros", "reflect": "by reflection", "replicate": "by repeating the edge"}


def _padding_mode(node: Node) -> str:
    """How a pad fills what it adds, as PyTorch's ``padding_mode`` names it."""
    mode = node.attrs.get("mode", "constant")
    if mode != "constant":
        return "replicate" if mode == "edge" else str(mode)
    value = float(node.attrs.get("value", 0.0))
    return "zeros" if value == 0.0 else f"constant {_fmt(value)}"


def _merge_pad_mode(findings: list[Finding], lhs: Graph, rhs: Graph, v: Voice
                    ) -> list[Finding]:
    """A pad one side has before a conv, where the other side's conv pads as much with
    zeros itself (its padding attribute), is one difference, how the border is filled (a
    reflection padding ported as ``padding="same"``): the conv's padding finding and the
    pad's missing-op finding become one."""
    graphs = {"lhs": lhs, "rhs": rhs}
    convs = {(side, getattr(f, side).node): k for k, f in enumerate(findings)
             if f.code == "attr-mismatch" and f.op == "conv" and f.attr == "padding"
             and f.lhs and f.rhs for side in ("lhs", "rhs")}  # a conv's finding, either side
    out = list(findings)
    dropped: set[int] = set()
    for k, f in enumerate(findings):
        if f.code != "missing-op" or f.ops != ("pad",) or (f.lhs is None) == (f.rhs is None):
            continue
        side = "lhs" if f.lhs is not None else "rhs"
        graph = graphs[side]
        pad = graph.nodes[side_index(f.lhs or f.rhs)]  # type: ignore[index]
        readers = graph.consumers(pad.outputs[0])
        if len(readers) != 1 or readers[0].op != "conv":
            continue
        r = convs.get((side, node_side(graph, readers[0]).node))
        if r is None or out[r].attr != "padding":  # none, or merged with another pad
            continue
        g = out[r]
        rank = pad.outputs[0].rank
        pads = list(pad.attrs["pads"])
        if any(pads[a] or pads[rank + a] for a in (0, 1)):
            continue
        ours = g.lhs.value if side == "lhs" else g.rhs.value  # type: ignore[union-attr]
        theirs = g.rhs.value if side == "lhs" else g.lhs.value  # type: ignore[union-attr]
        spatial = [pads[a] for a in range(2, rank)] + [pads[rank + a] for a in range(2, rank)]
        if len(spatial) != len(ours) or \
                tuple(p + o for p, o in zip(spatial, ours)) != tuple(theirs):
            continue
        modes = {side: _padding_mode(pad), ("rhs" if side == "lhs" else "lhs"): "zeros"}
        fill = {s: _FILLS.get(m, f"with {m}") for s, m in modes.items()}
        out[r] = dataclasses.replace(g, message=(
            f"conv at {g.lhs.scope} pads its input {fill['lhs']} in {v.lhs} but "  # type: ignore[union-attr]
            f"{fill['rhs']} in {v.rhs} (at {g.rhs.scope}), by {_fmt(tuple(theirs))}"),  # type: ignore[union-attr]
            attr="padding_mode",
            lhs=dataclasses.replace(g.lhs, value=modes["lhs"]),  # type: ignore[arg-type]
            rhs=dataclasses.replace(g.rhs, value=modes["rhs"]))  # type: ignore[arg-type]
        dropped.add(k)
    return [f for k, f in enumerate(out) if k not in dropped]


def _merge_moved(findings: list[Finding], v: Voice) -> list[Finding]:
    """Two attribute findings whose values trade places are one moved attribute (a stride
    moved from one conv to another), whose places are both."""
    out: list[Finding] = []
    used: set[int] = set()
    for i, f in enumerate(findings):
        if i in used:
            continue
        if f.code == "attr-mismatch" and f.lhs and f.rhs:
            for j in range(i + 1, len(findings)):
                g = findings[j]
                if j not in used and g.code == "attr-mismatch" and g.op == f.op and \
                        g.attr == f.attr and g.lhs and g.rhs and g.lhs.value == f.rhs.value \
                        and g.rhs.value == f.lhs.value:
                    used.add(j)
                    # told by the value that moved, not the one left (a stride of 2, not 1)
                    x, y = (g, f) if _unit(f.lhs.value) and not _unit(f.rhs.value) else (f, g)
                    f = Finding("attr-mismatch", (
                        f"{f.op} {f.attr} {_fmt(x.lhs.value)} sits at {x.lhs.scope} in "
                        f"{v.lhs} but at {y.rhs.scope} in {v.rhs}, which has "
                        f"{_fmt(x.rhs.value)} at {x.rhs.scope}: the {f.attr} moved from one "
                        f"{f.op} to another"), op=f.op, attr=f.attr, lhs=f.lhs, rhs=f.rhs,
                        places=((f.lhs, f.rhs), (g.lhs, g.rhs)))
                    break
        out.append(f)
    return out


def _unit(value: Any) -> bool:
    """A value that leaves its op as it is: strides and dilations of 1."""
    return isinstance(value, tuple) and bool(value) and all(x == 1 for x in value)


def _merge_wiring(findings: list[Finding]) -> list[Finding]:
    """Several wiring findings describe one reordering: report the first, mention the rest."""
    wiring = [f for f in findings if f.code == "edge-mismatch"]
    if len(wiring) < 2:
        return findings
    first = wiring[0]
    scopes = [g.lhs.scope for g in wiring if g.lhs]

    def place(f: Finding) -> str:  # the rhs scope too where lhs's repeat (one module's
        # q, k and v linears: ``attn`` in PyTorch, ``attn.query``... in Flax)
        assert f.lhs is not None
        if scopes.count(f.lhs.scope) > 1 and f.rhs is not None and f.rhs.scope != f.lhs.scope:
            return f"{f.op} at {f.lhs.scope} (rhs: {f.rhs.scope})"
        return f"{f.op} at {f.lhs.scope}"

    others = ", ".join(place(f) for f in wiring[1:] if f.lhs)
    merged = Finding("edge-mismatch", f"{first.message}; so are {others}", op=first.op,
                     lhs=first.lhs, rhs=first.rhs,
                     places=tuple((f.lhs, f.rhs) for f in wiring))  # one region, numbers say
    return [merged if f is first else f for f in findings if f.code != "edge-mismatch"
            or f is first]


def diff(lhs: Graph, rhs: Graph, *, alignment: Alignment | None = None, group: bool = True,
         voice: Voice = DIFF, folds: Sequence[Fold] = (), folded: Sequence[Folded] = ()
         ) -> tuple[list[Finding], list[Row]]:
    """The findings that explain how ``rhs`` differs from ``lhs``, in lhs graph order, and
    the side-by-side rows of the alignment.

    Args:
        lhs / rhs: the two canonical graphs.
        alignment: one already computed (else aligned here).
        group: make a difference found in several places one finding with its places
            (``specgraph.grouping``); False leaves one finding per place (for callers that
            judge each place before grouping, as ``specgraph.check.compare`` does).
        voice: how messages name the two sides (``lhs`` and ``rhs`` unless told).
        folds: the BatchNorms one side folded into the layer before, which are no finding
            (``specgraph.folds.find_folds``, which reads the weights).
        folded: what one side computes from its weights alone and the other holds as
            constants (``specgraph.folds.find_folded``), which is no finding either.
    """
    d = _Differ(alignment if alignment is not None else align(lhs, rhs), voice, folds,
                folded)
    d.missing()
    d.matched()
    findings = [f for _, f in sorted(d.findings, key=lambda kf: kf[0])]
    if any(_explains_layout(f, d.lhs, d.rhs) for f in findings):
        findings = [f for f in findings if not _is_layout(f)]
    findings = _merge_relayout(findings, d.lhs, d.rhs, voice)
    findings = _merge_wiring(_merge_moved(_merge_pad_mode(findings, d.lhs, d.rhs, voice), voice))
    return (group_repeated(findings, d.al, voice) if group else findings), d.rows()


def _keys_kept(graph: Graph, node: Node) -> str | None:
    """Which keys an attention node's constant mask (and causality) lets each query see, in
    words; None where the mask is computed from the inputs."""
    keep = None
    if node.attrs.get("has_mask"):
        data = graph.constants.get(node.inputs[3])
        if data is None:
            return None
        data = np.asarray(data)
        keep = data if data.dtype == bool else data > -1e4
        keep = keep.reshape((-1, *keep.shape[-2:]))
        if not all(np.array_equal(keep[0], k) for k in keep[1:]):
            return "keys that differ from head to head"
        keep = keep[0]
    length, source = node.inputs[0].shape[-2], node.inputs[1].shape[-2]
    if keep is None:
        keep = np.ones((length, source), dtype=bool)
    keep = np.broadcast_to(keep, (length, source))
    if node.attrs.get("causal"):
        keep = keep & np.tri(length, source, dtype=bool)
    rows, cols = np.indices(keep.shape)
    if keep.all():
        return "every key"
    if np.array_equal(keep, rows >= cols):
        return "the keys j <= i (causal)"
    if np.array_equal(keep, rows == cols):
        return "only its own key j == i"
    for w in range(1, length):
        if np.array_equal(keep, (rows >= cols) & (rows - cols <= w)):
            return f"the keys i-{w} <= j <= i (a causal window of {w + 1})"
    return f"{int(keep.sum())} of the {length}x{source} query-key pairs"


def _positions(at: np.ndarray, shown: int = 12) -> str:
    """Integer positions as a short list: ``[0, 0, 1, 2, 2, 3, ...]`` (the first ``shown``)."""
    items = [str(int(v)) for v in np.asarray(at).reshape(-1)[:shown]]
    return "[" + ", ".join(items) + (", ...]" if np.size(at) > shown else "]")
