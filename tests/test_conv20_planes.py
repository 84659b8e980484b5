"""Few-channel convolutions by planes (kernels/cpu/conv_planes.py) and their choice against im2col
(conv_choice.use_planes): values against a NumPy reference written out here, gradients against
float64 finite differences, the same bits whatever the threads, eager == graph, and which path
runs for which (scripted) timing — never how fast anything is."""
import json
import math

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import conv_choice, conv_kernels as ck, conv_planes as cp, gemm_tuning
from tensorweave.kernels.cpu.nn_util import geometry
from tensorweave.kernels.cpu.tiles import on_this_thread

RNG = np.random.default_rng(20)

#: (input [N, *S, C], ksize, strides, dilations, padding, output channels)
CASES = [((2, 7, 6, 3), (3, 3), (1, 1), (1, 1), "SAME", 5),
         ((3, 9, 8, 1), (3, 3), (1, 1), (1, 1), "VALID", 4),
         ((2, 9, 10, 3), (3, 2), (2, 3), (1, 1), "SAME", 6),
         ((2, 11, 9, 2), (3, 3), (1, 1), (2, 2), "SAME", 3),
         ((2, 8, 8, 4), (1, 1), (2, 2), (1, 1), "VALID", 7),
         ((2, 13, 3), (5,), (2,), (1,), "SAME", 4),
         ((1, 4, 5, 6, 2), (2, 3, 3), (1, 2, 1), (1, 1, 1), "SAME", 3)]


def _geometry(xs, ksize, strides, dilations, padding):
    return geometry(xs[1:-1], ksize, strides, dilations, padding)


def _tap(offs, dilations, strides, out):
    """``[N, *padded, C]`` -> the positions window offset ``offs`` reads, for every output."""
    return (slice(None),) + tuple(slice(a * d, a * d + s * (m - 1) + 1, s)
                                  for a, d, s, m in zip(offs, dilations, strides, out)) + (slice(None),)


def _references(x, f, dy, strides, dilations, padding):
    """Forward, input gradient and filter gradient in float64, one window offset at a time."""
    nd = x.ndim - 2
    ksize = f.shape[:nd]
    out, pads = _geometry(x.shape, ksize, strides, dilations, padding)
    x, f, dy = x.astype(np.float64), f.astype(np.float64), dy.astype(np.float64)
    xp = np.pad(x, [(0, 0)] + list(pads) + [(0, 0)])
    y = np.zeros((x.shape[0],) + out + (f.shape[-1],))
    dxp, df = np.zeros_like(xp), np.zeros_like(f)
    for offs in np.ndindex(*ksize):
        window = xp[_tap(offs, dilations, strides, out)]
        y += window @ f[offs]
        dxp[_tap(offs, dilations, strides, out)] += dy @ f[offs].T
        df[offs] = window.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, f.shape[-1])
    inner = (slice(None),) + tuple(slice(b, b + s) for (b, _), s in zip(pads, x.shape[1:-1])) + (slice(None),)
    return y, dxp[inner], df


def _case(xs, ksize, o, dtype=np.float32):
    x = RNG.standard_normal(xs).astype(dtype)
    f = (RNG.standard_normal(tuple(ksize) + (xs[-1], o)) / np.sqrt(math.prod(ksize) * xs[-1])).astype(dtype)
    return x, f


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ksize,strides,dilations,padding,o", CASES)
def test_planes_match_the_numpy_reference(xs, ksize, strides, dilations, padding, o, dtype):
    x, f = _case(xs, ksize, o, dtype)
    out, pads = _geometry(xs, ksize, strides, dilations, padding)
    dy = RNG.standard_normal((xs[0],) + out + (o,)).astype(dtype)
    y_ref, dx_ref, df_ref = _references(x, f, dy, strides, dilations, padding)
    got = (cp.forward(x, f, out, pads, strides, dilations),
           cp.backprop_input(xs, f, dy, out, pads, strides, dilations),
           cp.backprop_filter(x, f.shape, dy, out, pads, strides, dilations).reshape(f.shape))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, r in zip(got, (y_ref, dx_ref, df_ref)):
        assert g.dtype == dtype and g.shape == r.shape
        assert np.abs(g - r).max() <= tol * np.abs(r).max()


