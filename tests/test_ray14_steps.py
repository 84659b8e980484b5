"""Issue 14 (ray14) on 4 Ray workers: planned steps through a step channel (rayp19, session 15: FIFOs,
posted ahead in order, threads asleep between steps) or a compiled Ray graph give the bits of
actor calls and hand the driver no view of Ray's channel memory, a rank that raises inside one
ends its peers' collectives and the cluster goes on, a worker killed inside one is named and replaced,
steps on more ranks than the live graph's take it over (after one step by actor calls); the shared-memory collectives
with uneven pieces on 4 workers give the in-process bits; workers keep freed memory; a tw
initializer makes a global variable's pieces on the workers, with the one-device value."""
import gc
import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.core.sbp import B, S  # noqa: E402
from tensorweave.distribute.collective import CollectiveAbortedError, InProcessGroup  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray.step_channel import StepChannel  # noqa: E402

import ray14_cases  # noqa: E402
from ray14_cases import assert_same, large_collectives  # noqa: E402

N = 4
P2, P4 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=list(range(N)))
RNG = np.random.default_rng(1414)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ray14_cases)


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=N, timeout=60, transport="shm")
    yield c
    ray_cluster.shutdown()


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


X, Y = _arr(10, 6), _arr(10, 3)        # 10 rows: uneven over 4 ranks
INIT = {"w1": _arr(6, 8) * 0.4, "b1": np.full(8, 0.1, np.float32), "w2": _arr(8, 3) * 0.4}


def _train(placement, steps=4):
    x, y = (tw.constant(v).to_global(placement=placement, sbp=S(0)) for v in (X, Y))
    params = {n: tw.Variable(v, placement=placement, sbp=B) for n, v in INIT.items()}
    names, opt = sorted(params), tw.keras.optimizers.Adam(0.05)

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params["w1"]) + params["b1"])
            loss = tw.reduce_mean(tw.square(tw.matmul(h, params["w2"]) - y))
        opt.apply_gradients(zip(tape.gradient(loss, [params[n] for n in names]), [params[n] for n in names]))
        return loss
    losses = [float(step(x, y)) for _ in range(steps)]
    return losses, {n: params[n].numpy() for n in names}, int(opt.iterations.numpy())


@pytest.mark.parametrize("loop, kind", [("fifo", StepChannel), ("graph", ray_cluster._StepGraph)])
def test_compiled_steps_give_the_bits_of_actor_calls(cluster, loop, kind):
    cluster.compiled_steps = False
    want = _train(P2)
    assert (0, 1) not in cluster._graphs
    cluster.compiled_steps, cluster.step_loop = True, loop
    try:
        cluster._drop_graphs()
        got = _train(P2)
        assert type(cluster._graphs[(0, 1)]) is kind     # the steps went through the step channel / the graph
    finally:
        cluster.step_loop = "fifo"
        cluster._drop_graphs()
    assert got[0] == want[0] and got[2] == want[2] == 4
    for n in want[1]:
        np.testing.assert_array_equal(got[1][n], want[1][n], err_msg=n)


def _echo(worker, i, x):
    return worker.rank, i, x * 2 + worker.rank


def _raise_at(worker, i, at):
    if worker.rank == 1 and i == at:
        raise KeyError(f"rank 1 at step {i}")
    return worker.rank, i


def _channel(cluster, ranks=(0, 1)):
    cluster.compiled_steps = True
    cluster._drop_graphs()
    cluster.run_each(lambda w: w.rank, [()] * len(ranks), list(ranks), steady=True)
    ch = cluster._graphs[tuple(ranks)]
    assert isinstance(ch, StepChannel)
    return ch


