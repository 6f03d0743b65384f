"""Model Explorer files: both graphs, the per-node numeric error and the node pairing, in
the JSON formats of Google's Model Explorer (``ai-edge-model-explorer``), for models too
large to read on one HTML page.

``model_explorer_files(report)`` gives the files as bytes by name, ``write_model_explorer``
writes them into a folder. The names are fixed (``lhs.graph.json``...): nothing from a model
ever becomes a path; names from models are JSON strings (ASCII, ``<``, ``>`` and ``&``
escaped as in the HTML report). The same report gives the same bytes.

The formats, as Model Explorer 0.1.x reads them (``google-ai-edge/model-explorer``, read at
``ai-edge-model-explorer`` 0.1.32 to 0.1.34):

* ``{lhs,rhs}.graph.json``: a ``GraphCollection`` ``{label, graphs: [Graph]}`` as the UI's
  built-in JSON loader takes it (``loadGraphsJson`` in ``src/ui/src/common/utils.ts``),
  each ``Graph`` and ``GraphNode`` as ``model_explorer/graph_builder.py`` defines them:
  ``{id, nodes: [{id, label, namespace, subgraphIds, attrs: [{key, value}],
  incomingEdges: [{sourceNodeId, sourceNodeOutputId, targetNodeInputId}],
  outputsMetadata, inputsMetadata: [{id, attrs}]}]}``. A namespace is the node's scope with
  ``/`` between levels, so Model Explorer groups the layers as the model nests them.
* ``{lhs,rhs}.{forward,backward}_error.json``: node data, a ``ModelNodeData`` of
  ``model_explorer/node_data_builder.py`` (graph id -> ``GraphNodeData`` with ``name`` and
  ``results``: node id -> ``{value, bgColor}``; each colour from the layer's own tolerance,
  so neither ``gradient`` nor ``thresholds``, which colour by value alone).
* ``sync.json``: ``SyncNavigationData`` of
  ``src/ui/src/components/visualizer/common/sync_navigation.ts`` (``type:
  sync_navigation``, ``mappingEntries`` of ``leftNodeIds``/``rightNodeIds``), loaded in the
  UI as the split view's "Upload mapping from computer".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgraph.ir import Graph, Node, Value
from specgraph.page import comparison_of, concerned_nodes, layer_rows, node_rows
from specgraph.report import DiffReport, SpecReport

__all__ = ["model_explorer_files", "write_model_explorer", "FILES", "BANDS"]

SIDES = ("lhs", "rhs")
FILES = ("lhs.graph.json", "rhs.graph.json", "lhs.forward_error.json",
         "rhs.forward_error.json", "lhs.backward_error.json", "rhs.backward_error.json",
         "sync.json", "README.txt")
# a layer's error against its own tolerance (the one the verdict uses): background colours
# of Model Explorer's node data, up to a tenth of the tolerance, up to it, and beyond
BANDS = (("within a tenth of its tolerance", "#c8e6c9"), ("within its tolerance", "#fff59d"),
         ("over its tolerance: the layer diverges", "#e57373"))
_VALUE_CHARS = 200  # an attribute's value shown in Model Explorer's side panel, at most


def model_explorer_files(report: DiffReport | SpecReport) -> dict[str, bytes]:
    """The Model Explorer files of ``report`` by name: both graphs, the per-node relative
    error forward and backward where numbers were compared, the pairing and a README.txt.

    Args:
        report: a diff or a check against a spec that carries its alignment (made by
            ``specgraph.compare`` or ``specgraph.check_spec``).

    Returns:
        File name -> bytes, in the order of ``FILES`` (error files only where there are
        errors).

    Raises:
        ValueError: the report carries no alignment.
    """
    diff_report = comparison_of(report)
    al = diff_report.alignment
    check = isinstance(report, SpecReport)
    findings = [p.finding for p in report.findings] if check else list(report.findings)
    concerned = concerned_nodes(findings)
    graphs = {"lhs": al.lhs, "rhs": al.rhs}
    peers = {"lhs": al.lhs_to_rhs, "rhs": al.rhs_to_lhs}
    names = {"lhs": "the implementation" if check else "lhs",
             "rhs": "the spec" if check else "rhs"}
    models = {"lhs": (diff_report.lhs, diff_report.lhs_framework),
              "rhs": (diff_report.rhs, diff_report.rhs_framework)}
    codes = [f.code for f in findings]
    out: dict[str, bytes] = {}
    for side in SIDES:
        rows = node_rows(graphs[side], peers[side], concerned[side], diff_report.numeric, side)
        label = f"{_called(side, names)}: {models[side][0]} ({models[side][1]})"
        out[f"{side}.graph.json"] = _dump({"label": label, "graphs": [
            _graph(graphs[side], side, rows, codes)]})
    layers = layer_rows(diff_report.numeric, al)
    for direction, key in (("forward", "fw"), ("backward", "bw")):
        if any(key in row for row in layers):
            for side in SIDES:
                out[f"{side}.{direction}_error.json"] = _dump(
                    _node_data(layers, side, direction, key))
    out["sync.json"] = _dump(_sync(al.pairs, al.lhs, al.rhs))
    out["README.txt"] = _readme(out, models, names).encode("utf-8")
    return out


def write_model_explorer(report: DiffReport | SpecReport, folder: str | os.PathLike[str]
                         ) -> list[Path]:
    """Write ``model_explorer_files(report)`` into ``folder`` (made if missing), each file
    whole or not at all; files of an earlier run that this one does not write (an error
    file of a run with numbers) are removed. Returns the paths written, in order.

    Raises:
        FileExistsError: ``folder`` is a file.
        NotADirectoryError: a folder above ``folder`` is a file.
    """
    files = model_explorer_files(report)
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        path = target / name
        partial = target / f".{name}.partial"
        partial.write_bytes(data)
        partial.replace(path)
        written.append(path)
    for name in FILES:
        if name not in files and (target / name).is_file():
            (target / name).unlink()
    return written


def _dump(data: Any) -> bytes:
    """Compact JSON, ASCII only, ``<``, ``>`` and ``&`` as ``\\u`` escapes, no NaN."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            + "\n").encode("ascii")


