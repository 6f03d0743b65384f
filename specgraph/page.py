"""``build_page``: everything the HTML report shows, as plain data for ``renderers.html``.

Both canonical graphs with their scope trees (repeated identical blocks folded, blocks with
findings opened), every node's counterpart and status, the findings with the nodes they
concern on each side and the source lines they point at, per-layer equations side by side
with the differing terms marked (presentation MathML), the per-layer numeric errors with
their tolerances, and in a check against a spec the spec's YAML.

Names from models are carried as data (the renderer escapes them); source lines are read
only from the ``.py`` files a Python model was traced from, never from a path an ONNX file
or a spec names.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgraph.align import Alignment
from specgraph.diff import describe_node
from specgraph.ir import Graph, Node
from specgraph.numeric.result import NumericResult
from specgraph.numeric.stats import tolerance
from specgraph.page_equations import paired_equations
from specgraph.page_sources import excerpts, read_text
from specgraph.report import DiffReport, Finding, Side, SpecReport

__all__ = ["Page", "build_page", "MAX_ITEMS", "comparison_of", "finding_nodes",
           "concerned_nodes", "node_rows", "layer_rows"]

# a repeated block's name: a number, alone or after a stem and a separator (layers_0, h-3)
_NUMBERED = re.compile(r"^((?:.*[_-])?)(\d+)$")
MAX_ITEMS = 120  # a scope with more direct ops than this is shown in parts of this many
_FOLD_MIN = 1  # identical blocks after the first that make a fold
_OPEN_ALL = 80  # a model of at most this many nodes is shown with every scope open


@dataclass
class Page:
    """The report's content.

    Attributes:
        title: the page's title.
        verdict: ``equivalent`` (bool), ``text`` (one line), ``mode`` (``diff``/``check``).
        sides: per side (lhs, rhs): its model, framework, nodes, edges, scopes and folds.
        findings: each finding with the node ids it concerns on each side.
        equations: sections of paired equations, as MathML.
        layers: per aligned layer, forward and backward error and tolerance.
        sources: ``file:line`` -> the lines around it (first line number, lines).
        spec: in check mode, the spec's path and lines.
        notes: the report's notes.
        numeric: the run's settings (contexts, seeds) or None.
    """

    title: str
    verdict: dict[str, Any]
    sides: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    equations: list[dict[str, Any]] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    numeric: dict[str, Any] | None = None

    def data(self) -> dict[str, Any]:
        """What the page's script reads (the graphs, findings and layers)."""
        return {"verdict": self.verdict, "sides": self.sides, "findings": self.findings,
                "layers": self.layers, "sources": self.sources,
                "spec": self.spec and {"path": self.spec["path"]}}


def _node_index(side: Side | None) -> int | None:
    if side is None:
        return None
    m = re.match(r"(\d+):", side.node)
    return int(m.group(1)) if m else None


def _places(f: Finding) -> list[tuple[Side | None, Side | None]]:
    return list(f.places) if f.places else [(f.lhs, f.rhs)]


def finding_nodes(f: Finding) -> dict[str, list[int]]:
    """The node indices ``f`` concerns on each side (``lhs``, ``rhs``), every place, the
    first place first."""
    ids: dict[str, list[int]] = {"lhs": [], "rhs": []}
    for a, b in _places(f):
        for name, side in (("lhs", a), ("rhs", b)):
            i = _node_index(side)
            if i is not None and i not in ids[name]:
                ids[name].append(i)
    return ids


def concerned_nodes(findings: Sequence[Finding]) -> dict[str, dict[int, list[int]]]:
    """Per side, node index -> the indices in ``findings`` of the findings that concern it."""
    concerned: dict[str, dict[int, list[int]]] = {"lhs": defaultdict(list),
                                                 "rhs": defaultdict(list)}
    for k, f in enumerate(findings):
        for name, ids in finding_nodes(f).items():
            for i in ids:
                concerned[name][i].append(k)
    return concerned


def comparison_of(report: DiffReport | SpecReport) -> DiffReport:
    """The comparison under ``report`` (a diff is its own), with its alignment.

    Raises:
        ValueError: the report carries no alignment (it was not made by ``compare``).
    """
    diff_report = report.comparison if isinstance(report, SpecReport) else report
    if diff_report is None or diff_report.alignment is None:
        raise ValueError("the report carries no graphs to draw; make it with "
                         "specgraph.compare or specgraph.check_spec")
    return diff_report


