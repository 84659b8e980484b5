"""Session 17 (ray21): a gradient bucket over the shared-memory transport without the flat
concatenation (``distribute/shm_reduce.py``): the bits of the concatenated all-reduce (and of a
NumPy sum in rank order) in one round and in two, for 2 and 3 members, chunks crossing arrays,
two dtypes, values riding along; the result buffer reused only when no view of it is alive.
Members are threads of this process (no Ray)."""
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tensorweave.core import errors
from tensorweave.distribute import shm, shm_reduce

pytestmark = pytest.mark.skipif(not shm.available(), reason="no /dev/shm")


def _bucket(i, shapes, dtypes=None):
    rng = np.random.default_rng(17 + i)
    dtypes = dtypes or ["float32"] * len(shapes)
    return [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]


def _on_members(n, fn):
    """``fn(group, i)`` on ``n`` connected members (threads), their results in member order."""
    prefix = "tw-t21-" + uuid.uuid4().hex[:8]
    groups = [shm.ShmGroup(tuple(range(n)), i, prefix, timeout=60) for i in range(n)]

    def run(i):
        groups[i].connect()
        return fn(groups[i], i)
    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(run, range(n)))
    finally:
        for g in groups:
            g.close()
        assert shm.sweep(prefix) == 0         # every segment unlinked by its member (result buffers too)


# (784, 300) float32 is 0.9 MB: with the rest over shm.ONE_ROUND_BYTES, two rounds; chunks cross arrays
LARGE = [(784, 300), (300,), (300, 170), (170,), (7,), ()]
SMALL = [(20, 5), (5,), (3, 3), ()]


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("shapes", [SMALL, LARGE], ids=["one_round", "two_rounds"])
def test_bucket_sums_have_the_bits_of_the_concatenated_all_reduce(members, shapes):
    def fn(group, i):
        arrays = _bucket(i, shapes)
        sums, _ = shm_reduce.reduce_bucket(group, arrays, "sum", None)
        flat = np.concatenate([a.reshape(-1) for a in arrays])
        return sums, group.communicator(i).all_reduce(flat)     # the path before (one flat value)
    got = _on_members(members, fn)
    want = _bucket(0, shapes)
    for j in range(1, members):         # a NumPy sum in rank order
        want = [w + b for w, b in zip(want, _bucket(j, shapes))]
    for sums, flat in got:
        assert [s.shape for s in sums] == [tuple(s) for s in shapes]
        assert all(s.dtype == np.float32 and not s.flags.writeable for s in sums)
        assert np.array_equal(np.concatenate([s.reshape(-1) for s in sums]), flat)
        for s, w in zip(sums, want):
            assert np.array_equal(s, w)


def test_two_dtypes_each_reduced_and_values_ride_with_the_first():
    shapes, dtypes = [(600, 500), (4,), (3, 2)], ["float32", "float64", "float32"]

    def fn(group, i):
        ride = [np.float32(0.5), np.arange(3)] if i == 0 else [np.float32(9.0)]
        return shm_reduce.reduce_bucket(group, _bucket(i, shapes, dtypes), "max", ride)
    got = _on_members(2, fn)
    want = [np.maximum(a, b) for a, b in zip(_bucket(0, shapes, dtypes), _bucket(1, shapes, dtypes))]
    for sums, ridden in got:
        assert [s.dtype for s in sums] == [np.dtype(d) for d in dtypes]
        assert all(np.array_equal(s, w) for s, w in zip(sums, want))
        assert float(ridden[0]) == 0.5 and ridden[1].tolist() == [0, 1, 2]      # the first member's


