"""``Store``: where the first side's layer values wait for the second side to be compared.

Values are kept in memory up to a budget, then written to a temporary file and read back on
demand, so that comparing two models needs little more memory than running the larger one.
Writes happen on a thread of their own while the comparison goes on (the file's bytes are
written with ``pwrite`` at offsets fixed when a value is put), lagging by ``Store.LAG`` at
most; a read of a value still being written waits for it. Reads go through ordinary file
I/O (no memory map), so spilled values do not count against the process's memory.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

__all__ = ["Store", "return_freed_memory"]


class Store:
    """A key -> host array store that spills to disk past ``budget`` bytes.

    Args:
        budget: bytes kept in memory before spilling (0: spill everything).
        folder: where the spill file goes (default: the system temporary folder).
    """

    LAG = 256 << 20  # bytes the writer may lag behind ``put`` (the budget, if larger)

    def __init__(self, budget: int = 256 << 20, folder: str | None = None) -> None:
        self.budget = budget
        self.folder = folder
        self._memory: dict[Hashable, np.ndarray] = {}
        self._held = 0
        self._index: dict[Hashable, tuple[int, str, tuple[int, ...]]] = {}
        self._fd: int | None = None
        self._end = 0
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[Hashable, Future[None]] = {}
        self._queue: deque[tuple[Hashable, int]] = deque()  # written in this order
        self._lag = 0  # bytes handed to the writer and not known to be written
        self.spilled = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._memory or key in self._index

    def put(self, key: Hashable, array: np.ndarray) -> None:
        data = np.asarray(array)
        if self._held + data.nbytes <= self.budget:
            self._memory[key] = data  # as it is (a view stays one): nothing is copied
            self._held += data.nbytes
            return
        if self._fd is None:
            fd, path = tempfile.mkstemp(prefix="specgraph-", suffix=".bin", dir=self.folder)
            os.unlink(path)  # gone when closed, whatever happens
            self._fd = fd
            self._writer = ThreadPoolExecutor(max_workers=1,
                                              thread_name_prefix="specgraph-store")
        offset, self._end = self._end, self._end + data.nbytes
        self._index[key] = (offset, data.dtype.str, data.shape)
        self.spilled += data.nbytes
        assert self._writer is not None
        # ``data`` stays alive (a view keeps its base) until its bytes are on file; the
        # writer may lag by ``LAG`` at most (then ``put`` waits for it)
        self._pending[key] = self._writer.submit(_write, self._fd, data, offset)
        self._queue.append((key, data.nbytes))
        self._lag += data.nbytes
        while self._lag > max(self.budget, self.LAG) and self._queue:
            done, size = self._queue.popleft()
            future = self._pending.pop(done, None)
            if future is not None:
                future.result()
            self._lag -= size

    def get(self, key: Hashable) -> np.ndarray:
        if key in self._memory:
            return self._memory[key]
        offset, dtype, shape = self._index[key]
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending.result()  # a failed write raises here
        assert self._fd is not None
        out = np.empty(shape, dtype=np.dtype(dtype))
        view = memoryview(out.reshape(-1)).cast("B")
        done = 0
        while done < len(view):
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"the spill file ended {len(view) - done} bytes early")
            done += got
        return out

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True, cancel_futures=True)
            self._writer = None
        self._pending.clear()
        self._queue.clear()
        self._lag = 0
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._memory.clear()
        self._index.clear()
        self._held = 0
        self._end = 0

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write(fd: int, data: np.ndarray, offset: int) -> None:
    """``data``'s bytes in C order at ``offset`` of the file ``fd``."""
    view = memoryview(np.ascontiguousarray(data).reshape(-1)).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def return_freed_memory() -> None:
    """Give the memory the process freed back to the system where the C library keeps it
    (glibc's ``malloc_trim``; nothing elsewhere): what one side's program freed, its
    framework's allocator may not reuse for the other's, so it would count twice."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # another C library (musl)
        return None