def test_gradients_match_float64_finite_differences():
    xs, ksize, strides, dilations, padding, o = (2, 7, 6, 3), (3, 3), (2, 1), (1, 1), "SAME", 4
    x, f = _case(xs, ksize, o, np.float64)
    out, pads = _geometry(xs, ksize, strides, dilations, padding)
    w = RNG.standard_normal((xs[0],) + out + (o,))            # loss = sum(w * conv(x, f))

    def loss(x_, f_):
        return float(np.sum(w * cp.forward(x_, f_, out, pads, strides, dilations)))
    dx = cp.backprop_input(xs, f, w, out, pads, strides, dilations)
    df = cp.backprop_filter(x, f.shape, w, out, pads, strides, dilations).reshape(f.shape)
    eps = 1e-6
    for arr, grad, is_x in ((x, dx, True), (f, df, False)):
        for flat in RNG.choice(arr.size, 12, replace=False):
            idx = np.unravel_index(flat, arr.shape)
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args = ((plus, f), (minus, f)) if is_x else ((x, plus), (x, minus))
            numeric = (loss(*args[0]) - loss(*args[1])) / (2 * eps)
            assert abs(numeric - grad[idx]) <= 1e-6 * max(1.0, abs(numeric))


def test_the_fused_bias_and_relu_are_biasadd_then_relu():
    xs, ksize = (3, 8, 8, 3), (3, 3)
    x, f = _case(xs, ksize, 6)
    out, pads = _geometry(xs, ksize, (1, 1), (1, 1), "SAME")
    bias = RNG.standard_normal(6).astype(np.float32)
    plain = cp.forward(x, f, out, pads, (1, 1), (1, 1))
    np.testing.assert_array_equal(cp.forward(x, f, out, pads, (1, 1), (1, 1), bias, False), plain + bias)
    np.testing.assert_array_equal(cp.forward(x, f, out, pads, (1, 1), (1, 1), bias, True),
                                  np.maximum(plain + bias, 0))


def test_tiles_on_two_threads_or_one_give_the_same_bits(monkeypatch):
    xs, ksize, o = (24, 16, 16, 3), (3, 3), 8       # 24 images: several tiles (conv_tiles.split)
    x, f = _case(xs, ksize, o)
    out, pads = _geometry(xs, ksize, (1, 1), (1, 1), "SAME")
    dy = RNG.standard_normal((xs[0],) + out + (o,)).astype(np.float32)

    def three():
        return (cp.forward(x, f, out, pads, (1, 1), (1, 1)),
                cp.backprop_input(xs, f, dy, out, pads, (1, 1), (1, 1)),
                cp.backprop_filter(x, f.shape, dy, out, pads, (1, 1), (1, 1)))
    # Each tile product's one-thread library (gemm._serial_library, timed on a class's first
    # product) chosen first, on this thread: timed during the threaded call, both tile threads
    # timed the filter gradient's class at once, and near-equal timings could pick MKL on one and
    # OpenBLAS on the other, so that call's tiles mixed libraries (one run in three: 133 of 216
    # elements off by up to 4.6e-05; gemm._serial_library has no claim on a class being timed).
    # Compared here: the threads, with the choices made.
    with on_this_thread():
        three()
    threaded = three()
    with on_this_thread():
        alone = three()
    for a, b in zip(threaded, alone):
        np.testing.assert_array_equal(a, b)
    # whichever tile a thread finishes first (here: the last tile first, every time)
    real = cp.over_tiles

    def last_first(n, per_image, tile_bytes, run, blas=True):
        tiles = []
        real(n, per_image, tile_bytes, lambda *args: tiles.append(args), blas)
        for args in reversed(tiles):
            run(*args)
    monkeypatch.setattr(cp, "over_tiles", last_first)
    with on_this_thread():
        for a, b in zip(three(), alone):
            np.testing.assert_array_equal(a, b)


