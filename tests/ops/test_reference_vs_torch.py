"""Every registered op's NumPy reference against PyTorch in float64, on random inputs.

The cases live in two framework-free tables, ``cases_elementwise`` and ``cases_layers`` (joined
in ``cases``; the case type and input factories in ``case_types``), and the PyTorch expression
of each in ``torch_cases``, by case id; each case's inputs are seeded from its id, so a failure
reproduces. Adding an op without a case here fails ``test_every_registered_op_has_a_case``.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from specgraph.errors import ExecutionError
from specgraph.ops import OPAQUE, get_spec, registered_ops

torch = pytest.importorskip("torch")

from tests.ops.case_types import ATOL, Case, make_input  # noqa: E402
from tests.ops.cases import CASES  # noqa: E402
from tests.ops.torch_cases import TORCH  # noqa: E402  (it needs torch)


def _check_output(got, expected, rtol: float) -> None:
    expected = expected.detach().numpy()
    got = np.asarray(got)
    assert got.shape == expected.shape, f"shape {got.shape}, torch {expected.shape}"
    if expected.dtype.kind == "f":
        assert got.dtype.kind == "f", f"dtype {got.dtype}, torch {expected.dtype}"
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=ATOL)
    else:  # integers and booleans: the same dtype and exactly the same values
        assert got.dtype == expected.dtype, f"dtype {got.dtype}, torch {expected.dtype}"
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_reference_matches_torch(c: Case) -> None:
    spec = get_spec(c.op)
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    arrays = [make_input(s, rng) for s in c.inputs]
    attrs = spec.normalize_attrs(c.attrs)
    spec.input_names(attrs, len(arrays))  # the case feeds the inputs the schema names
    got = spec.reference(*(a.copy() for a in arrays), **attrs)
    with torch.no_grad():
        expected = TORCH[c.id](*(torch.from_numpy(a) for a in arrays))
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _check_output(g, e, c.rtol)
    else:
        _check_output(got, expected, c.rtol)


def test_every_registered_op_has_a_case() -> None:
    ops = set(registered_ops())
    covered = {c.op for c in CASES}
    assert sorted(ops - covered - {OPAQUE}) == [], "ops without a PyTorch case"
    assert sorted(covered - ops) == [], "cases for ops that are not registered"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"


def test_every_case_has_one_torch_expression() -> None:
    ids = {c.id for c in CASES}
    assert sorted(ids - set(TORCH)) == [], "cases without a PyTorch expression"
    assert sorted(set(TORCH) - ids) == [], "PyTorch expressions for cases that do not exist"


def test_opaque_reference_raises_execution_error() -> None:
    spec = get_spec(OPAQUE)
    attrs = spec.normalize_attrs({"target": "aten.frobnicate.default"})
    with pytest.raises(ExecutionError, match="aten.frobnicate.default"):
        spec.reference(np.ones(3), np.zeros(2), **attrs)
