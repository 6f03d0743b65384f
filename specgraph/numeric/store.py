"""``Store``: where the first side's layer values wait for the second side to be compared.

Values are kept in memory up to a budget, then appended to a temporary file and read back on
demand, so that comparing two models needs little more memory than running the larger one.
Reads go through ordinary file I/O (no memory map), so spilled values do not count against
the process's memory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Hashable

import numpy as np

__all__ = ["Store"]


class Store:
    """A key -> host array store that spills to disk past ``budget`` bytes.

    Args:
        budget: bytes kept in memory before spilling (0: spill everything).
        folder: where the spill file goes (default: the system temporary folder).
    """

    def __init__(self, budget: int = 256 << 20, folder: str | None = None) -> None:
        self.budget = budget
        self.folder = folder
        self._memory: dict[Hashable, np.ndarray] = {}
        self._held = 0
        self._index: dict[Hashable, tuple[int, str, tuple[int, ...]]] = {}
        self._file = None
        self.spilled = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._memory or key in self._index

    def put(self, key: Hashable, array: np.ndarray) -> None:
        data = np.asarray(array)
        if self._held + data.nbytes <= self.budget:
            self._memory[key] = data  # as it is (a view stays one): nothing is copied
            self._held += data.nbytes
            return
        data = np.ascontiguousarray(data)  # the bytes in order, for the file
        if self._file is None:
            fd, path = tempfile.mkstemp(prefix="specgraph-", suffix=".bin", dir=self.folder)
            self._file = os.fdopen(fd, "w+b")
            os.unlink(path)  # gone when closed, whatever happens
        offset = self._file.seek(0, os.SEEK_END)
        self._file.write(memoryview(data.reshape(-1)).cast("B"))  # no copy of the bytes
        self._index[key] = (offset, data.dtype.str, data.shape)
        self.spilled += data.nbytes

    def get(self, key: Hashable) -> np.ndarray:
        if key in self._memory:
            return self._memory[key]
        offset, dtype, shape = self._index[key]
        assert self._file is not None
        self._file.seek(offset)
        count = int(np.prod(shape, dtype=np.int64))
        return np.fromfile(self._file, dtype=np.dtype(dtype), count=count).reshape(shape)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._memory.clear()
        self._index.clear()
        self._held = 0

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
