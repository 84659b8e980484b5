"""A bucket's chunks are cut at the members' balanced row bounds and each member reduces its own
rows' chunks first (the rows a reduce-scatter hands it: a ZeRO-1 update then reads sums its own
core wrote); the sums keep the blocking all-reduce's bits."""
import threading

import numpy as np
import pytest

from tensorweave.distribute import collective
from tensorweave.distribute.collective import InProcessGroup, _chunks, _orders
from tensorweave.distribute.layout import balanced_bounds


def test_chunks_cut_at_the_members_row_bounds(monkeypatch):
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 4)
    arrays = [np.zeros((7, 3)), np.zeros(()), np.zeros((0, 5)), np.zeros(2), np.zeros((5,))]
    got = _chunks(arrays, 3)
    # (7, 3) over 3 members: rows 3 / 2 / 2 -> elements [0, 9) [9, 15) [15, 21), then pieces of 4
    assert [c for c in got if c[0] == 0] == [(0, 0, 4, 0), (0, 4, 8, 0), (0, 8, 9, 0), (0, 9, 13, 1), (0, 13, 15, 1),
                                             (0, 15, 19, 2), (0, 19, 21, 2)]
    assert [c for c in got if c[0] == 1] == [(1, 0, 1, 0)]            # a 0-d array: one chunk, member 0
    assert [c for c in got if c[0] == 2] == []                         # empty: nothing to reduce
    assert [c for c in got if c[0] == 3] == [(3, 0, 1, 0), (3, 1, 2, 1)]   # fewer rows than members
    assert [c for c in got if c[0] == 4] == [(4, 0, 2, 0), (4, 2, 4, 1), (4, 4, 5, 2)]
    for k, a in enumerate(arrays):          # the chunks tile each array once, owners by the row bounds
        mine = sorted(c for c in got if c[0] == k)
        assert sum(hi - lo for _, lo, hi, _ in mine) == a.size
        if a.ndim:
            cols = a.size // max(a.shape[0], 1)
            for _, lo, hi, j in mine:
                r0, r1 = balanced_bounds(a.shape[0], 3)[j]
                assert r0 * cols <= lo < hi <= r1 * cols


def test_each_member_takes_its_own_chunks_first_then_the_next_members():
    chunks = [(0, 0, 1, 0), (0, 1, 2, 1), (0, 2, 3, 2), (1, 0, 1, 0), (1, 1, 2, 1), (1, 2, 3, 2)]
    assert _orders(chunks, 3) == [[0, 3, 1, 4, 2, 5], [1, 4, 2, 5, 0, 3], [2, 5, 0, 3, 1, 4]]
    assert _orders(chunks[:1], 1) == [[0]]


@pytest.mark.parametrize("waiting", [0, 1])
def test_the_first_member_at_its_wait_reduces_its_own_rows_first(monkeypatch, waiting):
    """The other member has deposited but is not waiting yet: the waiting one reduces every chunk,
    its own rows' chunks first (scripted with an event, no timing)."""
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 3)
    seen = []
    real = collective._reduce_chunk

    def record(values, out, chunk, op):
        seen.append(chunk[3])
        return real(values, out, chunk, op)
    monkeypatch.setattr(collective, "_reduce_chunk", record)
    group = InProcessGroup([0, 1], timeout=20)
    rng = np.random.default_rng(waiting)
    values = [[rng.standard_normal((5, 2)).astype(np.float32), rng.standard_normal(7)] for _ in range(2)]
    other = 1 - waiting
    handles = [None, None]
    handles[other] = group.communicator(other).all_reduce_start(values[other])
    handles[waiting] = group.communicator(waiting).all_reduce_start(values[waiting])
    sums = handles[waiting].wait()                      # every chunk reduced on this thread
    assert seen == [waiting] * seen.count(waiting) + [other] * seen.count(other)
    assert seen.count(waiting) and seen.count(other)
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("sums", handles[other].wait()))
    t.start()
    t.join(20)
    assert len(seen) == len(_chunks(values[0], 2))      # the late member found nothing left
    for a, b, x, y in zip(sums, done["sums"], values[0], values[1]):
        np.testing.assert_array_equal(a, x + y)
        assert a is b
