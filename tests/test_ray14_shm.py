"""Issue 14 (ray14): the shared-memory transport on 3 and 4 members with uneven pieces gives
the bits of the in-process ranks; a large all-reduce and an all-to-all copy only what the peers
read into the segments; rank workers keep freed memory for the next step (no fresh pages).
Members are threads here (cheap); tests/test_ray14_steps.py runs them as Ray workers."""
import subprocess
import sys
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tensorweave.distribute import shm
from tensorweave.distribute.collective import SMALL_BYTES, InProcessGroup

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


def _large(comm, i):
    rng = np.random.default_rng(i)
    # sizes no member count divides: uneven chunks; every value above SMALL_BYTES (the large path)
    x = rng.standard_normal(SMALL_BYTES // 8 + 7)
    return {"sum": comm.all_reduce(x), "max": comm.all_reduce(x.reshape(-1, 1), "max"),
            "prod": comm.all_reduce(1.0 + x.astype(np.float32) / 8, "prod"),
            "int": comm.all_reduce(rng.integers(-9, 9, (3, SMALL_BYTES // 8 + 1)), "min"),
            "a2a": comm.all_to_all([np.full((j + i, 2), 10.0 * i + j) for j in range(comm.size)], axis=0),
            "a2a_list": comm.all_to_all([np.full(j, i, np.int8) for j in range(comm.size)]),
            "rs": comm.reduce_scatter(x * 3), "ag": comm.all_gather(x[: i * 1000])}


@pytest.mark.parametrize("n", [3, 4])
def test_large_collectives_on_3_and_4_members_give_the_in_process_bits(n):
    got, want = _on_groups(n, _large), _in_process(n, _large)
    for a, b in zip(got, want):
        for k in b:
            if isinstance(b[k], list):
                assert [v.dtype for v in a[k]] == [v.dtype for v in b[k]], k
                for u, v in zip(a[k], b[k]):
                    np.testing.assert_array_equal(u, v, err_msg=k)
            else:
                assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
                assert a[k].flags.writeable, k


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
    code = textwrap.dedent("""
        import ctypes, numpy as np
        from tensorweave.distribute.ray.cluster import keep_freed_memory
        class Info(ctypes.Structure):
            _fields_ = [(f, ctypes.c_size_t) for f in
                        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Info
        before = libc.mallinfo2().hblkhd
        print(keep_freed_memory())
        a = np.ones(16 << 20, np.float32)
        print(libc.mallinfo2().hblkhd - before)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    except subprocess.CalledProcessError as e:
        if "mallinfo2" in e.stderr:
            pytest.skip("not glibc >= 2.33")
        raise
    ok, mapped = out.stdout.split()
    assert ok == "True" and int(mapped) < 16 << 20