def build_page(report: DiffReport | SpecReport, *, spec_text: str | None = None) -> Page:
    """The page for ``report`` (a diff, or a check against a spec); the report must carry
    its alignment (``DiffReport.alignment``, set by ``specgraph.compare``).

    Raises:
        ValueError: the report carries no alignment (it was not made by ``compare``).
    """
    diff_report = comparison_of(report)
    al: Alignment = diff_report.alignment
    check = isinstance(report, SpecReport)
    if check:
        placed = [*report.findings, *(a.finding for a in report.accepted)]
        findings = [p.finding for p in report.findings]
        accepted = [a.finding.finding for a in report.accepted]
    else:
        placed = []
        findings = list(report.findings)
        accepted = [a.finding for a in diff_report.accepted]
    concerned = concerned_nodes(findings)
    rows = []
    voices = ({"lhs": "the implementation", "rhs": "the spec"} if check else
              {"lhs": "lhs", "rhs": "rhs"})
    for k, f in enumerate([*findings, *accepted]):
        ids = finding_nodes(f)
        row = {"code": f.code, "message": f.message, "blame": f.blame,
               "blamed": voices.get(f.blame, ""),
               "lhs": [f"n{i}" for i in ids["lhs"]], "rhs": [f"n{i}" for i in ids["rhs"]],
               "lsrc": f.lhs.source if f.lhs else "", "rsrc": f.rhs.source if f.rhs else "",
               "accepted": k >= len(findings)}
        if check and k < len(placed):
            p = placed[k]
            row["spec_line"] = p.spec_at.line if p.spec_at else None
            row["model_at"] = str(p.model_at) if p.model_at else ""
        rows.append(row)
    numeric = diff_report.numeric
    lhs_name = "implementation" if check else "lhs"
    rhs_name = "spec" if check else "rhs"
    sides = [
        _side(al.lhs, "lhs", lhs_name, diff_report.lhs, diff_report.lhs_framework,
              al.lhs_to_rhs, concerned["lhs"], numeric, "lhs"),
        _side(al.rhs, "rhs", rhs_name, diff_report.rhs, diff_report.rhs_framework,
              al.rhs_to_lhs, concerned["rhs"], numeric, "rhs"),
    ]
    folded = {s["side"]: _folded_nodes(s) for s in sides}
    equivalent = report.satisfied if check else report.equivalent
    n = len(findings)
    if check:
        text = ("the implementation satisfies the spec" if equivalent else
                f"the implementation leaves the spec: {n} finding{'s' * (n != 1)}")
        title = f"{diff_report.lhs} against {report.spec}"
    else:
        text = ("the two models are equivalent" if equivalent else
                f"the two models differ: {n} finding{'s' * (n != 1)}")
        title = f"{diff_report.lhs} vs {diff_report.rhs}"
    page = Page(
        title=title,
        verdict={"equivalent": equivalent, "text": text, "mode": "check" if check else "diff"},
        sides=sides, findings=rows,
        equations=paired_equations(al, folded),
        layers=layer_rows(numeric, al),
        notes=list(report.notes),
        numeric=None if numeric is None else {
            "lhs_context": numeric.lhs_context, "rhs_context": numeric.rhs_context,
            "seeds": list(numeric.seeds), "notes": list(numeric.notes)},
    )
    python_sides = [s for s, ref in ((sides[0], diff_report.lhs), (sides[1], diff_report.rhs))
                    if ".py:" in ref]
    wanted = {r[k] for r in rows for k in ("lsrc", "rsrc") if r[k]}
    wanted |= {nd["src"] for s in python_sides for nd in s["nodes"] if nd.get("src")}
    allowed = {nd["src"] for s in python_sides for nd in s["nodes"] if nd.get("src")}
    page.sources = excerpts(sorted(wanted & allowed))
    if check:
        page.spec = {"path": report.spec, "paper": {k: str(v) for k, v in
                                                     dict(report.paper or {}).items()},
                     "lines": (spec_text if spec_text is not None else
                               read_text(Path(report.spec))).splitlines()}
    return page


def _label(node: Node) -> str:
    return node.op


def _info(graph: Graph, node: Node, order: Mapping[str, int]) -> str:
    """The node's attributes, shapes and parameters (in ``graph.params`` order, which
    ``order`` gives by name)."""
    attrs = ", ".join(f"{k}={_short(v)}" for k, v in node.attrs.items())
    shapes = " → ".join([", ".join(_shape(v.shape) for v in node.inputs),
                          ", ".join(_shape(v.shape) for v in node.outputs)])
    params = sorted({n for n in map(graph.param_name, node.inputs) if n is not None},
                    key=order.__getitem__)
    return "; ".join(x for x in (attrs, shapes, ("params " + ", ".join(params))
                                 if params else "") if x)


