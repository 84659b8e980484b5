"""A convolution's input and filter gradients as one node, run side by side (issue 18, session 13):
``FusedConv{n}DBackprop`` (ops/fused_conv_ops.py), made by the ``remapping`` pass, and its kernel
(kernels/cpu/conv_pair_kernels.py).

The pair gives the bits of the two separate kernels on odd sizes (batch 1, channels not a
multiple of 8, stride 2, padding same/valid, Winograd and im2col, channels first), the NumPy
references' values and float64 finite differences; the pass fuses a training step's pairs and
only where nothing reads a moved value too early. No timing anywhere."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from opinfos.nn import ref_conv_backprop_filter, ref_conv_transpose
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_choice, conv_kernels as ck, conv_pair_kernels as cp, gemm, tiles
from test_graph_passes import _central_differences, _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(1813)

CASES = [  # (input shape NHWC, filter shape, strides, padding)
    ((1, 7, 6, 5), (3, 3, 5, 7), 1, "SAME"),        # batch 1: one after the other
    ((2, 9, 8, 5), (3, 3, 5, 3), 1, "SAME"),        # Winograd where it is on
    ((3, 9, 10, 17), (3, 3, 17, 9), 1, "VALID"),
    ((5, 11, 9, 3), (3, 3, 3, 6), 2, "SAME"),       # stride 2: im2col
    ((4, 8, 7, 6), (1, 1, 6, 5), 2, "VALID"),       # 1x1 stride-2 shortcut
    ((9, 10, 10, 4), (3, 3, 4, 11), 1, "SAME"),     # more tiles than threads
]


@pytest.fixture(params=["1", "0"], ids=["winograd", "im2col"])
def algorithm(request, monkeypatch):
    monkeypatch.setattr(conv_choice, "MODE", request.param)
    return request.param


@pytest.fixture
def two_cores(monkeypatch):
    """Side by side even where the test runs on one core (xdist workers: BLAS on one thread); the
    tiles' one-thread GEMMs on NumPy's BLAS always (the library of a new shape class is timed,
    alternating, during its first calls: the pair and the separate kernels could get different
    ones, and so different bits)."""
    library = "numpy1" if gemm._openblas_threads() is not None else "mkl1"
    monkeypatch.setattr(gemm, "_serial_library", lambda *a, **k: library)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "intra_op_threads", lambda: 2)
    monkeypatch.setattr(cp, "ENABLED", True)


def _case(xs, fs, stride, padding, dtype=np.float32, data_format="NHWC"):
    x = RNG.uniform(-1, 1, xs).astype(dtype)
    f = RNG.uniform(-1, 1, fs).astype(dtype)
    st = [stride, stride]
    y = ck.conv_forward(x, f, st, [1, 1], padding, "NHWC")
    dy = RNG.uniform(-1, 1, y.shape).astype(dtype)
    if data_format == "NCHW":
        x, dy = x.transpose(0, 3, 1, 2).copy(), dy.transpose(0, 3, 1, 2).copy()
    return x, f, dy, st


def _separate(x, f, dy, st, padding, data_format="NHWC"):
    return (ck.conv_backprop_input(list(x.shape), f, dy, st, [1, 1], padding, data_format),
            ck.conv_backprop_filter(x, list(f.shape), dy, st, [1, 1], padding, data_format))


@pytest.mark.parametrize("xs,fs,stride,padding", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_pair_gives_the_separate_kernels_bits(two_cores, algorithm, xs, fs, stride, padding, dtype):
    x, f, dy, st = _case(xs, fs, stride, padding, dtype)
    dx, df = cp.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy, st, [1, 1], padding, "NHWC")
    sx, sf = _separate(x, f, dy, st, padding)
    for got, want in ((dx, sx), (df, sf)):
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    kw = {"strides": stride, "padding": padding}
    np.testing.assert_allclose(dx, ref_conv_transpose(dy, f, list(x.shape), **kw), rtol=tol, atol=tol)
    np.testing.assert_allclose(df, ref_conv_backprop_filter(x, list(f.shape), dy, **kw), rtol=tol, atol=tol)


def test_channels_first_and_the_filter_first_order(two_cores, algorithm):
    x, f, dy, st = _case((3, 9, 8, 5), (3, 3, 5, 4), 1, "SAME", data_format="NCHW")
    sx, sf = _separate(x, f, dy, st, "SAME", "NCHW")
    df, dx = cp.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy, st, [1, 1], "SAME", "NCHW",
                                   filter_first=True)
    np.testing.assert_array_equal(dx, sx)
    np.testing.assert_array_equal(df, sf)


def _threads_of(monkeypatch):
    """Records the thread each gradient and each of its tiles runs on."""
    seen = {"input": set(), "filter": set(), "tiles": []}
    for kind, name in (("input", "backprop_input_runner"), ("filter", "backprop_filter_runner")):
        real = getattr(ck, name)

        def runner(*a, _real=real, _kind=kind, **k):
            run = _real(*a, **k)

            def wrapped():
                seen[_kind].add(threading.get_ident())
                return run()
            return wrapped
        monkeypatch.setattr(ck, name, runner)
    real_over = tiles.over_tiles

    def over(n, per, tile, run):
        def logged(b0, b1, scratch):
            seen["tiles"].append(threading.get_ident())
            return run(b0, b1, scratch)
        return real_over(n, per, tile, logged)
    monkeypatch.setattr(ck, "over_tiles", over)
    return seen


def test_the_two_gradients_run_on_two_threads_each_with_its_own_tiles(two_cores, monkeypatch):
    monkeypatch.setattr(conv_choice, "MODE", "0")
    monkeypatch.setattr(conv_choice, "PLANES_MODE", "0")     # im2col's tiles (conv_planes has its own)
    monkeypatch.setattr(ck, "TILE_BYTES", 1)        # one image a tile: several tiles each
    x, f, dy, st = _case((6, 7, 7, 3), (3, 3, 3, 5), 2, "SAME")
    seen = _threads_of(monkeypatch)
    from tensorweave.core.context import current_runtime
    pool, submitted = current_runtime().intra_op_pool(), []

    class Counting:       # every job handed to the intra-op helper
        def submit(self, fn, *a):
            submitted.append(fn)
            return pool.submit(fn, *a)

    class Runtime:
        def intra_op_pool(self):
            return Counting()
    for mod in (cp, tiles):
        monkeypatch.setattr(mod, "current_runtime", lambda: Runtime())
    cp.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy, st, [1, 1], "SAME", "NHWC")
    assert len(submitted) == 1      # the filter gradient; no gradient hands tiles to the busy helper
    assert seen["input"] == {threading.get_ident()}                  # the calling thread
    assert len(seen["filter"]) == 1 and seen["filter"] != seen["input"]   # a helper
    assert len(seen["tiles"]) == 12 and set(seen["tiles"]) == seen["input"] | seen["filter"]


@pytest.mark.parametrize("why", ["batch of one", "switched off", "one intra-op thread"])
def test_one_after_the_other_where_side_by_side_does_not_apply(two_cores, monkeypatch, why):
    monkeypatch.setattr(conv_choice, "MODE", "0")
    monkeypatch.setattr(conv_choice, "PLANES_MODE", "0")     # im2col's tiles (conv_planes has its own)
    n = 1 if why == "batch of one" else 4
    if why == "switched off":
        monkeypatch.setattr(cp, "ENABLED", False)
    if why == "one intra-op thread":
        monkeypatch.setattr(threads, "intra_op_threads", lambda: 1)
    x, f, dy, st = _case((n, 7, 7, 3), (3, 3, 3, 5), 1, "SAME")
    seen = _threads_of(monkeypatch)
    dx, df = cp.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy, st, [1, 1], "SAME", "NHWC")
    assert seen["input"] == seen["filter"] == {threading.get_ident()}
    sx, sf = _separate(x, f, dy, st, "SAME")
    np.testing.assert_array_equal(dx, sx)
    np.testing.assert_array_equal(df, sf)


def test_on_this_thread_keeps_every_tile_here(two_cores):
    where = []
    with tiles.on_this_thread():
        tiles.over_tiles(8, 1, 1, lambda b0, b1, s: where.append(threading.get_ident()))
    assert where == [threading.get_ident()] * 8
    tiles.over_tiles(2, 1, 1, lambda b0, b1, s: None)      # (the flag is gone after the block)
    assert not getattr(tiles._here, "serial", False)


def test_bad_input_names_the_problem(two_cores):
    x, f, dy, st = _case((2, 6, 6, 3), (3, 3, 3, 4), 1, "SAME")
    with pytest.raises(ValueError, match="out_backprop does not match"):
        cp.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy[:, :5], st, [1, 1], "SAME", "NHWC")


# ---- the remapping pass -----------------------------------------------------------------------------
def _step(w, dtype=tw.float32, xs=(3, 9, 8, 5), fs=(3, 3, 5, 7), stride=1, padding="SAME"):
    """``loss = sum(relu(conv(x, f)) * w)`` and its gradients for ``x`` and ``f``."""
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, list(xs))
        fv = tf1.placeholder(dtype, list(fs))
        loss = tw.reduce_sum(tw.nn.relu(tw.nn.conv2d(x, fv, stride, padding)) * tw.constant(w))
        gx, gf = tw.gradients(loss, [x, fv])
    return x, fv, loss, gx, gf


def _w(xs, fs, stride, padding, dtype=np.float32):
    shape = ck.conv_forward(np.zeros(xs), np.zeros(fs), [stride, stride], [1, 1], padding, "NHWC").shape
    return RNG.uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("xs,fs,stride,padding", CASES[:5])
def test_the_pass_fuses_the_pair_with_the_same_bits(two_cores, xs, fs, stride, padding):
    w = _w(xs, fs, stride, padding)
    x, fv, loss, gx, gf = _step(w, xs=xs, fs=fs, stride=stride, padding=padding)
    xv, fval = RNG.uniform(-1, 1, xs).astype(np.float32), RNG.uniform(-1, 1, fs).astype(np.float32)
    plan = _plan([loss, gx, gf], [x, fv])
    types = _types(plan)
    assert types.count("FusedConv2DBackprop") == 1
    assert "Conv2DBackpropInput" not in types and "Conv2DBackpropFilter" not in types
    on = _run(plan, [xv, fval])
    off = _run(_plan([loss, gx, gf], [x, fv], remapping=False), [xv, fval])
    for a, b in zip(off, on):
        np.testing.assert_array_equal(b, a)
    xe, fe = tw.constant(xv), tw.constant(fval)       # eager (no passes) == graph
    with tw.GradientTape() as tape:
        tape.watch([xe, fe])
        le = tw.reduce_sum(tw.nn.relu(tw.nn.conv2d(xe, fe, stride, padding)) * tw.constant(w))
    ex, ef = tape.gradient(le, [xe, fe])
    np.testing.assert_array_equal(ex.numpy(), on[1])
    np.testing.assert_array_equal(ef.numpy(), on[2])


def test_the_fused_gradients_match_float64_finite_differences(two_cores):
    xs, fs = (2, 5, 6, 3), (3, 3, 3, 2)
    x, fv, loss, gx, gf = _step(_w(xs, fs, 2, "SAME", np.float64), tw.float64, xs, fs, 2, "SAME")
    plan = _plan([loss, gx, gf], [x, fv])
    assert "FusedConv2DBackprop" in _types(plan)
    xv, fval = RNG.uniform(-1, 1, xs), RNG.uniform(-1, 1, fs)
    _, dx, df = _run(plan, [xv, fval])
    lplan = _plan([loss], [x, fv])
    for arg, grad in ((xv, dx), (fval, df)):
        np.testing.assert_allclose(grad, _central_differences(lplan, [xv, fval], arg), rtol=1e-6, atol=1e-7)


def _gradients_of_one_dy(make):
    g = tw.Graph()
    with g.as_default():
        dy = tf1.placeholder(tw.float32, [3, 9, 8, 7])
        xp = tf1.placeholder(tw.float32, [3, 9, 8, 5])
        f = tw.constant(RNG.uniform(-1, 1, (3, 3, 5, 7)).astype(np.float32))
        fetches = make(dy, xp, f)
    values = [RNG.uniform(-1, 1, (3, 9, 8, 7)).astype(np.float32), RNG.uniform(-1, 1, (3, 9, 8, 5)).astype(np.float32)]
    plan = _plan(fetches, [dy, xp])
    off = _run(_plan(fetches, [dy, xp], remapping=False), values)
    for u, v in zip(off, _run(plan, values)):
        np.testing.assert_array_equal(v, u)
    return _types(plan)


def test_other_attributes_or_a_fed_gradient_stop_the_fusion(two_cores):
    types = _gradients_of_one_dy(lambda dy, xp, f: [
        tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME"),
        tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME", dilations=2)])
    assert "FusedConv2DBackprop" not in types and "Conv2DBackpropFilter" in types
    types = _gradients_of_one_dy(lambda dy, xp, f: [
        tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME"),
        tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME")])
    assert types.count("FusedConv2DBackprop") == 1
    w = _w((3, 9, 8, 5), (3, 3, 5, 7), 1, "SAME")
    x, fv, loss, gx, gf = _step(w)
    assert "FusedConv2DBackprop" not in _types(_plan([gx], [x, fv, gf]))    # the filter gradient fed


def test_a_reader_of_the_earlier_gradient_before_the_later_one_stops_the_fusion(two_cores):
    def reader_between(dy, xp, f):
        a = tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME")
        sizes = tw.constant([3, 3, 5, 7])     # (made first: the reader of a is right before the twin)
        # this filter gradient reads a value computed from the input gradient: it must come later
        return [tw.nn.conv2d_backprop_filter(xp + a, sizes, dy, 1, "SAME")]
    types = _gradients_of_one_dy(reader_between)
    assert "FusedConv2DBackprop" not in types and "Conv2DBackpropInput" in types

    def another_twin_first(dy, xp, f):
        a = tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME")
        c = tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME")
        return [tw.nn.conv2d_backprop_filter(xp + a, [3, 3, 5, 7], dy, 1, "SAME"), c]
    types = _gradients_of_one_dy(another_twin_first)
    assert types.count("FusedConv2DBackprop") == 1 and types.count("Conv2DBackpropFilter") == 1

    def later_twin_qualifies(dy, xp, f):     # the first twin has other attributes, the second pairs
        a = tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME")
        b = tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME", dilations=2)
        return [a, b, tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME")]
    types = _gradients_of_one_dy(later_twin_qualifies)
    assert types.count("FusedConv2DBackprop") == 1 and types.count("Conv2DBackpropFilter") == 1


def test_the_filter_gradient_first_keeps_each_output_in_its_place(two_cores):
    """Filter gradient earlier in the plan: the node stands in its place, outputs swapped."""
    def filter_first(dy, xp, f):
        b = tw.nn.conv2d_backprop_filter(xp, [3, 3, 5, 7], dy, 1, "SAME")
        a = tw.nn.conv2d_backprop_input([3, 9, 8, 5], f, dy, 1, "SAME")
        return [a * 2.0, b * 3.0, a, b]
    types = _gradients_of_one_dy(filter_first)
    assert types.count("FusedConv2DBackprop") == 1