def test_steps_posted_ahead_come_back_in_order(cluster):
    # three steps queued before the first answer is read; the middle one's arrays (1.5 MB each way)
    # overfill both FIFOs (64 kB) at once: the driver writes and reads without blocking, no deadlock
    ch = _channel(cluster)
    big = np.arange(400_000, dtype=np.float32)
    for i, x in enumerate([np.float32(1.0), big, np.float32(3.0)]):
        ch.post([(_echo, (i, x), 0)] * 2)
    assert ch.pending == 3
    got = [ch.collect() for _ in range(3)]
    assert [[a[:2] for a in step] for step in got] == [[(0, i), (1, i)] for i in range(3)]
    np.testing.assert_array_equal(got[1][1][2], big * 2 + 1)
    assert got[2][0][2] == 6.0 and ch.pending == 0
    with pytest.raises(RuntimeError, match="no step was posted"):
        ch.collect()


def test_a_posted_ahead_step_that_raises_comes_back_in_its_place(cluster):
    ch = _channel(cluster)
    for i in range(3):
        ch.post([(_raise_at, (i, 1), 0)] * 2)
    first, second, third = (ch.collect() for _ in range(3))
    assert first == [(0, 0), (1, 0)] and third == [(0, 2), (1, 2)]
    assert second[0] == (0, 1) and isinstance(second[1], ray_cluster._Raised)
    assert isinstance(second[1].error, KeyError) and "rank 1 at step 1" in str(second[1].error)
    # through the cluster: the rank's own exception, with its rank
    with pytest.raises(KeyError, match="rank 1 at step 5") as e:
        cluster.run_each(_raise_at, [(5, 5)] * 2, [0, 1], steady=True)
    assert e.value.rank == 1


def _serving(worker):
    """``(name, state)`` of this worker's step channel threads (``/proc``: S = asleep in the kernel)."""
    import threading
    out = []
    for t in threading.enumerate():
        if t.name.startswith("tw-steps-"):
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    out.append((t.name, f.read().rsplit(")", 1)[1].split()[0]))
            except (FileNotFoundError, ProcessLookupError):   # it ended between the listing and the
                pass                       # read (gone: ENOENT; exiting: ESRCH): not serving
    return out


def _states_until(cluster, want, tries=50):
    """The ranks' channel threads' states, asked again (an actor call each: no sleep) until they
    are ``want`` (a thread that just wrote its answer is a few instructions from its read)."""
    for _ in range(tries):
        states = [[s for _, s in per_rank] for per_rank in cluster.run(_serving, ranks=[0, 1])]
        if states == want:
            break
    return states


def test_an_idle_channel_s_worker_threads_sleep_and_teardown_leaves_nothing(cluster):
    # Ray's compiled graph waits for the next step polling (sched_yield: runnable, 0.6 s of CPU a
    # second); the channel's thread sleeps in read(2) until a request comes
    ch = _channel(cluster)
    paths = [p for c in ch._ranks for p in (c.req_path, c.ans_path)]
    assert all(os.path.exists(p) for p in paths)
    assert _states_until(cluster, [["S"], ["S"]]) == [["S"], ["S"]]
    cluster._drop_graphs()
    assert not any(os.path.exists(p) for p in paths)
    assert not glob.glob(f"/dev/shm/tw-{cluster.cluster_id}*-gate-*")     # no FIFO left behind
    assert _states_until(cluster, [[], []]) == [[], []]                  # the threads ended


def _owners(a):
    """The objects an array's memory belongs to (its ``base`` chain, through memoryviews)."""
    out = []
    while a is not None:
        out.append(a)
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return out


def test_values_from_compiled_steps_are_no_views_of_ray_channels(cluster):
    # A NumPy array Ray reads from a compiled graph's channel zero-copy views the channel's shared
    # memory and holds its read lock while it lives; one the driver kept (a local variable's value,
    # a step's loss) was freed after Ray had freed the channel (teardown, ray.shutdown): SIGSEGV
    # in Ray's ReadRelease, which took a pytest worker down. Answers come as bytes now.
    cluster.compiled_steps = True
    cluster._drop_graphs()
    got = cluster.run_each(lambda w, x: (x + w.rank, x), [(np.ones(3),)] * 2, [0, 1], steady=True)
    assert cluster._graphs[(0, 1)] is not None
    for answer in got:
        for a in answer:
            assert not [type(o) for o in _owners(a) if type(o).__module__.startswith("ray")]
    # the worker's side: what the driver sent is no view either (kept in a worker's store here)
    kept = cluster.run_each(_keep, [(np.arange(4.0),)] * 2, [0, 1], steady=True)
    assert kept == [[]] * 2
    del got
    gc.collect()


