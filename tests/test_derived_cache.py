"""core/derived.py: values derived from tracked arrays, dropped on in-place changes, when the
array is freed, and least recently used first beyond the byte bound."""
import gc

import numpy as np
import pytest

from tensorweave.core import derived


@pytest.fixture(autouse=True)
def _clean():
    derived.clear()
    yield
    derived.clear()


def _counting():
    calls = []

    def compute(a):
        calls.append(1)
        return a * 2
    return calls, compute


def test_untracked_arrays_are_computed_every_time():
    calls, compute = _counting()
    a = np.ones(4)
    derived.get(a, "k", compute)
    derived.get(a, "k", compute)
    assert len(calls) == 2


def test_tracked_arrays_are_cached_per_key_until_modified():
    calls, compute = _counting()
    a = np.ones(4)
    derived.track(a)
    derived.get(a, "k", compute)
    derived.get(a, "k", compute)
    assert len(calls) == 1
    derived.get(a, "other", compute)
    assert len(calls) == 2
    a[:] = 3
    derived.modified(a)
    np.testing.assert_array_equal(derived.get(a, "k", compute), [6, 6, 6, 6])
    assert len(calls) == 3


def test_freed_arrays_release_their_values():
    calls, compute = _counting()
    a = np.ones(1000)
    derived.track(a)
    derived.get(a, "k", compute)
    assert derived.cached_bytes() == 8000
    del a
    gc.collect()
    assert derived.cached_bytes() == 0


def test_a_reused_id_is_not_confused_with_the_freed_array():
    _, compute = _counting()
    a = np.ones(4)
    derived.track(a)
    derived.get(a, "k", compute)
    ident = id(a)
    slot = derived._slots[ident]
    slot.ref = lambda: None                      # as if another object now had this id
    b = derived.get(a, "k", lambda arr: arr * 5)
    np.testing.assert_array_equal(b, [5, 5, 5, 5])


def test_the_byte_bound_evicts_least_recently_used(monkeypatch):
    monkeypatch.setattr(derived, "MAX_BYTES", 2 * 800)
    arrays = [np.full(100, float(i)) for i in range(3)]
    for a in arrays:
        derived.track(a)
    calls, compute = _counting()
    derived.get(arrays[0], "k", compute)
    derived.get(arrays[1], "k", compute)
    derived.get(arrays[0], "k", compute)        # 0 is now the most recent
    derived.get(arrays[2], "k", compute)        # evicts 1
    assert derived.cached_bytes() == 1600 and len(calls) == 3
    derived.get(arrays[0], "k", compute)
    assert len(calls) == 3
    derived.get(arrays[1], "k", compute)
    assert len(calls) == 4


def test_a_change_during_the_computation_is_not_cached():
    a = np.ones(4)
    derived.track(a)

    def compute(arr):
        derived.modified(arr)                    # another thread updates it meanwhile
        return arr * 2
    derived.get(a, "k", compute)
    calls, counting = _counting()
    derived.get(a, "k", counting)
    assert len(calls) == 1


def test_values_too_large_are_not_kept(monkeypatch):
    monkeypatch.setattr(derived, "MAX_BYTES", 10)
    a = np.ones(4)
    derived.track(a)
    calls, compute = _counting()
    derived.get(a, "k", compute)
    derived.get(a, "k", compute)
    assert len(calls) == 2 and derived.cached_bytes() == 0
