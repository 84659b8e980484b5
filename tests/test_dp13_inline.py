"""World.run(..., inline=True): the calling thread runs the first rank's share itself, as that rank."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.context import current_runtime
from tensorweave.core.sbp import B, S
from tensorweave.distribute import plan_function
from tensorweave.distribute.collective import CollectiveAbortedError
from tensorweave.distribute.ranks import current_rank, default_world


def test_inline_runs_the_first_rank_on_the_calling_thread_as_that_rank():
    world = default_world()
    me = threading.get_ident()

    def where(i):
        return threading.get_ident() == me, current_rank().rank, current_runtime() is world.rank(i + 2).runtime
    assert world.run([2, 3], where, inline=True) == [(True, 2, True), (False, 3, True)]
    assert world.run([2, 3], where) == [(False, 2, True), (False, 3, True)]
    assert current_rank() is None and current_runtime() is not world.rank(2).runtime   # restored


def test_inline_collectives_and_results_in_rank_order():
    world = default_world()
    got = world.run([0, 1, 2], lambda i: world.group([0, 1, 2]).communicator(i).all_reduce(
        np.array([i + 1.0])).tolist() + [i], inline=True)
    assert got == [[6.0, 0], [6.0, 1], [6.0, 2]]


def test_inline_failure_of_the_first_rank_aborts_the_others_and_names_it():
    world = default_world()

    def fn(i):
        if i == 0:
            raise ValueError("first rank fails")
        world.group([0, 1]).communicator(i).barrier()     # would wait for rank 0 until the timeout
    with pytest.raises(ValueError, match="first rank fails") as e:
        world.run([0, 1], fn, inline=True)
    assert e.value.rank == 0 and current_rank() is None
    # a later run on those ranks works
    assert world.run([0, 1], lambda i: world.group([0, 1]).communicator(i).all_gather([i]).tolist(),
                     inline=True) == [[0, 1], [0, 1]]


def test_inline_refuses_rank_work_started_from_the_inlined_rank():
    world = default_world()
    with pytest.raises(RuntimeError, match="from a rank thread"):
        world.run([0, 1], lambda i: world.run([0], lambda j: j) if i == 0 else None, inline=True)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_planned_training_is_the_same_bits_inline_or_posted(optimizer):
    p = tw.placement("cpu", ranks=[0, 1])
    rng = np.random.default_rng(3)
    x0, w0 = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    results = []
    for inline in (True, False):
        w = tw.Variable(w0, placement=p, sbp=B)
        opt = tw.keras.optimizers.SGD(0.1) if optimizer == "sgd" else tw.keras.optimizers.Adam(0.01)
        x = tw.constant(x0).to_global(placement=p, sbp=S(0))

        @tw.function
        def step():
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.square(tw.matmul(x, w)))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return loss
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plan_function, "INLINE_FIRST_RANK", inline)
            losses = [float(step()) for _ in range(3)]
        results.append((losses, w.numpy()))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
