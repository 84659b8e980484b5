"""Sparse optimizer steps on global tables inside ``tw.function`` (issue 13, session 26): the
planner runs the duplicate-row sum (``UniqueSegmentSum``, data-dependent rows) replicated and
the row-split update keeps each rank's rows (plan_bounded.py). Eager global and planned steps
equal the single-device step (SGD, Adam, Adagrad; split and broadcast tables; 2 and 3 ranks,
rows not divisible by the ranks); the gather gradient's static shape; the planner's refusals."""
from types import SimpleNamespace

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.distribute.interpreter import Layout
from tensorweave.distribute.plan_bounded import ROW_BOUNDS, Bounded, keep_bounded_b
from tensorweave.keras.optimizers.sparse_ops import unique_segment_sum

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
IDS = np.array([1, 7, 3, 7, 9, 0, 3, 3], np.int32)


def _table(rows, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)


def _train(table, placement, sbp, opt_name, planned, ids=IDS, steps=3):
    """The table and losses after ``steps`` sparse steps (``placement`` None: one device)."""
    v = tw.Variable(table) if placement is None else tw.Variable(table, placement=placement, sbp=[sbp])
    opt = getattr(tw.keras.optimizers, opt_name)(0.1)

    def step():
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.square(tw.gather(v, ids)) * 0.5 + tw.gather(v, ids))
        opt.apply_gradients([(tape.gradient(loss, v), v)])
        return loss
    if planned:
        step = tw.function(step)
    losses = [float(step().numpy()) for _ in range(steps)]
    return v.numpy(), losses


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "Adagrad"])
@pytest.mark.parametrize("sbp", [tw.sbp.split(0), tw.sbp.broadcast], ids=["S0", "B"])
@pytest.mark.parametrize("placement,rows", [(P2, 10), (P3, 10), (P2, 11)], ids=["2x10", "3x10", "2x11"])
@pytest.mark.parametrize("planned", [False, True], ids=["eager", "function"])
def test_sparse_step_matches_one_device(opt_name, sbp, placement, rows, planned):
    table = _table(rows)
    want, want_losses = _train(table, None, None, opt_name, False)
    got, losses = _train(table, placement, sbp, opt_name, planned)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    untouched = np.setdiff1d(np.arange(rows), IDS)
    np.testing.assert_array_equal(got[untouched], table[untouched])    # rows no id names keep their values


def test_planned_step_with_matrix_of_ids_on_a_split_table():
    ids = IDS.reshape(2, 4)
    table = _table(11, seed=3)
    want, _ = _train(table, None, None, "Adam", False, ids=ids)
    got, _ = _train(table, P3, tw.sbp.split(0), "Adam", True, ids=ids)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_gather_gradient_static_shape_in_a_graph():
    v = tw.Variable(_table(10))
    seen = []

    @tw.function
    def grad():
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.gather(v.read_value(), IDS.reshape(2, 4)))
        g = tape.gradient(loss, v)
        seen.append((g.values.shape.as_list(), g.dense_shape))
        return g.values, g.indices
    values, indices = grad()
    (shape, dense_shape), = seen
    assert shape == [8, 4]
    assert isinstance(dense_shape, np.ndarray) and dense_shape.dtype == np.int64
    assert dense_shape.tolist() == [10, 4]
    np.testing.assert_array_equal(values.numpy(), np.ones((8, 4), np.float32))
    np.testing.assert_array_equal(indices.numpy(), IDS)