@pytest.mark.parametrize("shapes", [SMALL, LARGE], ids=["one_round", "two_rounds"])
def test_the_result_buffer_is_reused_only_when_no_view_is_alive(shapes):
    def fn(group, i):
        first, _ = shm_reduce.reduce_bucket(group, _bucket(i, shapes), "sum", None)
        kept = [s.copy() for s in first]
        doubled = [2 * a for a in _bucket(i, shapes)]
        second, _ = shm_reduce.reduce_bucket(group, doubled, "sum", None)     # ``first`` is alive: a new buffer
        assert second[0].base is not first[0].base
        assert all(np.array_equal(a, b) for a, b in zip(first, kept))        # untouched
        base = id(first[0].base)
        del first
        third, _ = shm_reduce.reduce_bucket(group, _bucket(i, shapes), "sum", None)
        return id(third[0].base) == base, [np.array_equal(a, b) for a, b in zip(third, kept)]
    for reused, same in _on_members(2, fn):
        assert reused and all(same)


def test_a_member_with_another_bucket_is_named():
    def fn(group, i):
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"rank [01] gave a bucket of \[[34]\] float32 \(sum\) but rank [01] gave"):
            shm_reduce.reduce_bucket(group, [np.ones(3 + i, np.float32)], "sum", None)
        return True
    assert _on_members(2, fn) == [True, True]


def test_spans_cover_a_range_across_arrays():
    assert shm_reduce._spans((3, 0, 4, 2), 2, 8) == [(0, 2, 3), (2, 0, 4), (3, 0, 1)]
    assert shm_reduce._spans((3, 4), 3, 7) == [(1, 0, 4)]
    assert shm_reduce._spans((3, 4), 0, 0) == []


def test_sums_held_past_the_pool_stay_intact():
    # more results alive than the pool keeps (shm_reduce.POOL): a held buffer's slot gets a new
    # segment, the held sums keep theirs (its name unlinked, its mapping alive with the views)
    n = shm_reduce.POOL + 2

    def fn(group, i):
        held = [shm_reduce.reduce_bucket(group, [a * (k + 1) for a in _bucket(i, LARGE)], "sum", None)[0]
                for k in range(n)]
        return held, len({id(h[0].base) for h in held})
    for held, buffers in _on_members(2, fn):
        assert buffers == n
        for k, sums in enumerate(held):
            want = [a * (k + 1) + b * (k + 1) for a, b in zip(_bucket(0, LARGE), _bucket(1, LARGE))]
            assert all(np.array_equal(s, w) for s, w in zip(sums, want))


def test_a_member_with_another_reduction_is_named():
    def fn(group, i):
        with pytest.raises(errors.InvalidArgumentError, match=r"\((sum|max)\) but rank [01] gave \[3\] float32"):
            shm_reduce.reduce_bucket(group, [np.ones(3, np.float32)], ("sum", "max")[i], None)
        return True
    assert _on_members(2, fn) == [True, True]


@pytest.mark.parametrize("extra, rounds", [(0, ["bucket"]), (1, ["bucket", "bucket_gather"])])
def test_one_round_up_to_one_round_bytes_then_two_with_the_ride(extra, rounds, monkeypatch):
    calls = []
    real = shm.ShmGroup.exchange
    monkeypatch.setattr(shm.ShmGroup, "exchange", lambda self, *a, **k: calls.append((self.index, a[1])) or
                        real(self, *a, **k))
    n = shm.ONE_ROUND_BYTES // 4 + extra         # float32 elements: exactly ONE_ROUND_BYTES, then one more

    def fn(group, i):
        ride = [np.arange(4) + 10 * i]
        return shm_reduce.reduce_bucket(group, [np.full(n - 5, i + 1.0, np.float32), np.ones(5, np.float32)],
                                        "sum", ride)
    for sums, ridden in _on_members(2, fn):
        assert np.array_equal(sums[0], np.full(n - 5, 3.0, np.float32)) and sums[1].tolist() == [2.0] * 5
        assert [r.tolist() for r in ridden] == [[0, 1, 2, 3]]           # the first member's
    assert sorted(k for i, k in calls if i == 0) == sorted(rounds)