# ---- the choice (conv_choice.use_planes) ------------------------------------------------------------
@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, and a scripted clock: ``times[backend]``
    is the seconds every timed call of that backend takes."""
    monkeypatch.setattr(conv_choice, "PLANES_MODE", "auto")
    times = {"planes": 1e-3, "im2col": 1e-3}
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    _paths(*_choice_case())                          # col2im compiled: the input gradient's timing counts
    conv_choice.reset()
    yield times, calls, tmp_path / "conv-tuning.json"
    conv_choice.reset()


S = [1, 1]
PAD = ((1, 1), (1, 1))


def _choice_case(c=3):
    x, f = _case((3, 9, 10, c), (3, 3), 8)
    return x, f, RNG.standard_normal((3, 9, 10, 8)).astype(np.float32)


def _three(x, f, dy):
    return (ck.conv_forward(x, f, S, S, "SAME", "NHWC"),
            ck.conv_backprop_input(list(x.shape), f, dy, S, S, "SAME", "NHWC"),
            ck.conv_backprop_filter(x, list(f.shape), dy, S, S, "SAME", "NHWC"))


def _paths(x, f, dy):
    out = x.shape[1:3]
    return {"planes": (cp.forward(x, f, out, PAD, S, S), cp.backprop_input(x.shape, f, dy, out, PAD, S, S),
                       cp.backprop_filter(x, f.shape, dy, out, PAD, S, S).reshape(f.shape)),
            "im2col": (ck._dense_forward(x, f, out, PAD, S, S),
                       ck._dense_backprop_input(x.shape, f, dy, out, PAD, S, S),
                       ck._dense_backprop_filter(x, f.shape, dy, out, PAD, S, S).reshape(f.shape))}


@pytest.mark.parametrize("faster", ["planes", "im2col"])
def test_the_faster_path_runs_and_is_remembered(scripted, faster):
    times, calls, path = scripted
    times["im2col" if faster == "planes" else "planes"] = 1e-2
    x, f, dy = _choice_case()
    got, want = _three(x, f, dy), _paths(x, f, dy)[faster]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)          # the chosen path's own bits
    assert set(calls) == {"planes", "im2col"}
    saved = json.loads(path.read_text())["choices"]
    assert sorted(saved) == sorted(conv_choice.planes_class(k, 3, (9, 10), 3, 8, (3, 3), PAD, S, S)
                                   for k in conv_choice.KINDS)
    assert {e["backend"] for e in saved.values()} == {faster}
    timed = len(calls)
    conv_choice.reset()                              # another process on this machine: the file
    for g, w in zip(_three(x, f, dy), want):
        np.testing.assert_array_equal(g, w)
    assert len(calls) == timed


def test_a_small_lead_keeps_im2col(scripted):
    times, _, _ = scripted
    times["planes"] = 0.95e-3                        # 5 % faster: under gemm_tuning.MARGIN
    x, f, dy = _choice_case()
    for g, w in zip(_three(x, f, dy), _paths(x, f, dy)["im2col"]):
        np.testing.assert_array_equal(g, w)


def test_many_channels_are_not_candidates(scripted):
    _, calls, path = scripted
    x, f, dy = _choice_case(c=cp.MAX_CHANNELS + 1)
    ck.conv_forward(x, f, [2, 2], S, "SAME", "NHWC")   # (stride 2: not Winograd's either)
    assert not calls and not path.exists()


@pytest.mark.parametrize("mode,want", [("0", False), ("1", True), ("always", True), ("never", False)])
def test_overrides_skip_the_timing(monkeypatch, mode, want):
    monkeypatch.setattr(conv_choice, "PLANES_MODE", mode)

    def runners():
        raise AssertionError("must not be timed")
    assert conv_choice.use_planes("forward", 4, (8, 8), 3, 8, (3, 3), PAD, S, S, runners) is want


def test_planes_classes_keep_the_geometry_apart():
    pc = conv_choice.planes_class
    base = pc("forward", 64, (32, 32), 3, 16, (3, 3), PAD, S, S)
    assert base == "planes-forward:n4,s6x6,c3,o5,k3x3,st1x1,d1x1,p1111"
    assert base == pc("forward", 128, (32, 32), 3, 16, (3, 3), PAD, S, S)
    others = [pc("forward", 64, (32, 32), 1, 16, (3, 3), PAD, S, S),
              pc("forward", 64, (32, 32), 3, 16, (5, 5), PAD, S, S),
              pc("forward", 64, (32, 32), 3, 16, (3, 3), PAD, (2, 2), S),
              pc("filter", 64, (32, 32), 3, 16, (3, 3), PAD, S, S),
              pc("forward", 64, (32, 32), 3, 16, (3, 3), PAD, S, (2, 2)),
              pc("forward", 1, (32, 32), 3, 16, (3, 3), PAD, S, S)]
    assert len({base, *others}) == 7


def test_keras_conv_eager_graph_and_gradients_agree(monkeypatch):
    import tensorweave as tw
    monkeypatch.setattr(conv_choice, "PLANES_MODE", "1")
    x = tw.constant(RNG.standard_normal((4, 10, 10, 3)).astype(np.float32))
    layer = tw.keras.layers.Conv2D(8, 3, padding="same", activation="relu")

    def run(t):
        with tw.GradientTape() as tape:
            tape.watch(t)
            loss = tw.reduce_sum(layer(t) ** 2)
        return [loss] + tape.gradient(loss, [t] + layer.trainable_weights)
    eager = [v.numpy() for v in run(x)]
    graph = [v.numpy() for v in tw.function(run)(x)]
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(g, e)
    w, b = [v.numpy().astype(np.float64) for v in layer.weights]
    y_ref = np.maximum(_references(x.numpy(), w, np.zeros((4, 10, 10, 8)), S, S, "SAME")[0] + b, 0)
    assert np.abs(np.sum(y_ref ** 2) - eager[0]) <= 1e-5 * np.sum(y_ref ** 2)


def test_candidates_are_one_group_few_channel_float_convolutions():
    assert cp.applies(np.dtype(np.float32), cp.MAX_CHANNELS, 1)
    assert cp.applies(np.dtype(np.float64), 1, 1)
    assert not cp.applies(np.dtype(np.float32), cp.MAX_CHANNELS + 1, 1)
    assert not cp.applies(np.dtype(np.float32), 2, 2)
    assert not cp.applies(np.dtype(np.int32), 2, 1)


def test_each_backend_is_timed_on_its_own_path_and_a_slice_of_the_batch(scripted, monkeypatch):
    times, _, _ = scripted
    ran, timed = [], []
    for mod, name, tag in ((cp, "forward", "planes"), (ck, "_dense_forward", "im2col")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda x, *a, _real=real, _tag=tag, **k: (ran.append((_tag, x.shape[0])),
                                                                               _real(x, *a, **k))[1])

    def clock(backend, run):                         # what ran while ``backend`` was timed
        before = len(ran)
        run()
        timed.append((backend, ran[before:]))
        return times[backend]
    monkeypatch.setattr(gemm_tuning, "_time_call", clock)
    x, f = _case((20, 6, 6, 2), (3, 3), 4)
    ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    assert timed and all(paths == [(backend, 8)] for backend, paths in timed)
    assert ran[-1] == ("im2col", 20)                 # a tie: the incumbent, on the whole batch
    times["im2col"] = 1e-2
    x, f = _case((20, 6, 6, 1), (3, 3), 4)           # (another class: the tie is on file)
    ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    assert ran[-1] == ("planes", 20)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_channels_first_and_half_precision_through_the_kernels(monkeypatch, dtype):
    monkeypatch.setattr(conv_choice, "PLANES_MODE", "1")
    x, f = _case((3, 7, 8, 3), (3, 3), 5)
    dy = RNG.standard_normal((3, 4, 4, 5)).astype(np.float32)
    y_ref, dx_ref, df_ref = _references(x, f, dy, (2, 2), S, "SAME")
    xc, dyc = x.transpose(0, 3, 1, 2).astype(dtype), dy.transpose(0, 3, 1, 2).astype(dtype)
    got = (ck.conv_forward(xc, f.astype(dtype), [2, 2], S, "SAME", "NCHW").transpose(0, 2, 3, 1),
           ck.conv_backprop_input([3, 3, 7, 8], f.astype(dtype), dyc, [2, 2], S, "SAME", "NCHW").transpose(0, 2, 3, 1),
           ck.conv_backprop_filter(xc, list(f.shape), dyc, [2, 2], S, "SAME", "NCHW"))
    tol = 1e-5 if dtype == np.float32 else 1e-2
    for g, r in zip(got, (y_ref, dx_ref, df_ref)):
        assert g.dtype == dtype and g.shape == r.shape
        assert np.abs(g.astype(np.float64) - r).max() <= tol * np.abs(r).max()
