"""The shared-memory transport (distribute/shm.py) between threads of this process: every
collective gives the bits of the in-process ranks (uneven and empty pieces, int and bool
dtypes, point to point with tags), timeouts name the ranks that did not arrive, a failed or
dead peer ends the waits, and no segment is left in /dev/shm. (Ray workers: test_ray_runtime.)"""
import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tensorweave.core import errors
from tensorweave.distribute import shm
from tensorweave.distribute.collective import CollectiveAbortedError, CollectiveTimeoutError, InProcessGroup

pytestmark = pytest.mark.skipif(not shm.available(), reason="no /dev/shm")


def _left(prefix):
    return sorted(n for n in os.listdir(shm.SHM_DIR) if n.startswith(prefix))


def _on_groups(n, fn, timeout=30, ranks=None):
    """``fn(comm, i)`` on ``n`` threads, each a member of a fresh ShmGroup; results in order."""
    prefix = "tw-test-" + uuid.uuid4().hex[:10]
    ranks = ranks or tuple(range(n))
    groups = [shm.ShmGroup(ranks, i, prefix, timeout) for i in range(n)]

    def member(i):
        groups[i].connect()
        try:
            return fn(groups[i].communicator(i), i)
        except Exception as e:   # noqa: BLE001 - returned for the test to look at
            return e
    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(member, range(n)))
    finally:
        for g in groups:
            g.close()
        assert _left(prefix) == []


def _in_process(n, fn):
    group = InProcessGroup(range(n))
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: fn(group.communicator(i), i), range(n)))


def _everything(comm, i):
    rng = np.random.default_rng(i)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    big = rng.standard_normal(40000)                       # > SMALL_BYTES: reduce-scatter + all-gather
    out = {"sum": comm.all_reduce(x), "max": comm.all_reduce(x, "max"), "min": comm.all_reduce(x, "min"),
           "prod": comm.all_reduce(x, "prod"), "big": comm.all_reduce(big),
           "int": comm.all_reduce(np.arange(7, dtype=np.int32) * (i + 1)),
           "bool": comm.all_reduce(np.array([i == 0, True, False]), "max"),
           "scalar": comm.all_reduce(np.float64(i + 0.5)),
           "rs": comm.reduce_scatter(np.arange(7.0) * (i + 1)),        # 7 rows over 3: uneven
           "rs1": comm.reduce_scatter(np.ones((4, 2), np.int64), axis=1),   # 2 columns over 3: one empty
           "ag": comm.all_gather(np.full((i, 2), i, np.int16)),       # rank 0's piece is empty
           "agb": comm.all_gather(np.array([i % 2 == 0])),
           "a2a": comm.all_to_all([np.full(j + i, 10 * i + j) for j in range(comm.size)], axis=0),
           "a2a_list": comm.all_to_all([np.full((j,), i, np.uint8) for j in range(comm.size)]),
           "bc": comm.broadcast(x if i == 2 else None, root=2),
           "empty": comm.all_reduce(np.zeros((0, 3)))}
    if i == 0:
        comm.send(np.array([7, 8]), 2, tag=5)
        comm.send(np.array([1.5]), 2, tag=("x", 1))
        comm.send(np.zeros((0,), np.bool_), 1, tag=0)
    if i == 2:
        out["recv_x"] = comm.recv(0, tag=("x", 1))                 # out of order: tags pick
        out["recv_5"] = comm.recv(0, tag=5)
    if i == 1:
        out["recv_empty"] = comm.recv(0)
    comm.barrier()
    return out


def test_every_collective_gives_the_bits_of_the_in_process_ranks():
    got, want = _on_groups(3, _everything), _in_process(3, _everything)
    for a, b in zip(got, want):
        assert not isinstance(a, Exception), a
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(b[k], list):
                assert [v.dtype for v in a[k]] == [v.dtype for v in b[k]]
                for u, v in zip(a[k], b[k]):
                    np.testing.assert_array_equal(u, v, err_msg=k)
            else:
                assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert got[0]["bool"].tolist() == [True, True, False]
    assert got[1]["recv_empty"].shape == (0,) and got[1]["recv_empty"].dtype == np.bool_
    np.testing.assert_array_equal(got[2]["recv_5"], [7, 8])


