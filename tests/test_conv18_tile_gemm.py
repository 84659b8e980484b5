"""A convolution's tile GEMMs on one thread, on the library measured faster there per shape class
(issue 18, conv18): ``conv_tiles.split`` (a tile per core, one-thread flag) and
``gemm.matmul(..., one_thread=True)`` (2-D products and stacks), then the convolution kernels
through them against the float64 references of the op table and float64 finite differences.
The library is forced (or the clock scripted) wherever a choice is checked: no timings asserted."""
import ctypes

import numpy as np
import pytest

from opinfos.nn import ref_conv, ref_conv_backprop_filter, ref_conv_transpose
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_kernels as ck
from tensorweave.kernels.cpu import conv_tiles, gemm, gemm_tuning, winograd

needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
LIBRARIES = ["mkl1", pytest.param("numpy1", marks=pytest.mark.skipif(
    gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS with a thread setting"))]


@pytest.mark.parametrize("n,per_image,tile,cores,expected", [
    (64, 16384, 1 << 20, 2, (8 * 16384, True)),      # one tile would hold all 64: 4 tiles a core
    (64, 4096, 1 << 20, 2, (16 * 4096, True)),       # ... but none under MIN_TILE_BYTES
    (64, 1 << 17, 1 << 20, 2, (8 << 17, True)),      # the byte budget's tiles: already 8
    (10, 1 << 17, 1 << 20, 2, (2 << 17, True)),      # 4 a core rounds up to whole images
    (64, 1024, 1 << 20, 2, (32 * 1024, True)),       # tiny images: the floor, but still a tile per core
    (2, 10, 1 << 20, 2, (10, True)),                 # a batch of two: a tile each
    (3, 5 << 20, 1 << 20, 1, (5 << 20, True)),       # one core, images over the budget: one per tile
    (64, 16384, 1 << 20, 1, (64 * 16384, False)),    # one core: one tile, BLAS keeps its threads
    (64, 300000, 1 << 20, 2, (3 * 300000, True)),    # already many tiles
    (5, 10, 1 << 20, 2, (3 * 10, True)),             # an odd batch: tiles of 3 and 2
    (1, 10, 1 << 20, 2, (1 << 20, False)),           # batch 1: one tile on BLAS's threads
    (3, 5 << 20, 1 << 20, 2, (5 << 20, True)),       # an image over the budget: one per tile
    (0, 10, 1 << 20, 2, (1 << 20, False)),           # empty batch
])
def test_split_makes_a_tile_per_core(n, per_image, tile, cores, expected):
    got = conv_tiles.split(n, per_image, tile, cores=cores)
    assert got == expected and type(got[0]) is int


def test_split_follows_the_cores_not_the_thread_setting(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads, "intra_op_threads", lambda: 1)
    assert conv_tiles.split(64, 16384, 1 << 20) == (4 * 16384, True)


@pytest.fixture
def forced(monkeypatch):
    """``forced(library)``: every one-thread product runs on ``library``; returns the log of the
    shape classes' counts (a product or a stack) that took the one-thread choice."""
    log = []

    def force(library):
        def chosen(a, b, out, op_a, op_b, m, n, k, run_mkl, count=1, seen=None):
            log.append(count)
            return library
        monkeypatch.setattr(gemm, "_serial_library", chosen)
        monkeypatch.setitem(gemm._tuning, "on", False)
        # no product is one-threaded for its size: only one_thread=True reaches the choice
        monkeypatch.setattr(gemm, "_serial_work", {np.dtype(np.float32): 0, np.dtype(np.float64): 0})
        return log
    return force


def _operands(rng, dtype, shape_a, shape_b, trans_a, trans_b):
    a = rng.standard_normal(shape_a[:-2] + (shape_a[-1], shape_a[-2]) if trans_a else shape_a).astype(dtype)
    b = rng.standard_normal(shape_b[:-2] + (shape_b[-1], shape_b[-2]) if trans_b else shape_b).astype(dtype)
    return (np.swapaxes(a, -1, -2) if trans_a else a), (np.swapaxes(b, -1, -2) if trans_b else b)


def _mkl_threads_local():
    return ctypes.CDLL(gemm._library_path()).MKL_Set_Num_Threads_Local


@needs_serial
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape_a,shape_b,trans_a,trans_b", [
    ((300, 24), (24, 70), False, False),          # a 1x1 convolution's tile
    ((300, 24), (24, 70), False, True),           # the input gradient's dy @ F^T
    ((24, 300), (300, 70), True, False),          # the filter gradient's dy^T @ cols
    ((36, 40, 16), (36, 16, 24), False, False),   # Winograd's 36 products
    ((36, 16, 40), (36, 40, 24), True, False),    # its filter gradient V^T W
    ((5, 40, 16), (16, 24), False, False),        # a stack against one matrix
])
def test_one_thread_products_match_float64(forced, rng, library, dtype, shape_a, shape_b, trans_a, trans_b):
    log = forced(library)
    a, b = _operands(rng, dtype, shape_a, shape_b, trans_a, trans_b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    got = gemm.matmul(a, b, one_thread=True)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    out = np.full(ref.shape, np.nan, dtype)
    assert gemm.matmul(a, b, out=out, one_thread=True) is out
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    count = a.shape[0] if a.ndim == 3 else 1
    assert log == [count, count]


@needs_serial
@pytest.mark.parametrize("library", LIBRARIES)
def test_one_thread_stacks_leave_both_thread_settings(forced, rng, library):
    """The MKL stack runs with the calling thread's MKL count set to 1 and restored; OpenBLAS's
    process-wide count is restored after its one-thread call."""
    forced(library)
    set_local = _mkl_threads_local()
    before_mkl = set_local(3)
    get, _ = gemm._openblas_threads() or (lambda: None, None)
    before_openblas = get()
    try:
        a, b = _operands(rng, np.float32, (36, 40, 16), (36, 16, 24), False, False)
        gemm.matmul(a, b, one_thread=True)
        assert set_local(3) == 3 and get() == before_openblas
    finally:
        set_local(before_mkl)


@needs_serial
def test_a_stack_is_timed_once_per_class_and_the_product_left_in_place(monkeypatch, rng, tmp_path):
    """The first stack of a class is timed on both libraries (the clock scripted: OpenBLAS
    faster), its result left in ``out``; the class keeps the choice, in the cache file too."""
    if gemm._openblas_threads() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS with a thread setting")
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), {"cpu": "t"},
                                                                 ("mkl", "numpy", "mkl1", "numpy1")))
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    ran = []

    def timed(backend, run):
        ran.append(backend)
        run()
        return 1.0 if backend == "numpy1" else 2.0
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)
    a, b = _operands(rng, np.float32, (36, 40, 16), (36, 16, 24), False, False)
    out = np.full((36, 40, 24), np.nan, np.float32)
    gemm.matmul(a, b, out=out, one_thread=True)
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)
    assert set(ran) == {"mkl1", "numpy1"}
    cls = "serial:" + gemm_tuning.shape_class(40, 24, 16, "float32", False, False, 36)
    assert gemm.tuner().backend(cls) == "numpy1" and cls.endswith(",b6")
    ran.clear()
    gemm.matmul(a, b, out=out, one_thread=True)
    assert ran == []


