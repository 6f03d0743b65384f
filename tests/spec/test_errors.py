"""Malformed specs: each is one SpecError at the file:line:col of the fault, saying what is
wrong there and how to fix it, and exit code 2 from the CLI."""

from __future__ import annotations

import time

import pytest

from specgraph.cli import main
from specgraph.errors import SpecError, SpecgraphError
from specgraph.spec import loads

HEAD = """\
dims: {B: 2, T: 4}
hyper: {d: 8, heads: 2}
inputs:
  x: "B T d"
layers:
"""

RELU = "  - {name: q, relu: x}\n"


def _sized(old: str, new: str) -> str:
    """The head with one size written otherwise, and one statement."""
    return HEAD.replace(old, new) + RELU


# name: (the spec, the line:col of the fault, words the message holds)
CASES = {
    "wrong type": (
        HEAD.replace("{B: 2, T: 4}", "{B: two, T: 4}") + "  - {name: q, linear: x, out: d}\n",
        "1:11", "dims.B is 'two' (text); write a whole number"),
    "unknown op": (
        HEAD + "  - {name: q, lineer: x, out: d}\n",
        "6:15", "'lineer' is no op and no key of a statement (did you mean linear?)"),
    "unknown attribute": (
        HEAD + "  - {name: q, linear: x, out: d, eps: 1e-5}\n",
        "6:34", "'eps' is not an attribute of linear"),
    "unknown name in inputs": (
        HEAD + "  - {name: q, linear: y, out: d}\n",
        "6:23", "y is not defined before this statement"),
    "misspelt residual": (
        HEAD + "  - {name: q, linear: x, out: d}\n  - {name: r, add: [x, qq]}\n",
        "7:24", "qq is not defined before this statement (did you mean q?)"),
    "bad einops": (
        HEAD + '  - {name: h, rearrange: x, pattern: "B T (heads e) -> B heads T"}\n',
        "6:38", "e is not on the right side"),
    "einops sizes that do not fit": (
        HEAD + '  - {name: h, rearrange: x, pattern: "B T (heads e) -> B heads T e", '
        'sizes: {e: 3}}\n',
        "6:38", "(heads e) is 6 but the input's axis is 8"),
    "bad expression": (
        HEAD.replace("heads: 2}", "heads: 2, e: d *}") + "  - {name: q, linear: x, out: e}\n",
        "2:28", "hyper.e: 'd *' is not an expression"),
    "unknown name in an expression": (
        HEAD + "  - {name: q, linear: x, out: 2 * dd}\n",
        "6:31", "dd is not defined here (did you mean d?)"),
    "index outside a repeat": (
        HEAD + '  - {name: "layer.{i}", linear: x, out: d}\n',
        "6:12", "exists only inside a block with repeat:"),
    "repeat whose name uses no index": (
        HEAD + "  - name: layer\n    repeat: 2\n    in: x\n    layers:\n"
        "      - {name: fc, linear: x, out: d}\n",
        "6:11", "uses no {i}: every iteration would be layer; write layer.{i}"),
    "index shadowing a size": (
        HEAD + '  - name: "layer.{d}"\n    repeat: 2\n    index: d\n    layers:\n'
        "      - {name: fc, linear: x, out: d}\n",
        "8:12", "the index d is already a name here"),
    "reading a later iteration": (
        HEAD + '  - name: "layer.{i}"\n    repeat: 2\n    layers:\n'
        '      - {name: fc, linear: "layer.{i + 1}", out: d}\n',
        "9:28", "layer.1 is not defined before this statement"),
    "duplicate names": (
        HEAD + "  - {name: q, linear: x, out: d}\n  - {name: q, relu: q}\n",
        "7:12", "q is defined twice in this block (first on line 6)"),
    "duplicate keys": (
        HEAD + "  - {name: q, linear: x, out: d, out: 4}\n",
        "6:34", "the key 'out' appears twice in this mapping"),
    "stated shape that disagrees": (
        HEAD + '  - {name: q, linear: x, out: d, params: {weight: "d 4"}}\n',
        "6:51", "params.weight of q is [8, 4] but the statement makes it [8, 8]"),
    "shapes that do not add": (
        HEAD + "  - {name: q, linear: x, out: 4}\n  - {name: r, add: [x, q]}\n",
        "7:15", "add r cannot take inputs of shapes [2, 4, 8], [2, 4, 4]"),
    "parameter count": (
        HEAD + "  - {name: q, linear: x, out: d, param_count: 64}\n",
        "6:47", "statement q states 64 parameters but its statements hold 72"),
    "huge number": (
        _sized("T: 4", "T: 100000000000000000000000"),
        "1:17", "it must be at most 16,777,216"),
    "NaN size": (
        _sized("T: 4", "T: .nan"),
        "1:17", "dims.T is nan (a number); write a whole number"),
    "NaN hyperparameter": (
        _sized("d: 8", "d: .nan"),
        "2:12", "a value must be a finite number"),
    "tensor too large": (
        _sized("T: 4", "T: 10000000"),
        "4:6", "more than the 16,777,216 a spec's tensors may hold"),
    "missing layers": (
        HEAD.replace("layers:\n", ""),
        "1:1", "the document has no layers; add layers: (a list of statements)"),
    "not UTF-8": (
        HEAD.encode() + b"  - {name: q, relu: x}  # \xff\n",
        "6:27", "byte 0xff is not UTF-8; save the file as UTF-8"),
    "alias bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join([f'*{chr(97 + k)}'] * 10)}]\n"
                  for k in range(8)),
        "5:20", "the document expands to more than 50,000 values"),
    "deep nesting": (
        HEAD + "  - {name: q, relu: " + "[" * 200 + "x" + "]" * 200 + "}\n",
        "6:66", "nests more than 48 levels deep"),
    "a tag that constructs objects": (
        HEAD + "  - {name: q, relu: !!python/object/apply:os.system [ls]}\n",
        "6:21", "the tag !!python/object/apply:os.system is not allowed here"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_spec_is_one_sentence_at_its_place(case: str) -> None:
    text, where, words = CASES[case]
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        loads(text, name="spec.yaml")
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert message.startswith(f"spec.yaml:{where}: "), message
    assert words in message, message
    assert isinstance(info.value, SpecgraphError)
    assert "\n" not in message and "Traceback" not in message


def test_the_cli_says_it_at_file_line_col_with_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text(CASES["misspelt residual"][0])
    code = main(["show", "bad.yaml"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("specgraph: error: bad.yaml:7:24: qq is not defined before this "
                          "statement (did you mean q?)"), err


def test_a_missing_spec_file_is_named(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["show", "gone.yaml"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "file gone.yaml does not exist; pass the path of a paper spec (.yaml)" in err
