"""``Store``: where the first side's layer values wait for the second side to be compared.

Values are kept in memory up to a budget, then written to a temporary file and read back on
demand, so that comparing two models needs little more memory than running the larger one.
Writes happen on a thread of their own while the comparison goes on (the file's bytes are
written with ``pwrite`` at offsets fixed when a value is put), lagging by ``Store.LAG`` at
most (unless told otherwise: ``Store.deferred``); a read of a value still being written
waits for it. An array put under several keys is kept once. A large value is read back as
a view of the file's own pages, mapped for as long as it is in use (a smaller one is read
into memory of its own), so spilled values count against the process's memory only while
they are compared. A value
put with a memory ``order`` other than its own (the order the value it will be measured
against lies in: ``specgraph.numeric.layouts``) is copied into that order on a thread of
its own, or written to disk in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import mmap
import os
import sys
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from specgraph.numeric.layouts import array_order

__all__ = ["Store", "return_freed_memory"]


class Store:
    """A key -> host array store that spills to disk past ``budget`` bytes.

    The same array put under several keys (a gradient that is both a layer's output gradient
    and its reader's share) is kept, written and read once.

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
        self._index: dict[Hashable, int] = {}  # key -> offset of its value in the file
        self._fd: int | None = None
        self._end = 0
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future[None]] = {}  # by offset
        self._queue: deque[tuple[int, int]] = deque()  # (offset, bytes), in writing order
        self._lag = 0  # bytes handed to the writer and not known to be written
        self._deferred = False
        # arrays put, by where their bytes lie: the same array put again is an alias
        self._twins: dict[tuple[Any, ...], tuple[weakref.ref[np.ndarray], Hashable]] = {}
        self._read: weakref.WeakValueDictionary[int, np.ndarray] = \
            weakref.WeakValueDictionary()  # arrays read back and still in use, by offset
        # offset -> dtype, shape and memory order of the value there (values lie end to
        # end; the order is None for C order)
        self._entries: dict[int, tuple[np.dtype, tuple[int, ...],
                                       tuple[int, ...] | None]] = {}
        self._reader: ThreadPoolExecutor | None = None
        self._ahead: dict[int, Future[np.ndarray]] = {}  # read ahead, by offset
        self._mover: ThreadPoolExecutor | None = None
        self._moving: dict[Hashable, Future[np.ndarray]] = {}  # being copied into an order
        self.spilled = 0
        # the file's pages mapped for values still in use: the file is not reused while any is
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._memory or key in self._moving or key in self._index

    MOVED = 1 << 14  # elements from which a value is copied into the order asked for

    def put(self, key: Hashable, array: np.ndarray, order: tuple[int, ...] | None = None
            ) -> None:
        """Keep ``array`` under ``key``; ``order``: the memory order (axes from the slowest)
        it is to be kept in, if not its own (None: as it lies)."""
        data = np.asarray(array)
        if self._alias(key, data):
            return
        if order is not None and (data.size < self.MOVED or len(order) != data.ndim
                                  or array_order(data) == order):
            order = None
        if self._held + data.nbytes <= self.budget:
            self._held += data.nbytes
            if order is None:
                self._memory[key] = data  # as it is (a view stays one): nothing is copied
                return
            if self._mover is None:
                self._mover = ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="specgraph-relayout")
            self._moving[key] = self._mover.submit(_in_order, data, order)
            return
        if self._fd is None:
            self._fd = _spill_file(self.folder)
            self._writer = ThreadPoolExecutor(max_workers=1,
                                              thread_name_prefix="specgraph-store")
        offset, self._end = self._end, self._end + data.nbytes
        self._index[key] = offset
        if order is None:
            order = _transposed_order(data)  # a transposed view is written as its bytes lie
        self._entries[offset] = (data.dtype, data.shape, order)
        if order is not None:  # (else in C order)
            data = data.transpose(order)
        self.spilled += data.nbytes
        assert self._writer is not None
        # ``data`` stays alive (a view keeps its base) until its bytes are on file
        self._pending[offset] = self._writer.submit(_write, self._fd, data, offset)
        self._queue.append((offset, data.nbytes))
        self._lag += data.nbytes
        if not self._deferred:
            self._wait(max(self.budget, self.LAG))

    def _alias(self, key: Hashable, data: np.ndarray) -> bool:
        """Whether ``data`` is an array already put (the same object, still alive: its bytes
        cannot have moved), now kept under ``key`` too."""
        if data.nbytes == 0:
            return False
        where = (data.__array_interface__["data"][0], data.shape, data.strides,
                 data.dtype.str)
        twin = self._twins.get(where)
        if twin is not None and twin[0]() is data:
            first = twin[1]
            if first in self._memory:
                self._memory[key] = self._memory[first]
            elif first in self._moving:
                self._moving[key] = self._moving[first]
            else:
                self._index[key] = self._index[first]
            return True
        self._twins[where] = (weakref.ref(data), key)
        return False

    def lagging(self) -> int:
        """Bytes handed to the writer and not yet known to be on file."""
        return self._lag

    def _wait(self, lag: int) -> None:
        """Wait for the writer until at most ``lag`` bytes are not known to be written."""
        while self._lag > lag and self._queue:
            offset, size = self._queue.popleft()
            future = self._pending.pop(offset, None)
            if future is not None:
                future.result()
            self._lag -= size

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within, ``put`` never waits for the writer: for values held elsewhere anyway
        until the block ends (a program's observations while they are walked). Nor does
        the block's end: the writer goes on while the caller's next work starts, and what
        the block's owner lets go of is freed value by value as it reaches the file (the
        other side's program starts small; waiting here held up a BERT-sized comparison by
        a tenth of its time). ``after_writes`` runs something once it is all written."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False

    def after_writes(self, then: Callable[[], object]) -> None:
        """Call ``then`` once what was handed to the writer is on file (on the writer's
        thread; at once, on this one, when nothing was ever spilled)."""
        if self._writer is None:
            then()
        else:
            self._writer.submit(then)

    def get(self, key: Hashable) -> np.ndarray:
        if key in self._memory:
            return self._memory[key]
        moving = self._moving.pop(key, None)
        if moving is not None:  # its aliases' futures give the same array
            self._memory[key] = out = moving.result()
            return out
        offset = self._index[key]
        out = self._read.get(offset)
        if out is not None:  # an alias read back before, still in use
            return out
        ahead = self._ahead.pop(offset, None)
        if ahead is not None:
            out = ahead.result()
        else:
            out = self._mapped(offset)
            if out is None:
                out = _read(self._fd, offset, self._empty(offset),  # type: ignore[arg-type]
                            self._pending.get(offset))
        self._pending.pop(offset, None)
        self._read[offset] = out
        following = offset + out.nbytes  # the next value written lies right after it
        self._read_ahead(following if following in self._entries
                         and not self._maps_at(following) else None)
        return out

    MAPPED = 1 << 20  # bytes from which a spilled value is mapped, not read

    def _maps_at(self, offset: int) -> bool:
        """Whether the value at ``offset`` is mapped back (large, and the system maps)."""
        dtype, shape, _ = self._entries[offset]
        return _MAP_FLAGS is not None and math.prod(shape) * dtype.itemsize >= self.MAPPED

    def _mapped(self, offset: int) -> np.ndarray | None:
        """The large value at ``offset`` as a read-only view of the spill file's pages
        (mapped whole, the page cache's own pages: nothing is copied or zeroed, where a
        read fills new memory page by page), once its write is done; None for a small
        value, or where the file cannot be mapped (it is read then)."""
        if self._fd is None or not self._maps_at(offset):
            return None
        written = self._pending.get(offset)
        if written is not None:
            written.result()
        dtype, shape, order = self._entries[offset]
        size = math.prod(shape) * dtype.itemsize
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            pages = mmap.mmap(self._fd, offset + size - start, flags=_MAP_FLAGS,
                              prot=mmap.PROT_READ, offset=start)
        except (OSError, ValueError):
            return None
        self._maps.add(pages)
        flat = np.frombuffer(pages, dtype, size // dtype.itemsize, offset - start)
        return _own_axes(lambda laid: flat.reshape(laid), shape, order)

    def _empty(self, offset: int) -> np.ndarray:
        """An array, on the calling thread, to read the value at ``offset`` into: C-contiguous
        in the memory order the value was written in, seen in the value's own axis order."""
        dtype, shape, order = self._entries[offset]
        return _own_axes(lambda laid: np.empty(laid, dtype), shape, order)

    def _read_ahead(self, offset: int | None) -> None:
        """Read the value at ``offset`` on the reader thread while the caller works on this
        one (values are mostly read in the order they were written); one at most is read
        ahead, so a guess that misses is dropped."""
        for other in [o for o in self._ahead if o != offset]:
            self._ahead.pop(other).cancel()
        if offset is None or offset in self._ahead or self._read.get(offset) is not None:
            return
        if self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=1,
                                              thread_name_prefix="specgraph-read")
        self._ahead[offset] = self._reader.submit(_read, self._fd, offset, self._empty(offset),
                                                  self._pending.get(offset))

    def close(self) -> None:
        for executor in (self._reader, self._writer, self._mover):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        self._reader = self._writer = self._mover = None
        self._moving.clear()
        self._ahead.clear()
        self._entries.clear()
        self._pending.clear()
        self._queue.clear()
        self._lag = 0
        if self._fd is not None:
            if len(self._maps):  # a value mapped from it lives on: its bytes must stay
                os.close(self._fd)  # (the unlinked file goes once its pages are unmapped)
            else:
                _spare(self._fd, self.folder)
            self._fd = None
        self._memory.clear()
        self._index.clear()
        self._twins.clear()
        self._read.clear()
        self._held = 0
        self._end = 0

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# one closed store's spill file, by folder, for the process's next store: writing over pages
# the system still caches is several times faster than filling new ones (a comparison over
# many seeds spills about as much for each)
_SPARE: dict[str | None, int] = {}
_SPARE_LOCK = threading.Lock()


