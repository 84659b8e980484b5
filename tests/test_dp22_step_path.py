"""Session 18 dp22 (issue 13, in-process data parallel): less per-step work on a planned step's path —
the controller's thread settings and the shared weights' join made before the other ranks are posted,
a rank's communicator kept while its world's groups stay the same (``RankComms``), the bucket's
targets taken from one check of the shared buffer (``SharedWeight.buffer``) and the gather's check
that marks nothing modified (``SharedWeight.holds``). Same bits as before: the fused and the unfused
updates, on 1, 2 and 3 ranks."""
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import derived
from tensorweave.distribute import collective, fused_sgd, planner, zero_update
from tensorweave.distribute import ranks as ranks_mod
from tensorweave.distribute.collective import CollectiveAbortedError
from test_dp21_rank_meeting import _mlp_training


# ---- RankComms: a group's communicator kept -------------------------------------------------------
def test_rank_comms_keeps_the_communicator_until_the_groups_are_replaced():
    world = ranks_mod.World(timeout=30)
    try:
        comms = ranks_mod.RankComms(world, 1)
        a = comms((0, 1))
        assert comms((0, 1)) is a and comms([0, 1]) is a and a.index == 1
        assert a.group is world.group((0, 1))
        assert comms((1, 2)).index == 0 and comms((1, 2)) is not a
        world.set_timeout(7)                       # the groups are replaced: a new one, with the new timeout
        b = comms((0, 1))
        assert b is not a and b.group is world.group((0, 1)) and b.group.timeout == 7
    finally:
        world.shutdown()


def test_a_run_after_a_failed_one_meets_on_the_new_group():
    """A failed run aborts its groups (and replaces them): a communicator kept from before must not
    be used again, or the next run's collectives would be abandoned (or wait on a dead group)."""
    world = ranks_mod.World(timeout=30)

    def total(i):
        comm = world.rank(i).runtime.resource("communicator", "world")((0, 1))
        return float(comm.all_reduce(np.array([i + 1.0]))[0])

    def failing(i):
        if i == 1:
            raise ValueError("rank 1 fails")
        return total(i)
    try:
        assert world.run([0, 1], total) == [3.0, 3.0]
        old = world.rank(0).runtime.resource("communicator", "world")((0, 1)).group
        with pytest.raises(ValueError, match="rank 1 fails"):
            world.run([0, 1], failing)
        assert old._failure is not None            # aborted by the failure
        assert world.run([0, 1], total) == [3.0, 3.0]
        new = world.rank(0).runtime.resource("communicator", "world")((0, 1)).group
        assert new is not old and new._failure is None
    finally:
        world.shutdown()


def test_a_group_asked_for_while_a_rank_has_failed_is_not_kept():
    world = ranks_mod.World(timeout=30)
    try:
        comms = ranks_mod.RankComms(world, 0)
        world._abort([1], "rank 1 failed")
        a = comms((0, 1))
        with pytest.raises(CollectiveAbortedError):
            a.all_reduce(np.ones(2))
        assert (0, 1) not in comms._kept
        world._failure.clear()                     # as the next run of those ranks does
        b = comms((0, 1))
        assert b is not a and b.group._failure is None and comms((0, 1)) is b
    finally:
        world.shutdown()


# ---- SharedWeight: one check of the buffer ---------------------------------------------------------
def _group(n=2, rows=6):
    buf = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3).copy()     # its own base, as reshare makes it
    derived.track(buf)
    shards = [types.SimpleNamespace(_value=buf) for _ in range(n)]
    bounds = [(lo, hi) for lo, hi in collective.balanced_bounds(rows, n)]
    g = zero_update.SharedWeight(shards, bounds)
    g.views = [buf[lo:hi] for lo, hi in bounds]
    g.active = True
    return g, buf


