"""A random draw (no global input) in a planned function is planned just before its first
consumer and takes its layout from that consumer's other inputs: an uneven uniform created
before the batch's matmul is drawn S(0) beside the S(0) batch (no all-to-all), and the values
stay the single-device draw."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

X = np.arange(28, dtype=np.float32).reshape(7, 4) / 10       # 7 rows, 4 columns: uneven on 2 and 3 ranks
W = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)


def _draw_first(x, w):
    u = tw.random.uniform([7, 4], seed=1)         # created before the batch's matmul
    n = tw.random.normal([7, 4], seed=2)
    h = tw.matmul(x, w)
    return tw.reduce_sum(h + u * n, axis=0)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_draw_created_before_its_consumers_inputs_follows_the_batch(ranks):
    placement = tw.placement("cpu", ranks=list(range(ranks)))
    args = (tw.constant(X).to_global(placement=placement, sbp=S(0)),
            tw.constant(W).to_global(placement=placement, sbp=B))
    tw.random.set_seed(9)                          # (a draw's stream is seeded when traced)
    f = tw.function(_draw_first)
    plan = tw.distribute.explain(f, *args).to_dict()
    assert [c["kind"] for c in plan["collectives"]] == []          # was an all-to-all of the batch
    sigs = {op["type"]: op["signature"] for op in plan["ops"]}
    assert sigs["RandomUniform"].endswith("S(0)") and sigs["RandomStandardNormal"].endswith("S(0)")
    tw.random.set_seed(9)
    one = tw.function(_draw_first)
    want = [one(tw.constant(X), tw.constant(W)).numpy() for _ in range(2)]
    got = [f(*args).numpy() for _ in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_draw_nobody_reads_and_a_draw_read_twice():
    p = tw.placement("cpu", ranks=[0, 1])

    def f(x):
        u = tw.random.uniform([7, 4], seed=3)
        tw.random.uniform([2], seed=4)                    # no consumer: planned last, still drawn
        return x * u, tw.transpose(u)
    tw.random.set_seed(2)
    want = [t.numpy() for t in tw.function(f)(tw.constant(X))]
    tw.random.set_seed(2)
    got = tw.function(f)(tw.constant(X).to_global(placement=p, sbp=S(1)))
    assert got[0].sbp == (S(1),)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_planning_order_defers_draws_and_pure_ops_on_them_only():
    from tensorweave.distribute.plan_random import planning_order
    g = tw.Graph()
    with g.as_default():
        u = tw.random.uniform([4], seed=1)
        n = tw.random.normal([4], seed=2)
        pure = u * n                                 # pure, on draws only: deferred too
        shuffled = tw.random.shuffle(pure, seed=3)   # stateful: never deferred
        x = tw.compat.v1.placeholder(tw.float32, [4])
        y = x + shuffled + pure
    ops = g.get_operations()
    local = {id(t) for op in ops if op.type == "Const" for t in op.outputs}
    free = set()
    order = [op.type for op in planning_order(ops, local, free)]
    assert {op.type for op in ops if id(op) in free} == {"RandomUniform", "RandomStandardNormal", "Mul"}
    assert order.index("RandomShuffle") > order.index("Mul")         # its input planned first
    assert sorted(order) == sorted(op.type for op in ops) and y.op.type == order[-1]
