"""Any combination of the CLI's options and values keeps the contract: exit 0, 1 or 2, one
sentence on error, never a traceback and never exit 3 (a specgraph bug); JSON on stdout stays
JSON. Bounded here; ``SPECGRAPH_PROPERTY_EXAMPLES=2000 pytest tests/test_cli_properties.py``
runs a longer search."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specgraph.cli import main  # noqa: E402

EXAMPLES = int(os.environ.get("SPECGRAPH_PROPERTY_EXAMPLES", "25"))
LHS, RHS = "examples/xor/model_torch.py:correct", "examples/xor/model_jax.py:correct"

_NUMBERS = st.sampled_from(["0", "1e-5", "-1", "nan", "inf", "-inf", "1e308", "abc", "",
                            "0x10", "1_000", " 1"])
_SEEDS = st.sampled_from(["0", "0-4", "3", "-1", "5-2", "0-100000000000", "a-b", "1,2",
                          "0-0", "99999999999999999999"])
_COUNTS = st.sampled_from(["1", "2", "0", "-3", "100000000000", "x", "1.5"])
_FLAGS = {
    "--format": st.sampled_from(["text", "json", "xml"]),
    "--rtol": _NUMBERS,
    "--atol": _NUMBERS,
    "--seed": _SEEDS,
    "--batch": _COUNTS,
    "--repeat": _COUNTS,
    "--dtype": st.sampled_from(["float32", "float16", "bfloat16", "int8"]),
    "--mode": st.sampled_from(["eager", "compiled", "fast"]),
    "--lhs-context": st.sampled_from(["cpu,eager", "cpu,eager,float32", "gpu", "", ",,,"]),
    "--accept": st.sampled_from(["missing-op:*", "nope", "attr-mismatch:", ":x"]),
    "--input-shape": st.sampled_from(["x=4,2", "x=0", "x", "=1", "x=1_0", "x=2,",
                                      "x=" + "1," * 40 + "1", "x=99999999999999"]),
}
_SWITCHES = ["--no-numeric", "--numeric-only", "--no-transfer", "--no-backward",
             "--isolated", "--raw", "--full"]


@st.composite
def _arguments(draw) -> list[str]:
    args = ["diff", LHS, RHS]
    for flag in draw(st.lists(st.sampled_from(sorted(_FLAGS)), max_size=4, unique=True)):
        args += [flag, draw(_FLAGS[flag])]
    args += draw(st.lists(st.sampled_from(_SWITCHES), max_size=3, unique=True))
    return args


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=_arguments())
def test_any_options_keep_the_exit_contract(args: list[str], capsys) -> None:
    try:
        code = main(args)
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (args, code, err[-500:])
    assert "Traceback" not in out + err, args
    if code == 2:
        assert err.strip(), args
    if "--format" in args and args[args.index("--format") + 1] == "json" and out.strip():
        json.loads(out)
