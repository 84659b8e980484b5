"""A rank plan's ``_Boxing`` of ``pad`` steps only (``S(i) -> P``) runs with its bounds worked out
once (``plan_ops._local_boxing``): the same pieces as ``run_boxing_on_rank`` for every rank, 1-D and
2-D meshes, uneven splits and every partial kind; plans with any other step keep the general path."""
import numpy as np
import pytest

from tensorweave.core.sbp import B, Partial, S
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
from tensorweave.distribute.layout import Placement, shard_slices
from tensorweave.distribute.plan_ops import _boxing_kernel, _local_boxing

CASES = [((7,), [0, 1], (S(0),), (Partial("sum"),)),
         ((5, 3), [0, 1, 2], (S(0),), (Partial("max"),)),
         ((4, 9), [0, 1], (S(1),), (Partial("min"),)),
         ((6, 2), [0, 1, 2], (S(0),), (Partial("prod"),)),
         ((5, 7), [[0, 1], [2, 3]], (S(0), S(1)), (Partial("sum"), Partial("sum"))),
         ((5, 7), [[0, 1], [2, 3]], (S(1), S(1)), (Partial("sum"), Partial("sum"))),
         ((6,), [[0, 1], [2, 3]], (B, S(0)), (B, Partial("sum")))]


@pytest.mark.parametrize("shape, ranks, src, dst", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_local_pads_equal_the_general_path(shape, ranks, src, dst, dtype):
    p = Placement("cpu", ranks)
    plan = plan_boxing(shape, dtype, p, src, dst)
    assert plan.steps and all(st.kind == "pad" for st in plan.steps)
    value = (np.arange(np.prod(shape)).reshape(shape) + 1).astype(dtype)
    for index, where in enumerate(shard_slices(shape, p, src)):
        rank = p.ranks[index]
        fast = _local_boxing(plan, rank)
        assert fast is not None
        want = run_boxing_on_rank(plan, rank, value[where], None)
        got = fast(value[where])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_the_kernel_takes_the_fast_path_for_pads_only():
    p = Placement("cpu", [0, 1])
    pad = plan_boxing((6,), np.float32, p, (S(0),), (Partial("sum"),))
    gather = plan_boxing((6,), np.float32, p, (S(0),), (B,))
    assert _local_boxing(pad, 1) is not None
    assert _local_boxing(gather, 1) is None                 # a collective: the general path
    assert _local_boxing(pad, 5) is None                    # not a rank of the placement
    piece = np.arange(3, dtype=np.float32)
    step = _boxing_kernel(plan=pad.to_dict(), rank=1, comm=None)
    np.testing.assert_array_equal(step(piece), [0, 0, 0, 0, 1, 2])
    # a plan with a collective keeps the general path and runs as before
    from tensorweave.distribute.ranks import default_world
    world = default_world()

    def on_rank(i):
        comm = world.rank(i).runtime.resource("communicator", "world")
        return _boxing_kernel(plan=gather.to_dict(), rank=i, comm=comm)(np.arange(3, dtype=np.float32) + 3 * i)
    for got in world.run([0, 1], on_rank):
        np.testing.assert_array_equal(got, np.arange(6))
