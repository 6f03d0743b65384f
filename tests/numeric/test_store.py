"""``Store``: values past the memory budget go to a file on a writer thread and come back
bit for bit, whatever their layout; values within it are kept as they are."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specgraph.numeric import store as store_module
from specgraph.numeric.store import Store


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((6, 5, 4)).astype(np.float32)
    return {
        "contiguous": base,
        "transposed view": np.transpose(base, (2, 0, 1)),
        "fortran order": np.asfortranarray(base[:, :, 1]),
        "transposed, size-1 axis": np.transpose(base[:, :1, :], (2, 1, 0)),
        "transposed slice": np.transpose(base[:, 1:, :], (1, 2, 0)),
        "strided slice": base[::2, 1:, ::3],
        "float64": rng.standard_normal(7),
        "int64": np.arange(12, dtype=np.int64).reshape(3, 4),
        "bool": rng.standard_normal(9) > 0,
        "scalar": np.float32(3.5) * np.ones((), np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "nan and inf": np.array([np.nan, np.inf, -np.inf, -0.0], np.float32),
    }


@pytest.mark.parametrize("budget", [0, 400, 1 << 30], ids=["all spilled", "some", "none"])
def test_values_come_back_bit_for_bit(budget: int) -> None:
    values = _values()
    with Store(budget) as store:
        for key, array in values.items():
            store.put(key, array)
        assert all(key in store for key in values) and "other" not in store
        for _ in range(2):  # a value is read as often as it is needed
            for key, array in reversed(list(values.items())):
                got = store.get(key)
                assert got.shape == array.shape and got.dtype == array.dtype
                assert got.tobytes() == np.ascontiguousarray(array).tobytes(), key
        assert (store.spilled == 0) == (budget == 1 << 30)


def test_values_within_the_budget_are_not_copied() -> None:
    base = np.ones((4, 4), np.float32)
    view = base.T
    with Store(1 << 20) as store:
        store.put("v", view)
        assert store.get("v") is view and store.spilled == 0


def test_a_spilled_value_is_its_value_when_put() -> None:
    """The bytes written are those of the array handed over (the writer reads it later,
    but the comparison never changes a value it has put)."""
    with Store(0) as store:
        arrays = [np.full((256, 256), float(i), np.float32) for i in range(40)]
        for i, a in enumerate(arrays):
            store.put(i, a)
        del arrays
        assert [float(store.get(i)[0, 0]) for i in range(40)] == [float(i) for i in range(40)]
        assert store.spilled == 40 * 256 * 256 * 4


def test_close_is_final_and_repeatable() -> None:
    store = Store(0)
    store.put("x", np.arange(10.0))
    store.close()
    store.close()
    assert "x" not in store


@pytest.mark.parametrize("budget", [0, 1 << 20], ids=["spilled", "in memory"])
def test_an_array_put_under_two_keys_is_kept_once(budget: int) -> None:
    """A gradient that is a layer's output gradient and its reader's share is one array:
    written once, read once, and both keys give its values."""
    rng = np.random.default_rng(1)
    grad = rng.standard_normal((64, 32)).astype(np.float32)
    other = rng.standard_normal((64, 32)).astype(np.float32)
    with Store(budget) as store:
        store.put(("oct", 3, 0), grad)
        store.put(("ct", 4, 0), grad)
        store.put(("ct", 5, 0), other)  # the same shape elsewhere: its own entry
        assert store.spilled == (0 if budget else 2 * grad.nbytes)
        first, second = store.get(("oct", 3, 0)), store.get(("ct", 4, 0))
        assert first is second and np.array_equal(first, grad)
        assert np.array_equal(store.get(("ct", 5, 0)), other)


def test_a_new_array_where_a_dead_one_lay_is_not_taken_for_it() -> None:
    """An array freed after it was put may leave its address to the next one: that one is
    kept in its own right, with its own values."""
    with Store(0) as store:
        for i in range(50):
            store.put(i, np.full((128, 128), float(i), np.float32))  # freed at once
        assert store.spilled == 50 * 128 * 128 * 4
        assert [float(store.get(i)[5, 5]) for i in range(50)] == [float(i) for i in range(50)]


def test_deferred_puts_let_the_writer_lag_past_the_block(monkeypatch) -> None:
    """Neither the puts of a deferred block nor its end wait for the writer (the other
    side's program starts meanwhile); ``after_writes`` runs once every value is on file,
    on the writer's thread."""
    monkeypatch.setattr(Store, "LAG", 1 << 16)
    events: list[str] = []
    real_write = store_module._write

    def write(*args: object) -> None:
        real_write(*args)
        events.append("written")

    monkeypatch.setattr(store_module, "_write", write)
    arrays = [np.full((128, 128), float(i), np.float32) for i in range(32)]  # 64 KiB each
    with Store(0) as store:
        with store.deferred():
            for i, a in enumerate(arrays):
                store.put(i, a)
        assert store.lagging() == 32 * arrays[0].nbytes  # nothing waited for
        done = threading.Event()

        def then() -> None:
            events.append(threading.current_thread().name.split("_")[0])
            done.set()

        store.after_writes(then)
        assert done.wait(30)
        assert events == ["written"] * 32 + ["specgraph-store"]
        assert [float(store.get(i)[0, 0]) for i in range(32)] == [float(i) for i in range(32)]


def test_after_writes_of_a_store_that_spilled_nothing_runs_at_once() -> None:
    ran: list[str] = []
    with Store(1 << 20) as store:
        store.put("a", np.ones(16, np.float32))
        store.after_writes(lambda: ran.append(threading.current_thread().name))
        assert ran == [threading.current_thread().name]


def test_values_read_in_any_order_are_their_own() -> None:
    """Reads in the order of writing are read ahead on a thread; a read out of that order
    drops the guess and still gets its own value."""
    rng = np.random.default_rng(2)
    arrays = {i: rng.standard_normal((int(rng.integers(1, 300)), 7)).astype(np.float32)
              for i in range(60)}
    order = list(arrays) + [int(i) for i in rng.permutation(60)] + list(arrays)[::3]
    with Store(0) as store:
        for i, a in arrays.items():
            store.put(i, a)
        for i in order:
            assert np.array_equal(store.get(i), arrays[i]), i


def test_a_store_writing_over_the_last_ones_file_reads_its_own_values() -> None:
    """A closed store's spill file serves the next store (the next seed): its bytes are
    overwritten before they are read, whatever the earlier store left there; two stores
    open at once each have a file of their own."""
    rng = np.random.default_rng(5)
    first = [rng.standard_normal(1000 + 37 * i).astype(np.float32) for i in range(20)]
    second = [rng.standard_normal(500 + 53 * i).astype(np.float32) for i in range(30)]
    with Store(0) as store:
        for i, a in enumerate(first):
            store.put(i, a)
    with Store(0) as store, Store(0) as other:
        for i, a in enumerate(second):
            store.put(i, a)
            other.put(i, -a)
        for i, a in enumerate(second):
            assert np.array_equal(store.get(i), a) and np.array_equal(other.get(i), -a), i


@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["spilled", "in memory"])
def test_a_value_put_with_an_order_comes_back_laid_out_so(budget: int) -> None:
    """lhs's channels-first value kept in the channels-last order rhs's will lie in (and a
    kernel gradient (out, in) kept (in, out)): the same values, bit for bit, one read apart
    from rhs's in a single memory order; under two keys still one array."""
    from specgraph.numeric.layouts import array_order

    rng = np.random.default_rng(2)
    nchw = rng.standard_normal((2, 16, 32, 32)).astype(np.float32)
    kernel = rng.standard_normal((256, 128)).astype(np.float32)
    rhs_value = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    with Store(budget) as store:
        store.put(("f", "x"), nchw, (0, 2, 3, 1))
        store.put(("ct", 1, 0), nchw, (0, 2, 3, 1))  # the same array again
        store.put(("grad", "w"), kernel, (1, 0))
        store.put(("f", "small"), nchw[:, :1, :2, :2], (0, 2, 3, 1))  # too small to move
        in_order = kernel + 1
        store.put(("f", "as is"), in_order, (0, 1))
        got = store.get(("f", "x"))
        assert got.tobytes() == nchw.tobytes() and got.shape == nchw.shape
        assert array_order(got) == array_order(rhs_value) == (0, 2, 3, 1)
        assert store.get(("ct", 1, 0)) is got
        w = store.get(("grad", "w"))
        assert np.array_equal(w, kernel) and w.T.flags.c_contiguous
        assert store.get(("f", "as is")) is in_order or budget == 0
        assert array_order(store.get(("f", "small"))) == (0, 1, 2, 3)