def test_buffer_is_the_shared_one_only_where_every_shard_holds_it(monkeypatch):
    marked = []
    real = derived.modified
    monkeypatch.setattr(derived, "modified", lambda a: (marked.append(a), real(a)))
    g, buf = _group(3)
    assert g.buffer() is buf and len(marked) == 1 and marked[0] is buf        # marked once, not per shard
    assert all(g.holds(s, i) for i, s in enumerate(g.shards)) and len(marked) == 1   # holds marks nothing
    g.shards[2]._value = buf.copy()                # a shard given a buffer of its own (copy-on-write)
    assert g.buffer() is None and not g.holds(g.shards[2], 2) and g.holds(g.shards[0], 0)
    g.shards[2]._value = buf
    g.views[1] = buf.copy()[2:4]                   # a view of another buffer
    assert g.buffer() is None
    g2, _ = _group(2)
    g2.active = False
    assert g2.buffer() is None and not g2.holds(g2.shards[0], 0)
    g2.active, g2.views[0] = True, None
    assert g2.buffer() is None and not g2.holds(g2.shards[0], 0)


# ---- the planned step: settings before the posting, same bits -------------------------------------
def _training(placement, steps=3, batch=10, optimizer=None):
    return _mlp_training(placement, steps, batch, optimizer, seed=1)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("zero_fixed", [0, None])
def test_fused_and_unfused_updates_give_the_same_bits(n, zero_fixed, monkeypatch):
    """Every weight in shared ZeRO-1 buffers updated by the bucket (``zero_fixed`` 0: targets from
    ``SharedWeight.buffer``, the gather skipped on ``holds``), or none (the planner's default for
    weights this small), gives the unfused step's losses and weights to the last bit, on 1, 2 and
    3 ranks (batch 10: uneven on 3)."""
    if zero_fixed is not None:
        monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", zero_fixed)
    p = tw.placement("cpu", ranks=list(range(n)))
    applied = []
    real = fused_sgd.BucketUpdate.apply_chunk
    monkeypatch.setattr(fused_sgd.BucketUpdate, "apply_chunk",
                        lambda self, *a: (applied.append(1), real(self, *a))[1])
    fused = _training(p)
    # every weight shared (zero_fixed 0): the fused path ran, its targets found; the planner's default
    # keeps this MLP's small weights all-reduced
    assert bool(applied) == (n > 1 and zero_fixed == 0)
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    assert _training(p) == fused


def test_shared_weights_skip_their_gather_every_step(monkeypatch):
    """The gather's check (``holds``) finds the ranks' shared buffers every step: no rows copied."""
    gathered = []
    monkeypatch.setattr(collective.InProcessCommunicator, "all_gather_rows", lambda self, arrays: gathered.append(1))
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    _training(tw.placement("cpu", ranks=[0, 1]), optimizer=lambda: tw.keras.optimizers.SGD(0.1, momentum=0.9))
    assert gathered == []


def test_controller_settings_are_made_before_the_ranks_are_posted(monkeypatch):
    """The controller's per-thread counts are the ranks' share when the other ranks are posted, and
    are its own again after the step; the shared weights are joined inside the run (the ranks' locks
    held, so a concurrent run on those ranks waits for it)."""
    import numba
    from threadpoolctl import threadpool_limits
    seen = []
    world = ranks_mod.default_world()
    real_post = ranks_mod.Rank.post
    real_reshare = zero_update.reshare

    def post(self, fn, index, latch):
        seen.append(("post", numba.get_num_threads()))
        return real_post(self, fn, index, latch)

    def reshare(groups):
        seen.append(("reshare", all(world._rank_locks[r].locked() for r in (0, 1))))
        return real_reshare(groups)
    monkeypatch.setattr(ranks_mod.Rank, "post", post)
    monkeypatch.setattr(zero_update, "reshare", reshare)
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)          # shared weights to join
    p = tw.placement("cpu", ranks=[0, 1])
    with threadpool_limits(2):
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        before = numba.get_num_threads()
        _training(p, steps=2)
        assert numba.get_num_threads() == before
    joins = [i for i, s in enumerate(seen) if s[0] == "reshare"]
    assert len(joins) >= 2
    for i in joins:             # each step: rank 1 posted at the share, then the join inside the run
        assert seen[i] == ("reshare", True) and seen[i - 1] == ("post", 1)