def _namespace(scope: str) -> str:
    """A scope (``encoder.layer.0``) as a Model Explorer namespace (``encoder/layer/0``):
    a ``/`` inside one level becomes ``∕`` (U+2215) so it does not nest, empty levels go."""
    return "/".join(part.replace("/", "\u2215") for part in scope.split(".") if part)


def _graph(graph: Graph, side: str, rows: Sequence[dict[str, Any]], codes: Sequence[str]
           ) -> dict[str, Any]:
    other = "rhs" if side == "lhs" else "lhs"
    producer: dict[Value, tuple[str, int]] = {
        v: (f"in{k}", 0) for k, v in enumerate(graph.inputs)}
    nodes = []
    for row in rows:
        if row["op"] == "input":
            k = int(row["id"][2:])
            nodes.append(_io_node(row, "", [], [_meta(0, graph.inputs[k], row["label"])]))
            continue
        if row["op"] == "output":
            k = int(row["id"][3:])
            source = producer.get(graph.outputs[k])
            edges = [_edge(source, 0)] if source else []
            nodes.append(_io_node(row, "", edges, []))
            continue
        i = int(row["id"][1:])
        node = graph.nodes[i]
        edges = [_edge(producer[v], k) for k, v in enumerate(node.inputs) if v in producer]
        nodes.append({
            "id": row["id"], "label": row["label"], "namespace": _namespace(row["path"]),
            "subgraphIds": [], "attrs": _attrs(graph, node, row, other, codes),
            "incomingEdges": edges,
            "outputsMetadata": [_meta(k, v, None) for k, v in enumerate(node.outputs)],
            "inputsMetadata": [_meta(k, v, graph.param_name(v) or graph.input_name(v))
                               for k, v in enumerate(node.inputs)]})
        for k, v in enumerate(node.outputs):
            producer[v] = (row["id"], k)
    return {"id": side, "nodes": nodes}


def _io_node(row: Mapping[str, Any], namespace: str, edges: list[dict[str, str]],
             outputs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": row["id"], "label": row["op"], "namespace": namespace, "subgraphIds": [],
            "attrs": [_kv("name", row["label"]), _kv("value", row["info"])],
            "incomingEdges": edges, "outputsMetadata": outputs, "inputsMetadata": []}


def _edge(source: tuple[str, int], target_input: int) -> dict[str, str]:
    return {"sourceNodeId": source[0], "sourceNodeOutputId": str(source[1]),
            "targetNodeInputId": str(target_input)}


def _meta(k: int, value: Value, tag: str | None) -> dict[str, Any]:
    shape = f"{value.dtype}[{','.join(map(str, value.shape))}]"
    attrs = [_kv("tensor_shape", shape)]
    if tag:
        attrs.append(_kv("__tensor_tag", tag))
    return {"id": str(k), "attrs": attrs}


def _kv(key: str, value: Any) -> dict[str, str]:
    text = str(value.tolist() if hasattr(value, "tolist") else value)
    if len(text) > _VALUE_CHARS:
        text = text[:_VALUE_CHARS - 3] + "..."
    return {"key": key, "value": text}


