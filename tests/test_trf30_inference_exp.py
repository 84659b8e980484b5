"""The inference ``FusedAttention`` on the vector exponential (``attention_kernels.exp_tiles``, issue 18
session 26, trf30): float32 within float32 tolerance of NumPy's softmax (the ``Softmax`` kernel's bits
no longer), float64 still NumPy's ``exp`` on the loop's scores; the training forward is the inference loop."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import attention_kernels, attention_train, nn_kernels, softmax_loops

RNG = np.random.default_rng(3030)
DOT, COMBINE = "aecd,abcd->acbe", "acbe,aecd->abcd"


def _operands(dtype, b=2, t=24, h=2, d=8, scale=3.0):
    return [(RNG.standard_normal((b, t, h, d)) * scale).astype(dtype) for _ in range(3)]


def _numpy_attention(k, q, v):
    """float64 NumPy: ``softmax(q k^T) v`` per (batch, head)."""
    k, q, v = (a.astype(np.float64) for a in (k, q, v))
    s = np.einsum("bthd,bshd->bhts", q, k)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", p, v)


@pytest.mark.parametrize("parts", [1, 2])
def test_float32_is_within_float32_tolerance_of_numpys_softmax(parts):
    k, q, v = _operands(np.float32)
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    got = attention_kernels._fused(k, q, v, *how, parts, np.empty(q.shape, np.float32))
    ref = _numpy_attention(k, q, v)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.abs(ref).max())
    steps = attention_kernels._apart(k, q, v, DOT, COMBINE)    # the Softmax kernel's NumPy exp
    np.testing.assert_allclose(got, steps, rtol=0, atol=2e-6 * np.abs(ref).max())


def test_float32_exponentials_are_the_vector_loops():
    """The probabilities the loop leaves: the shifted scores through ``exp_tiles``, not ``np.exp``."""
    k, q, v = _operands(np.float32, b=1, t=16, h=1, d=4, scale=4.0)
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    probs = np.empty((1, 16, 16), np.float32)
    attention_kernels._fused(k, q, v, *how, 1, np.empty_like(q), probs)
    s = np.empty_like(probs)
    attention_kernels.scores_shift(*how, q, k, s, 0, 1)
    want = s.copy()
    attention_kernels.exp_tiles(want)
    want /= want.sum(-1, keepdims=True, dtype=np.float32)
    np.testing.assert_allclose(probs, want, rtol=2e-7, atol=0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)


def test_float64_keeps_numpys_exp_bits():
    """The loop's own shifted scores through NumPy's ``exp`` and the softmax's normalize loop."""
    k, q, v = _operands(np.float64)
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    probs = np.empty((4, 24, 24))
    attention_kernels._fused(k, q, v, *how, 1, np.empty_like(q), probs)
    s = np.empty_like(probs)
    attention_kernels.scores_shift(*how, q, k, s, 0, 4)
    want = np.exp(s)
    for tile in want:
        softmax_loops.normalize(tile)
    np.testing.assert_array_equal(probs, want)
    np.testing.assert_allclose(probs, nn_kernels._softmax(np.einsum(DOT, k, q), -1).reshape(probs.shape),
                               rtol=1e-12, atol=1e-300)


def test_training_forward_is_the_inference_loop_bit_for_bit():
    k, q, v = _operands(np.float32)
    how = attention_train._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    out, probs = attention_train.fused_forward(k, q, v, *how, 1)
    assert probs.shape == (2, 2, 24, 24) and out.shape == q.shape
    np.testing.assert_array_equal(out, attention_kernels._fused(k, q, v, *how, 1, np.empty_like(out)))
    np.testing.assert_allclose(out, _numpy_attention(k, q, v), rtol=0, atol=2e-6 * np.abs(out).max())


def test_rows_of_minus_infinity_give_nan_as_the_softmax_kernel():
    k, q, v = _operands(np.float32, b=1, t=4, h=1, d=2)
    q[0, 1] = np.inf
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    got = attention_kernels._fused(k, q, v, *how, 1, np.empty_like(q))
    with np.errstate(all="ignore"):
        ref = attention_kernels._apart(k, q, v, DOT, COMBINE)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got[0, [0, 2, 3]], ref[0, [0, 2, 3]], rtol=0, atol=2e-6 * np.nanmax(np.abs(ref)))


def test_eager_equals_graph_through_the_plan():
    """Graph (its plan may make the three steps one ``FusedAttention`` node) against eager (the steps)."""
    k, q, v = _operands(np.float32, b=2, t=32, h=2, d=16, scale=1.0)

    def attend(k, q, v):
        return tw.einsum(COMBINE, tw.nn.softmax(tw.einsum(DOT, k, q)), v)
    eager = attend(*map(tw.constant, (k, q, v))).numpy()
    graph = tw.function(attend)(*map(tw.constant, (k, q, v))).numpy()
    np.testing.assert_allclose(graph, eager, rtol=0, atol=2e-6 * np.abs(eager).max())
    np.testing.assert_allclose(graph, _numpy_attention(k, q, v), rtol=0, atol=2e-6 * np.abs(eager).max())
