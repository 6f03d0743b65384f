"""Names reach --repro scripts as data: an escaped string literal and a comment without
line breaks, never as code, whatever characters a module, scope or op attribute holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgraph.ir import GraphBuilder, Node
from specgraph.numeric.repro import ReproCase, comment, literal

pytest.importorskip("torch")

MARKER = "PWNED_BY_A_NAME"
HOSTILE = [
    f'block"""\nimport pathlib; pathlib.Path("{MARKER}").write_text("x")\n"""',
    f"block'''\nimport pathlib; pathlib.Path('{MARKER}').write_text('x')\n'''",
    f"block\r\nimport pathlib; pathlib.Path('{MARKER}').write_text('x') #",
    f"block\\\n\u2028\x00\x0c{{{{}}}}{{LAYER}}",
]


def _clip_node(scope: str) -> Node:
    b = GraphBuilder("repro")
    x = b.input("x", (2, 3), "float32")
    y = b.add("clip", [x], {"min": 0.0, "max": float("inf")}, shape=(2, 3),
              dtype="float32", scope=scope)
    b.output("y", y)
    return b.build().nodes[0]


def _case(node: Node) -> ReproCase:
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    return ReproCase("forward", node, node, (x,), (None,), "rhs", "torch", "torch", 0)


def _check_script(path: Path, scope: str) -> None:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    layer = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "LAYER")
    assert layer == f"clip at {scope}"  # the name, whole, as a string constant
    assert MARKER not in {getattr(n, "id", None) for n in ast.walk(tree)}
    # the name's only other place is the one comment line, with nothing after it
    comments = [line for line in text.splitlines() if line.startswith("# layer: ")]
    assert comments == [f"# layer: {comment(f'clip at {scope}')}"]


@pytest.mark.parametrize("scope", HOSTILE)
def test_a_hostile_name_in_a_torch_repro_is_a_literal_and_the_script_runs(tmp_path,
                                                                         scope) -> None:
    from specgraph.frontends.torch.repro import write
    from specgraph.numeric.repro import write_repro

    node = _clip_node(scope)
    write_repro(_case(node), tmp_path, [("lhs", write), ("rhs", None)])
    script = tmp_path / "repro_torch.py"
    _check_script(script, scope)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "torch clip at block" in proc.stdout
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("scope", HOSTILE)
def test_a_hostile_name_in_an_onnx_repro_is_a_literal(tmp_path, scope) -> None:
    pytest.importorskip("onnx")
    from specgraph.frontends.onnx.repro import write

    node = _clip_node(scope)
    write(tmp_path, node, "lhs", _case(node))
    _check_script(tmp_path / "repro_onnx.py", scope)


def test_attribute_literals_round_trip_infinities_and_strings() -> None:
    value = {"max": float("inf"), "min": float("-inf"), "eps": float("nan"),
             "mode": 'a"""\nb', "axes": (1,), "pads": [0, 2], "flag": True, "none": None,
             "n": np.int64(3)}
    back = eval(literal(value), {"np": np})  # noqa: S307  (our own literal)
    assert back["max"] == float("inf") and back["min"] == float("-inf")
    assert back["eps"] != back["eps"] and back["mode"] == 'a"""\nb'
    assert back["axes"] == (1,) and back["pads"] == [0, 2] and back["n"] == 3
    assert back["flag"] is True and back["none"] is None
    assert comment("a\nb\rc\x00d\u2028e") == "a b c d e"


@pytest.mark.parametrize("framework", ["jax", "tf", "torch"])
def test_a_compiled_sides_script_compiles_the_layer_and_runs(tmp_path, framework) -> None:
    """A side whose program ran compiled gets a second script, ``repro_<fw>_compiled.py``,
    that compiles the layer alone (``jax.jit``, ``tf.function(jit_compile=True)``,
    ``torch.compile``) and holds it against the float64 truth: each one runs, and a right
    layer passes."""
    import dataclasses
    import importlib

    from specgraph.numeric.repro import write_repro

    pytest.importorskip({"jax": "jax", "tf": "tensorflow", "torch": "torch"}[framework])
    write = importlib.import_module(f"specgraph.frontends.{framework}.repro").write
    node = _clip_node("block")
    case = dataclasses.replace(_case(node), lhs_framework=framework,
                               rhs_framework=framework, compiled=frozenset({"rhs"}))
    written = write_repro(case, tmp_path, [("lhs", write), ("rhs", write)])
    eager, compiled = tmp_path / f"repro_{framework}.py", tmp_path / \
        f"repro_{framework}_compiled.py"
    assert any(line.startswith(f"{compiled}:") and "compiled alone" in line
               for line in written), written
    assert "_eager" not in eager.read_text() and "_eager" in compiled.read_text()
    for path in (eager, compiled):
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "max error" in done.stdout