def test_results_are_owned_by_the_caller_not_views_of_shared_memory():
    def fn(comm, i):
        a = comm.all_gather(np.full(3, float(i)))
        b = comm.all_gather(np.full(3, float(i + 10)))     # peers overwrite their segments
        return a, b, a.flags.writeable
    for a, b, writeable in _on_groups(2, fn):
        np.testing.assert_array_equal(a, [0, 0, 0, 1, 1, 1])
        np.testing.assert_array_equal(b, [10, 10, 10, 11, 11, 11])
        assert writeable


def test_data_segments_grow_and_are_replaced_without_leaks():
    def fn(comm, i):
        return [float(comm.all_reduce(np.ones(n, np.float32))[-1]) for n in (10, 50000, 300000, 10)]
    assert _on_groups(2, fn) == [[2.0] * 4] * 2


def test_a_timeout_names_the_ranks_that_did_not_arrive():
    def fn(comm, i):
        if i == 2:
            return "skipped"
        comm.all_gather(np.ones(1))
    out = _on_groups(3, fn, timeout=0.5, ranks=(4, 5, 6))
    assert out[2] == "skipped"
    for e in out[:2]:
        assert isinstance(e, (CollectiveTimeoutError, CollectiveAbortedError)), e
    timeouts = [e for e in out[:2] if isinstance(e, CollectiveTimeoutError)]
    assert timeouts and all(6 in e.missing and 4 not in e.missing for e in timeouts)
    for e in timeouts:
        assert f"on ranks [4, 5, 6]: ranks {list(e.missing)} did not arrive within 0.5 s" in str(e)


def test_recv_timeout_names_the_sender():
    out = _on_groups(2, lambda comm, i: comm.recv(1, tag=3) if i == 0 else None, timeout=0.3)
    assert isinstance(out[0], CollectiveTimeoutError) and out[0].missing == (1,)
    assert "recv (tag 3) on rank 0" in str(out[0])


def test_mismatched_collectives_name_both_calls():
    out = _on_groups(2, lambda comm, i: comm.all_gather(np.ones(1)) if i == 0 else comm.barrier())
    assert any(isinstance(e, errors.InternalError) for e in out)
    text = " ".join(str(e) for e in out)
    assert "called barrier while rank 0 called all_gather" in text or \
        "called all_gather while rank 1 called barrier" in text


def test_a_failed_peer_ends_the_others_waits():
    def fn(comm, i):
        if i == 1:
            comm.group.abort("rank 1 raised KeyError")
            return None
        comm.all_reduce(np.ones(2))
    out = _on_groups(2, fn, timeout=60)
    assert isinstance(out[0], CollectiveAbortedError) and "rank 1 raised KeyError" in str(out[0])


def test_a_dead_peer_process_is_named():
    prefix = "tw-test-" + uuid.uuid4().hex[:10]
    g = shm.ShmGroup((0, 1), 0, prefix, timeout=60)
    peer = shm.ShmGroup((0, 1), 1, prefix, timeout=60)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda x: x.connect(), (g, peer)))
    pid = os.fork()
    if pid == 0:                      # a process that exits at once stands for a killed worker
        os._exit(0)
    os.waitpid(pid, 0)
    peer._ctl[shm._PID] = pid         # the peer "was" that process
    try:
        with pytest.raises(CollectiveAbortedError, match=r"rank 1 died"):
            g.communicator(0).all_reduce(np.ones(2))
    finally:
        peer.close()
        g.close()
    assert _left(prefix) == []


def test_sweep_unlinks_what_a_dead_member_left():
    prefix = "tw-test-" + uuid.uuid4().hex[:10]
    groups = [shm.ShmGroup((0, 1), i, prefix) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda g: g.connect(), groups))
    groups[0].communicator(0).send(np.ones(3), 1)          # never received
    assert len(_left(prefix)) == 5           # two control segments, two wake-up FIFOs, the message
    assert shm.sweep(prefix) == 5 and _left(prefix) == []
    for g in groups:
        g.close()