def _keep(worker, x):
    worker.store["ray14-kept"] = x
    return [type(o).__module__ + "." + type(o).__name__ for o in _owners(x) if type(o).__module__.startswith("ray")]


def _die_on_rank_1(worker):
    if worker.rank == 1:
        os.kill(os.getpid(), 9)
    return worker.rank


def test_a_worker_killed_in_a_compiled_step_is_named_and_the_cluster_goes_on(cluster):
    # the driver sleeps on the step gate (local workers), and a rank whose process died ends that
    # wait (it never writes its byte): Ray's read then raises, as without the gate
    cluster.compiled_steps = True
    cluster._drop_graphs()
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]
    live = cluster._graphs[(0, 1)]
    assert isinstance(live, StepChannel) or live.gate is not None      # the driver sleeps during a step
    with pytest.raises(Exception) as e:
        cluster.run_each(_die_on_rank_1, [()] * 2, [0, 1], steady=True)
    assert e.value.rank == 1
    assert (0, 1) not in cluster._graphs                      # torn down; the next step compiles anew
    cluster.restart_worker(1)
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]
    assert cluster._graphs[(0, 1)] is not None


def test_steps_on_ranks_sharing_workers_with_the_live_graph_take_it_over_and_are_right(cluster):
    cluster.compiled_steps = True
    _train(P2, steps=1)
    assert cluster._graphs[(0, 1)] is not None
    losses, params, _ = _train(P4)                    # 10 rows over 4 workers: 3, 3, 2, 2
    # the first step by actor calls, then the 4-worker graph replaces the 2-worker one (one live graph)
    assert list(cluster._graphs) == [(0, 1, 2, 3)] and cluster._graphs[(0, 1, 2, 3)] is not None
    with tw.distribute.in_process():
        in_process = _train(P4)
    np.testing.assert_allclose(losses, in_process[0], rtol=2e-5)
    for n in params:
        np.testing.assert_allclose(params[n], in_process[1][n], rtol=2e-5, atol=1e-6, err_msg=n)


def _raise_on_rank_1(worker):
    comm = worker.comm()
    if worker.rank == 1:
        raise KeyError("rank 1's own error")
    try:
        comm.all_reduce(np.ones(3))                     # waits for rank 1, which never comes
    except CollectiveAbortedError as e:
        worker.store["abort"] = str(e)
        raise


@pytest.mark.parametrize("compiled", [True, False])
def test_a_rank_raising_in_a_step_ends_its_peers_collectives(cluster, compiled):
    cluster._drop_graphs()
    cluster.compiled_steps = compiled
    with pytest.raises(KeyError, match="rank 1's own error") as e:
        cluster.run_each(_raise_on_rank_1, [()] * N, list(range(N)), steady=True)
    assert e.value.rank == 1
    assert (cluster._graphs.get(tuple(range(N))) is not None) == compiled
    # the others were woken by the abort (rank 1's own in a compiled graph, else the driver's once it
    # saw rank 1 fail); the cluster's timeout is 60 s: none timed out
    notes = cluster.run(lambda w: w.store.pop("abort", None))
    assert [n is not None and "rank 1 raised KeyError" in n for n in notes] == [True, False, True, True]
    # and the next steps work, on fresh groups
    got = cluster.run_each(lambda w: w.comm().all_reduce(np.ones(2) * w.rank).tolist(), [()] * N, list(range(N)),
                           steady=True)
    assert got == [[6.0, 6.0]] * N


