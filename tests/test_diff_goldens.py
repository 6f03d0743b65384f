"""``specgraph diff`` end to end on the XOR pairs, text and JSON, against golden files
(``pytest --update-goldens`` rewrites them for review): an equivalent pair whose numbers are
compared, a forgotten activation found by the structure (numbers not compared) and by the
numbers alone (``--numeric-only``), and PyTorch against Keras."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from specgraph.cli import main


class Case(NamedTuple):
    """One ``specgraph diff`` run: its two models, extra arguments and expected exit code."""

    lhs: str
    rhs: str
    args: tuple[str, ...]
    exit: int
    needs: str  # the framework rhs is written in


def _xor(framework: str, factory: str) -> str:
    return f"examples/xor/model_{framework}.py:{factory}"


CASES = {  # golden file name (without suffix) -> case
    "diff_xor_torch_jax": Case(_xor("torch", "correct"), _xor("jax", "correct"), (), 0, "jax"),
    "diff_xor_torch_jax_forgot_activation": Case(
        _xor("torch", "correct"), _xor("jax", "forgot_activation"), (), 1, "jax"),
    "diff_xor_torch_keras": Case(_xor("torch", "correct"), _xor("keras", "correct"), (), 0,
                                 "keras"),
    "diff_xor_torch_jax_forgot_activation_numeric_only": Case(
        _xor("torch", "correct"), _xor("jax", "forgot_activation"), ("--numeric-only",), 1,
        "jax"),
}
FORMATS = {"text": "txt", "json": "json"}


def _diff(capsys, name: str, fmt: str) -> tuple[int, str, str]:
    case = CASES[name]
    pytest.importorskip(case.needs)
    code = main(["diff", case.lhs, case.rhs, *case.args, "--format", fmt])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", list(CASES))
def test_diff_xor_matches_golden(repo_root, capsys, golden, name: str, fmt: str) -> None:
    code, out, err = _diff(capsys, name, fmt)
    assert (code, err) == (CASES[name].exit, "")  # no progress lines off a terminal
    assert "\x1b[" not in out  # no color off a terminal
    if fmt == "json":
        assert json.loads(out)["equivalent"] is (code == 0)
    golden(f"{name}.{FORMATS[fmt]}", out)


@pytest.mark.parametrize("name", ["diff_xor_torch_jax",
                                  "diff_xor_torch_jax_forgot_activation_numeric_only"])
def test_diff_xor_json_is_byte_identical_across_runs(repo_root, capsys, name: str) -> None:
    first = _diff(capsys, name, "json")
    assert _diff(capsys, name, "json") == first