CONVS = [  # (input NHWC, filter, strides, padding): the ResNet's kinds, small
    ((6, 9, 9, 4), (3, 3, 4, 6), 2, "SAME"),      # 3x3 stride 2 (im2col)
    ((6, 8, 8, 4), (1, 1, 4, 6), 2, "VALID"),     # 1x1 stride-2 shortcut
    ((6, 7, 7, 3), (3, 3, 3, 4), 1, "SAME"),      # stem: too few channels for Winograd
    ((5, 6, 6, 2), (3, 3, 2, 40), 1, "VALID"),    # a tiny filter gradient (per-image stacks)
    ((3, 6, 6, 20), (2, 2, 20, 64), 1, "SAME"),   # a filter gradient past _SKINNY (one product a tile)
]


@pytest.fixture
def tiles_on_cores(monkeypatch):
    """Two cores, and column buffers of one image each, so every batch runs as several tiles;
    products of any size go to the libraries (small ones would stay in NumPy)."""
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(ck, "TILE_BYTES", 1)
    monkeypatch.setattr(gemm, "MIN_WORK", 0)
    monkeypatch.setattr(ck.conv_choice, "POINTWISE_MODE", "0")    # the 1x1 shortcut by im2col's tiles


@needs_serial
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,fs,stride,padding", CONVS)
def test_convolutions_on_one_thread_products_match_the_references(forced, tiles_on_cores, rng, library, dtype,
                                                                   xs, fs, stride, padding):
    log = forced(library)
    x, f = rng.uniform(-1, 1, xs).astype(dtype), rng.uniform(-1, 1, fs).astype(dtype)
    st = [stride, stride]
    kw = {"strides": stride, "padding": padding}
    tol = 1e-4 if dtype == np.float32 else 1e-10
    y = ck.conv_forward(x, f, st, [1, 1], padding, "NHWC")
    np.testing.assert_allclose(y, ref_conv(x, f, **kw), rtol=tol, atol=tol)
    dy = rng.uniform(-1, 1, y.shape).astype(dtype)
    np.testing.assert_allclose(ck.conv_backprop_input(list(xs), f, dy, st, [1, 1], padding, "NHWC"),
                               ref_conv_transpose(dy, f, list(xs), **kw), rtol=tol, atol=tol)
    np.testing.assert_allclose(ck.conv_backprop_filter(x, list(fs), dy, st, [1, 1], padding, "NHWC"),
                               ref_conv_backprop_filter(x, list(fs), dy, **kw), rtol=tol, atol=tol)
    assert len(log) >= 3 * 2      # every kernel's tiles took the one-thread choice


