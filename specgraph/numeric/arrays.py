"""Where the comparison's arithmetic happens: on the host (NumPy) or on the device.

On a CPU the runners' tensors are fetched as NumPy arrays (free for PyTorch and JAX, which
share the memory) and measured with NumPy. On a GPU the lhs values stay on the device and
are measured there, every framework's tensor seen through DLPack
(``specgraph.frontends.torch.arrays``); only the statistics cross to the host, and whole
tensors only at a divergence, for the fp64 oracle.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from specgraph.numeric.runner import Runner
from specgraph.numeric.stats import Stats, Tolerance, all_finite, measure
from specgraph.numeric.store import Store

__all__ = ["HostArrays", "DeviceStore", "arrays_for"]


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

    def rms(self, kept: Any) -> float:
        data = np.asarray(kept).ravel()
        return float(np.sqrt(np.sum(data * data, dtype=np.float64) / data.size)) \
            if data.size else 0.0

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

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = value

    def get(self, key: Hashable) -> Any:
        return self._items[key]

    def close(self) -> None:
        self._items.clear()


def arrays_for(*runners: Runner) -> Any:
    """Device arithmetic when any runner works on a GPU, else the host's."""
    if any(r.device_kind() == "cuda" for r in runners):
        from specgraph.frontends.torch.arrays import DeviceArrays

        return DeviceArrays()
    return HostArrays()
