"""Issue 14 (ray14): the shared-memory transport on 3 and 4 members with uneven pieces gives
the bits of the in-process ranks (all-reduce in one round and in two); a two-round all-reduce and an
all-to-all copy only what the peers read into the segments; an all-reduce up to ONE_ROUND_BYTES is
one exchange, a bucket (all_reduce_start) one all-reduce per dtype, and an exchange waits only for
the peers' round (not for them to start the next); rank workers keep freed memory for the next step (no fresh pages).
Members are threads here (cheap); tests/test_ray14_steps.py runs them as Ray workers."""
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tensorweave.distribute import shm
from tensorweave.distribute.collective import InProcessGroup

from ray14_cases import assert_same, large_collectives

pytestmark = pytest.mark.skipif(not shm.available(), reason="no /dev/shm")


def _on_groups(n, fn):
    prefix = "tw-test14-" + uuid.uuid4().hex[:10]
    groups = [shm.ShmGroup(tuple(range(n)), i, prefix, 60) for i in range(n)]

    def member(i):
        groups[i].connect()
        return fn(groups[i].communicator(i), i)
    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(member, range(n)))
    finally:
        for g in groups:
            g.close()
        assert shm.sweep(prefix) == 0


def _in_process(n, fn):
    group = InProcessGroup(range(n))
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: fn(group.communicator(i), i), range(n)))


@pytest.mark.parametrize("one_round", [True, False])
@pytest.mark.parametrize("n", [3, 4])
def test_large_collectives_on_3_and_4_members_give_the_in_process_bits(n, one_round, monkeypatch):
    if not one_round:
        monkeypatch.setattr(shm, "ONE_ROUND_BYTES", 0)          # every all-reduce in two rounds
    assert_same(_on_groups(n, large_collectives), _in_process(n, large_collectives))


def _counting_writes(monkeypatch):
    written = []
    real = shm._write

    def counting(mm, meta, arrays, offsets):
        written.append(sum(a.nbytes for a in arrays if not isinstance(a, shm._Reserved)))
        return real(mm, meta, arrays, offsets)
    monkeypatch.setattr(shm, "_write", counting)
    return written


def test_an_all_reduce_up_to_one_round_bytes_is_one_exchange(monkeypatch):
    written = _counting_writes(monkeypatch)
    n, size = 4, (1 << 20) // 8 - 3            # a ~1 MB float64 all-reduce on 4 members
    assert size * 8 <= shm.ONE_ROUND_BYTES
    got = _on_groups(n, lambda comm, i: comm.all_reduce(np.full(size, i + 1.0)))
    assert sorted(written) == [size * 8] * n           # one round: each member wrote its buffer once
    for g in got:
        np.testing.assert_array_equal(g, np.full(size, 10.0))


@pytest.mark.parametrize("one_round", [True, False])
def test_a_bucket_of_all_reduces_is_one_all_reduce_per_dtype_with_the_in_process_bits(one_round, monkeypatch):
    if not one_round:
        monkeypatch.setattr(shm, "ONE_ROUND_BYTES", 0)
    calls = []
    real = shm.ShmGroup.exchange
    monkeypatch.setattr(shm.ShmGroup, "exchange", lambda self, *a, **k: calls.append(a[1]) or real(self, *a, **k))

    def bucket(comm, i):
        rng = np.random.default_rng(i)
        arrays = [rng.standard_normal((30, 7)).astype(np.float32), rng.standard_normal(5),
                  rng.standard_normal(11).astype(np.float32), np.arange(4.0, dtype=np.float32)[::2]]
        return dict(enumerate(comm.all_reduce_start(arrays).wait()))
    got = _on_groups(3, bucket)
    assert_same(got, _in_process(3, bucket), writeable=False)
    # per member: float32 and float64 (and a second round each on the two-round path)
    assert sorted(calls) == sorted(["bucket"] * 6 + ([] if one_round else ["bucket_gather"] * 6))


def test_an_exchange_waits_for_the_peers_round_only(monkeypatch):
    # Member 0's second all-reduce starts while member 1 has not started its second: member 0
    # writes and publishes at once (its data goes to the other of its two segments) and waits
    # once, for member 1's round. Before, it first waited for member 1 to start that call.
    go, ready_at_entry = threading.Event(), []
    real = shm.ShmGroup._wait

    def wait(self, ready, what, timeout):
        if self.index == 0 and "call #1" in what and not ready_at_entry:      # its first wait in call 1
            ready_at_entry.append(all(ready(j) for j in self._peers))
            go.set()                                  # (set before waiting: the old code waited here)
        return real(self, ready, what, timeout)
    monkeypatch.setattr(shm.ShmGroup, "_wait", wait)

    def fn(comm, i):
        first = comm.all_reduce(np.arange(3.0) * (i + 1))
        if i == 1:
            assert go.wait(60)
        return first, comm.all_reduce(np.ones(2) * (i + 1))
    got = _on_groups(2, fn)
    assert ready_at_entry == [True]
    for first, second in got:
        np.testing.assert_array_equal(first, np.arange(3.0) * 3)
        np.testing.assert_array_equal(second, np.ones(2) * 3)


def test_a_two_round_all_reduce_and_an_all_to_all_write_only_what_the_peers_read(monkeypatch):
    monkeypatch.setattr(shm, "ONE_ROUND_BYTES", 0)
    written = _counting_writes(monkeypatch)
    n, size = 4, 40003                     # float64: 320 KB, chunks of 10001, 10001, 10001, 10000 elements

    def fn(comm, i):
        comm.all_reduce(np.ones(size))
        comm.all_to_all([np.ones(100)] * n)
    _on_groups(n, fn)
    # per member: all_reduce round 1 = the 3 peers' chunks, round 2 = nothing; all_to_all = 3 chunks
    assert sorted(written) == sorted([0] * n + [3 * 100 * 8] * n +
                                     [(size - 10001) * 8] * 3 + [(size - 10000) * 8])


def test_rank_workers_keep_freed_memory_for_the_next_step():
    # in a fresh process: a 64 MB array is then carved from the heap, not a fresh mapping
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ray14_cases as c; "
            "from tensorweave.distribute.ray.cluster import keep_freed_memory as k; "
            "print(c.mapped_bytes_of_a_new_array(64 << 20), k(), c.mapped_bytes_of_a_new_array(64 << 20))")
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    if out[0] == "None":
        pytest.skip("not glibc >= 2.33")
    assert int(out[0]) >= 64 << 20 and out[1] == "True" and int(out[2]) < 64 << 20