def _shape(shape: Sequence[int]) -> str:
    return "[" + "×".join(map(str, shape)) + "]"


def _short(value: Any) -> str:
    text = str(value.tolist() if hasattr(value, "tolist") else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _stats_of(numeric: NumericResult | None, side: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    if numeric is None:
        return out
    for layer in numeric.layers:
        i = layer.lhs_node if side == "lhs" else layer.rhs_node
        if i is None:
            continue
        row: dict[str, Any] = {}
        if layer.forward is not None:
            row["fw"] = _num(layer.forward.max_rel)
        if layer.backward is not None:
            row["bw"] = _num(layer.backward.max_rel)
        out[i] = row
    return out


def _num(x: float) -> float | str:
    return float(f"{x:.4g}") if x == x and abs(x) != float("inf") else str(x)


def node_rows(graph: Graph, peers: Mapping[int, int], concerned: Mapping[int, list[int]],
              numeric: NumericResult | None, key: str) -> list[dict[str, Any]]:
    """Every node of ``graph`` as a row: the inputs ``in{k}``, the nodes ``n{i}`` (``i`` their
    index in ``graph.nodes``) and the outputs ``out{k}``, each with its op, label, scope
    path, status (``same``, ``differs``, ``only``; ``io`` for inputs and outputs), its peer
    on the other side, the findings that concern it and its errors (``fw``, ``bw``)."""
    stats = _stats_of(numeric, key)
    order = {name: k for k, name in enumerate(graph.params)}
    nodes: list[dict[str, Any]] = []
    for k, (iname, v) in enumerate(zip(graph.input_names, graph.inputs)):
        nodes.append({"id": f"in{k}", "op": "input", "label": iname, "path": "",
                      "st": "io", "info": f"input {iname} {_shape(v.shape)} {v.dtype}"})
    for i, node in enumerate(graph.nodes):
        peer = peers.get(i)
        status = "only" if peer is None else ("differs" if concerned.get(i) else "same")
        row: dict[str, Any] = {
            "id": f"n{i}", "op": node.op, "label": _label(node), "path": node.scope,
            "st": status, "info": _info(graph, node, order), "src": node.source,
            "desc": describe_node(node)}
        if peer is not None:
            row["peer"] = f"n{peer}"
        elif (near := _nearest_peer(graph, i, peers)) is not None:
            row["near"] = f"n{near}"
        if concerned.get(i):
            row["f"] = list(concerned[i])
        if i in stats:
            row.update(stats[i])
        nodes.append(row)
    for k, (oname, v) in enumerate(zip(graph.output_names, graph.outputs)):
        nodes.append({"id": f"out{k}", "op": "output", "label": oname, "path": "",
                      "st": "io", "info": f"output {oname} {_shape(v.shape)} {v.dtype}"})
    return nodes


def _side(graph: Graph, side: str, name: str, model: str, framework: str,
          peers: Mapping[int, int], concerned: Mapping[int, list[int]],
          numeric: NumericResult | None, key: str) -> dict[str, Any]:
    scopes = _Scopes()
    nodes = node_rows(graph, peers, concerned, numeric, key)
    for nd in nodes:
        nd["scope"] = 0 if nd["st"] == "io" else scopes.of(nd["path"])
        if nd["st"] == "io":
            del nd["path"]
    edges = _edges(graph)
    scopes.chunk(nodes)
    folds = scopes.fold(nodes, graph)
    scopes.open(nodes, total=len(graph.nodes))
    return {"side": side, "name": name, "model": model, "framework": framework,
            "nodes": nodes, "edges": edges, "scopes": scopes.rows, "folds": folds}


def _nearest_peer(graph: Graph, start: int, peers: Mapping[int, int]) -> int | None:
    """The counterpart of the aligned node nearest ``start`` along the graph's edges (where
    ``start``'s own counterpart would be), producers before readers; None if none is."""
    seen = {start}
    frontier = [start]
    while frontier:
        nxt: list[int] = []
        for i in frontier:
            node = graph.nodes[i]
            near = [graph.index(p) for v in node.inputs if (p := graph.producer(v)) is not None]
            near += [graph.index(c) for v in node.outputs for c in graph.consumers(v)]
            for j in near:
                if j in seen:
                    continue
                if j in peers:
                    return peers[j]
                seen.add(j)
                nxt.append(j)
        frontier = nxt
    return None


def _edges(graph: Graph) -> list[list[str]]:
    producer: dict[Any, str] = {v: f"in{k}" for k, v in enumerate(graph.inputs)}
    seen: set[tuple[str, str]] = set()
    out: list[list[str]] = []

    def add(a: str, b: str) -> None:
        if (a, b) not in seen:
            seen.add((a, b))
            out.append([a, b])

    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in producer:
                add(producer[v], f"n{i}")
        for v in node.outputs:
            producer[v] = f"n{i}"
    for k, v in enumerate(graph.outputs):
        if v in producer:
            add(producer[v], f"out{k}")
    return out


class _Scopes:
    """The scope tree as rows ``{id, parent, label, path}``; 0 is the model itself."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = [{"id": 0, "parent": None, "label": "model",
                                            "path": "", "open": True}]
        self._by_path: dict[str, int] = {"": 0}

    def of(self, path: str) -> int:
        if path in self._by_path:
            return self._by_path[path]
        parent_path, _, last = path.rpartition(".")
        parent = self.of(parent_path) if "." in path else 0
        k = len(self.rows)
        self.rows.append({"id": k, "parent": parent, "label": last if "." in path else path,
                          "path": path, "open": False})
        self._by_path[path] = k
        return k

    def chunk(self, nodes: list[dict[str, Any]]) -> None:
        """A scope with more than MAX_ITEMS direct ops gets them in parts (laid out one by
        one, never as one flat graph)."""
        direct: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for nd in nodes:
            if nd["op"] not in ("input", "output"):
                direct[nd["scope"]].append(nd)
        for scope, members in sorted(direct.items()):
            if len(members) <= MAX_ITEMS:
                continue
            for start in range(0, len(members), MAX_ITEMS):
                part = members[start:start + MAX_ITEMS]
                k = len(self.rows)
                self.rows.append({"id": k, "parent": scope, "path": self.rows[scope]["path"],
                                  "label": f"ops {start + 1}–{start + len(part)}",
                                  "open": False, "part": True})
                for nd in part:
                    nd["scope"] = k

    def _descendants(self) -> dict[int, list[int]]:
        children: dict[int, list[int]] = defaultdict(list)
        for row in self.rows[1:]:
            children[row["parent"]].append(row["id"])
        return children

    def fold(self, nodes: list[dict[str, Any]], graph: Graph) -> list[dict[str, Any]]:
        """Runs of sibling blocks named by numbers (``layer.0``, ``layer.1``...) that follow
        one another in the graph, each whole and of more than one op, compute the same ops
        with the same attributes and hold no finding, folded under the first (Keras's flat
        ``conv_pw_7``, ``conv_pw_8`` with other layers between them, or GPT-2's one-op
        ``ln_1``, ``ln_2``, are not folded)."""
        children = self._descendants()
        inside: dict[int, list[dict[str, Any]]] = defaultdict(list)
        parent = {r["id"]: r["parent"] for r in self.rows}
        for nd in nodes:
            s = nd["scope"]
            while s is not None:
                inside[s].append(nd)
                s = parent[s]
        folds: list[dict[str, Any]] = []
        for scope, kids in sorted(children.items()):
            # siblings named by a number, alone or after a common stem: layer.0, layers_0, h_0
            runs: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for k in kids:
                m = _NUMBERED.match(str(self.rows[k]["label"]))
                if m and not self.rows[k].get("part"):
                    runs[m.group(1)].append((int(m.group(2)), k))
            for stem, numbered in sorted(runs.items()):
                folds.extend(self._fold_run(scope, stem, sorted(numbered), inside, graph,
                                            len(folds)))
        return folds

    def _fold_run(self, scope: int, stem: str, numbered: list[tuple[int, int]],
                  inside: Mapping[int, list[dict[str, Any]]], graph: Graph, start: int
                  ) -> list[dict[str, Any]]:
        """Folds of the runs of blocks in ``numbered`` that follow one another in the graph
        (nothing computed between two of them), each whole (its ops one stretch of the
        graph) and of more than one op, computing the same."""
        folds: list[dict[str, Any]] = []
        sigs = {k: self._signature(k, inside[k], graph) for _, k in numbered}
        spans = {k: _span(inside[k]) for _, k in numbered}
        run: list[int] = []
        for _, k in [*numbered, (None, None)]:
            if k is not None and run and sigs[k] == sigs[run[0]] and \
                    not _marked(inside[k]) and _whole(spans[k]) and \
                    spans[k][0] == spans[run[-1]][1] + 1:
                run.append(k)
                continue
            if len(run) > _FOLD_MIN:
                folds.append(self._fold(scope, stem, run, f"f{start + len(folds)}"))
            run = [k] if k is not None and _whole(spans[k]) else []
        return folds

    def _fold(self, scope: int, stem: str, run: list[int], key: str) -> dict[str, Any]:
        first, rest = run[0], run[1:]
        a = self.rows[rest[0]]["label"]
        b = self.rows[rest[-1]]["label"][len(stem):]
        base = self.rows[first]["path"].rpartition(".")[0]
        base = f"{base}." if base else ""
        span = f"{a}–{b}" if len(rest) > 1 else f"{a}"
        return {"id": key, "scope": scope, "first": first, "members": rest,
                "label": f"{base}{span}: identical to {self.rows[first]['path']}",
                "open": False}

    def _signature(self, scope: int, members: list[dict[str, Any]], graph: Graph) -> str:
        prefix = self.rows[scope]["path"]
        h = hashlib.sha256()
        index = {nd["id"]: k for k, nd in enumerate(members)}
        for nd in members:
            i = int(nd["id"][1:])
            node = graph.nodes[i]
            rel = node.scope[len(prefix):]
            h.update(repr((rel, node.op, sorted((k, repr(v)) for k, v in node.attrs.items()),
                           [v.shape for v in node.outputs],
                           [index.get(f"n{graph.index(graph.producer(v))}", -1)
                            if graph.producer(v) is not None else -1
                            for v in node.inputs])).encode())
        return h.hexdigest()

    def open(self, nodes: list[dict[str, Any]], total: int) -> None:
        """Open the model, every block holding a finding or a node without counterpart,
        and every block of a small model."""
        parent = {r["id"]: r["parent"] for r in self.rows}
        for nd in nodes:
            if total <= _OPEN_ALL or nd["st"] in ("differs", "only") or nd.get("f"):
                s = nd["scope"]
                while s is not None:
                    self.rows[s]["open"] = True
                    s = parent[s]


def _span(members: list[dict[str, Any]]) -> tuple[int, int, int]:
    """The first and last graph index of a block's ops, and how many it holds."""
    index = [int(nd["id"][1:]) for nd in members if nd["id"].startswith("n")]
    return (min(index), max(index), len(index)) if index else (0, -1, 0)


def _whole(span: tuple[int, int, int]) -> bool:
    """A block of more than one op, its ops one stretch of the graph."""
    lo, hi, count = span
    return count > 1 and hi - lo + 1 == count


def _marked(members: list[dict[str, Any]]) -> bool:
    return any(nd["st"] in ("differs", "only") or nd.get("f") for nd in members)


def _folded_nodes(side: dict[str, Any]) -> set[int]:
    """Node indices inside folded blocks (their equations are the first block's)."""
    parent = {r["id"]: r["parent"] for r in side["scopes"]}
    folded_scopes = {m for f in side["folds"] for m in f["members"]}
    out = set()
    for nd in side["nodes"]:
        s = nd["scope"]
        while s is not None:
            if s in folded_scopes:
                out.add(int(nd["id"][1:]))
                break
            s = parent[s]
    return out


def layer_rows(numeric: NumericResult | None, al: Alignment) -> list[dict[str, Any]]:
    """Per aligned layer (rhs order): the forward and backward error relative to the
    tensor's scale, and the tolerance it is held to."""
    if numeric is None:
        return []
    precisions = (numeric.lhs_context.rsplit(",", 1)[-1], numeric.rhs_context.rsplit(",", 1)[-1])
    out = []
    for layer in numeric.layers:
        if layer.rhs_node is None or layer.lhs_node is None:
            continue
        node = al.rhs.nodes[layer.rhs_node]
        row: dict[str, Any] = {"l": f"n{layer.lhs_node}", "r": f"n{layer.rhs_node}",
                               "name": layer.rhs,
                               "tf": tolerance(node, precisions).rtol,
                               "tb": tolerance(node, precisions, backward=True).rtol}
        if layer.forward is not None:
            row["fw"] = _num(layer.forward.max_rel)
            row["bad_f"] = layer.forward.diverges
        if layer.backward is not None:
            row["bw"] = _num(layer.backward.max_rel)
            row["bad_b"] = layer.backward.diverges
        out.append(row)
    return out