def test_unsupported_values_are_a_clear_error():
    with pytest.raises(TypeError, match="cannot send an array of dtype object"):
        shm._encode(np.array([object()]), [])


def test_a_waiting_member_sleeps_on_its_fifo_and_is_woken_by_the_peer_s_publish(monkeypatch):
    # a waiter past its few yields sleeps in select() on its FIFO until the peer's counter moves
    # (was: naps of up to 1 ms, oversleeping the peer's arrival); the peer's publish writes a byte
    prefix = "tw-test-" + uuid.uuid4().hex[:10]
    groups = [shm.ShmGroup((0, 1), i, prefix) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda g: g.connect(), groups))
    slept, asleep, real = [], threading.Event(), shm.ShmGroup._sleep

    def sleep(self, t):
        slept.append(self.index)
        asleep.set()
        return real(self, t)
    monkeypatch.setattr(shm.ShmGroup, "_sleep", sleep)
    monkeypatch.setattr(shm, "_SPINS", 0)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(groups[0].exchange, 0, "x", np.ones(2))
            asleep.wait()                     # member 0 is asleep before member 1 arrives
            second = pool.submit(groups[1].exchange, 1, "x", np.zeros(2))
            assert [v.tolist() for v in first.result()] == [[1.0, 1.0], [0.0, 0.0]]
            second.result()
        assert 0 in slept                     # member 0 slept on its FIFO; the publish woke it
    finally:
        for g in groups:
            g.close()
    assert _left(prefix) == []


def test_a_bucket_carries_the_first_member_s_attached_values_in_its_own_exchange():
    # plan_ops._OnceInto (Adam's step counter read folded into the gradient bucket): on the shm
    # transport the values ride on the bucket's exchange (was: a broadcast of their own)
    prefix = "tw-test-" + uuid.uuid4().hex[:10]
    groups = [shm.ShmGroup((0, 1), i, prefix) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda g: g.connect(), groups))

    def member(i):
        comm = groups[i].communicator(i)
        big = np.full(300_000, i + 1.0, np.float32)          # over ONE_ROUND_BYTES: the two-round path
        handle = comm.all_reduce_start([np.arange(3.0) * (i + 1), big], "sum")
        if i == 0:
            handle.attach([np.array(7, np.int64), np.ones(2, np.float32)])
        sums = handle.wait()
        return sums, handle.extras(2), groups[i]._seq
    try:
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(member, range(2)))
    finally:
        for g in groups:
            g.close()
    for sums, extra, seq in got:
        assert sums[0].tolist() == [0.0, 3.0, 6.0] and float(sums[1][0]) == 3.0 and not sums[0].flags.writeable
        assert int(extra[0]) == 7 and extra[1].tolist() == [1.0, 1.0]
        assert seq == 3          # float64 one round + float32 two rounds: the extras added none


def test_a_view_read_from_a_segment_keeps_its_mapping_after_the_segment_closes():
    # np.ndarray(buffer=mmap) holds no export: close() unmapped under a live view, and reading it
    # afterwards crashed the process. Views now hold the mapping; close() leaves it to them.
    name = f"tw-test-view-{uuid.uuid4().hex[:8]}"
    values = np.arange(1000, dtype=np.float32)
    arrays = []
    meta = json.dumps({"v": shm._encode(values, arrays)}).encode()
    offsets, total = shm._layout(meta, arrays)
    seg = shm._Segment(name, total)
    try:
        shm._write(seg.mm, meta, arrays, offsets)
        _, (view,) = shm._read(seg.mm, copy=False)
        seg.close()
        assert not view.flags.writeable and np.array_equal(view, values)
        assert not seg.mm.closed                     # the view still holds it
        del view
        seg.close()
        assert seg.mm.closed
    finally:
        seg.unlink()
