"""A planned function on several placements whose ranks are Ray workers: each segment runs on
its placement's workers (one call per worker), and the values moved between placements go worker
to worker (``plan_placements._move``), never through the driver. Equal to in-process ranks and to
one device; the micro-batched pipeline of such a function too."""
import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.core.sbp import B, S  # noqa: E402
from tensorweave.distribute import boxing  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import pieces as ray_pieces  # noqa: E402

RNG = np.random.default_rng(1314)
X = RNG.standard_normal((6, 4)).astype(np.float32)
Y = RNG.standard_normal((6, 2)).astype(np.float32)
W1 = RNG.standard_normal((4, 5)).astype(np.float32)
W2 = RNG.standard_normal((5, 2)).astype(np.float32)
P1 = tw.placement("cpu", ranks=[0, 1])
P2 = tw.placement("cpu", ranks=[2])


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=3, timeout=60)
    yield c
    ray_cluster.shutdown()


def _model(glob):
    if glob:
        w1, w2 = tw.Variable(W1, placement=P1, sbp=S(1)), tw.Variable(W2, placement=P2, sbp=B)
    else:
        w1, w2 = tw.Variable(W1), tw.Variable(W2)

    def loss_fn(x, y):
        h = tw.nn.relu(tw.matmul(x, w1))
        if glob:
            h = h.to_global(placement=P2, sbp=B)
        return tw.reduce_mean(tw.square(tw.matmul(h, w2) - y))
    return [w1, w2], loss_fn


def _batch(glob):
    if not glob:
        return tw.constant(X), tw.constant(Y)
    return tw.constant(X).to_global(placement=P1, sbp=S(0)), tw.constant(Y).to_global(placement=P2, sbp=B)


def _train(glob, steps=3):
    variables, loss_fn = _model(glob)
    opt = tw.keras.optimizers.Adam(0.05)

    def step(x, y):
        with tw.GradientTape() as tape:
            loss = loss_fn(x, y)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss
    f = tw.function(step) if glob else step
    return [float(f(*_batch(glob))) for _ in range(steps)], [v.numpy() for v in variables]


@pytest.fixture
def driver_moves(monkeypatch):
    """Counts the moves that bring remote pieces to the driver or box on in-process ranks."""
    seen = []
    fetch, box = ray_pieces.local_pieces, boxing.box

    def counted_fetch(pieces):
        if ray_pieces.is_remote(pieces):
            seen.append("fetch")
        return fetch(pieces)

    def counted_box(*a, **k):
        seen.append("box")
        return box(*a, **k)
    monkeypatch.setattr(ray_pieces, "local_pieces", counted_fetch)
    monkeypatch.setattr(boxing, "box", counted_box)
    return seen


def test_segments_on_workers_train_as_one_device_with_moves_worker_to_worker(cluster, driver_moves):
    want_losses, want = _train(False)
    losses, got = _train(True)
    assert driver_moves == []                     # the steps' moves between placements stayed on the workers
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    with tw.distribute.in_process():
        in_losses, _ = _train(True)
    np.testing.assert_allclose(losses, in_losses, rtol=2e-5)


def test_an_outer_tape_and_the_micro_batched_pipeline_on_workers(cluster):
    variables, loss_fn = _model(True)
    with tw.GradientTape() as tape:
        loss = tw.function(loss_fn)(*_batch(True))
    grads = tape.gradient(loss, variables)
    assert all(isinstance(p, ray_pieces.RemotePiece) for p in grads[0]._pieces)
    ref_vars, ref_fn = _model(False)
    with tw.GradientTape() as tape:
        want_loss = ref_fn(*_batch(False))
    want = tape.gradient(want_loss, ref_vars)
    pipe = tw.distribute.pipeline(loss_fn, micro_batches=3, schedule="1f1b")
    p_loss, p_grads, _ = pipe.forward_backward(*_batch(True))
    for got_loss, got in ((loss, grads), (p_loss, p_grads)):
        np.testing.assert_allclose(got_loss.numpy(), want_loss.numpy(), rtol=2e-5)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-6)