# populated at once where the system can (Linux): one call maps every page, not a fault each
_MAP_FLAGS = (mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
              if hasattr(mmap, "MAP_SHARED") else None)  # (None: Windows, values are read)


def _spill_file(folder: str | None) -> int:
    """An unlinked file to spill into: the spare one left in ``folder``, else a new one."""
    with _SPARE_LOCK:
        fd = _SPARE.pop(folder, None)
    if fd is not None:
        return fd
    fd, path = tempfile.mkstemp(prefix="specgraph-", suffix=".bin", dir=folder)
    os.unlink(path)  # gone when closed (at the latest when the process ends)
    return fd


def _spare(fd: int, folder: str | None) -> None:
    """Keep a closed store's file for the next store spilling into ``folder``, or close it
    (one is kept per folder)."""
    with _SPARE_LOCK:
        if folder not in _SPARE:
            _SPARE[folder] = fd
            return
    os.close(fd)


def _own_axes(make: Callable[[tuple[int, ...]], np.ndarray], shape: tuple[int, ...],
              order: tuple[int, ...] | None) -> np.ndarray:
    """An array of ``shape`` made C-contiguous in memory ``order`` (``make`` gives one of the
    shape laid out so), seen in its own axis order."""
    if order is None:
        return make(shape)
    return make(tuple(shape[k] for k in order)).transpose(_inverse(order))


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes ``order`` (``np.argsort`` of a few axes, without NumPy's
    cost per call)."""
    return tuple(sorted(range(len(order)), key=order.__getitem__))


def _in_order(data: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """``data``'s values in a new array laid out in ``order`` (axes from the slowest), seen
    in ``data``'s own axis order."""
    return np.ascontiguousarray(data.transpose(order)).transpose(_inverse(order))


