"""Attention's fused inference step (``runtime/passes/attention.py``, ``kernels/cpu/attention_kernels.py``):
against a float64 NumPy reference, each way (apart, fused on one thread, fused over the intra-op
threads), the plan equal to eager, and left apart where the probabilities are read elsewhere or
the plan trains."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import attention_kernels, gemm
from tensorweave.runtime.passes import attention, plan_stats

DOT, COMBINE = "aecd,abcd->acbe", "acbe,aecd->abcd"
RNG = np.random.default_rng(24)


def _reference(k, q, v):
    k, q, v = (x.astype(np.float64) for x in (k, q, v))
    s = np.einsum("bshd,bthd->bhts", k, q)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhts,bshd->bthd", p / p.sum(-1, keepdims=True), v)


def _operands(dtype, b=2, t=5, s=7, h=3, d=4, dv=6):
    """Key, query (strided slices of one array, as the grouped projection gives them) and value."""
    y = RNG.standard_normal((b, max(t, s), 2, h, d)).astype(dtype)
    return y[:, :s, 0], y[:, :t, 1], RNG.standard_normal((b, s, h, dv)).astype(dtype)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_each_way_matches_the_float64_reference(dtype, tol):
    k, q, v = _operands(dtype)
    ref = _reference(k, q, v)
    how = attention_kernels._fusable(k, q, v)
    got = {"mkl": attention_kernels._apart(k, q, v, DOT, COMBINE)}
    if how is not None:     # (MKL loaded: the fused way runs)
        for parts in (1, 2):
            out = np.full(q.shape[:3] + (6,), np.nan, dtype)
            got[parts] = attention_kernels._fused(k, q, v, *how, parts, out)
        np.testing.assert_array_equal(got[1], got[2])      # the same products, split by pairs
    for way, y in got.items():
        assert y.dtype == dtype and y.shape == ref.shape, way
        np.testing.assert_allclose(y, ref, rtol=0, atol=tol * np.abs(ref).max(), err_msg=str(way))


def test_small_tile_blocks_give_the_same_bits(monkeypatch):
    k, q, v = _operands(np.float32)
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    whole = attention_kernels._fused(k, q, v, *how, 1, np.empty((2, 5, 3, 6), np.float32))
    monkeypatch.setattr(attention_kernels, "TILE_BLOCK_BYTES", 1)     # one pair a block
    np.testing.assert_array_equal(attention_kernels._fused(k, q, v, *how, 1, np.empty_like(whole)), whole)


def test_operands_it_cannot_fuse_run_apart():
    k, q, v = _operands(np.float32)
    assert attention_kernels._fusable(k, q, v.astype(np.float64)) is None
    assert attention_kernels._fusable(k, q, v[..., ::2]) is None        # rows not unit-stride
    got = attention_kernels.fused_attention(k, q, v[..., ::2], dot=DOT, combine=COMBINE)
    np.testing.assert_allclose(got, _reference(k, q, v[..., ::2]), atol=1e-5)


def _attend(k, q, v):
    return tw.einsum(COMBINE, tw.nn.softmax(tw.einsum(DOT, k, q)), v)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_plan_equals_eager(monkeypatch, enabled):
    monkeypatch.setattr(attention, "ENABLED", enabled)
    k, q, v = _operands(np.float32)
    k, q, v = k.copy(), q.copy(), v.copy()
    f = tw.function(_attend)
    got = f(tw.constant(k), tw.constant(q), tw.constant(v)).numpy()
    assert plan_stats(f).get("attention", 0) == (1 if enabled else 0)
    np.testing.assert_allclose(got, _attend(tw.constant(k), tw.constant(q), tw.constant(v)).numpy(),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("fetched", [True, False])
def test_left_apart_where_the_probabilities_are_read_elsewhere(fetched):
    k, q, v = (tw.constant(x.copy()) for x in _operands(np.float32))

    def both(k, q, v):
        p = tw.nn.softmax(tw.einsum(DOT, k, q))
        y = tw.einsum(COMBINE, p, v)
        return (y, p) if fetched else y + tw.reduce_sum(p)
    f = tw.function(both)
    got = f(k, q, v)
    assert "attention" not in plan_stats(f)
    if not fetched:     # (each softmax row sums to 1: the sum is B * H * T)
        np.testing.assert_allclose(got.numpy(), _reference(k.numpy(), q.numpy(), v.numpy()) + 30, atol=1e-4)


def test_a_training_step_is_left_apart():
    k, q, v = (tw.constant(x.copy()) for x in _operands(np.float32))
    w = tw.Variable(np.ones((), np.float32))

    @tw.function
    def step(k, q, v):
        w.assign_add(1.0)
        return _attend(k, q * w, v)
    step(k, q, v)
    assert "attention" not in plan_stats(step)


def test_keras_attention_predict_takes_the_fused_step():
    keras = tw.keras
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 8))
    model = keras.Model(x, keras.layers.MultiHeadAttention(2, 4)(x, x))
    data = RNG.standard_normal((2, 6, 8)).astype(np.float32)
    got = model.predict_on_batch(data)
    np.testing.assert_allclose(got, model(tw.constant(data)).numpy(), rtol=0, atol=1e-5)
    if gemm.compiled_gemm(np.float32, 6, 6, 4) is not None:
        assert any(k[1] == (2, 6, 2, 4) for k in attention_kernels._chosen)