def test_memory_orders_of_views_and_layout_steps() -> None:
    from specgraph.numeric.layouts import array_order, memory_order

    x = np.zeros((2, 16, 16, 8))
    assert memory_order(x.shape) == array_order(x) == (0, 1, 2, 3)
    nchw_view = x.transpose(0, 3, 1, 2)
    assert memory_order(x.shape, [("transpose", (0, 3, 1, 2))]) == array_order(nchw_view) \
        == (0, 2, 3, 1)
    hwio = np.zeros((3, 3, 4, 8))  # a Flax kernel seen as PyTorch's (out, in, h, w)
    assert memory_order(hwio.shape, [("transpose", (3, 2, 0, 1))]) == \
        array_order(hwio.transpose(3, 2, 0, 1)) == (2, 3, 1, 0)
    # a reshape of a transposed view is a copy, in C order
    assert memory_order((4, 6), [("transpose", (1, 0)), ("reshape", (24,))]) == (0,)
    # axes of one element stay where C order has them
    assert array_order(np.zeros((1, 4, 1, 3)).transpose(0, 3, 2, 1)) == (0, 3, 2, 1)


def test_a_large_spilled_value_is_the_files_pages_and_outlives_its_store() -> None:
    """A value of a MiB or more comes back as a read-only view of the spill file's pages
    (a transposed one in its own axis order); held past its store's end, its bytes stay
    its own: the next store does not write over a file a live value maps."""
    rng = np.random.default_rng(3)
    big = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    with Store(0) as store:
        store.put("big", big)
        store.put("t", big.T)
        store.put("small", big[:4])
        kept, turned = store.get("big"), store.get("t")
        assert np.array_equal(kept, big) and np.array_equal(turned, big.T)
        assert not kept.flags.writeable  # the file's pages, not a copy
        assert np.array_equal(store.get("small"), big[:4])
    with Store(0) as other:
        other.put("big", np.zeros_like(big))
        assert not other.get("big").any()
    assert np.array_equal(kept, big) and np.array_equal(turned, big.T)
