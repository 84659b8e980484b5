"""Kernels with NumPy twins (``jit.njit_twin``): the twin gives the compiled loop's bits, and a
cold kernel answers through its twin while it compiles on the background thread."""
import numpy as np
import pytest

import served_loop

from tensorweave.kernels.cpu import gemm, jit, nn_loops, training_kernels, winograd

RNG = np.random.default_rng(7)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _both(kernel, *args, copies=()):
    """Runs the compiled kernel (tests/served_loop.py: the built loop where served) and its twin
    on copies of ``args`` (positions in ``copies`` are outputs); returns both results and both
    argument lists."""
    a1 = [a.copy() if i in copies else a for i, a in enumerate(args)]
    a2 = [a.copy() if i in copies else a for i, a in enumerate(args)]
    r1 = served_loop.compiled(kernel, *a1)(*a1)
    r2 = kernel.twin(*a2)
    return r1, r2, a1, a2


def _assert_same(kernel, *args, copies=()):
    r1, r2, a1, a2 = _both(kernel, *args, copies=copies)
    assert r1 == r2
    for i in copies:
        assert _same(a1[i], a2[i]), (kernel.py_func.__name__, i)


def _floats(*shape, scale=10.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape,pads", [((3, 26, 26, 8), ((0, 0), (0, 0))), ((2, 9, 11, 8), ((1, 1), (2, 0))),
                                        ((1, 7, 6, 5), ((2, 2), (1, 1)))])
def test_winograd_transforms_match_their_twins_bit_for_bit(shape, pads):
    n, _, _, c = shape
    o = 9
    blk = winograd._Blocks(shape, pads)
    p = n * blk.per_image()
    xp = np.zeros((n, blk.hp, blk.wp, c), np.float32)
    xp[:, blk.pt:blk.pt + blk.hh, blk.pl:blk.pl + blk.ww] = _floats(n, blk.hh, blk.ww, c)
    _assert_same(winograd._input_transform, xp, 0, n, blk.th, blk.tw, np.empty((36, p, c), np.float32), copies=(5,))
    m, bias = _floats(36, p, o), _floats(o)
    for has_bias, relu in ((False, False), (True, False), (True, True)):
        y = np.full((n, blk.ho, blk.wo, o), 7, np.float32)
        _assert_same(winograd._output_transform, m, 0, n, blk.th, blk.tw, y, bias, has_bias, relu, copies=(5,))
    dy = _floats(n, blk.ho, blk.wo, o)
    _assert_same(winograd._output_grad_transform, dy, 0, n, blk.th, blk.tw, np.empty((36, p, o), np.float32),
                 copies=(5,))
    e = _floats(36, p, c)
    _assert_same(winograd._input_grad_transform, e, 0, n, blk.th, blk.tw, blk.pt, blk.pl,
                 np.zeros(shape, np.float32), copies=(7,))


@pytest.mark.parametrize("rows", [0, 3, 4, 37, 1001])
def test_bias_and_column_sum_loops_match_their_twins(rows):
    g, y, b = _floats(rows, 19, scale=100), _floats(rows, 19), _floats(19)
    for relu in (False, True):
        _assert_same(nn_loops.bias_act, y, b, relu, copies=(0,))
    _assert_same(nn_loops.column_sums, g, RNG.standard_normal(19), copies=(1,))
    _assert_same(nn_loops.relu_grad_column_sums, g, y, np.empty_like(g), np.zeros(19), copies=(2, 3))


def test_softmax_cross_entropy_loops_match_their_twins_with_nan_inf_and_bad_labels():
    x = _floats(50, 10, scale=5)
    x[3, 0], x[4, 5], x[5], x[6, 2] = np.nan, np.nan, -np.inf, np.inf
    labels = RNG.integers(0, 10, 50).astype(np.int32)
    shifted, picked = np.zeros_like(x), np.zeros(50, np.float32)
    _assert_same(nn_loops.shift_rows, x, labels, shifted, picked, copies=(2, 3))
    nn_loops.shift_rows.twin(x, labels, shifted, picked)
    with np.errstate(all="ignore"):
        e = np.exp(shifted)
    for with_grad in (False, True):
        _assert_same(nn_loops.xent_from_exps, e, labels, picked, np.zeros(50, np.float32), with_grad, copies=(0, 3))
    bad = labels.copy()
    bad[20] = 10
    r1, r2, _, _ = _both(nn_loops.shift_rows, x, bad, shifted, picked, copies=(2, 3))
    assert r1 == r2 == 20


