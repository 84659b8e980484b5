"""The bucket's wait as issue 13's dp24 left it (``collective.reduce_wait`` / ``_chunks``,
``rank_threads.held``): a small sum no update is applied to is one chunk, an applied array stays
cut at the members' rows (its slots are per member); the chunk list is made again when the
bucket's layout or its applied arrays change (nothing stale after a shape change); a planned
step's weights on 1, 2 and 3 ranks have the bits of the step without the fused updates."""
import numba
import numpy as np
import pytest

from tensorweave.distribute import collective, fused_sgd, rank_threads
from test_dp13_fused_sgd import FUSED, _Apply, _on_members, _ordered_sum
from zero13_model import train


def test_small_unapplied_sums_are_one_chunk_and_applied_ones_are_cut_at_the_rows():
    arrays = [np.zeros(5, np.float32), np.zeros((6, 2), np.float32), np.zeros((7, 3), np.float32)]
    cut = collective._chunks(arrays, 2)
    assert [c for c in cut if c[0] == 0] == [(0, 0, 3, 0), (0, 3, 5, 1)]
    got = collective._chunks(arrays, 2, whole={0, 1})
    assert [c for c in got if c[0] < 2] == [(0, 0, 5, 0), (1, 0, 12, 1)]     # owners spread: k % members
    assert [c for c in got if c[0] == 2] == [c for c in cut if c[0] == 2]


def _chunks_of(group, k):
    return {key[2]: [c for c in chunks if c[0] == k] for key, (chunks, _, _) in group._chunk_lists.items()}


@pytest.mark.parametrize("members", [2, 3])
def test_chunk_lists_follow_the_applied_arrays_and_the_shapes(monkeypatch, members):
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 7)     # arrays of <= 7 elements are small here
    rng = np.random.default_rng(members)
    group = collective.InProcessGroup(range(members), timeout=30)

    def bucket(rows):
        return [[rng.standard_normal(5).astype(np.float32), rng.standard_normal((rows, 2)).astype(np.float32),
                 rng.standard_normal(3).astype(np.float32)] for _ in range(members)]
    # a small weight (6 elements) applied by the bucket: still cut at the members' rows
    buckets = bucket(3)
    w = rng.standard_normal(6).astype(np.float32)
    lr = np.float32(0.25)
    want_w = w - _ordered_sum([b[1] for b in buckets]).reshape(-1) * lr
    got = _on_members(group, buckets, [_Apply(w, lr)] * members)
    np.testing.assert_array_equal(w, want_w)
    for res in got:
        assert res[1] is None
        for k in (0, 2):
            np.testing.assert_array_equal(res[k], _ordered_sum([b[k] for b in buckets]))
    assert len(_chunks_of(group, 1)[(True, False, True)]) == members
    # the same layout with nothing applied: a list of its own, the small sums whole
    buckets = bucket(3)
    for applies in ([None] * members, [_Apply(w, lr)] + [None] * (members - 1)):   # differing applies: none
        got = _on_members(group, buckets, applies)
        for res in got:
            for k in range(3):
                np.testing.assert_array_equal(res[k], _ordered_sum([b[k] for b in buckets]))
    assert _chunks_of(group, 1)[None] == [(1, 0, 6, 1 % members)]
    assert _chunks_of(group, 0)[None] == [(0, 0, 5, 0)]
    # another shape: another list, no chunk of the old one used
    buckets = bucket(9)
    got = _on_members(group, buckets, [None] * members)
    for res in got:
        np.testing.assert_array_equal(res[1], _ordered_sum([b[1] for b in buckets]))
    assert len(group._chunk_lists) == 3


@pytest.mark.parametrize("ranks,shards", [(1, False), (2, False), (3, False), (2, True), (3, True)])
def test_planned_steps_keep_the_unfused_bits(monkeypatch, ranks, shards):
    """``shards``: every weight a ZeRO-1 weight whose update the bucket applies (else the small
    weights stay replicated: their sums are whole chunks)."""
    import tensorweave as tw
    from tensorweave.distribute import planner
    if shards:
        monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    applied = []
    real = fused_sgd.BucketUpdate.apply_chunk
    monkeypatch.setattr(fused_sgd.BucketUpdate, "apply_chunk", lambda self, *a: applied.append(1) or real(self, *a))
    placement = tw.placement("cpu", ranks=list(range(ranks)))
    fused = train(placement, FUSED["sgd_momentum"](), steps=3)[0]
    assert bool(applied) == (shards and ranks > 1)
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    unfused = train(placement, FUSED["sgd_momentum"](), steps=3)[0]
    for a, b in zip(fused, unfused):
        np.testing.assert_array_equal(a, b)


def test_held_sets_and_restores_numba_s_count_through_the_threading_layer():
    numba.get_num_threads()                     # numba's threads launched
    get, put = rank_threads._numba_counts()
    assert get is not numba.get_num_threads
    before = numba.get_num_threads()
    with rank_threads.held(1):
        assert numba.get_num_threads() == get() == 1
    assert numba.get_num_threads() == before
