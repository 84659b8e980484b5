"""Session 17 dp21 (issue 13, in-process data parallel): the ranks' per-step meeting (``World.run``
with a prepared :class:`~tensorweave.distribute.ranks._Meeting`), bias gradients (``SumToLike``) summed
by a loop that releases the GIL with NumPy's bits, the bucket's targets worked out once per weight
shape, and a collective timeout that keeps the ranks that did not arrive through ``executor.node_error``."""
import threading
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import fused_sgd, planner, ranks as ranks_mod
from tensorweave.distribute.collective import CollectiveAbortedError, CollectiveTimeoutError
from tensorweave.kernels.cpu import array_kernels, reduce_kernels
from mlp_step import mlp_step

RNG = np.random.default_rng(21)


def _sum_to_like(g, target):
    return array_kernels._sum_to_like(g, np.zeros(target, g.dtype))


# (gradient shape, target shape): the leading axes summed (a bias gradient), odd sizes, one row,
# many rows, a target with unit axes, and shapes the loop leaves to NumPy (short rows, the last axis)
SHAPES = [((128, 512), (512,)), ((37, 19), (19,)), ((1, 9), (9,)), ((2, 8), (8,)), ((1001, 13), (13,)),
          ((5, 7, 11), (11,)), ((4, 6, 10), (6, 10)), ((33, 9), (1, 9)), ((6, 3), (3,)), ((17, 1), (1,)),
          ((9, 12), (9, 1)), ((3, 5, 16), (3, 1, 16)), ((0, 12), (12,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,target", SHAPES)
def test_sum_to_like_gives_numpys_sums_bit_for_bit(shape, target, dtype):
    """NumPy sums a non-last axis of a contiguous array row after row from its identity 0 (its
    pairwise sums are along the last axis only): the loop does the same, -0.0 columns (0.0 in NumPy)
    and values of very different sizes included."""
    g = (RNG.standard_normal(shape) * np.exp(RNG.uniform(-12, 12, shape))).astype(dtype)
    if g.ndim and g.shape[-1] > 2 and g.size:
        g[..., 1] = -0.0                    # a column of negative zeros: 0.0 + -0.0 = 0.0
    lead = len(shape) - len(target)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(target) if d == 1 and shape[i + lead] != 1)
    want = np.sum(g, axis=axes, keepdims=True, dtype=g.dtype).reshape(target)
    got = _sum_to_like(g, target)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_sum_to_like_runs_the_loop_for_a_bias_gradient(monkeypatch):
    """The bias gradient's case reaches the compiled loop (not NumPy's reduction): able to fail."""
    calls = []
    real = reduce_kernels._sum_middle
    monkeypatch.setattr(reduce_kernels, "_sum_middle", lambda x, out: (calls.append(x.shape), real(x, out)))
    _sum_to_like(np.ones((6, 10), np.float32), (10,))
    _sum_to_like(np.ones((6, 3), np.float32), (3,))          # rows of 3: NumPy's reduction
    assert calls == [(1, 6, 10)]


def test_reduce_sum_over_leading_axes_gives_numpys_zero_of_negative_zeros():
    x = np.zeros((4, 9), np.float32)
    x[:, 2] = -0.0
    x[:, 3] = RNG.standard_normal(4)
    got = tw.reduce_sum(tw.constant(x), axis=0).numpy()
    assert got.tobytes() == np.sum(x, axis=0).tobytes() and not np.signbit(got[2])


SIZES = (13, 16, 16, 10)


def _mlp_training(placement, steps=3, batch=10, optimizer=None, seed=0):
    """Losses and weights (bytes) of a small MLP with biases trained by a planned tw.function with
    ``optimizer()`` (default SGD 0.1) on ``placement`` (``mlp_step.mlp_step``)."""
    step, params = mlp_step(SIZES, placement, batch, seed, lr=0.1, optimizer=optimizer)
    losses = [step().numpy().tobytes() for _ in range(steps)]
    return losses, [p.numpy().tobytes() for p in params]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_data_parallel_training_bits_unchanged_by_the_loop_sums(n, monkeypatch):
    """The same losses and weights to the last bit with the bias gradients summed by NumPy (as before
    this session) and by the loop, on 1, 2 and 3 ranks (batch 10: uneven on 3), every weight in
    ZeRO-1 shards (the bucket's fused SGD and its targets)."""
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    p = tw.placement("cpu", ranks=list(range(n)))
    now = _mlp_training(p)
    monkeypatch.setattr(array_kernels, "LOOP_DTYPES", ())                    # NumPy's np.sum, as before
    before = _mlp_training(p)
    assert now == before


def test_bucket_targets_work_out_row_bounds_once_per_weight_shape(monkeypatch):
    """BucketUpdate.targets: the balanced-rows check runs once per (array, weight shape); plain SGD's
    targets are kept from step to step (session 25: their weights are the shared buffers' flat views,
    which reshare counts; ``test_dp29_kept_targets.py``)."""
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    calls = []
    real = fused_sgd._balanced_rows
    monkeypatch.setattr(fused_sgd, "_balanced_rows", lambda buf, bounds: (calls.append(buf.shape),
                                                                           real(buf, bounds))[1])
    got = []
    real_targets = fused_sgd.BucketUpdate.targets
    monkeypatch.setattr(fused_sgd.BucketUpdate, "targets", lambda self: got.append(real_targets(self)) or got[-1])
    _mlp_training(tw.placement("cpu", ranks=[0, 1]), steps=3)
    assert got and all(t is not None for t in got[-1])
    per_step = len(got) // 3
    assert per_step >= 1 and len(calls) == len(got[-1])                   # once per array, not per step
    assert got[-1] is got[-1 - per_step]                                  # the same targets, kept


def test_world_run_meets_the_same_ranks_again_with_fresh_results():
    world = ranks_mod.World()
    try:
        first = world.run([0, 1, 2], lambda i: (i, threading.current_thread().name))
        second = world.run((0, 1, 2), lambda i: i * 10, inline=True)
        assert [r[0] for r in first] == [0, 1, 2] and second == [0, 10, 20]
        assert first[1][1] == "tw-rank1" and len(world._meetings) == 1      # one meeting, reused
        assert world.run([2, 0], lambda i: ranks_mod.current_rank().rank) == [2, 0]
        assert world.run([], lambda i: i) == []
    finally:
        world.shutdown()


def test_world_run_after_a_failure_raises_the_cause_and_meets_again():
    world = ranks_mod.World(timeout=30)

    def fn(i):
        comm = world.group([0, 1]).communicator(i)
        if i == 1:
            raise ValueError("bad rank")
        return comm.all_reduce(np.ones(2))          # aborted by rank 1's failure, not timed out
    try:
        with pytest.raises(ValueError, match="bad rank") as info:
            world.run([0, 1], fn, inline=True)
        assert info.value.rank == 1
        assert world.run([0, 1], lambda i: world.group([0, 1]).communicator(i).all_reduce(
            np.array([i + 1.0])).tolist()) == [[3.0], [3.0]]
        with pytest.raises(CollectiveAbortedError):           # every rank aborted: the first error raised
            world.run([0, 1], lambda i: (_ for _ in ()).throw(CollectiveAbortedError(f"r{i}")))
    finally:
        world.shutdown()


def test_node_error_keeps_the_ranks_that_did_not_arrive():
    """executor.node_error re-raises a step's error as its own class naming the node; a collective
    timeout's ``missing`` (the ranks that did not arrive) came back empty."""
    from tensorweave.runtime.executor import node_error
    node = types.SimpleNamespace(op="_AllReduceWait", name="bucket0/wait", type="_AllReduceWait", traceback=None)
    step = types.SimpleNamespace(node=node, device="/cpu:0", op=object())
    err = node_error(step, CollectiveTimeoutError("all_reduce (call #2): ranks [1, 2] did not arrive", [1, 2]))
    assert isinstance(err, CollectiveTimeoutError) and err.missing == (1, 2) and err.op is step.op
    assert "bucket0/wait" in str(err)
    plain = node_error(step, ValueError("x"))
    assert not hasattr(plain, "missing") and "ValueError: x" in str(plain)
