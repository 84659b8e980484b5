"""Issue 14 (ray14): the shared-memory transport on 3 and 4 members with uneven pieces gives
the bits of the in-process ranks; a large all-reduce and an all-to-all copy only what the peers
read into the segments; rank workers keep freed memory for the next step (no fresh pages).
Members are threads here (cheap); tests/test_ray14_steps.py runs them as Ray workers."""
import os
import subprocess
import sys
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


@pytest.mark.parametrize("n", [3, 4])
def test_large_collectives_on_3_and_4_members_give_the_in_process_bits(n):
    assert_same(_on_groups(n, large_collectives), _in_process(n, large_collectives))


def test_a_large_all_reduce_and_an_all_to_all_write_only_what_the_peers_read(monkeypatch):
    written = []
    real = shm._write

    def counting(mm, meta, arrays, offsets):
        written.append(sum(a.nbytes for a in arrays if not isinstance(a, shm._Reserved)))
        return real(mm, meta, arrays, offsets)
    monkeypatch.setattr(shm, "_write", counting)
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
