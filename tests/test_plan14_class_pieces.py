"""Decompositions in planned graphs, session 14 (``distribute/decompositions.py``): the sparse
cross-entropy's one-hot is built per piece on a split class axis (``labels[:, None] ==
range(depth)``, elementwise: each rank its own classes) where ``OneHot``'s rule had every rank
build the whole ``[rows, classes]`` one-hot and keep a slice; and a mean, sum or max over a split
axis moves its partial result (row statistics), never the input, in ``tw.function`` and a TF1
session as in eager. Bytes moved from ``explain``; gradients inside the function, through an
outer tape and ``tw.gradients`` in a session; results equal a float64 NumPy reference."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import Split
from tensorweave.distribute import decompositions
from tensorweave.ops import indexing_ops

P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
RNG = np.random.default_rng(1414)
ROWS, CLASSES = 5, 7
X = (RNG.standard_normal((ROWS, CLASSES)) * 100).astype(np.float32)
LABELS = np.array([0, 3, 6, 2, 5], np.int32)
LAYOUTS = {"3 ranks": (P3, tw.sbp.split(1), tw.sbp.broadcast),
           "2x2 mesh": (MESH, (tw.sbp.split(0), tw.sbp.split(1)), (tw.sbp.split(0), tw.sbp.broadcast))}


def _log_softmax64(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _xent_and_grad(x, labels):
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x))
    return loss, tape.gradient(loss, x)


def _want():
    ls = _log_softmax64(X)
    g = np.exp(ls)
    g[np.arange(ROWS), LABELS] -= 1
    return -ls[np.arange(ROWS), LABELS].mean(), g / ROWS


def _whole_class_values(gp):
    """Names of the planned global ops writing a [rows, classes] value whole along the classes."""
    out = []
    for op in gp.ops:
        q = gp.op_plans.get(id(op))
        if q is None or q.kind != "global":
            continue
        for o, nd in zip(op.outputs, q.out_nd):
            shape = tuple(o.shape.as_list()) if o.shape.rank is not None else None
            if shape == (ROWS, CLASSES) and not any(isinstance(s, Split) and s.axis == 1 for s in nd):
                out.append(op.name)
    return out


def _old_one_hot(labels, depth, dtype):
    return indexing_ops.one_hot(labels, depth, dtype=dtype)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_one_hot_built_per_piece_and_gradient_equals_one_device(layout, monkeypatch):
    placement, x_sbp, b = LAYOUTS[layout]
    x = tw.constant(X).to_global(placement=placement, sbp=x_sbp)
    labels = tw.constant(LABELS).to_global(placement=placement, sbp=b)
    want_loss, want_g = _want()
    if placement is MESH:      # the forward only (the gradient on the mesh: tests/test_plan13c_class_axis.py)
        f = tw.function(lambda x, labels: tw.reduce_mean(
            tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)))
        np.testing.assert_allclose(float(f(x, labels)), want_loss, rtol=2e-5)
        assert _whole_class_values(f.get_concrete_function(x, labels)._global.plan) == []
        return
    f = tw.function(_xent_and_grad)
    loss, g = f(x, labels)
    np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
    np.testing.assert_allclose(g.numpy(), want_g, rtol=2e-5, atol=1e-6)
    assert _whole_class_values(f.get_concrete_function(x, labels)._global.plan) == []
    after = tw.distribute.explain(f, x, labels).to_dict()["bytes_moved"]
    monkeypatch.setattr(decompositions, "_one_hot", _old_one_hot)          # the session-13 decomposition
    old = tw.function(_xent_and_grad)
    assert _whole_class_values(old.get_concrete_function(x, labels)._global.plan)   # whole one-hots, then sliced
    before = tw.distribute.explain(old, x, labels).to_dict()["bytes_moved"]
    assert after <= before, (before, after)


def test_one_hot_of_out_of_range_labels_is_a_zero_row():
    labels = tw.constant(np.array([-1, 0, 7, 6], np.int32))
    np.testing.assert_array_equal(decompositions._one_hot(labels, 7, tw.float32).numpy(),
                                  indexing_ops.one_hot(labels, 7, dtype=tw.float32).numpy())


def test_outer_tape_and_tf1_session_sparse_xent_of_split_classes():
    f = tw.function(lambda x, labels: tw.reduce_mean(
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)))
    x = tw.constant(X).to_global(placement=P3, sbp=tw.sbp.split(1))
    labels = tw.constant(LABELS).to_global(placement=P3, sbp=tw.sbp.broadcast)
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = f(x, labels)
    want_loss, want_g = _want()
    np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), want_g, rtol=2e-5, atol=1e-6)
    g = tw.Graph()
    with g.as_default():
        xp = tw.compat.v1.placeholder(tw.float32, [ROWS, CLASSES])
        xg = xp.to_global(placement=P3, sbp=tw.sbp.split(1))
        lg = tw.constant(LABELS).to_global(placement=P3, sbp=tw.sbp.broadcast)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=lg, logits=xg))
        grad, = tw.gradients(loss, [xg])
    with tw.compat.v1.Session(graph=g) as sess:
        got_loss, got_g = sess.run([loss, grad], feed_dict={xp: X})
    np.testing.assert_allclose(got_loss, want_loss, rtol=2e-5)
    np.testing.assert_allclose(got_g, want_g, rtol=2e-5, atol=1e-6)


REDUCTIONS = {"mean": (tw.reduce_mean, lambda v: v.mean(1, keepdims=True)),
              "sum": (tw.reduce_sum, lambda v: v.sum(1, keepdims=True)),
              "max": (tw.reduce_max, lambda v: v.max(1, keepdims=True))}


def _centred(reduce):
    def f(x):
        with tw.GradientTape() as tape:
            tape.watch(x)
            y = tw.reduce_sum(tw.square(x - reduce(x, axis=1, keepdims=True)))
        return y, tape.gradient(y, x)
    return f


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_over_a_split_axis_moves_its_partial_result_only(name):
    reduce, ref = REDUCTIONS[name]
    x = tw.constant(X).to_global(placement=P3, sbp=tw.sbp.split(1))
    f = tw.function(_centred(reduce))
    y, g = f(x)
    want_y, want_g = _centred(reduce)(tw.constant(X.astype(np.float64)))
    np.testing.assert_allclose(float(y), float(want_y), rtol=2e-5)
    np.testing.assert_allclose(g.numpy(), want_g.numpy(), rtol=2e-5, atol=1e-3)
    moved = [tuple(c["shape"]) for c in tw.distribute.explain(f, x).to_dict()["collectives"]]
    assert moved and all(s in ((ROWS, 1), (ROWS,), ()) for s in moved), moved
    gr = tw.Graph()
    with gr.as_default():
        xp = tw.compat.v1.placeholder(tw.float32, [ROWS, CLASSES])
        xg = xp.to_global(placement=P3, sbp=tw.sbp.split(1))
        r = reduce(xg, axis=1, keepdims=True)
        loss = tw.reduce_sum(tw.square(xg - r))
        grad, = tw.gradients(loss, [xg])
    with tw.compat.v1.Session(graph=gr) as sess:
        got_r, got_g = sess.run([r, grad], feed_dict={xp: X})
    np.testing.assert_allclose(got_r, ref(X.astype(np.float64)), rtol=2e-5, atol=1e-4)
    np.testing.assert_allclose(got_g, want_g.numpy(), rtol=2e-5, atol=1e-3)
