"""No-Ray units of mw14's changes: joining pieces of several worker pipelines, putting a
pipeline's shuffle pass counters back, a replica's carry-over of lost ranks' pipelines,
validation pieces by policy, and a cluster's free bundles and removal checks."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data  # noqa: F401
from tensorweave.data import sharding
from tensorweave.distribute.ray import members
from tensorweave.distribute.ray.multi_worker_replica import Replica

P = tw.data.experimental.AutoShardPolicy


def test_zip_pieces_joins_each_steps_pieces_in_stream_order():
    a = iter([(np.arange(2), np.zeros(2)), (np.arange(2, 3), np.zeros(1))])
    b = iter([(np.arange(5, 7), np.ones(2)), (np.arange(7, 8), np.ones(1)), (np.arange(8, 9), np.ones(1))])
    got = [(x.tolist(), y.tolist()) for x, y in sharding.zip_pieces([a, b])]
    assert got == [([0, 1, 5, 6], [0, 0, 1, 1]), ([2, 7], [0, 1]), ([8], [1])]
    one = iter([np.arange(3)])
    assert [p.tolist() for p in sharding.zip_pieces([one])] == [[0, 1, 2]]
    assert list(sharding.zip_pieces([iter(()), iter(())])) == []


def test_pass_counters_put_back_repeat_a_reshuffling_pass():
    ds = tw.data.Dataset.range(8).shuffle(8, seed=3).batch(4)
    start = sharding.pass_counters(ds)
    first = [b.tolist() for b in ds.as_numpy_iterator()]
    assert sharding.pass_counters(ds) == [start[0] + 1]
    second = [b.tolist() for b in ds.as_numpy_iterator()]
    assert second != first                                    # it reshuffles
    sharding.set_pass_counters(ds, start)
    assert [b.tolist() for b in ds.as_numpy_iterator()] == first
    fixed = tw.data.Dataset.range(4).shuffle(4, seed=1, reshuffle_each_iteration=False)
    assert sharding.pass_counters(fixed) == []                # its order never moves


class _Worker:
    def __init__(self, rank):
        self.rank, self.store = rank, {}


def _replica(rank, split):
    rep = Replica(_Worker(rank))
    rep.split = split
    return rep


def test_carry_over_gives_each_lost_ranks_pipeline_to_a_survivor():
    rep = _replica(0, (4, (0, 1, 2, 3)))
    rep.carry_over((0, 2))                      # 1 and 3 lost: the 1st orphan to rank 0, the 2nd to rank 2
    assert rep.split == (4, (0, 0, 2, 2))
    rep.carry_over((2,))                        # then rank 0 too
    assert rep.split == (4, (2, 2, 2, 2))
    rep = _replica(0, (3, (0, 1, 2)))
    rep.carry_over((0, 1, 2))                   # nobody lost: unchanged
    assert rep.split == (3, (0, 1, 2))
    rep = _replica(0, (3, (0, 1, 2)))
    rep.carry_over((2, 0))                      # in the order of the active ranks given
    assert rep.split == (3, (0, 2, 2))
    rep = _replica(0, None)
    rep.carry_over((0,))                        # no split yet (DATA, or before the epoch): nothing
    assert rep.split is None


def _text_files(tmp_path):
    out = []
    for i, n in enumerate((3, 2, 4)):
        p = tmp_path / f"f{i}.txt"
        p.write_text("".join(f"{i * 10 + k}\n" for k in range(n)))
        out.append(str(p))
    return out


def test_validation_pieces_follow_the_policy(tmp_path):
    files = _text_files(tmp_path)

    def pipeline(policy):
        opts = tw.data.Options()
        opts.experimental_distribute.auto_shard_policy = policy
        return tw.data.TextLineDataset(files).map(lambda s: tw.strings.to_number(s, tw.int32)).batch(3) \
            .with_options(opts)

    def rows(policy, index, steps=None):
        rep = Replica(_Worker(index))
        rep.index, rep.size, rep._val_pipelines = index, 2, {}
        spec = {"validation_data": pipeline(policy), "validation_steps": steps, "validation_batch_size": None}
        return [np.asarray(b[0]).tolist() for b in rep._validation_batches(spec)]
    # FILE: worker 0 reads files 0 and 2 (pieces of 2, 1 rows), worker 1 file 1 (pieces of 1, 2)
    assert rows(P.FILE, 0) == [[0, 1], [2], [20, 21], [22], [23]]
    assert rows(P.FILE, 1) == [[10], [11]]
    assert rows(P.FILE, 0, steps=2) == [[0, 1], [2]]
    # OFF: each worker reads everything; DATA: balanced slices of each global batch of 3
    assert sum(rows(P.OFF, 1), []) == [0, 1, 2, 10, 11, 20, 21, 22, 23]
    assert rows(P.DATA, 0) == [[0, 1], [10, 11], [21, 22]] and rows(P.DATA, 1) == [[2], [20], [23]]


class _Group:
    def __init__(self, bundles):
        self.bundle_count = bundles


class _FakeCluster:
    def __init__(self, bundles, used, resources=None):
        self._pg = _Group(bundles)
        self._resources = resources or {"CPU": 1}
        self._slots = [(self._pg, b, dict(self._resources)) for b in used]
        self.workers = [None] * len(used)

    @property
    def num_workers(self):
        return len(self.workers)


def test_a_free_bundle_is_one_no_rank_uses_with_the_same_resources():
    assert members._free_bundle(_FakeCluster(3, [0, 2]), {"CPU": 1}) == 1
    assert members._free_bundle(_FakeCluster(3, [2, 1]), {"CPU": 1}) == 0
    assert members._free_bundle(_FakeCluster(2, [0, 1]), {"CPU": 1}) is None
    assert members._free_bundle(_FakeCluster(3, [0, 2]), {"CPU": 2}) is None      # other resources: a group of its own
    c = _FakeCluster(2, [0])
    c._pg = None
    assert members._free_bundle(c, {"CPU": 1}) is None


def test_remove_worker_checks_its_rank_before_touching_ray():
    c = _FakeCluster(2, [0, 1])
    for bad in (2, -1, True, 1.0):
        with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\)"):
            members.remove_worker(c, bad)
    with pytest.raises(tw.errors.FailedPreconditionError, match="last rank cannot be removed"):
        members.remove_worker(_FakeCluster(1, [0]), 0)


def _data_replica(rank, ds):
    rep = Replica(_Worker(rank))
    rep.data = {"dataset": ds, "class_weight": None}
    rep._pipelines, rep.split, rep._passes = {}, None, {}
    rep.index, rep.size, rep.active = rank, 2, (0, 1)
    return rep


def _pieces(rep, epoch):
    return [np.asarray(b[0]).tolist() for b in rep._epoch_batches(epoch)]


def test_a_re_made_or_taken_over_stream_repeats_the_epochs_pass(tmp_path):
    files = _text_files(tmp_path)
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = P.FILE
    ds = tw.data.TextLineDataset(files).map(lambda s: tw.strings.to_number(s, tw.int32)).shuffle(9, seed=5) \
        .batch(3).with_options(opts)
    reps = [_data_replica(0, ds), _data_replica(1, ds)]
    epoch0 = [_pieces(r, 0) for r in reps]
    epoch1 = [_pieces(r, 1) for r in reps]
    assert epoch1 != epoch0                              # the shuffle moved on
    assert _pieces(reps[0], 1) == epoch1[0]              # re-made in the same epoch: the same pass
    reps[0].carry_over((0,))                             # rank 1 lost in epoch 1: rank 0 reads its pipeline too
    reps[0].size, reps[0].index, reps[0].active = 1, 0, (0,)
    joined = [a + b for a, b in zip(epoch1[0], epoch1[1])] + epoch1[0][len(epoch1[1]):]
    assert _pieces(reps[0], 1) == joined