def _attrs(graph: Graph, node: Node, row: Mapping[str, Any], other: str,
           codes: Sequence[str]) -> list[dict[str, str]]:
    """What the side panel shows: op, scope, source, status, counterpart, findings, errors,
    then the op's attributes (an attribute named like one of ours is shown as ``attr NAME``)."""
    ours = [("op", node.op), ("scope", node.scope or "<model>"), ("source", node.source),
            ("origin", node.origin), ("status", row["st"]),
            ("counterpart", f"{other} {row['peer']}" if "peer" in row else "none"),
            ("findings", ", ".join(codes[k] for k in row.get("f", ())))]
    ours += [(label, row[key]) for key, label in (("fw", "forward error"),
                                                  ("bw", "backward error")) if key in row]
    params = [name for name in map(graph.param_name, node.inputs) if name]
    if params:
        ours.append(("params", ", ".join(params)))
    taken = {k for k, _ in ours}
    out = [_kv(k, v) for k, v in ours if v not in ("", None)]
    for key, value in node.attrs.items():
        out.append(_kv(f"attr {key}" if key in taken else key, value))
    return out


def _node_data(layers: Sequence[Mapping[str, Any]], side: str, direction: str, key: str
               ) -> dict[str, Any]:
    """One side's per-node error in one direction, as ``ModelNodeData`` keyed by the graph
    id. A layer whose error is not a finite number (NaN, inf) has no entry: Model Explorer
    takes numbers only; the graph's ``forward error`` attribute names it."""
    tol_key, bad_key, node_key = f"t{key[0]}", f"bad_{key[0]}", side[0]
    results: dict[str, Any] = {}
    for row in layers:
        value = row.get(key)
        if not isinstance(value, float) or not math.isfinite(value):
            continue
        band = 2 if row.get(bad_key) else (1 if value > 0.1 * row[tol_key] else 0)
        results[row[node_key]] = {"value": value, "bgColor": BANDS[band][1]}
    return {side: {"name": f"{direction} relative error ({side})", "results": results}}


def _sync(pairs: Sequence[tuple[int, int]], lhs: Graph, rhs: Graph) -> dict[str, Any]:
    """The pairing: each aligned node pair, then inputs and outputs by position; every
    node not named has no counterpart, and Model Explorer marks it in the split view."""
    entries = [{"leftNodeIds": [f"n{i}"], "rightNodeIds": [f"n{j}"]} for i, j in pairs]
    for prefix, a, b in (("in", lhs.inputs, rhs.inputs), ("out", lhs.outputs, rhs.outputs)):
        entries += [{"leftNodeIds": [f"{prefix}{k}"], "rightNodeIds": [f"{prefix}{k}"]}
                    for k in range(min(len(a), len(b)))]
    return {"type": "sync_navigation", "mappingEntries": entries,
            "disableMappingFallback": True, "showDiffHighlights": True}


def _readme(files: Mapping[str, bytes], models: Mapping[str, tuple[str, str]],
            names: Mapping[str, str]) -> str:
    errors = [n for n in files if n.endswith("_error.json")]
    lhs_data = ",".join(n for n in errors if n.startswith("lhs."))
    rhs_data = ",".join(n for n in errors if n.startswith("rhs."))
    lines = ["specgraph: two models for Google's Model Explorer (pip install "
             "ai-edge-model-explorer)", ""]
    for side in SIDES:
        model, framework = models[side]
        lines.append(f"{_called(side, names)}: {_printable(model)} ({_printable(framework)})")
    lines += ["", "Files:",
              "  lhs.graph.json, rhs.graph.json   each model's graph, layers grouped by "
              "module path",
              *(["  *.forward_error.json, *.backward_error.json   the relative error of "
                 "each aligned layer (node data)"] if errors else
                ["  (no error files: numbers were not compared)"]),
              "  sync.json   the aligned node pairs, for the split view", "",
              "Open one side with its errors:",
              "  model-explorer lhs.graph.json" +
              (f" --node_data_paths={lhs_data}" if lhs_data else ""),
              "  model-explorer rhs.graph.json" +
              (f" --node_data_paths={rhs_data}" if rhs_data else ""), "",
              "Open both (node data goes to the first model on the command line, so name "
              "the model for each file in Python):",
              "  import model_explorer",
              "  config = model_explorer.config()",
              "  config.add_model_from_path('lhs.graph.json')",
              "  config.add_model_from_path('rhs.graph.json')"]
    for name in errors:
        lines.append(f"  config.add_node_data_from_path('{name}', model_name="
                     f"'{name.split('.')[0]}.graph.json')")
    lines += ["  model_explorer.visualize_from_config(config)", "",
              "Then open the rhs graph in a split pane, and in the split view's sync menu",
              "choose \"Upload mapping from computer\" and pick sync.json: selecting a node",
              "selects its counterpart; a node with none is outlined (red on the left,",
              "green on the right).", ""]
    if errors:
        lines += ["Node colours (each layer against its own tolerance, as the verdict "
                  "judges it):"]
        lines += [f"  {colour}  {what}" for what, colour in BANDS]
        lines += ["A layer whose error is NaN or infinite has no colour; its node's "
                  "attributes say so.", ""]
    return "\n".join(lines)


def _called(side: str, names: Mapping[str, str]) -> str:
    """``lhs``, or ``lhs (the implementation)`` where the side has another name."""
    return side if names[side] == side else f"{side} ({names[side]})"


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