def test_large_shm_collectives_on_4_workers_give_the_in_process_bits(cluster):
    got = cluster.run(lambda w: large_collectives(w.comm(transport="shm"), w.rank))
    group = InProcessGroup(range(N))
    with ThreadPoolExecutor(N) as pool:
        want = list(pool.map(lambda i: large_collectives(group.communicator(i), i), range(N)))
    assert_same(got, want, writeable=False)


def test_workers_keep_freed_memory(cluster):
    mapped = cluster.run(lambda w: ray14_cases.mapped_bytes_of_a_new_array(64 << 20))
    if mapped[0] is None:
        pytest.skip("not glibc >= 2.33")
    assert all(m < 64 << 20 for m in mapped)


def test_an_initializer_runs_on_the_workers_with_the_one_device_value(cluster, monkeypatch):
    from tensorweave.distribute.variables import InitialPieces

    def not_here(self, i):
        raise AssertionError("a piece was made on the driver")
    monkeypatch.setattr(InitialPieces, "piece", not_here)     # the driver's class only: workers import their own
    glorot = tw.keras.initializers.GlorotUniform(seed=3)
    v = tw.Variable(glorot, shape=(10, 6), placement=P4, sbp=S(0))
    np.testing.assert_array_equal(v.numpy(), glorot((10, 6)).numpy())
    assert [t.shape.as_list() for t in v.to_local()] == [[3, 6], [3, 6], [2, 6], [2, 6]]
    w = tw.Variable(tw.keras.initializers.RandomNormal(), shape=(3, 4), placement=P2, sbp=B)
    replicas = [t.numpy() for t in w.to_local()]
    np.testing.assert_array_equal(replicas[0], replicas[1])


def _traced(worker, block):
    """Starts tracing a worker's allocations (``block``: the draw's block size), or, with
    ``block=None``, stops and returns the peak."""
    import tracemalloc
    from tensorweave.distribute import sharded_draws
    if block is not None:
        worker.store["_block"], sharded_draws.BLOCK = sharded_draws.BLOCK, block
        tracemalloc.start()
        return 0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    sharded_draws.BLOCK = worker.store.pop("_block")
    return peak


def test_a_worker_draws_only_its_slice_of_a_sharded_initializer(cluster):
    # a 16 MB weight over 4 workers (4 MB each): drawing the whole value first allocated >= 16 MB per
    # worker; now the piece, the shard variable's own copy of it (tw.Variable copies its initial value)
    # and a few blocks of the draw: ~9.5 MB
    he = tw.keras.initializers.HeNormal(seed=5)
    shape, full = (4096, 1024), 4096 * 1024 * 4
    tw.Variable(he, shape=(8, 4), placement=P4, sbp=S(1))     # the workers' imports, outside the measurement
    cluster.run(_traced, 1 << 15)
    try:
        v = tw.Variable(he, shape=shape, placement=P4, sbp=S(1))
    finally:
        peaks = cluster.run(_traced, None)
    assert max(peaks) < full * 3 // 4, peaks
    np.testing.assert_array_equal(v.numpy(), he(shape).numpy())


def _exchanges(worker):
    """The shared-memory exchanges this worker made so far (all its groups)."""
    return sum(g._seq for g in worker._shm_groups)


def _sgd_steps(placement, steps=3):
    # the benchmark MLP's shape of step: each 0.01 * g is computed between the updates, so the
    # planner makes one bucket per gradient (rank_graph.bucket_all_reduces)
    return ray14_cases.sgd_step(placement, X, Y, [INIT[n] for n in ("w1", "b1", "w2")])


def test_a_step_s_gradient_buckets_go_as_one_exchange_with_the_same_bits(cluster):
    results = {}
    for merge in (False, True):
        cluster.merge_buckets = merge
        step, x, y, params = _sgd_steps(P2)
        start = cluster.run(_exchanges)
        losses = [float(step(x, y)) for _ in range(3)]
        per_step = (np.array(cluster.run(_exchanges)) - start) / 3
        results[merge] = losses, [p.numpy() for p in params], per_step
    cluster.merge_buckets = True
    (l0, w0, e0), (l1, w1, e1) = results[False], results[True]
    assert l0 == l1
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)
    # 4 workers in the cluster, the step on ranks 0-1: three single-gradient buckets, or one
    assert list(e0) == [3, 3, 0, 0] and list(e1) == [1, 1, 0, 0], (e0, e1)


