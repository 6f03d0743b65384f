"""The Model Explorer files: graphs in Model Explorer's graph JSON (every edge names a node
that exists, namespaces follow the scopes), node data whose ids are nodes of the graph, a
sync mapping between real nodes of both sides, the numeric error of a pair with a planted
kernel fault highest at the fault, the same bytes for the same report, names from models
kept as data, and the CLI refusing a folder it cannot write before tracing."""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import pytest

from specgraph.align import align
from specgraph.cli import main
from specgraph.ir import GraphBuilder
from specgraph.renderers.model_explorer import (BANDS, FILES, model_explorer_files,
                                                write_model_explorer)
from specgraph.report import DiffReport

ROOT = Path(__file__).resolve().parents[2]
XOR = str(ROOT / "examples/xor/model_torch.py") + ":correct"
XOR_BAD = str(ROOT / "examples/xor/model_jax.py") + ":forgot_activation"
NODE_KEYS = {"id", "label", "namespace", "subgraphIds", "attrs", "incomingEdges",
             "outputsMetadata", "inputsMetadata"}
HOSTILE = ("../../x", "<script>alert(1)</script>", "a/b", "..", "q\"uote\\", "\u202eevil",
           "head\x1b[31m")


@pytest.fixture(scope="module")
def fault_files() -> dict[str, bytes]:
    """A PyTorch classifier with a planted softmax kernel fault against its JAX twin."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from specgraph.check import compare
    from specgraph.frontends import torch as frontend
    from specgraph.passes import canonicalize_model
    from tests.zoo import jax_models, torch_models
    from tests.zoo.torch_faults import wrong_softmax

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lhs = canonicalize_model(frontend.trace(*torch_models.MODELS["wide_classifier"](),
                                                reference="wide_classifier"))
    rhs = canonicalize_model(jax_models.trace("wide_classifier/jax"))
    with wrong_softmax():
        report = compare(lhs, rhs)
    assert [f.code for f in report.findings] == ["numeric-divergence"]
    files = model_explorer_files(report)
    assert model_explorer_files(report) == files  # the same report, the same bytes
    return files


def _hostile_report() -> DiffReport:
    """Two small graphs whose scopes, input, parameter and output names are hostile; the
    rhs lacks one ReLU."""
    graphs = []
    for with_extra in (True, False):
        b = GraphBuilder()
        x = b.input(HOSTILE[1], (2, 3), "float32")
        w = b.param(HOSTILE[0] + ".weight", (3, 3), "float32")
        h = b.add("matmul", [x, w], shape=(2, 3), dtype="float32", scope=HOSTILE[0],
                  source="<b>.py:1")
        for k, scope in enumerate(HOSTILE[1:]):
            if with_extra or k != 2:
                h = b.add("relu", [h], shape=(2, 3), dtype="float32", scope=scope)
        b.output(HOSTILE[5], h)
        graphs.append(b.build())
    al = align(*graphs)
    return DiffReport(HOSTILE[0], HOSTILE[1], "torch", "jax", findings=(), alignment=al)


def _graph(files: dict[str, bytes], side: str) -> dict[str, dict]:
    collection = json.loads(files[f"{side}.graph.json"])
    assert set(collection) == {"label", "graphs"} and isinstance(collection["label"], str)
    [graph] = collection["graphs"]
    assert graph["id"] == side
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert len(nodes) == len(graph["nodes"]), "node ids are unique"
    return nodes


def _check_graph(nodes: dict[str, dict]) -> None:
    """What Model Explorer's JSON loader relies on."""
    for node in nodes.values():
        assert set(node) == NODE_KEYS
        assert all(isinstance(kv["key"], str) and isinstance(kv["value"], str)
                   for kv in node["attrs"])
        for edge in node["incomingEdges"]:
            source = nodes[edge["sourceNodeId"]]  # every edge names an existing node
            assert int(edge["sourceNodeOutputId"]) < len(source["outputsMetadata"])
            if node["label"] != "output":
                assert int(edge["targetNodeInputId"]) < len(node["inputsMetadata"])
        ns = node["namespace"]
        assert ns == "" or all(ns.split("/")), f"an empty level in {ns!r}"
        scope = {kv["key"]: kv["value"] for kv in node["attrs"]}.get("scope")
        if scope and scope != "<model>":  # the scope's levels, none empty, none with a /
            assert ns == "/".join(p.replace("/", "\u2215") for p in scope.split(".") if p)


def _node_data(files: dict[str, bytes], name: str, side: str) -> dict[str, dict]:
    data = json.loads(files[name])
    assert list(data) == [side]
    results = data[side]["results"]
    for result in results.values():
        assert math.isfinite(result["value"])
        assert result["bgColor"] in {colour for _, colour in BANDS}
    return results


def test_graphs_node_data_and_mapping_follow_the_formats(fault_files) -> None:
    assert list(fault_files) == list(FILES)  # numbers forward and backward: every file
    nodes = {side: _graph(fault_files, side) for side in ("lhs", "rhs")}
    for side in ("lhs", "rhs"):
        _check_graph(nodes[side])
        for direction in ("forward", "backward"):
            results = _node_data(fault_files, f"{side}.{direction}_error.json", side)
            assert results and set(results) <= set(nodes[side])
    sync = json.loads(fault_files["sync.json"])
    assert sync["type"] == "sync_navigation" and sync["disableMappingFallback"] is True
    seen: dict[str, set[str]] = {"lhs": set(), "rhs": set()}
    for entry in sync["mappingEntries"]:
        for side, key in (("lhs", "leftNodeIds"), ("rhs", "rightNodeIds")):
            [node_id] = entry[key]
            assert node_id in nodes[side] and node_id not in seen[side]
            seen[side].add(node_id)
        left, right = nodes["lhs"][entry["leftNodeIds"][0]], nodes["rhs"][
            entry["rightNodeIds"][0]]
        assert left["label"] == right["label"]  # aligned nodes compute the same op


