"""Random ops in planned tw.functions on global tensors: each rank draws from its own copy of
the op's stream (a plan resource), so every call's logical value equals the single-device
function's; uniform pieces by counter offset, normals whole-and-sliced, B draws identical on
every rank (also unseeded), and the per-rank specs with their streams saved and loaded."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
X = np.arange(56, dtype=np.float32).reshape(7, 8) / 10.0       # 7 rows: uneven on 2 and 3 ranks


def _body(x):
    u = tw.random.uniform([7, 8], seed=3)                 # consumed with an S(0) x: drawn per piece
    n = tw.random.normal([8, 3])                          # a weight-like draw: B on every rank
    d = tw.nn.dropout(x, 0.5)                             # the mask drawn split like x
    t = tw.random.truncated_normal([7, 8], seed=4) * x    # normal family: whole draw, slice kept
    return x + u, tw.matmul(x, n), d, t


def _both(body, placement, sbp, calls=2, seed=7):
    tw.random.set_seed(seed)
    local = tw.function(body)
    want = [[t.numpy() for t in local(tw.constant(X))] for _ in range(calls)]
    tw.random.set_seed(seed)
    planned = tw.function(body)
    xg = tw.constant(X).to_global(placement=placement, sbp=sbp)
    got = [planned(xg) for _ in range(calls)]
    tw.random.set_seed(None)
    return want, got, planned, xg


@pytest.mark.parametrize("placement,sbp", [(P2, S(0)), (P3, S(0)), (P2, S(1))])
def test_each_call_draws_the_single_device_values(placement, sbp):
    want, got, planned, xg = _both(_body, placement, sbp)
    assert not np.array_equal(want[0][0], want[1][0])          # the stream moves on between calls
    for w_call, g_call in zip(want, got):
        for k, (w, g) in enumerate(zip(w_call, g_call)):
            assert g.is_global and g.placement == placement
            if k == 1:      # a matmul: a split contraction sums in another order
                np.testing.assert_allclose(g.numpy(), w, rtol=1e-6, atol=1e-6)
            else:           # elementwise of the draws: the same bits
                np.testing.assert_array_equal(g.numpy(), w)
    gp = planned.get_concrete_function(xg)._global.plan
    kinds = {op.type: [gp.op_plans[id(op)].local_ops[i][0] for i in range(placement.size)]
             for op in gp.ops if op.type.startswith(("Random", "Truncated"))}
    assert kinds["RandomUniform"] == ["SbpRandomPiece"] * placement.size         # only the rank's values
    # the weight-like normal: B (the whole draw) beside a row split, S(0) (whole draw, rows kept) for x's S(1)
    assert kinds["RandomStandardNormal"] == ["RandomStandardNormal" if sbp == S(0) else "SbpSliceOf"] * placement.size
    assert kinds["TruncatedNormal"] == ["SbpSliceOf"] * placement.size           # rejection: whole, sliced
    # no draw is moved between ranks (each rank makes what it needs)
    collectives = tw.distribute.explain(planned, xg).to_dict()["collectives"]
    assert not [c for c in collectives if c["tensor"].startswith(("Random", "Truncated"))]


def test_unseeded_draws_agree_on_every_rank():
    tw.random.set_seed(None)

    @tw.function
    def f(x):
        return tw.matmul(x, tw.random.normal([8, 3])), tw.random.uniform([7, 8]) + x
    xg = tw.constant(X).to_global(placement=P3, sbp=S(0))
    a, b = f(xg)
    assert a.sbp == (S(0),)
    w = np.linalg.lstsq(X, a.numpy(), rcond=None)[0]          # one weight explains every rank's rows
    np.testing.assert_allclose(X @ w, a.numpy(), rtol=1e-4, atol=1e-4)
    u = b.numpy() - X
    assert 0 <= u.min() and u.max() < 1 and len(np.unique(u)) == u.size


def test_a_random_op_with_a_global_input():
    logits = np.log(np.arange(1, 25, dtype=np.float32).reshape(6, 4))

    def body(x):
        return tw.random.categorical(x, 5, seed=2), tw.random.shuffle(tf_rows(x), seed=5)

    def tf_rows(x):
        return tw.transpose(x)
    tw.random.set_seed(3)
    want = [t.numpy() for t in tw.function(body)(tw.constant(logits))]
    tw.random.set_seed(3)
    got = tw.function(body)(tw.constant(logits).to_global(placement=P2, sbp=S(0)))
    tw.random.set_seed(None)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.numpy(), w)


def test_rank_specs_with_their_streams_save_load_and_continue(tmp_path):
    from tensorweave.distribute.layout import assemble
    from tensorweave.distribute.ranks import RankComms, World
    from tensorweave.runtime import executor
    from tensorweave.runtime.runtime import Runtime
    from tensorweave.saving.plan_io import load_plan, save_plan
    tw.random.set_seed(11)
    f = tw.function(lambda x: x * tw.random.uniform([7, 8], seed=1))
    want = [f(tw.constant(X)).numpy() for _ in range(2)]
    tw.random.set_seed(11)
    g = tw.function(lambda x: x * tw.random.uniform([7, 8], seed=1))
    xg = tw.constant(X).to_global(placement=P2, sbp=S(0))
    gp = g.get_concrete_function(xg)._global.plan
    tw.random.set_seed(None)
    world, loaded = World(), []
    for i in range(2):
        spec, live = gp.rank_spec(i, RankComms(world, i))
        assert [d["kind"] for d in spec.resources] == ["communicator", "random_stream"]
        save_plan(executor.bind(spec, Runtime(f"src{i}"), live), str(tmp_path / f"rank{i}"))
        rt = Runtime(f"worker{i}", rank=i)
        rt.add_resource("communicator", "world", RankComms(world, i))
        loaded.append(load_plan(str(tmp_path / f"rank{i}"), rt))
    for call in range(2):
        pieces = [r[0] for r in world.run([0, 1], lambda i: executor.run_plan(loaded[i], [xg._pieces[i]]))]
        np.testing.assert_array_equal(assemble(pieces, (7, 8), P2, (S(0),)), want[call])
    world.shutdown()


def test_tf1_session_with_a_global_variable_and_dropout():
    import tensorweave.compat.v1 as tf
    want = []
    for placement in (None, P2):
        g = tf.Graph()
        with g.as_default():
            tf.set_random_seed(5)
            kwargs = {} if placement is None else {"placement": placement, "sbp": B}
            w = tw.Variable(np.ones((8, 3), np.float32), **kwargs)
            x = tf.placeholder(tf.float32, [7, 8])
            y = tf.matmul(tf.nn.dropout(x, rate=0.25, seed=9), w)   # (op counts differ)
            with tf.Session() as sess:
                if placement is None:
                    sess.run(tf.global_variables_initializer())
                want.append([sess.run(y, {x: X}) for _ in range(2)])
    for a, b in zip(*want):
        np.testing.assert_allclose(b, a, rtol=1e-6)


def test_session_runs_of_different_fetches_continue_one_stream_per_rank():
    import tensorweave.compat.v1 as tf
    want = []
    for placement in (None, P2):
        g = tf.Graph()
        with g.as_default():
            kwargs = {} if placement is None else {"placement": placement, "sbp": B}
            w = tw.Variable(np.ones((8, 3), np.float32), **kwargs)
            x = tf.placeholder(tf.float32, [7, 8])
            d = tf.nn.dropout(x, rate=0.5, seed=3)
            y = tf.matmul(d, w)
            with tf.Session() as sess:
                if placement is None:
                    sess.run(tf.global_variables_initializer())
                want.append([sess.run(y, {x: X}), sess.run([y, tf.reduce_sum(d)], {x: X})[0], sess.run(y, {x: X})])
    assert not np.allclose(want[0][0], want[0][1])          # each run draws afresh ...
    for a, b in zip(*want):                                  # ... whichever fetches it has
        np.testing.assert_allclose(b, a, rtol=1e-6)