def test_planned_steps_posted_ahead_give_the_bits_of_waiting_steps(cluster):
    # an SGD step (no driver-local variable, one global output of static shape) returns before the
    # workers answer: four steps queued back to back, the losses read after the last
    results = {}
    cluster.compiled_steps = True
    try:
        for ahead in (False, True):
            cluster.post_ahead = ahead
            step, x, y, params = _sgd_steps(P2)
            losses = [step(x, y) for _ in range(4)]
            results[ahead] = ([p for p in cluster._posted], [float(v) for v in losses], [p.numpy() for p in params])
    finally:
        cluster.post_ahead = True
    (posted0, l0, w0), (posted1, l1, w1) = results[False], results[True]
    assert posted0 == [] and [r for r, _ in posted1] == [(0, 1)]     # the last step was still out
    assert l0 == l1 and cluster._posted == []                         # reading a loss drained it
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)


def test_a_step_posted_ahead_raises_at_the_next_call_with_its_rank(cluster):
    _channel(cluster)
    args = lambda i: [(i, 1)] * 2                                    # noqa: E731 - rank 1 raises at step 1
    assert cluster.post_each(_raise_at, args(0), [0, 1]) is True
    assert cluster.post_each(_raise_at, args(1), [0, 1]) is True       # step 0 read: fine
    with pytest.raises(KeyError, match="rank 1 at step 1") as e:
        cluster.post_each(_raise_at, args(2), [0, 1])                  # step 1 read: its error
    assert e.value.rank == 1 and cluster._posted == []
    # posted, then any other call reads it first: the error there
    cluster.post_each(_raise_at, [(7, 7)] * 2, [0, 1])
    with pytest.raises(KeyError, match="rank 1 at step 7") as e:
        cluster.run(lambda w: w.rank)
    assert e.value.rank == 1
    assert cluster.run(lambda w: w.rank, ranks=[0, 1]) == [0, 1]     # and the cluster goes on
    cluster.compiled_steps = False                                     # no step channel: nothing posted
    try:
        assert cluster.post_each(_raise_at, args(0), [0, 1]) is False
    finally:
        cluster.compiled_steps = True


