"""``Store``: values past the memory budget go to a file on a writer thread and come back
bit for bit, whatever their layout; values within it are kept as they are."""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.numeric.store import Store


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((6, 5, 4)).astype(np.float32)
    return {
        "contiguous": base,
        "transposed view": np.transpose(base, (2, 0, 1)),
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
