"""A bucket's chunks are taken without the group's lock and the first two members summed in one
pass: the same bits as the blocking all-reduce for every op and member count, empty buckets too."""
import threading

import numpy as np
import pytest

from tensorweave.distribute import collective
from tensorweave.distribute.collective import InProcessGroup


def _on_ranks(n, fn):
    out, errs = [None] * n, [None] * n

    def body(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errs[i] = e
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errs == [None] * n
    return out


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_bucket_bits_equal_the_blocking_all_reduce(monkeypatch, n, op):
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 5)          # many chunks, taken by every member
    rng = np.random.default_rng(n)
    values = [[rng.standard_normal(37).astype(np.float32), rng.standard_normal((6, 4))] for _ in range(n)]
    bucket, ref = InProcessGroup(list(range(n)), timeout=20), InProcessGroup(list(range(n)), timeout=20)
    got = _on_ranks(n, lambda i: bucket.communicator(i).all_reduce_start(values[i], op).wait())
    want = _on_ranks(n, lambda i: [ref.communicator(i).all_reduce(v, op) for v in values[i]])
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
            assert not a.flags.writeable


def test_a_bucket_of_empty_arrays_and_the_next_call_stay_matched():
    group = InProcessGroup([0, 1], timeout=20)

    def rank(i):
        c = group.communicator(i)
        empty = c.all_reduce_start([np.zeros((0, 2), np.float32)]).wait()
        return empty[0].shape, c.all_gather(np.array([i])).tolist()
    assert _on_ranks(2, rank) == [((0, 2), [0, 1])] * 2


def test_chunk_list_made_once_per_bucket_layout(monkeypatch):
    """The chunks of a bucket are listed once per layout (shapes, dtypes, chunk size) and reused."""
    made = []
    real = collective._chunks
    monkeypatch.setattr(collective, "_chunks", lambda arrays, n, *w: made.append(len(arrays)) or real(arrays, n, *w))
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 4)
    group = InProcessGroup([0, 1], timeout=20)
    a = [np.arange(10, dtype=np.float32), np.ones((3, 3))]
    b = [np.arange(7, dtype=np.float32)]
    for values in (a, a, b, a):
        got = _on_ranks(2, lambda i: group.communicator(i).all_reduce_start(values).wait())
        for g in got:
            for x, v in zip(g, values):
                np.testing.assert_array_equal(x, 2 * v)
    assert made == [2, 1]
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 3)               # another chunk size: listed again
    _on_ranks(2, lambda i: group.communicator(i).all_reduce_start(a).wait())
    assert made == [2, 1, 2]
