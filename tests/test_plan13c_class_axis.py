"""Softmax, log-softmax and the cross-entropies on a split class axis in planned graphs
(``distribute/plan_decompose.py``): the planner runs the stable partial log-sum-exp, so only row
statistics move (the logits are never gathered or all-to-all'd), with logits ~1000, 7 classes
over 3 ranks (uneven) and a 2x2 mesh, gradients inside the function and through an outer tape,
a TF1 session; results equal one device (float64 NumPy reference)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import plan_decompose

P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
RNG = np.random.default_rng(1313)
ROWS, CLASSES = 5, 7
X = (RNG.standard_normal((ROWS, CLASSES)) * 1000).astype(np.float32)      # exp(x) overflows unshifted
LABELS = np.array([0, 3, 6, 2, 5], np.int32)
DENSE = RNG.dirichlet(np.ones(CLASSES), ROWS).astype(np.float32)


def _log_softmax64(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


REFS = {
    "softmax": lambda: np.exp(_log_softmax64(X)),
    "log_softmax": lambda: _log_softmax64(X),
    "xent": lambda: -(DENSE * _log_softmax64(X)).sum(-1),
    "sparse_xent": lambda: -_log_softmax64(X)[np.arange(ROWS), LABELS],
}


def _call(name, x, labels, dense):
    if name == "softmax":
        return tw.nn.softmax(x)
    if name == "log_softmax":
        return tw.nn.log_softmax(x)
    if name == "xent":
        return tw.nn.softmax_cross_entropy_with_logits(labels=dense, logits=x)
    return tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)


def _globals(placement, x_sbp, b):
    x = tw.constant(X).to_global(placement=placement, sbp=x_sbp)
    labels = tw.constant(LABELS).to_global(placement=placement, sbp=b)
    dense = tw.constant(DENSE).to_global(placement=placement, sbp=x_sbp)
    return x, labels, dense


def _logits_never_move(explanation):
    """Every collective moves row statistics only (a [rows, 1] or [rows] tensor), never logits."""
    moved = [tuple(c["shape"]) for c in explanation.to_dict()["collectives"]]
    assert moved, "a split class axis needs its row maximum and sum reduced"
    assert all(s in ((ROWS, 1), (ROWS,)) for s in moved), moved


LAYOUTS = {"3 ranks": (P3, tw.sbp.split(1), tw.sbp.broadcast),
           "2x2 mesh": (MESH, (tw.sbp.split(0), tw.sbp.split(1)), (tw.sbp.split(0), tw.sbp.broadcast))}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(REFS))
def test_planned_class_split_equals_one_device_and_moves_row_statistics_only(name, layout):
    placement, x_sbp, b = LAYOUTS[layout]
    args = _globals(placement, x_sbp, b)
    f = tw.function(lambda x, labels, dense: _call(name, x, labels, dense))
    y = f(*args)
    np.testing.assert_allclose(y.numpy(), REFS[name](), rtol=2e-5, atol=1e-4)
    assert np.isfinite(y.numpy()).all()
    _logits_never_move(tw.distribute.explain(f, *args))
    if name in ("softmax", "log_softmax"):
        assert y.sbp == tuple(x_sbp) if isinstance(x_sbp, tuple) else y.sbp == (x_sbp,)


@pytest.mark.parametrize("name", sorted(REFS))
def test_gradient_inside_the_function_equals_one_device(name):
    weights = RNG.standard_normal(REFS[name]().shape).astype(np.float32)

    def loss_and_grad(x, labels, dense):
        with tw.GradientTape() as tape:
            tape.watch(x)
            loss = tw.reduce_sum(_call(name, x, labels, dense) * weights)
        return loss, tape.gradient(loss, x)
    args = _globals(P3, tw.sbp.split(1), tw.sbp.broadcast)
    f = tw.function(loss_and_grad)
    loss, g = f(*args)
    want_loss, want_g = loss_and_grad(tw.constant(X), tw.constant(LABELS), tw.constant(DENSE))
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=2e-5)
    np.testing.assert_allclose(g.numpy(), want_g.numpy(), rtol=2e-5, atol=1e-5)
    assert g.sbp == (tw.sbp.split(1),)
    _logits_never_move(tw.distribute.explain(f, *args))


def test_outer_tape_over_a_planned_call_gets_the_sparse_xent_gradient():
    f = tw.function(lambda x, labels: tw.reduce_sum(
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)))
    x, labels, _ = _globals(P3, tw.sbp.split(1), tw.sbp.broadcast)
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = f(x, labels)
    g = tape.gradient(loss, x)
    want = np.exp(_log_softmax64(X))
    want[np.arange(ROWS), LABELS] -= 1
    np.testing.assert_allclose(float(loss), REFS["sparse_xent"]().sum(), rtol=2e-5)
    np.testing.assert_allclose(g.numpy(), want, rtol=2e-5, atol=1e-5)


def test_tf1_session_softmax_of_split_logits():
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [ROWS, CLASSES])
        y = tw.nn.log_softmax(x.to_global(placement=P3, sbp=tw.sbp.split(1)))
    with tw.compat.v1.Session(graph=g) as sess:
        ops_before = len(g.get_operations())
        got = sess.run(y, feed_dict={x: X})
        again = sess.run(y, feed_dict={x: X})
    np.testing.assert_allclose(got, _log_softmax64(X), rtol=2e-5, atol=1e-4)
    np.testing.assert_array_equal(got, again)
    assert len(g.get_operations()) == ops_before       # the decomposition lives in a scratch graph


def test_without_the_decomposition_the_plan_moves_logits(monkeypatch):
    """The check above can fail: with plan_decompose off, the op's rule boxes the logits."""
    monkeypatch.setattr(plan_decompose, "DECOMPOSE", False)
    args = _globals(P3, tw.sbp.split(1), tw.sbp.broadcast)
    f = tw.function(lambda x, labels, dense: tw.nn.log_softmax(x))
    np.testing.assert_allclose(f(*args).numpy(), _log_softmax64(X), rtol=2e-5, atol=1e-4)
    with pytest.raises(AssertionError):
        _logits_never_move(tw.distribute.explain(f, *args))


def test_eager_log_softmax_keeps_the_class_split_instead_of_a_full_size_partial():
    x, _, _ = _globals(P3, tw.sbp.split(1), tw.sbp.broadcast)
    y = tw.nn.log_softmax(x)
    assert y.sbp == (tw.sbp.split(1),)          # was P: every rank held a full-size [rows, classes] partial
    np.testing.assert_allclose(y.numpy(), _log_softmax64(X), rtol=2e-5, atol=1e-4)
