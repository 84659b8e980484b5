"""The float32 exponential in vector lanes (``softmax_loops.exp_in_place``) and the training
attention's forward that uses it (``attention_train.fused_forward``): within 1 ulp of the float64
``exp``, NumPy's special values, and the probabilities within float32 tolerance of the ``Softmax``
kernel's (issue 18, session 25, trf29)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import attention_kernels, attention_train, nn_kernels, softmax_loops

RNG = np.random.default_rng(29)


def _ulps(got, x):
    """``|got - e^x|`` in units of the float32 spacing at ``e^x`` (finite, nonzero results)."""
    exact = np.exp(x.astype(np.float64))
    keep = (exact < np.finfo(np.float32).max) & (exact >= np.finfo(np.float32).tiny)
    return np.abs(got[keep].astype(np.float64) - exact[keep]) / np.spacing(exact[keep].astype(np.float32))


def _exp(x):
    got = np.array(x, np.float32)
    softmax_loops.exp_in_place(got)
    return got


def test_within_one_ulp_of_the_exact_exponential_over_the_float32_range():
    x = np.concatenate([RNG.uniform(-88, 88.7, 200_000), RNG.uniform(-20, 0, 200_000),
                        RNG.uniform(-1e-3, 1e-3, 10_000)]).astype(np.float32)
    assert _ulps(_exp(x), x).max() <= 1.0


@pytest.mark.parametrize("x", [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.34657359, -0.34657359, 10.0, -10.0, 88.0, -87.0])
def test_single_values_within_one_ulp(x):
    assert _ulps(_exp([x]), np.array([x], np.float32)).max() <= 1.0


def test_special_values_and_the_range_ends_as_numpy():
    x = np.array([np.inf, -np.inf, np.nan, 88.72283, 88.7229, 89.0, 89.5, 1e30, -87.33655, -100.0, -103.97,
                  -103.98, -104.0, -104.5, -1e30, 0.0], np.float32)
    got = _exp(x)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    assert np.isnan(got[2]) and np.isnan(ref[2])
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_array_equal(got == 0, ref == 0)
    finite = np.isfinite(ref) & (ref > 0)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=3e-7, atol=0)
    assert got[3] == pytest.approx(3.4027e38, rel=1e-4) and got[-1] == 1.0


def test_subnormal_results_within_the_smallest_spacing():
    x = np.linspace(-103.9, -87.4, 997, dtype=np.float32)
    exact = np.exp(x.astype(np.float64))
    assert np.abs(_exp(x).astype(np.float64) - exact).max() <= 2 * 2.0 ** -149


@pytest.mark.parametrize("n", list(range(0, 20)) + [63, 64, 65, 1031])
def test_every_length_and_tail_as_elementwise(n):
    x = RNG.uniform(-30, 30, n).astype(np.float32)
    whole = _exp(x)
    one_by_one = np.array([_exp([v])[0] for v in x], np.float32)
    np.testing.assert_array_equal(whole, one_by_one)
    assert n == 0 or _ulps(whole, x).max() <= 1.0


def test_only_the_given_vector_changes():
    buf = np.arange(12, dtype=np.float32) - 6
    softmax_loops.exp_in_place(buf[3:9])
    np.testing.assert_array_equal(buf[:3], [-6, -5, -4])
    np.testing.assert_array_equal(buf[9:], [3, 4, 5])
    assert _ulps(buf[3:9], np.arange(-3, 3, dtype=np.float32)).max() <= 1.0


def _operands(dtype, b=3, t=9, h=2, d=5):
    q, k, v = (RNG.standard_normal((b, t, h, d)).astype(dtype) * 3 for _ in range(3))
    return k, q, v


def test_exp_tiles_float64_keeps_numpys_bits():
    s = RNG.uniform(-50, 0, (3, 4, 5))
    got = s.copy()
    attention_kernels.exp_tiles(got)
    np.testing.assert_array_equal(got, np.exp(s))


def test_exp_tiles_float32_is_exp_in_place_over_the_block():
    s = RNG.uniform(-50, 0, (3, 4, 5)).astype(np.float32)
    got = s.copy()
    attention_kernels.exp_tiles(got)
    np.testing.assert_array_equal(got, _exp(s.ravel()).reshape(s.shape))


@pytest.mark.parametrize("parts", [1, 2])
def test_fused_forward_float32_within_a_few_ulp_of_the_inference_steps(parts):
    """The same scores (the inference loop's products); only the exponentials differ."""
    k, q, v = _operands(np.float32)
    how = attention_train._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    out, probs = attention_train.fused_forward(k, q, v, *how, parts)
    b, t, h, _ = q.shape
    want_probs = np.empty_like(probs)
    want = attention_kernels._fused(k, q, v, *how, parts, np.empty_like(out), want_probs.reshape(b * h, t, -1))
    np.testing.assert_allclose(probs, want_probs, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6 * np.abs(want).max())
    ref = np.einsum("bhts,bshd->bthd", nn_kernels._softmax(np.einsum("bshd,bthd->bhts", k, q), -1).astype(np.float64),
                    v.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_fused_forward_float64_has_the_inference_steps_bits():
    k, q, v = _operands(np.float64)
    how = attention_train._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    out, probs = attention_train.fused_forward(k, q, v, *how, 1)
    b, t, h, _ = q.shape
    want_probs = np.empty_like(probs)
    want = attention_kernels._fused(k, q, v, *how, 1, np.empty_like(out), want_probs.reshape(b * h, t, -1))
    np.testing.assert_array_equal(probs, want_probs)
    np.testing.assert_array_equal(out, want)


def test_fused_forward_rows_of_minus_infinity_give_nan_as_the_softmax_kernel():
    k, q, v = _operands(np.float32, b=1, t=4, h=1, d=2)
    q[0, 1] = np.inf                 # row 1's scores: inf * k, +-inf or NaN
    how = attention_train._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    _, probs = attention_train.fused_forward(k, q, v, *how, 1)
    with np.errstate(all="ignore"):
        ref = nn_kernels._softmax(np.einsum("bshd,bthd->bhts", k, q), -1)
    np.testing.assert_array_equal(np.isnan(probs), np.isnan(ref))
    np.testing.assert_allclose(probs[0, 0, [0, 2, 3]], ref[0, 0, [0, 2, 3]], rtol=2e-6)