def test_gather_gradient_of_open_shape_in_a_graph():
    seen = []

    @tw.function(input_signature=[tw.TensorSpec([None, 3], tw.float32), tw.TensorSpec([None], tw.int32)])
    def grad(params, ids):
        with tw.GradientTape() as tape:
            tape.watch(params)
            loss = tw.reduce_sum(tw.gather(params, ids) * tw.constant([1.0, 2.0, 3.0]))
        g = tape.gradient(loss, params)
        seen.append(g.values.shape.as_list())
        return tw.convert_to_tensor(g)
    got = grad(tw.constant(np.zeros((5, 3), np.float32)), tw.constant([4, 0, 4], tw.int32)).numpy()
    assert len(seen) == 1 and seen[0][0] is None       # rows from the run-time shapes
    want = np.zeros((5, 3), np.float32)
    np.add.at(want, [4, 0, 4], np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(got, want)


def _global(x, placement=P2, sbp=tw.sbp.broadcast):
    return tw.constant(x).to_global(placement=placement, sbp=sbp)


def test_planned_unique_segment_sum_result_and_its_shape():
    ids, vals = IDS, np.arange(32, dtype=np.float32).reshape(8, 4)

    @tw.function
    def f(i, x):
        uniq, summed = unique_segment_sum(i, x)
        return uniq, summed, tw.shape(summed)
    uniq, summed, shape = f(_global(ids), _global(vals, sbp=tw.sbp.split(0)))
    want_u, inverse = np.unique(ids, return_inverse=True)
    want_s = np.zeros((len(want_u), 4), np.float32)
    np.add.at(want_s, inverse, vals)
    np.testing.assert_array_equal(uniq.numpy(), want_u)
    np.testing.assert_array_equal(summed.numpy(), want_s)
    assert summed.shape.as_list() == [5, 4]
    assert shape.numpy().tolist() == [5, 4]     # the rows it holds, not the planner's bound (8)


def test_summed_rows_pinned_to_broadcast_keep_their_shape():
    @tw.function
    def f(i, x):
        _, summed = unique_segment_sum(i, x)
        return summed.to_global(placement=P2, sbp=tw.sbp.broadcast)
    out = f(_global(IDS), _global(np.ones((8, 4), np.float32)))
    assert out.shape.as_list() == [5, 4]
    np.testing.assert_array_equal(out.numpy()[:, 0], [1, 1, 3, 2, 1])


def test_data_dependent_rows_cannot_be_split():
    @tw.function
    def f(i, x):
        _, summed = unique_segment_sum(i, x)
        return summed.to_global(placement=P2, sbp=tw.sbp.split(0))
    with pytest.raises(errors.UnimplementedError, match="rows depend on the data.*UniqueSegmentSum"):
        f(_global(IDS), _global(np.ones((8, 4), np.float32)))


def test_data_dependent_op_without_a_bound_is_refused_by_name():
    @tw.function
    def f(x):
        return tw.unique(x)[0]
    with pytest.raises(errors.UnimplementedError, match="'Unique.*no upper bound"):
        f(_global(IDS))


def test_planned_reader_of_summed_rows_matches_numpy():
    ids, vals, w = IDS, np.arange(32, dtype=np.float32).reshape(8, 4), _table(1, seed=5)[0]

    @tw.function
    def f(i, x, w):
        _, summed = unique_segment_sum(i, x)
        return tw.reduce_sum(summed, axis=0) * w    # w split: summed still read as B, not S(1)
    got = f(_global(ids), _global(vals), _global(w, sbp=tw.sbp.split(0))).numpy()
    np.testing.assert_allclose(got, vals.sum(0) * w, rtol=1e-6)


def test_reader_with_open_rows_is_refused_by_name():
    @tw.function
    def f(i, x, w):
        _, summed = unique_segment_sum(i, x)
        return tw.matmul(summed, w)
    with pytest.raises(errors.UnimplementedError, match="'MatMul'.*no upper bound"):
        f(_global(IDS), _global(np.ones((8, 4), np.float32)), _global(np.ones((4, 3), np.float32)))


def test_unique_segment_sum_bound_is_its_input_rows():
    ids = Layout((8,), tw.int32, (tw.sbp.broadcast,), P2)
    vals = Layout((8, 4), tw.float32, (tw.sbp.broadcast,), P2)
    assert ROW_BOUNDS["UniqueSegmentSum"]([ids, vals]) == [(8,), (8, 4), (8,)]


def test_keep_bounded_b_keeps_only_combos_reading_the_bounded_input_as_b():
    b, s0 = (tw.sbp.broadcast,), (tw.sbp.split(0),)
    src = SimpleNamespace(name="UniqueSegmentSum", type="UniqueSegmentSum")
    x = SimpleNamespace(name="UniqueSegmentSum:1", shape=tw.TensorShape([None, 4]), op=src)
    op = SimpleNamespace(name="reader", type="Reader", inputs=[x, x])
    ins = [Bounded((8, 4), tw.float32, b, P2), Layout((8, 4), tw.float32, s0, P2)]
    combos = [("split", [s0, s0], [s0]), ("b", [b, s0], [s0]), ("b2", [b, b], [b])]
    assert [c[0] for c in keep_bounded_b(op, ins, combos, b)] == ["b", "b2"]
    with pytest.raises(errors.UnimplementedError, match="'reader' .*'UniqueSegmentSum:1'.*'UniqueSegmentSum'"):
        keep_bounded_b(op, ins, combos[:1], b)