def _transposed_order(data: np.ndarray) -> tuple[int, ...] | None:
    """The axis order in which ``data``, not C-contiguous, is a C-contiguous array (a
    transposed view of one), else None."""
    if data.flags.c_contiguous or data.ndim < 2:
        return None
    order = tuple(sorted(range(data.ndim), key=lambda k: -data.strides[k]))
    return order if data.transpose(order).flags.c_contiguous else None


def _read(fd: int, offset: int, out: np.ndarray, written: Future[None] | None) -> np.ndarray:
    """``out`` (made by the caller's thread: its memory is that thread's to reuse; C-contiguous
    or a transposed view of a C-contiguous array, filled in its memory order) filled with the
    bytes at ``offset`` of the file ``fd``, once ``written`` (its write, if it may be under
    way) is done; a failed write raises here."""
    if written is not None:
        written.result()
    base = out if out.flags.c_contiguous else out.transpose(
        sorted(range(out.ndim), key=lambda k: -out.strides[k]))
    view = memoryview(base.reshape(-1)).cast("B")
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise OSError(f"the spill file ended {len(view) - done} bytes early")
        done += got
    return out


_PIECE = 1 << 20  # bytes a non-contiguous value is written in at a time


def _write(fd: int, data: np.ndarray, offset: int) -> None:
    """``data``'s bytes in C order at ``offset`` of the file ``fd``; a strided view (a slice
    with steps; a transposed view comes in its memory order) is copied a piece at a time
    (no copy of the whole on the writer's thread)."""
    if data.flags.c_contiguous or data.ndim == 0:
        pieces = [data]
    else:
        rows = max(1, _PIECE // max(1, data[0].nbytes))
        pieces = [data[i:i + rows] for i in range(0, len(data), rows)]
    for piece in pieces:
        view = memoryview(np.ascontiguousarray(piece).reshape(-1)).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)
        offset += len(view)


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
