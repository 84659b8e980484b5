"""The bookkeeping of pieces on Ray workers without starting Ray: which backend a placement means,
the free list of dropped pieces, what a call sends for a piece, and the errors."""
import pickle

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.ray import cluster as ray_cluster
from tensorweave.distribute.ray import pieces
from tensorweave.distribute.ray.pieces import Heap, RemotePiece, RemoteVariable


class _FakeCluster:
    def __init__(self, n):
        self.num_workers, self.heap = n, None


@pytest.fixture
def fake(monkeypatch):
    c = _FakeCluster(2)
    monkeypatch.setattr(ray_cluster, "_current", c)
    return c


def test_no_cluster_means_in_process_ranks():
    assert ray_cluster._current is None
    assert pieces.cluster_for(tw.placement("cpu", ranks=[0, 1])) is None
    assert pieces.place(tw.placement("cpu", ranks=[0, 1]), [np.ones(2), np.zeros(2)])[1].tolist() == [0.0, 0.0]


def test_a_connected_cluster_is_the_placements_ranks_except_inside_in_process(fake):
    p = tw.placement("cpu", ranks=[0, 1])
    assert pieces.cluster_for(p) is fake
    assert pieces.cluster_for(tw.placement("cpu", ranks=[1])) is fake
    assert pieces.cluster_for(tw.placement("cuda", ranks=[0, 1])) is None       # the workers are CPU ranks
    assert tw.distribute.in_process is pieces.in_process
    with pieces.in_process():
        with pieces.in_process():
            assert pieces.cluster_for(p) is None
        assert pieces.cluster_for(p) is None
    assert pieces.cluster_for(p) is fake
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"names rank 2 but the connected Ray cluster has 2 "
                                                               r"workers \(ranks 0\.\.1\).*num_workers=3"):
        pieces.cluster_for(tw.placement("cpu", ranks=[0, 2]))


def test_dropped_pieces_are_freed_with_the_next_call_to_their_worker(fake):
    heap = pieces.heap_of(fake)
    assert pieces.heap_of(fake) is heap
    keys = [heap.key() for _ in range(3)]
    assert keys == sorted(set(keys)) and keys[0] >= 1
    a, b = RemotePiece(heap, 0, keys[0], (2, 3), np.float32), RemotePiece(heap, 1, keys[1], (4,), np.int64)
    assert (a.nbytes, a.ndim, b.nbytes, b.ndim) == (24, 2, 32, 1)
    del a
    assert heap.take_freed(0) == [keys[0]] and heap.take_freed(0) == [] and heap.take_freed(1) == []
    heap.release(0, 7)
    heap.release(0, 5)
    assert heap.take_freed(0) == [7, 5]          # in the order they were dropped
    heap.alive = False                      # the cluster shut down: nothing to free any more
    del b
    assert heap.take_freed(1) == []


def test_what_a_call_sends_for_a_piece(fake):
    heap = pieces.heap_of(fake)
    piece = RemotePiece(heap, 1, heap.key(), (2,), np.float32)
    assert pieces._ref(piece, 1, fake, "op") == (piece.key, None)
    value = np.arange(3.0)
    assert pieces._ref(value, 0, fake, "op")[0] is None and pieces._ref(value, 0, fake, "op")[1] is value
    assert pieces._ref(2.5, 0, fake, "op") == (None, 2.5)
    with pytest.raises(tw.errors.InternalError, match="op: <piece \\[2\\] float32 on worker 1 #.*not on worker 0"):
        pieces._ref(piece, 0, fake, "op")
    with pytest.raises(tw.errors.FailedPreconditionError, match="held by an in-process rank \\(Variable\\).*connect"):
        pieces._ref(tw.Variable(1.0), 0, fake, "'Add' (global)")
    other = RemotePiece(Heap(), 1, 1, (2,), np.float32)      # a piece of another (gone) cluster
    with pytest.raises(tw.errors.FailedPreconditionError, match="lived on a Ray cluster that is shut down"):
        pieces._ref(other, 1, fake, "op")
    heap.alive = False                                        # this cluster's, after its shutdown
    with pytest.raises(tw.errors.FailedPreconditionError, match="lived on a Ray cluster that is shut down"):
        pieces._ref(piece, 1, fake, "op")
    heap.alive = True
    with pytest.raises(TypeError, match="send its key"):
        pickle.dumps(piece)


def test_pieces_of_a_cluster_that_is_gone_say_so(fake):
    heap = pieces.heap_of(fake)
    shard = RemoteVariable(heap, 0, heap.key(), (3, 2), np.float32, "w/rank0")
    assert shard._shape.as_list() == [3, 2] and "shard of 'w/rank0'" in repr(shard)
    heap.alive = False
    for call in (shard._read, lambda: shard._write(np.zeros((3, 2))), lambda: pieces.local_pieces([shard])):
        with pytest.raises(tw.errors.FailedPreconditionError, match="shut down.*numpy\\(\\) first"):
            call()
    assert pieces.local_pieces([np.ones(1)])[0].tolist() == [1.0]
    assert not pieces.is_remote([np.ones(1)]) and pieces.is_remote([np.ones(1), shard])
