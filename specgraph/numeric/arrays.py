"""Where the comparison's arithmetic happens: on the host (NumPy) or on the device.

On a CPU the runners' tensors are fetched as NumPy arrays (free for PyTorch and JAX, which
share the memory) and measured with NumPy. On a GPU the lhs values stay on the device and
are measured there, every framework's tensor seen through DLPack
(``specgraph.frontends.torch.arrays``); only the statistics cross to the host, and whole
tensors only at a divergence, for the fp64 oracle.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from specgraph.numeric.runner import Runner
from specgraph.numeric.stats import Stats, Tolerance, all_finite, flat, measure, square_sum
from specgraph.numeric.store import Store

__all__ = ["Arrays", "KeptStore", "HostArrays", "DeviceStore"]


class KeptStore(Protocol):
    """Where lhs values wait to be compared (``Store`` on the host, ``DeviceStore``)."""

    def __contains__(self, key: Hashable) -> bool: ...

    def put(self, key: Hashable, value: Any, order: tuple[int, ...] | None = None) -> None:
        """Keep ``value``; ``order``: the memory order it will be measured against, where
        known (a host store keeps it so)."""

    def get(self, key: Hashable) -> Any: ...

    def deferred(self) -> AbstractContextManager[None]:
        """A block whose puts do not wait on the store's own work (values held elsewhere
        until it ends)."""

    def after_writes(self, then: Callable[[], object]) -> None:
        """Call ``then`` once the store's own work on what was put is done."""

    def close(self) -> None: ...


class Arrays(Protocol):
    """The comparison's arithmetic: how values are kept and measured."""

    def keep(self, runner: Runner, tensor: Any) -> Any:
        """The form in which ``runner``'s tensor is kept and compared."""

    def host(self, kept: Any) -> np.ndarray:
        """A kept value as a host array (floats as float32 or wider)."""

    def measure(self, lhs: Any, rhs: Any, tol: Tolerance, floor: float = 0.0) -> Stats:
        """The distance between two kept values (``specgraph.numeric.stats.measure``)."""

    def finite(self, kept: Any) -> bool:
        """Whether every element is finite."""

    def nan_free(self, kept: Any) -> bool:
        """Whether no element is NaN (infinities allowed: a mask drowns scores with them)."""

    def rms(self, kept: Any) -> float:
        """The root mean square of a kept value."""

    def equal(self, a: Any, b: Any) -> bool:
        """Whether two kept values are equal bit for bit (NaN equal to NaN)."""

    def store(self, budget: int) -> KeptStore:
        """A store for kept values, spilling past ``budget`` bytes where it can."""


class HostArrays:
    """NumPy on the host."""

    def keep(self, runner: Runner, tensor: Any) -> Any:
        """The form in which values are kept and compared."""
        return runner.fetch(tensor)

    def host(self, kept: Any) -> np.ndarray:
        return np.asarray(kept)

    def measure(self, lhs: Any, rhs: Any, tol: Tolerance, floor: float = 0.0) -> Stats:
        return measure(lhs, rhs, tol, floor)

    def finite(self, kept: Any) -> bool:
        return all_finite(kept)

    def nan_free(self, kept: Any) -> bool:
        return all_finite(kept) or not bool(np.isnan(np.asarray(kept)).any())

    def rms(self, kept: Any) -> float:
        data = np.asarray(kept)
        if not data.size:
            return 0.0
        if data.dtype.kind == "f":  # Σx², as a measure of it may have found it already
            total = square_sum(data)
            if math.isfinite(total) or data.dtype != np.float32:
                return math.sqrt(total / data.size)
        return float(np.sqrt(np.sum(np.square(flat(data), dtype=np.float64)) / data.size))

    def equal(self, a: Any, b: Any) -> bool:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))

    def store(self, budget: int) -> Store | DeviceStore:
        return Store(budget)


class DeviceStore:
    """Keeps device tensors as they are (no spilling: they stay where they are compared)."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Any] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def put(self, key: Hashable, value: Any, order: tuple[int, ...] | None = None) -> None:
        self._items[key] = value  # measured where it is, in any layout

    def get(self, key: Hashable) -> Any:
        return self._items[key]

    def deferred(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def after_writes(self, then: Callable[[], object]) -> None:
        then()  # nothing is written

    def close(self) -> None:
        self._items.clear()
