"""The op cases' type and input factories, free of any framework.

A case names an op, its canonical attributes and how to make each input; its inputs are
seeded from its id, so a failure reproduces. The tables are ``cases_elementwise`` and
``cases_layers``, joined in ``cases``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Case", "CaseTable", "RTOL", "ATOL", "INF", "U", "POS", "NZ", "INT", "TIES", "BOOL",
           "KEEP", "A", "make_input"]

RTOL = 1e-10
ATOL = 1e-12
INF = float("inf")


@dataclass(frozen=True)
class Case:
    op: str
    name: str
    inputs: tuple  # each: a shape tuple (uniform in [-2, 2)) or a function rng -> array
    attrs: dict
    rtol: float = RTOL  # of the reference against PyTorch in float64

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


class CaseTable(list):
    """A list of cases; ``table.add(op, name, inputs, attrs)`` appends one."""

    def add(self, op: str, name: str, inputs, attrs, rtol: float = RTOL) -> None:
        self.append(Case(op, name, tuple(inputs), dict(attrs), rtol))


# -- input factories -----------------------------------------------------------------------


def U(*shape, low=-2.0, high=2.0):
    """Uniform floats."""
    return lambda rng: rng.uniform(low, high, shape)


def POS(*shape):
    """Floats bounded away from zero, positive."""
    return U(*shape, low=0.25, high=3.0)


def NZ(*shape):
    """Floats bounded away from zero, either sign."""
    return lambda rng: rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def INT(low, high, *shape, dtype=np.int64):
    """Integers in [low, high)."""
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def TIES(*shape):
    """Small integer-valued floats, so comparisons meet equal pairs."""
    return lambda rng: rng.integers(-2, 3, shape).astype(np.float64)


def BOOL(*shape):
    """Random booleans."""
    return lambda rng: rng.random(shape) < 0.5


def KEEP(*shape):
    """A boolean attention mask that keeps at least the first key of every query."""

    def make(rng):
        mask = rng.random(shape) < 0.6
        mask[..., 0] = True
        return mask

    return make


def A(values, dtype=np.float64):
    """Fixed values."""
    return lambda rng: np.array(values, dtype=dtype)


def make_input(spec, rng) -> np.ndarray:
    """The array an input spec stands for (a fresh, writable one)."""
    if isinstance(spec, tuple):
        return np.array(rng.uniform(-2.0, 2.0, spec))
    return np.array(spec(rng))
