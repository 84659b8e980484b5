"""Attention's fused training steps (``runtime/passes/attention_train.py``,
``kernels/cpu/attention_train.py``): forward and backward against float64 references (analytic and
finite differences), each way (apart, fused on one thread, fused over the intra-op threads), the
plan's gradients equal to the unfused plan's and to eager, and left apart where the probabilities
are read elsewhere."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import attention_train
from tensorweave.runtime.passes import attention_train as attention_train_pass
from tensorweave.runtime.passes import plan_stats

DOT, COMBINE = "aecd,abcd->acbe", "acbe,aecd->abcd"
RNG = np.random.default_rng(25)


def _operands(dtype, b=2, t=5, s=7, h=3, d=4, dv=6):
    """Key, query, value and the output's gradient; the key a strided slice (as a grouped
    projection gives it)."""
    y = RNG.standard_normal((b, s, 2, h, d)).astype(dtype)
    q, v, g = (RNG.standard_normal(shape).astype(dtype) for shape in ((b, t, h, d), (b, s, h, dv), (b, t, h, dv)))
    return y[:, :, 0], q, v, g


def _reference(k, q, v, g):
    """``(out, probs, dq, dk, dv)`` in float64."""
    k, q, v, g = (x.astype(np.float64) for x in (k, q, v, g))
    s = np.einsum("bshd,bthd->bhts", k, q)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = np.einsum("bthd,bshd->bhts", g, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return (np.einsum("bhts,bshd->bthd", p, v), p, np.einsum("bhts,bshd->bthd", ds, k),
            np.einsum("bhts,bthd->bshd", ds, q), np.einsum("bhts,bthd->bshd", p, g))


def _ways(k, q, v, g):
    """Each way's ``(out, probs, dq, dk, dv)``; the fused ones only where MKL is loaded."""
    out, probs = attention_train.apart_forward(k, q, v, DOT, COMBINE)
    got = {"apart": (out, probs) + attention_train.apart_backward(g, probs, q, k, v, attention_train.GRAD_EQUATIONS)}
    how = attention_train._fusable(k, q, v, g)
    for parts in ((1, 2) if how is not None else ()):
        out, probs = attention_train.fused_forward(k, q, v, *how, parts)
        got[parts] = (out, probs) + attention_train.fused_backward(g, probs, q, k, v, *how, parts)
    return got


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_each_way_matches_the_float64_reference(dtype, tol):
    k, q, v, g = _operands(dtype)
    ref = _reference(k, q, v, g)
    got = _ways(k, q, v, g)
    for way, results in got.items():
        for name, y, r in zip(("out", "probs", "dq", "dk", "dv"), results, ref):
            assert y.dtype == dtype and y.shape == r.shape, (way, name)
            np.testing.assert_allclose(y, r, rtol=0, atol=tol * np.abs(r).max(), err_msg=f"{way} {name}")
    if 1 in got:
        for a, b in zip(got[1], got[2]):        # the same work, split by pairs: the same bits
            np.testing.assert_array_equal(a, b)


def test_fused_gradients_match_float64_finite_differences():
    k, q, v, g = _operands(np.float64, b=1, t=3, s=4, h=2, d=2, dv=3)
    how = attention_train._fusable(k, q, v, g)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    _, probs = attention_train.fused_forward(k, q, v, *how, 1)
    grads = attention_train.fused_backward(g, probs, q, k, v, *how, 1)
    loss = lambda k, q, v: float((attention_train.fused_forward(k, q, v, *how, 1)[0] * g).sum())  # noqa: E731
    eps = 1e-6
    for i, (x, grad) in enumerate(zip((q, k, v), grads)):
        for idx in [(0, 1, 1, 0), (0, 2, 0, 1), (0, 0, 1, 1)]:
            lo, hi = [a.copy() for a in (k, q, v)], [a.copy() for a in (k, q, v)]
            j = (1, 0, 2)[i]            # (q, k, v) -> position in (k, q, v)
            lo[j][idx] -= eps
            hi[j][idx] += eps
            assert abs((loss(*hi) - loss(*lo)) / (2 * eps) - grad[idx]) < 1e-7, (i, idx)


def _grads(k, q, v, g):
    with tw.GradientTape() as tape:
        tape.watch([k, q, v])
        y = tw.einsum(COMBINE, tw.nn.softmax(tw.einsum(DOT, k, q * 0.5)), v)
        loss = tw.reduce_sum(y * g)
    return [y] + tape.gradient(loss, [k, q, v])


@pytest.mark.parametrize("enabled", [True, False])
def test_the_plan_equals_eager_and_the_unfused_plan(monkeypatch, enabled):
    monkeypatch.setattr(attention_train_pass, "ENABLED", enabled)
    k, q, v, g = (tw.constant(x.copy()) for x in _operands(np.float32))
    f = tw.function(_grads)
    got = [t.numpy() for t in f(k, q, v, g)]
    assert plan_stats(f).get("attention_train", 0) == (1 if enabled else 0)
    ref = _reference(k.numpy(), q.numpy() * 0.5, v.numpy(), g.numpy())
    for y, e, r in zip(got, _grads(k, q, v, g), (ref[0], ref[3], ref[2] * 0.5, ref[4])):
        np.testing.assert_allclose(y, e.numpy(), rtol=0, atol=2e-6 * np.abs(r).max())
        np.testing.assert_allclose(y, r, rtol=0, atol=2e-5 * np.abs(r).max())


def test_left_apart_where_the_probabilities_are_read_elsewhere():
    k, q, v, g = (tw.constant(x.copy()) for x in _operands(np.float32))

    def grads(k, q, v):
        with tw.GradientTape() as tape:
            tape.watch([k, q, v])
            p = tw.nn.softmax(tw.einsum(DOT, k, q))
            loss = tw.reduce_sum(tw.einsum(COMBINE, p, v) * g) + tw.reduce_sum(p * p)
        return tape.gradient(loss, [k, q, v])
    f = tw.function(grads)
    for y, e in zip(f(k, q, v), grads(k, q, v)):
        np.testing.assert_allclose(y.numpy(), e.numpy(), rtol=0, atol=1e-5)
    assert "attention_train" not in plan_stats(f)
