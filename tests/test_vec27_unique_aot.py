"""``UniqueSegmentSum``'s loops (``keras/optimizers/sparse_ops.py``) with their outputs as arguments:
the ahead-of-time build serves them (a tuple-returning loop it did not, and fasttext's first
measured step compiled it), they give ``np.unique``'s and ``np.add.at``'s results on both paths (ids
marked within a bound, or sorted by ``np.unique``), and the op's outputs keep the ids' dtype."""
import numba
import numpy as np
import pytest

from tensorweave.kernels.cpu import aot, jit
from tensorweave.keras.optimizers import sparse_ops

RNG = np.random.default_rng(27)


def _ids(dtype, n, high):
    return RNG.integers(0, high, n).astype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("ids", [[5], [0, 0, 0], [7, 3, 7, 0, 3, 9], list(range(9, -1, -1))])
def test_marking_gives_np_unique_sorted_values_and_inverse(dtype, ids):
    ids = np.array(ids, dtype)
    bound = int(ids.max()) + 1
    uniq, inverse = np.full(min(bound, ids.size), -7, dtype), np.full(ids.size, -7, dtype)
    kernel = jit.compile_now(sparse_ops._unique_by_marking, ids, bound, uniq, inverse)
    n = kernel(ids, bound, uniq, inverse)
    want, want_inverse = np.unique(ids, return_inverse=True)
    assert n == want.size
    np.testing.assert_array_equal(uniq[:n], want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
    assert (uniq[n:] == -7).all()                          # nothing written past the count


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("high", [50, 10 ** 6])              # marked within the bound / sorted by np.unique
def test_both_paths_give_the_ids_dtype_and_the_same_sums(dtype, high):
    ids = _ids(dtype, 300, high)
    ids[:40] = ids[40:80]                                   # repeats
    values = RNG.standard_normal((300, 3)).astype(np.float32)
    uniq, summed, inverse = sparse_ops._unique_segment_sum(ids, values)
    want, want_inverse = np.unique(ids, return_inverse=True)
    expected = np.zeros((want.size, 3), np.float32)
    np.add.at(expected, want_inverse.reshape(-1), values)   # rows added in input order: the same rounding
    assert uniq.dtype == inverse.dtype == dtype
    np.testing.assert_array_equal(uniq, want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
    assert summed.tobytes() == expected.tobytes()


def test_empty_ids():
    uniq, summed, inverse = sparse_ops._unique_segment_sum(np.zeros(0, np.int32), np.zeros((0, 2), np.float32))
    assert uniq.shape == (0,) and summed.shape == (0, 2) and inverse.shape == (0,) and uniq.dtype == np.int32


# (three ids: 24 per id plus 4096, sparse_ops._mark_bound; session 24 widened it from 4 per id)
@pytest.mark.parametrize("high,marked", [(24 * 3 + 4095, True), (24 * 3 + 4096, False), (10 ** 6, False)])
def test_ids_are_marked_below_the_bound_else_sorted(high, marked, monkeypatch):
    calls = []
    real = sparse_ops._unique_by_marking
    monkeypatch.setattr(sparse_ops, "_unique_by_marking", lambda *args: (calls.append(1), real(*args))[1])
    uniq, _, inverse = sparse_ops._unique_segment_sum(np.array([high, 5, high], np.int64), np.ones((3, 1), np.float32))
    assert bool(calls) == marked
    assert uniq.tolist() == [5, high] and inverse.tolist() == [1, 0, 1]


def test_negative_ids_are_sorted_not_marked():
    uniq, summed, inverse = sparse_ops._unique_segment_sum(np.array([-1, 3, -1], np.int32), np.ones((3, 1), np.float32))
    assert uniq.tolist() == [-1, 3] and inverse.tolist() == [0, 1, 0] and summed.tolist() == [[2.0], [1.0]]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_a_built_package_sums_an_embedding_gradient_without_compiling(dtype, monkeypatch):
    if aot.library() is None:
        pytest.skip("no ahead-of-time build in this checkout (`make aot`)")
    ids = _ids(dtype, 32 * 400, 20000)                      # fasttext's batch of ids
    values = RNG.standard_normal((ids.size, 4)).astype(np.float32)
    compiled = []
    monkeypatch.setattr(numba.core.dispatcher.Dispatcher, "compile",
                        lambda self, sig: compiled.append(self.py_func.__qualname__))
    uniq, summed, inverse = sparse_ops._unique_segment_sum(ids, values)
    assert compiled == []
    assert uniq.size == np.unique(ids).size and summed.shape == (uniq.size, 4)
