"""Session 17 (ray21): the step channel's loose ends, and the gradient bucket on workers.
``tw.distribute.RemoteError`` is exported; a collective timeout's ``missing`` ranks cross the step
frame as a field (the driver's exception has ``.missing``); a teardown while a request is half written
wakes the rank's serving thread (it ends: the driver closes the FIFOs' only other ends, the thread's
read sees end of file). A data-parallel step on 2 workers (its bucket in one round and in two) gives
the bits of in-process ranks."""
import os
import sys
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.collective import CollectiveTimeoutError
from tensorweave.distribute.ray import step_frame as sf


def test_remote_error_is_exported_from_tw_distribute():
    assert tw.distribute.RemoteError is sf.RemoteError
    assert "RemoteError" in tw.distribute.__all__
    assert issubclass(tw.distribute.RemoteError, tw.errors.UnknownError)


def _roundtrip(values):
    frame = sf.encode(sf.KIND_ERROR, 1, 0, 0, values)
    head = sf.parse_header(frame[:sf.HEADER.size])
    return tuple(sf.decode(head, bytearray(frame[sf.HEADER.size:])))


def test_missing_ranks_cross_the_frame_as_a_field():
    e = CollectiveTimeoutError("all_reduce on ranks [0, 1, 3]: ranks [1, 3] did not arrive", missing=[1, np.int64(3)])
    values = _roundtrip(sf.error_values(e, 0))
    assert values[6] == (1, 3)
    back = sf.exception_of(values)
    assert type(back) is CollectiveTimeoutError and back.missing == (1, 3) and back.rank == 0
    # an exception without ``missing`` gets none; one whose ``missing`` is not ranks sends None
    assert sf.error_values(KeyError("k"), 2)[6] is None and not hasattr(sf.exception_of(_roundtrip(
        sf.error_values(KeyError("k"), 2))), "missing")
    odd = ValueError("x")
    odd.missing = "rank 1"
    assert sf.error_values(odd, 0)[6] is None
    assert sf.exception_of(values[:6] + ((),)).missing == ()


@pytest.mark.parametrize("missing", [[1], (1.0,), ("1",), 1])
def test_malformed_missing_ranks_are_rejected(missing):
    values = sf.error_values(CollectiveTimeoutError("t", missing=(1,)), 0)[:6] + (missing,)
    with pytest.raises(sf.FrameError, match="missing ranks"):
        sf.exception_of(values)


# ---- on Ray ------------------------------------------------------------------------------------------
ray = pytest.importorskip("ray")
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray.step_channel import StepChannel  # noqa: E402

import ray14_cases  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=2, timeout=60, transport="shm")
    yield c
    ray_cluster.shutdown()


def _channel(cluster):
    cluster.compiled_steps = True
    cluster._drop_graphs()
    cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True)
    ch = cluster._graphs[(0, 1)]
    assert isinstance(ch, StepChannel)
    return ch


def _time_out_on_rank_0(worker):
    comm = worker.comm((0, 1))           # (both make the group: its setup is a rendezvous)
    if worker.rank == 0:                 # rank 1 never joins; this one waits half a second for it
        comm.group.exchange(comm.index, "all_reduce", np.ones(2), timeout=0.5)
    return worker.rank


def test_a_collective_timeout_in_a_step_has_missing_on_the_driver(cluster):
    _channel(cluster)
    with pytest.raises(CollectiveTimeoutError, match=r"ranks \[1\] did not arrive") as e:
        cluster.run_each(_time_out_on_rank_0, [()] * 2, [0, 1], steady=True)
    assert e.value.missing == (1,) and e.value.rank == 0
    assert isinstance(cluster._graphs[(0, 1)], StepChannel)            # the channel goes on
    got = cluster.run_each(lambda w: w.comm((0, 1)).all_reduce(np.ones(2) * w.rank).tolist(), [()] * 2, [0, 1],
                           steady=True)
    assert got == [[1.0, 1.0]] * 2


def _channel_threads_left(worker):
    """The names of this worker's step-channel threads still alive after a join of up to 60 s each."""
    threads = [t for t in threading.enumerate() if t.name.startswith("tw-steps-")]
    for t in threads:
        t.join(60)
    return [t.name for t in threads if t.is_alive()]


def test_teardown_with_a_request_half_written_ends_the_serving_thread(cluster):
    ch = _channel(cluster)
    c = ch._ranks[0]
    fn = next(iter(ch._fn_ids.values()))[0]
    frame = sf.encode(sf.KIND_REQUEST, 7, 0, fn, (np.zeros(1000, np.float32),))
    half = len(frame) // 2
    os.write(c.req, frame[:half])        # rank 0's thread reads the header and waits for the body's rest
    c.out += frame[half:]                # what the driver had not written yet
    cluster._drop_graphs()               # the teardown: no stop frame fits behind half a request
    assert cluster.run(_channel_threads_left, ranks=[0, 1]) == [[], []]
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]    # a fresh channel


# ---- the gradient bucket on workers (distribute/shm_reduce.py) ----------------------------------------
P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(21)
X, Y = RNG.standard_normal((8, 40)).astype(np.float32), RNG.standard_normal((8, 3)).astype(np.float32)
INIT = [RNG.standard_normal(s).astype(np.float32) * 0.3 for s in ((40, 30), (30,), (30, 3))]


def _train(placement, steps=3):
    step, x, y, params = ray14_cases.sgd_step(placement, X, Y, INIT, steps=0)
    losses = [float(step(x, y)) for _ in range(steps)]
    return losses, [p.numpy() for p in params]


def _one_round_bytes(worker, n):
    from tensorweave.distribute import shm
    shm.ONE_ROUND_BYTES = n


@pytest.mark.parametrize("two_rounds", [False, True])
def test_data_parallel_sgd_on_workers_gives_the_in_process_bits(cluster, two_rounds):
    if two_rounds:                       # the bucket (a few kB) as a reduce-scatter + all-gather
        cluster.run(_one_round_bytes, 0, ranks=[0, 1])
    try:
        got = _train(P2)
    finally:
        cluster.run(_one_round_bytes, 1 << 20, ranks=[0, 1])
    with tw.distribute.in_process():
        want = _train(P2)
        one = _train(tw.placement("cpu", ranks=[0]))
    assert got[0] == want[0]
    for g, w, o in zip(got[1], want[1], one[1]):
        assert np.array_equal(g, w)
        np.testing.assert_allclose(g, o, rtol=2e-5, atol=1e-6)
