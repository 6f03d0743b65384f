"""Any YAML, however hostile, keeps the loader's contract: a compiled spec, or one SpecError
at ``file:line:col`` (exit 2 from ``specgraph show``), never another exception, never exit 3,
never a hang: random structures, wrong types, huge numbers, unicode, deep nesting, anchors
and aliases, billion-laughs documents, and valid specs with one part replaced. Bounded here;
``SPECGRAPH_PROPERTY_EXAMPLES=2000 pytest tests/spec/test_properties.py`` searches longer."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgraph.cli import main
from specgraph.errors import SpecError
from specgraph.spec import loads

EXAMPLES = int(os.environ.get("SPECGRAPH_PROPERTY_EXAMPLES", "60"))
ROOT = Path(__file__).resolve().parents[2]
SPECS = [yaml.safe_load(p.read_text())
         for p in sorted((ROOT / "examples" / "specs").glob("*.yaml"))]
AT = re.compile(r"^spec\.yaml:\d+:\d+: \S")

_WORDS = ["name", "layers", "repeat", "index", "in", "out", "linear", "relu", "add", "gelu",
          "attention", "rearrange", "pattern", "eps", "axis", "params", "weight", "bias",
          "dims", "hyper", "inputs", "outputs", "x", "B", "T", "d", "unspecified",
          "activation", "kernel", "stride", "padding", "conv", "layer_norm", "split", "sizes",
          "shape", "reshape", "tolerance", "param_count", "equation", "<<", "i"]
_TEXT = ["x", "B T d", "d / heads", "layer.{i}", "{i}", "layer.{i + 1}", "1e-12", "unspecified",
         "b t (h d) -> b h t d", "B (", "2 ** 10 ** 10", "__import__('os')", "x[0]", "q.T",
         "sqrt(-1)", "1/0", "é ñ 漢字 🙂", "\u202e", "", " ", "a" * 300, "softmax(q @ k.T) @ v"]
_KEYS = st.sampled_from(_WORDS) | st.text(max_size=6)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_TEXT), st.text(max_size=12))
_VALUES = st.recursive(_SCALARS, lambda kids: st.lists(kids, max_size=4)
                       | st.dictionaries(_KEYS, kids, max_size=5), max_leaves=25)


def _dump(data: Any, unicode: bool) -> str:
    return yaml.safe_dump(data, allow_unicode=unicode, sort_keys=False)


@st.composite
def _mutated_example(draw) -> str:
    """A valid example spec with one value somewhere replaced."""
    data = yaml.safe_load(yaml.safe_dump(draw(st.sampled_from(SPECS))))
    node, path = data, []
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 5)):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict)
                                   else list(range(len(node)))))
        path.append((node, key))
        node = node[key]
    if path:
        parent, key = path[-1]
        parent[key] = draw(_SCALARS | _VALUES)
    return _dump(data, draw(st.booleans()))


@st.composite
def _aliases(draw) -> str:
    """Anchors and aliases: a billion laughs of random width and depth, or a merge chain."""
    width, depth = draw(st.integers(2, 12)), draw(st.integers(1, 12))
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for k in range(1, depth):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]")
    if draw(st.booleans()):
        lines = ["m0: &m0 {name: q, linear: x, out: 4}"] + [
            f"m{k}: &m{k} {{<<: [*m{k - 1}, *m{k - 1}], k{k}: *m{k - 1}}}"
            for k in range(1, depth)]
    lines += ["inputs: {x: '2 4'}", f"layers: [*{lines[-1].split('&')[1].split(' ')[0]}]"]
    return "\n".join(lines) + "\n"


_DOCUMENTS = st.one_of(
    _mutated_example(),
    st.builds(_dump, _VALUES, st.booleans()),
    _aliases(),
    st.builds(lambda n, open_, close: "layers: " + open_ * n + "x" + close * n,
              st.integers(1, 3000), st.sampled_from(["[", "{a: "]), st.sampled_from(["]", "}"])),
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
)


def _load(text: str) -> None:
    start = time.perf_counter()
    try:
        loads(text.encode("utf-8", "surrogatepass"), name="spec.yaml")
    except SpecError as err:
        assert AT.match(str(err)), str(err)
        assert "\n" not in str(err)
    assert time.perf_counter() - start < 10, "the loader took too long"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=_DOCUMENTS)
def test_any_yaml_compiles_or_is_one_sentence_at_its_place(text: str) -> None:
    _load(text)


@settings(max_examples=max(EXAMPLES // 4, 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(text=st.one_of(_mutated_example(), _aliases(), st.builds(_dump, _VALUES, st.booleans())))
def test_show_on_any_yaml_exits_0_or_2(text: str, tmp_path_factory, capsys) -> None:
    folder = tmp_path_factory.mktemp("spec")
    (folder / "spec.yaml").write_bytes(text.encode("utf-8", "surrogatepass"))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        code = main(["show", "spec.yaml"])
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    assert "Traceback" not in out + err
    if code == 2:
        assert re.match(r"^specgraph: error: spec\.yaml:\d+:\d+: \S", err), err


@pytest.mark.parametrize("text", [
    "a: &a [" + ", ".join(["x"] * 9) + "]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
    "a: &a [*a]\n",
    "layers: " + "[" * 100_000 + "]" * 100_000,
])
def test_hostile_documents_fail_fast(text: str) -> None:
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"^spec\.yaml:\d+:\d+: "):
        loads(text, name="spec.yaml")
    assert time.perf_counter() - start < 5