# ---- ray20 (session 16): the step channel's binary frames (no pickle), its errors and timeouts ----
class _Marker:
    """A pickle that would create ``path`` when loaded (what a crafted frame might carry)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return exec, (f"open({self.path!r}, 'w').close()",)


def _rejected(ch, data):
    """Writes ``data`` into rank 0's request FIFO of ``ch`` as it is and returns the values of the
    error answer that rank sends back before its serving thread ends."""
    from tensorweave.distribute.ray import step_frame
    c = ch._ranks[0]
    os.write(c.req, data)
    ch._pump(lambda: c.answers, None)
    h, body = c.answers.popleft()
    assert h.kind == step_frame.KIND_ERROR
    return step_frame.decode(h, body)


def test_a_crafted_frame_cannot_run_code_on_a_worker(cluster, tmp_path):
    import pickle

    from tensorweave.distribute.ray import step_frame
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Marker(str(marker)))
    # pickle bytes where a frame should be: the header's magic is wrong
    name, message, rank = _rejected(_channel(cluster), payload.ljust(step_frame.HEADER.size, b"."))[:3]
    assert (name, rank) == ("FrameError", 0) and "bad magic" in message
    # a well-formed header (a registered function) and pickle bytes as its body: an unknown value tag
    ch = _channel(cluster)
    head = step_frame.HEADER.pack(step_frame.MAGIC, step_frame.VERSION, step_frame.KIND_REQUEST, 0, 1, 0,
                                  next(iter(ch._fn_ids.values()))[0], 1, len(payload))
    name, message = _rejected(ch, head + payload)[:2]
    assert name == "FrameError" and "unknown value tag" in message
    # through the cluster: pickle bytes ahead of a real step; the rank's rejection is raised and the
    # channel (whose rank 0 stopped serving) dropped
    ch = _channel(cluster)
    os.write(ch._ranks[0].req, payload.ljust(step_frame.HEADER.size, b"."))
    with pytest.raises(step_frame.FrameError, match="bad magic") as e:
        cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True)
    assert e.value.rank == 0 and (0, 1) not in cluster._graphs
    assert not marker.exists()                                          # nothing was unpickled
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]   # a fresh channel


def test_arguments_outside_the_frames_set_go_by_actor_calls(cluster):
    ch = _channel(cluster)
    got = cluster.run_each(lambda w, s: sorted(s) + [w.rank], [({3, 1},)] * 2, [0, 1], steady=True)
    assert got == [[1, 3, 0], [1, 3, 1]]
    assert cluster._graphs[(0, 1)] is ch                               # the channel stays for the next steps


class Ray20Error(Exception):
    """An exception type the driver does not know: it comes back as a RemoteError naming it."""


def _raise_unknown(worker):
    if worker.rank == 1:
        raise Ray20Error("rank 1 failed its own way")
    return worker.rank


def test_an_unknown_exception_type_comes_back_as_a_remote_error_with_rank_and_line(cluster):
    from tensorweave.distribute.ray.step_frame import RemoteError
    _channel(cluster)
    with pytest.raises(RemoteError, match="Ray20Error: rank 1 failed its own way") as e:
        cluster.run_each(_raise_unknown, [()] * 2, [0, 1], steady=True)
    assert e.value.rank == 1 and e.value.remote_type == "Ray20Error"
    assert e.value.remote_line == f"{__file__}:{_raise_unknown.__code__.co_firstlineno + 2}"
    assert isinstance(cluster._graphs[(0, 1)], StepChannel)
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]


def _wait_for_rank_1(worker):
    if worker.rank == 0:
        worker.comm((0, 1)).all_reduce(np.ones(2))       # rank 1 never joins
    return worker.rank


def test_a_step_past_the_channel_timeout_names_the_ranks_and_the_cluster_goes_on(cluster):
    cluster.step_timeout = 30.0
    try:
        ch = _channel(cluster)
    finally:
        cluster.step_timeout = None
    assert ch.timeout == 30.0
    ch.timeout = 1.0                                   # the cluster's collectives wait 60 s
    with pytest.raises(tw.errors.DeadlineExceededError, match=r"ranks \[0\] had not answered") as e:
        cluster.run_each(_wait_for_rank_1, [()] * 2, [0, 1], steady=True)
    assert e.value.ranks == [0]
    assert (0, 1) not in cluster._graphs                # dropped (its rank 0 was busy); its collective aborted:
    assert _states_until(cluster, [[], []], tries=2000) == [[], []]      # both serving threads ended
    got = cluster.run_each(lambda w: w.comm((0, 1)).all_reduce(np.ones(2) * w.rank).tolist(), [()] * 2, [0, 1],
                           steady=True)
    assert got == [[1.0, 1.0]] * 2


def test_an_answer_out_of_order_is_rejected(cluster):
    from tensorweave.distribute.ray import step_frame
    ch = _channel(cluster)
    # a stray answer (step 99) ahead of rank 0's real one: the driver checks each answer's step id
    os.write(ch._ranks[0].ans, step_frame.encode(step_frame.KIND_ANSWER, 99, 0, 0, (0,)))
    with pytest.raises(step_frame.FrameError, match="rank 0 answered step 99"):
        cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True)
    assert (0, 1) not in cluster._graphs                # the channel is not trusted any more
    assert cluster.run_each(lambda w: w.rank, [()] * 2, [0, 1], steady=True) == [0, 1]
