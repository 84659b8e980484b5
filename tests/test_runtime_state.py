"""Per-rank state in the Runtime (issue 12): eager random state and the intra-op pool.

Two ranks in one process (threads, each under its own Runtime) must not see each other: a rank's
unseeded or op-seeded draws, its global Generator and its ``set_seed`` give the same values
whatever the other rank's thread does meanwhile, and its tiled kernels run on its own helper
threads. Interleavings are forced step by step (no sleeps), so each order is tested exactly.
"""
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tensorweave as tw
from tensorweave.core.context import current_runtime
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import tiles
from tensorweave.runtime.runtime import Runtime, default_runtime


class _Turns:
    """Lets threads take steps in a fixed global order: ``order`` is a list of thread labels."""

    def __init__(self, order):
        self.order, self.pos, self.cond = list(order), 0, threading.Condition()

    def step(self, me, fn):
        with self.cond:
            while self.order[self.pos] != me:
                self.cond.wait()
        try:
            return fn()
        finally:
            with self.cond:
                self.pos += 1
                self.cond.notify_all()


def _rank_program(seed):
    """The draws of one rank, step by step: set_seed, then draws under TF's seed rules."""
    return [
        lambda: tw.random.set_seed(seed),
        lambda: tw.random.uniform([3]).numpy(),                    # op seed from the eager counter
        lambda: tw.random.normal([2], seed=7).numpy(),             # op-seeded: the eager stream cache
        lambda: tw.random.normal([2], seed=7).numpy(),             # ... which moves on
        lambda: tw.random.get_global_generator().uniform([2]).numpy(),
        lambda: tw.random.uniform([2], maxval=100, dtype=tw.int32).numpy(),
        lambda: tw.nn.dropout(tw.ones([6]), rate=0.5).numpy(),
    ]


def _run_ranks(order, seeds):
    runtimes = {label: Runtime(f"r{label}", rank=i) for i, label in enumerate(seeds)}
    turns = _Turns(order)
    out = {label: [] for label in seeds}
    errors = []

    def body(label):
        try:
            with runtimes[label].as_default():
                for fn in _rank_program(seeds[label]):
                    out[label].append(turns.step(label, fn))
        except BaseException as e:  # noqa: BLE001 - reported on the test's thread
            errors.append(e)
            with turns.cond:        # let the other thread finish instead of waiting for this one
                turns.order = [x for x in turns.order[:turns.pos]] + [x for x in turns.order[turns.pos:]
                                                                     if x != label]
                turns.cond.notify_all()
    ts = [threading.Thread(target=body, args=(label,)) for label in seeds]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return out


ORDERS = {
    "A then B": "A" * 7 + "B" * 7,
    "B then A": "B" * 7 + "A" * 7,
    "alternating": "AB" * 7,
    "alternating, B first": "BA" * 7,
    "blocks": "AABBBAAABBBAAB",
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_two_ranks_draw_the_same_values_in_any_interleaving(order):
    reference = _run_ranks(ORDERS["A then B"], {"A": 1, "B": 2})
    got = _run_ranks(ORDERS[order], {"A": 1, "B": 2})
    for label in "AB":
        for i, (x, y) in enumerate(zip(reference[label], got[label])):
            if x is not None:
                np.testing.assert_array_equal(x, y, err_msg=f"rank {label}, step {i}, order {order}")
    # and a rank's draws are those of a program run alone on the main thread's runtime
    solo = [fn() for fn in _rank_program(1)]
    tw.random.set_seed(None)
    for i, (x, y) in enumerate(zip(solo, got["A"])):
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=f"rank A vs alone, step {i}")


def test_a_rank_seed_leaves_the_process_state_alone():
    tw.random.set_seed(11)
    expected = tw.random.uniform([4]).numpy()
    tw.random.set_seed(11)
    rt = Runtime("rank-seed", rank=1)
    with rt.as_default():
        tw.random.set_seed(99)
        tw.random.uniform([4])
        gen = tw.random.get_global_generator()
    assert gen is not tw.random.get_global_generator()
    assert rt.random.seed == 99 and default_runtime().random.seed == 11
    np.testing.assert_array_equal(tw.random.uniform([4]).numpy(), expected)   # the counter did not move
    tw.random.set_seed(None)


def test_rank_threads_and_pool_threads_run_under_their_runtime():
    from tensorweave.distribute.ranks import World
    world = World()
    try:
        seen = world.run([0, 1], lambda i: current_runtime())
        assert seen == [world.rank(0).runtime, world.rank(1).runtime]
        rt = world.rank(1).runtime
        assert rt.pool().submit(current_runtime).result() is rt
        assert rt.intra_op_pool().submit(current_runtime).result() is rt
    finally:
        world.shutdown()
    assert current_runtime() is default_runtime()


def test_two_ranks_tiled_kernels_use_their_own_pools():
    """Each rank's tiles need two threads at once (a barrier of four: two per rank); with one
    helper thread per runtime that only happens when no rank waits in the other's pool queue."""
    if threads.cores() < 2:
        pytest.skip("tiles run on one thread on one core")
    runtimes = [Runtime(f"tiles{i}", rank=i) for i in range(2)]
    all_in = threading.Barrier(4, timeout=120)     # a guard against a hang, never reached when it passes
    names = [set(), set()]
    errors = []

    def rank(i):
        def run(b0, b1, scratch):
            names[i].add(threading.current_thread().name)
            all_in.wait()
        try:
            with runtimes[i].as_default():
                tiles.over_tiles(2, 1, 1, run)       # two tiles: the caller and one helper
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=rank, args=(i,), name=f"caller{i}") for i in range(2)]
    with threadpool_limits(2, user_api="blas"):     # two intra-op threads (xdist workers run with one)
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for rt in runtimes:
        rt.shutdown()
    assert not errors, errors
    for i in range(2):
        helpers = names[i] - {f"caller{i}"}
        assert helpers and all(n.startswith(f"tw-tiles{i}-intra") for n in helpers), names
