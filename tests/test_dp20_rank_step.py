"""Session 16 dp20: the controller's per-step work in a planned data-parallel step
(distribute/rank_threads.py, plan_function.RankPlans.run) and a collective's timeout inside a
planned step (distribute/collective.py)."""
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import rank_threads
from tensorweave.distribute.collective import CollectiveTimeoutError
from tensorweave.kernels import threads
from mlp_step import FakeLib


def test_held_sets_only_what_differs_and_restores_it(monkeypatch):
    import numba
    lib = FakeLib(4)
    monkeypatch.setattr(rank_threads, "_per_thread_libs", lambda: [lib])
    numba_before = numba.get_num_threads()
    with rank_threads.held(1) as n:
        assert (n, lib.num_threads, numba.get_num_threads()) == (1, 1, 1)
    assert lib.num_threads == 4 and lib.calls == [1, 4] and numba.get_num_threads() == numba_before
    lib.calls.clear()
    with rank_threads.held(4):                  # nothing differs: nothing set, nothing restored
        assert lib.num_threads == 4
    assert lib.calls == []


def test_held_with_counts_read_before_does_not_read_them_again(monkeypatch):
    lib = FakeLib(2)
    monkeypatch.setattr(rank_threads, "_per_thread_libs", lambda: pytest.fail("counts were given"))
    with rank_threads.held(1, [(lib, 2)]):
        assert lib.num_threads == 1
    assert lib.num_threads == 2 and lib.calls == [1, 2]


def test_controller_counts_is_for_ranks_with_the_per_thread_counts(monkeypatch):
    libs = [FakeLib(6), types.SimpleNamespace(internal_api="openblas", num_threads=3)]
    monkeypatch.setattr(threads, "_blas", lambda: libs)
    assert rank_threads.for_ranks(2) == 3
    n, counts = rank_threads.controller_counts(2)
    assert n == 3 and counts == [(libs[0], 6)]            # the max over every library, shared by 2
    assert rank_threads.controller_counts(4)[0] == 1 and rank_threads.controller_counts(1)[0] == 6
    monkeypatch.setattr(threads, "_blas", lambda: [])
    assert rank_threads.controller_counts(2) == (1, [])


def test_planned_step_restores_the_controllers_counts_and_equals_one_device():
    """The inline rank's settings (held with the counts read once) come back after each step, and
    two data-parallel SGD steps give one device's weights (the bits: both sum in the same order)."""
    import numba
    from threadpoolctl import threadpool_limits
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((8, 5)).astype(np.float32)
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    p = tw.placement("cpu", ranks=[0, 1])

    def train(placement):
        w = tw.Variable(w0) if placement is None else tw.Variable(w0, placement=placement, sbp=tw.sbp.broadcast)
        x = tw.constant(x0) if placement is None else tw.constant(x0).to_global(placement=placement,
                                                                               sbp=tw.sbp.split(0))
        opt = tw.keras.optimizers.SGD(0.1)

        @tw.function
        def step():
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.square(tw.matmul(x, w)))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return loss
        return [float(step()) for _ in range(2)], w.numpy()
    with threadpool_limits(2):
        before = threads.intra_op_threads(), numba.get_num_threads()
        got = train(p)
        assert (threads.intra_op_threads(), numba.get_num_threads()) == before
    want = train(None)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)


def test_a_collective_timeout_inside_a_plan_step_keeps_its_type():
    """executor.node_error re-raises a step's OpError as its own class with ``op=``: a timeout of a
    planned step's collective came out as a TypeError (CollectiveTimeoutError took no ``op``)."""
    from tensorweave.runtime.executor import node_error
    node = types.SimpleNamespace(op="_AllReduceWait", name="all_reduce_bucket0/wait", type="_AllReduceWait",
                                 traceback=None)
    op = object()                   # the graph op the error names (OpError.op)
    step = types.SimpleNamespace(node=node, device="/cpu:0", op=op)
    err = node_error(step, CollectiveTimeoutError("all_reduce_start(sum) (call #3): ranks [1] did not arrive", [1]))
    assert isinstance(err, CollectiveTimeoutError) and err.op is op
    assert "ranks [1] did not arrive" in str(err) and "all_reduce_bucket0/wait" in str(err)


def test_gil_sampler_finds_the_gil_record_and_counts_samples_by_holder_and_label():
    """benchmarks/gil_sampler.py finds CPython's GIL record (read here while this thread runs Python:
    it holds the GIL) and, per sample of a record, counts the registered thread holding it under the
    label it set; a thread never registered is never counted as holding it. Samples are fed here from a
    scripted record, not taken on a clock: what a real run measures is the benchmark's business."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import gil_sampler
    if not gil_sampler.available():
        pytest.skip(f"the GIL record is read on CPython 3.11 only (this is {sys.version.split()[0]})")
    words, holder_at, locked_at = gil_sampler._find()
    assert int(words[holder_at]) == gil_sampler._thread_state() and int(words[locked_at]) & 0xFFFFFFFF == 1
    sample, _ = gil_sampler._compiled()
    s = gil_sampler.GilSampler(["python"], threads=2)
    s.register(0)                       # thread 1: never registered (its state 0 is no thread's)
    s.enter(0, 0)
    record = np.array([0, s.states[0], 1], np.uint64)          # (anything, holder, locked)
    for locked in (1, 1, 1, 0):
        record[2] = locked
        sample(record, 1, 2, s.states, s.where, s.counts)
    s.leave(0)
    sample(record, 1, 2, s.states, s.where, s.counts)           # unlocked, outside any label
    s.samples, s.seconds = 5, 0.005                              # 1 ms a sample
    assert s.counts[0, 0].tolist() == [1, 3] and s.counts[0, 1].tolist() == [1, 0]
    assert s.counts[1, :, 1].sum() == 0 and s.counts[1, s.outside, 0] == 5
    assert s.fractions() == [{"python": 0.75, "outside": 0.0}, {"outside": 0.0}]
    assert s.held_ms() == [{"python": 3.0}, {}] and s.held_ms(per=3) == [{"python": 1.0}, {}]
