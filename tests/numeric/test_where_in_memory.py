"""Where an array lies in memory: what a program's caches of given weights are keyed by.
Views of one buffer at the same place, shape, strides, dtype and values are one key; any of
those different is another."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from specgraph.numeric.program import where_in_memory


def test_views_of_the_same_memory_are_one_key_and_anything_else_another() -> None:
    own = np.arange(24, dtype=np.float32).reshape(4, 6).copy()
    owner, key = where_in_memory(own.T)
    assert owner is own and where_in_memory(own[...].T) == (own, key)
    others = [own, own.T.copy(), own[1:].T, own[:, ::-1].T, own.reshape(6, 4),
              own.view(np.int32).T]
    assert all(where_in_memory(x)[1] != key for x in others)
    own[3, 5] += 1  # edited in place: what it holds is part of the key
    assert where_in_memory(own.T)[1] != key


def test_two_dtypes_with_one_name_in_numpy_are_two_keys() -> None:
    """ml_dtypes' 8-bit floats all call themselves '<V1' in NumPy; their values differ."""
    raw = np.arange(16, dtype=np.uint8)
    e4m3 = raw.view(ml_dtypes.float8_e4m3fn)
    b11 = raw.view(ml_dtypes.float8_e4m3b11fnuz)
    assert e4m3.dtype.str == b11.dtype.str
    assert where_in_memory(e4m3)[1] != where_in_memory(b11)[1]


def test_an_empty_array_and_a_tensor_have_keys_too() -> None:
    empty = np.zeros((0, 3), np.float32)
    assert where_in_memory(empty)[0] is empty
    other = object()
    assert where_in_memory(other) == (other, ())
