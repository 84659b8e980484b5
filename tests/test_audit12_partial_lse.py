"""Issue 13's rule sentence "softmax/cross-entropy: class-axis split with a stable partial
log-sum-exp", eagerly on global tensors (audit, session 12): logits split along the class axis
over 3 ranks (7 classes: 3, 2, 2) with logits far beyond float32's exp range give the
single-device values (finite: the max is subtracted before exp), and the logits are never
gathered whole: what crosses ranks is per-row values only (the decompositions box the row
maximum and the row sum to B; session 13 — before, log-softmax and the cross-entropies also
reduce-scattered a full-size partial (rows, classes) value)."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import global_tensor, interpreter

P3 = tw.placement("cpu", ranks=[0, 1, 2])
ROWS, CLASSES = 4, 7


@pytest.fixture
def boxed(monkeypatch):
    """(shape, step kinds) of each tensor the interpreter boxes with a collective."""
    shapes = []
    real = interpreter.run_boxing_on_rank

    def record(plan, rank, *args, **kwargs):
        if rank == 0 and plan.bytes:
            shapes.append((plan.shape, tuple(step.kind for step in plan.steps)))
        return real(plan, rank, *args, **kwargs)
    monkeypatch.setattr(interpreter, "run_boxing_on_rank", record)
    real_box = global_tensor.box

    def record_box(pieces, plan, *args, **kwargs):      # x.to_global(...): the decompositions' row statistics
        if plan.bytes:
            shapes.append((plan.shape, tuple(step.kind for step in plan.steps)))
        return real_box(pieces, plan, *args, **kwargs)
    monkeypatch.setattr(global_tensor, "box", record_box)
    return shapes


def _logits():
    rng = np.random.default_rng(12)
    return (rng.standard_normal((ROWS, CLASSES)) * 50 + 1000).astype(np.float32)   # exp overflows float32


def _reference_log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_softmax_over_a_split_class_axis_is_stable_and_gathers_no_logits(boxed):
    z = _logits()
    x = tw.constant(z).to_global(placement=P3, sbp=S(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # no "boxed to B" fallback warning
        y = tw.nn.softmax(x)
        softmax_boxed = list(boxed)
        ly = tw.nn.log_softmax(x)
    assert y.sbp == (S(1),) and ly.sbp != (B,)
    np.testing.assert_allclose(y.numpy(), np.exp(_reference_log_softmax(z)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ly.numpy(), _reference_log_softmax(z), rtol=1e-5, atol=1e-4)
    assert softmax_boxed and all(s == (ROWS, 1) for s, _ in softmax_boxed), softmax_boxed   # row max, row sum
    assert all(s == (ROWS, 1) for s, _ in boxed), boxed          # log-softmax too: no (rows, classes) partial
    assert ly.sbp == (S(1),)
    assert not _gathered(boxed), boxed


def _gathered(boxed):
    """Boxings that gather or re-lay out a (rows, classes) value: the logits moved (to B, or to
    S(0) rows by an all-to-all) instead of reduced per row.
    (The eager choice today also reduce-scatters a partial (rows, classes) value in log-softmax:
    the row sums are reduce-scattered to S(0), then logits - log(sums) pads both to P. Moving the
    row sums to B instead keeps log-softmax S(1) with (rows, 1) values crossing only; AUDIT.md.)"""
    return [(s, k) for s, k in boxed if s == (ROWS, CLASSES) and {"all_gather", "all_to_all"} & set(k)]


def test_cross_entropy_over_a_split_class_axis_equals_one_device_and_gathers_no_logits(boxed):
    z = _logits()
    labels = np.eye(CLASSES, dtype=np.float32)[[0, 3, 6, 2]]
    sparse = np.array([0, 3, 6, 2], np.int64)
    want = -(_reference_log_softmax(z) * labels).sum(-1)
    x = tw.constant(z).to_global(placement=P3, sbp=S(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dense = tw.nn.softmax_cross_entropy_with_logits(labels=tw.constant(labels).to_global(placement=P3, sbp=S(1)),
                                                        logits=x)
        sp = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant(sparse), logits=x)
    for got in (dense, sp):
        assert np.all(np.isfinite(got.numpy()))
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)
    assert not _gathered(boxed), boxed
    assert all(s in ((ROWS, 1), (ROWS,)) for s, _ in boxed), boxed     # row values only