@needs_serial
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("xs,fs,stride,padding", CONVS[:2])
def test_one_thread_gradients_match_float64_finite_differences(forced, tiles_on_cores, rng, library,
                                                               xs, fs, stride, padding):
    """``L = sum(conv(x, f) * dy)``: the input and filter gradients of the tiled kernels against
    central differences of the tiled forward, all in float64."""
    forced(library)
    x, f = rng.uniform(-1, 1, xs), rng.uniform(-1, 1, fs)
    st = [stride, stride]

    def loss(x, f):
        return float(np.sum(ck.conv_forward(x, f, st, [1, 1], padding, "NHWC") * dy))
    dy = rng.uniform(-1, 1, ck.conv_forward(x, f, st, [1, 1], padding, "NHWC").shape)
    for arg, grad in ((x, ck.conv_backprop_input(list(xs), f, dy, st, [1, 1], padding, "NHWC")),
                      (f, ck.conv_backprop_filter(x, list(fs), dy, st, [1, 1], padding, "NHWC"))):
        fd = np.empty(arg.shape)
        for i in np.ndindex(arg.shape):
            keep = arg[i]
            arg[i] = keep + 1e-6
            up = loss(x, f)
            arg[i] = keep - 1e-6
            fd[i] = (up - loss(x, f)) / 2e-6
            arg[i] = keep
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


@needs_serial
@pytest.mark.parametrize("library", LIBRARIES)
def test_winograd_stacks_on_one_thread_match_the_float64_reference(forced, monkeypatch, rng, library):
    """Several Winograd tiles (and filter-gradient groups): the 36 products take the one-thread
    choice; a batch of one stays on NumPy's stacked product."""
    log = forced(library)
    monkeypatch.setattr(ck.conv_choice, "STACKS_MODE", "0")       # the stacks through gemm.matmul
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(winograd, "TILE_BYTES", 1)
    monkeypatch.setattr(winograd, "GROUP_IMAGES", 2)
    monkeypatch.setattr(gemm, "MIN_WORK", 0)
    x = rng.standard_normal((5, 9, 9, 8)).astype(np.float32)
    f = (rng.standard_normal((3, 3, 8, 12)) / 9).astype(np.float32)
    assert winograd.applies(x.dtype, f.shape, [1, 1], [1, 1], [(1, 1), (1, 1)])
    x64, f64 = x.astype(np.float64), f.astype(np.float64)
    y = ck.conv_forward(x, f, [1, 1], [1, 1], "SAME", "NHWC")
    ref = ck.conv_forward(x64, f64, [1, 1], [1, 1], "SAME", "NHWC")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    got = [y, ck.conv_backprop_input(list(x.shape), f, dy, [1, 1], [1, 1], "SAME", "NHWC"),
           ck.conv_backprop_filter(x, list(f.shape), dy, [1, 1], [1, 1], "SAME", "NHWC")]
    refs = [ref, ck.conv_backprop_input(list(x.shape), f64, dy.astype(np.float64), [1, 1], [1, 1], "SAME", "NHWC"),
            ck.conv_backprop_filter(x64, list(f.shape), dy.astype(np.float64), [1, 1], [1, 1], "SAME", "NHWC")]
    for g, r in zip(got, refs):
        assert g.dtype == np.float32 and np.abs(g - r).max() <= 2e-5 * np.abs(r).max()
    assert 36 in log
    log.clear()
    ck.conv_forward(x[:1], f, [1, 1], [1, 1], "SAME", "NHWC")
    assert log == []


def test_the_old_tiling_is_kept_behind_its_switch(monkeypatch):
    """``TW_CONV_ONE_THREAD=0``: tiles as the byte budget gives them, no one-thread flag."""
    monkeypatch.setattr(conv_tiles, "ENABLED", False)
    assert conv_tiles.split(64, 16384, 1 << 20, cores=2) == (1 << 20, False)