@pytest.mark.parametrize("shape,ksize,strides,pads,tiled", [
    ((4, 1, 24, 24, 8), (1, 2, 2), (1, 2, 2), (0, 0, 0), True),
    ((3, 1, 9, 7, 5), (1, 3, 3), (1, 2, 2), (0, 1, 1), False),
    ((2, 2, 8, 8, 3), (2, 3, 3), (1, 1, 1), (0, 1, 1), False),
    ((2, 4, 6, 6, 3), (2, 3, 3), (2, 3, 3), (0, 0, 0), True)])   # depth stride != height stride (a mutant)
def test_max_pool_loop_matches_its_twin_with_ties_and_nan(shape, ksize, strides, pads, tiled):
    x = (np.round(RNG.standard_normal(shape) * 2) / 2).astype(np.float32)   # ties
    x.reshape(-1)[5] = np.nan
    outs = tuple((s + 2 * p - k) // st + 1 for s, k, st, p in zip(shape[1:4], ksize, strides, pads))
    res = np.zeros(shape[:1] + outs + shape[4:], np.float32)
    _assert_same(nn_loops.max_windows, x, ksize, strides, pads, res, res.copy(), False, False, copies=(5,))
    g = _floats(*res.shape)
    dx = np.full_like(x, 9) if tiled else np.zeros_like(x)
    _assert_same(nn_loops.max_windows, x, ksize, strides, pads, g, dx, True, tiled, copies=(5,))


@pytest.mark.parametrize("size", [100, 70000])
def test_adam_loops_match_their_twin(size):
    w, m, g = _floats(size), _floats(size, scale=0.1), _floats(size)
    v = np.abs(_floats(size, scale=0.01))
    coeffs = training_kernels._compute_coefficients(np.dtype(np.float32), 1e-3, 3, 0.9, 0.999) + (np.float32(1e-7),)
    _assert_same(training_kernels._adam_flat, w, m, v, g, *coeffs, copies=(0, 1, 2))
    _assert_same(training_kernels._adam_chunks, w, m, v, g, *coeffs, 2, copies=(0, 1, 2))


def test_gemm_call_through_ctypes_is_the_same_mkl_call():
    if not gemm.load():
        pytest.skip("MKL is not installed")
    import ctypes
    fn = ctypes.cast(gemm._lib.cblas_sgemm, ctypes.c_void_p).value
    a, b = _floats(64, 33), _floats(20, 33)
    c = np.zeros((64, 20), np.float32)
    _assert_same(gemm._call, fn, gemm._NO_TRANS, gemm._TRANS, 64, 20, 33, a, 33, b, 33, c, 20, copies=(10,))
    gemm._call.twin(fn, gemm._NO_TRANS, gemm._TRANS, 64, 20, 33, a, 33, b, 33, c, 20)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)


def _twin_marks(out, x):
    out[0] = -1.0          # a twin that differs, so the test can see which ran


@pytest.mark.skipif(not jit.BACKGROUND, reason="TW_JIT_BACKGROUND=0")
def test_a_cold_kernel_answers_through_its_twin_then_through_the_compiled_loop():
    @jit.njit_twin(_twin_marks)
    def kernel(out, x):
        out[0] = x * 2.0
    out = np.zeros(1)
    kernel(out, 3.0)
    assert out[0] == -1.0                 # compiling in the background: the twin answered
    jit.wait_for_compiles()
    kernel(out, 3.0)
    assert out[0] == 6.0
    kernel(np.zeros(1, np.float32), 3.0)  # a new signature gets the twin again
    assert len(kernel.signatures) == 1
    jit.wait_for_compiles()
    assert len(kernel.signatures) == 2


@pytest.mark.skipif(not jit.BACKGROUND, reason="TW_JIT_BACKGROUND=0")
def test_a_kernel_that_fails_to_compile_raises_on_the_callers_thread():
    import numba

    @jit.njit_twin(_twin_marks)
    def broken(out, x):
        out[0] = x.no_such_attribute
    out = np.zeros(1)
    broken(out, 3.0)
    assert out[0] == -1.0
    jit.wait_for_compiles()
    with pytest.raises(numba.core.errors.TypingError, match="no_such_attribute"):
        broken(out, 3.0)