def test_numeric_error_is_highest_at_the_planted_fault(fault_files) -> None:
    for side in ("lhs", "rhs"):
        nodes = _graph(fault_files, side)
        results = _node_data(fault_files, f"{side}.forward_error.json", side)
        aligned = [n for n in nodes.values()
                   if any(kv["key"] == "counterpart" and kv["value"] != "none"
                          for kv in n["attrs"])]
        assert {n["id"] for n in aligned} == set(results)  # every aligned layer has one
        worst = max(results, key=lambda k: results[k]["value"])
        assert nodes[worst]["label"] == "softmax"
        assert results[worst]["bgColor"] == BANDS[2][1]  # over its tolerance
        assert all(r["bgColor"] == BANDS[0][1] for k, r in results.items() if k != worst)


def test_hostile_names_stay_data_in_fixed_files(tmp_path) -> None:
    report = _hostile_report()
    files = model_explorer_files(report)
    assert set(files) == {"lhs.graph.json", "rhs.graph.json", "sync.json", "README.txt"}
    assert model_explorer_files(report) == files
    for name, data in files.items():
        if name.endswith(".json"):  # JSON escapes every non-ASCII character and < > &
            assert "<" not in data.decode("ascii"), name
    readme = files["README.txt"].decode("utf-8")  # plain text, the model references printable
    assert "\x1b" not in readme and "\u202e" not in readme and HOSTILE[1] in readme
    lhs, rhs = _graph(files, "lhs"), _graph(files, "rhs")
    _check_graph(lhs)
    _check_graph(rhs)
    assert lhs["n0"]["namespace"] == "\u2215/\u2215x"  # ../../x: the levels '/' and '/x'
    assert {kv["key"]: kv["value"] for kv in lhs["n0"]["attrs"]}["scope"] == "../../x"
    assert lhs["in0"]["attrs"][0] == {"key": "name", "value": HOSTILE[1]}
    assert sum(n["namespace"] == "a\u2215b" for n in lhs.values()) == 1
    status = {n["id"]: {kv["key"]: kv["value"] for kv in n["attrs"]}.get("status")
              for n in lhs.values()}
    assert list(status.values()).count("only") == 1  # the ReLU rhs lacks
    target = tmp_path / "out"
    written = write_model_explorer(report, target)
    assert sorted(p.name for p in written) == sorted(files)
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["out", *files])
    assert all((target / n).read_bytes() == data for n, data in files.items())


def test_a_later_run_without_numbers_removes_the_error_files(tmp_path, fault_files) -> None:
    for name, data in fault_files.items():
        (tmp_path / name).write_bytes(data)
    write_model_explorer(_hostile_report(), tmp_path)
    assert not list(tmp_path.glob("*_error.json"))


def test_report_writes_the_folder_and_says_so(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    out = tmp_path / "me" / "deeper"
    assert main(["report", XOR, XOR_BAD, "-o", str(tmp_path / "r.html"),
                 "--model-explorer", str(out)]) == 1
    said = capsys.readouterr().out
    assert f"wrote {out} (8 files" in said
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(files) == set(FILES)
    readme = files["README.txt"].decode()
    assert "model-explorer lhs.graph.json --node_data_paths=lhs.forward_error.json," \
           "lhs.backward_error.json" in readme and "sync.json" in readme
    lhs, rhs = _graph(files, "lhs"), _graph(files, "rhs")
    only = [n["label"] for n in lhs.values()
            if {kv["key"]: kv["value"] for kv in n["attrs"]}.get("status") == "only"]
    assert only == ["relu"] and len(rhs) == len(lhs) - 1


@pytest.mark.parametrize("command", ["diff", "report", "check"])
def test_a_folder_that_cannot_be_written_is_refused_before_tracing(command, tmp_path,
                                                                    capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    missing = str(tmp_path / "nothing.py") + ":make"  # tracing it would fail otherwise
    args = {"diff": ["diff", missing, missing],
            "report": ["report", missing, missing, "-o", str(tmp_path / "r.html")],
            "check": ["check", missing, "--spec", str(ROOT / "examples/specs/xor.spec.yaml")]}
    for target, said in ((blocker, "a file of that name exists"),
                         (blocker / "sub", f"{blocker} is a file")):
        assert main([*args[command], "--model-explorer", str(target)]) == 2
        err = capsys.readouterr().err
        assert said in err and "--model-explorer names a folder" in err
        assert len(err.strip().splitlines()) == 1
    assert blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_folder_is_refused(tmp_path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    missing = str(tmp_path / "nothing.py") + ":make"
    assert main(["diff", missing, missing, "--model-explorer", str(locked / "me")]) == 2
    assert f"{locked} is not writable" in capsys.readouterr().err


def test_model_explorer_reads_the_files_with_its_own_types(fault_files) -> None:
    """Where ai-edge-model-explorer is installed: its graph and node data dataclasses take
    the files field for field (dacite, strict)."""
    pytest.importorskip("model_explorer")
    import dacite
    from model_explorer import graph_builder, node_data_builder

    strict = dacite.Config(strict=True)
    for side in ("lhs", "rhs"):
        collection = dacite.from_dict(graph_builder.GraphCollection,
                                      json.loads(fault_files[f"{side}.graph.json"]),
                                      config=strict)
        assert collection.graphs[0].id == side
        for direction in ("forward", "backward"):
            data = json.loads(fault_files[f"{side}.{direction}_error.json"])
            dacite.from_dict(node_data_builder.GraphNodeData, data[side], config=strict)
