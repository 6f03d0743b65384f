"""Every op case, from both tables: what the NumPy references are checked on against PyTorch
(``test_reference_vs_torch``, with the PyTorch expressions of ``torch_cases``) and what every
runner is checked on against the references (``tests/frontends/test_runner_conformance.py``).
No framework is imported here."""

from __future__ import annotations

from tests.ops import cases_elementwise, cases_layers
from tests.ops.case_types import Case

__all__ = ["CASES", "BY_ID"]

CASES: list[Case] = [*cases_elementwise.CASES, *cases_layers.CASES]
BY_ID: dict[str, Case] = {c.id: c for c in CASES}
