"""The ResNet step's one-thread passes split by rows over the intra-op threads (issue 18, session
19): ``AddN`` (``split_passes.add_n``: the gradient sums at the residual blocks), ``ReluGrad``
(``nn_kernels._relu_grad``) and the fused elementwise loops (``split_passes.flat_by_rows``:
the residual add + ReLU). Each gives the bits of its whole pass (NaN, inf, negative zero, dead
units), splits only where ``split_passes.parts_for`` allows, and eager == graph; the gradients
match float64 finite differences. The batch norm's tiles (no BLAS in them) leave BLAS's thread
count alone (``tiles.over_tiles(..., blas=False)``). No timing."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm, nn_kernels, nn_loops, split_passes
from test_graph_passes import ALL_ON, _central_differences, _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(2319)
SHAPE = (6, 5, 7, 9)           # 7.6 KiB of float32: split only with the threshold forced to 0


@pytest.fixture
def forced(monkeypatch):
    """Every pass split over two threads; the row blocks handed out are counted."""
    monkeypatch.setitem(split_passes._limit, "bytes", 0)
    monkeypatch.setitem(split_passes.ENABLED, "on", True)
    monkeypatch.setattr(split_passes, "LADDER", (1,) + split_passes.LADDER[1:])
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    shared = []
    real = gemm.share_tasks

    def counting(tasks, parts):
        shared.append(len(tasks))
        return real(tasks, parts)
    monkeypatch.setattr(gemm, "share_tasks", counting)
    return shared


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _specials(a):
    a.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -0.0, 1e30]
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count", [2, 3, 4])
def test_add_n_split_has_the_bits_of_the_whole_sum(forced, dtype, count):
    xs = [_specials((RNG.standard_normal(SHAPE) * 10.0 ** RNG.integers(-3, 4)).astype(dtype)) for _ in range(count)]
    want = xs[0] + xs[1]
    for x in xs[2:]:
        want = want + x                               # the order AddN adds in: ((x0 + x1) + x2) + ...
    got = split_passes.add_n(*xs)
    assert _same(got, want)
    assert forced == [4]                               # split: two blocks per thread
    assert all(not np.shares_memory(got, x) for x in xs)


def test_add_n_stays_whole_for_broadcasts_mixed_dtypes_ints_and_scalars(forced):
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    for args in ((x, x[:1]), (x, x.astype(np.float64)), (x.astype(np.int32), x.astype(np.int32)),
                 (np.float32(2), np.float32(3)), (np.asarray(x[0, 0, 0, 0]), np.asarray(x[0, 0, 0, 1]))):
        want = np.add(args[0], args[1])
        got = split_passes.add_n(*args)
        assert isinstance(got, np.ndarray) and _same(got, np.asarray(want))
    assert forced == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_grad_split_has_the_bits_of_the_whole_pass(forced, dtype):
    g = _specials(RNG.standard_normal(SHAPE).astype(dtype))
    f = RNG.standard_normal(SHAPE).astype(dtype)
    f.reshape(-1)[[1, 6, 7]] = [-1.0, np.nan, 0.0]      # a dead unit with an inf gradient: 0, not nan
    whole = np.empty_like(g)
    nn_loops.relu_grad(g.reshape(-1), f.reshape(-1), whole.reshape(-1))
    got = nn_kernels._relu_grad(g, f)
    assert _same(got, whole) and _same(got, np.where(f > 0, g, np.zeros((), dtype)))
    assert forced == [4]
    view = np.broadcast_to(g[:, :1], SHAPE)             # (the global pool's gradient: copied first)
    assert _same(nn_kernels._relu_grad(view, f), np.where(f > 0, view, np.zeros((), dtype)))
    assert _same(nn_kernels._relu_grad(g[:0], f[:0]), g[:0])     # empty: nothing to split


def test_not_split_under_the_measured_threshold(monkeypatch):
    monkeypatch.setitem(split_passes._limit, "bytes", 1 << 40)
    calls = []
    monkeypatch.setattr(split_passes, "over_rows", lambda *a: calls.append(a))
    x = RNG.standard_normal((64, 32, 32, 4)).astype(np.float32)      # 1 MiB
    assert _same(split_passes.add_n(x, x), x + x)
    assert _same(nn_kernels._relu_grad(x, x), np.maximum(x, 0))
    assert calls == []


def _loss(x, r, c1, c2):
    h = tw.nn.relu(x * tw.constant(0.5, x.dtype) + r)
    return h, tw.reduce_sum(h * c1) + tw.reduce_sum(x * c2)


def _residual(dtype, shape):
    """``h = relu(x * 0.5 + r)`` (the residual add and ReLU: one fused loop), ``loss = sum(h * c1) +
    sum(x * c2)``: ``ReluGrad`` and an ``AddN`` (``x``'s two paths) in its gradients."""
    c1, c2 = (RNG.standard_normal(shape).astype(dtype.np_dtype) for _ in range(2))
    g = tw.Graph()
    with g.as_default():
        x, r = tf1.placeholder(dtype, list(shape)), tf1.placeholder(dtype, list(shape))
        h, loss = _loss(x, r, tw.constant(c1), tw.constant(c2))
        gx, gr = tw.gradients(loss, [x, r])
    return [x, r], [h, gx, gr, loss], (c1, c2)


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_a_plan_with_split_passes_has_the_unsplit_plans_bits_and_eagers(forced, dtype):
    feeds, fetches, consts = _residual(dtype, SHAPE)
    npdt = dtype.np_dtype
    values = [_specials(RNG.standard_normal(SHAPE).astype(npdt)), RNG.standard_normal(SHAPE).astype(npdt)]
    plan = _plan(fetches, feeds, **ALL_ON)
    assert {"FusedElementwise", "AddN", "ReluGrad"} <= set(_types(plan))
    split = _run(plan, values)
    assert len(forced) >= 2                             # the fused loop and the gradient passes split
    split_passes.ENABLED["on"] = False
    whole = _run(_plan(fetches, feeds, **ALL_ON), values)
    split_passes.ENABLED["on"] = True
    for a, b in zip(split, whole):
        assert _same(a, b)
    xe, re_ = (tw.constant(v) for v in values)          # eager (no fusion, stock kernels) == graph
    with tw.GradientTape() as tape:
        tape.watch([xe, re_])
        he, le = _loss(xe, re_, *(tw.constant(c) for c in consts))
    got = [he.numpy()] + [t.numpy() for t in tape.gradient(le, [xe, re_])] + [le.numpy()]
    for a, b in zip(got, split):
        assert _same(a, b)


def test_the_gradients_match_float64_finite_differences(forced):
    shape = (4, 3, 2)
    feeds, fetches, _ = _residual(tw.float64, shape)
    values = [RNG.standard_normal(shape), RNG.standard_normal(shape)]
    plan, lplan = _plan(fetches, feeds, **ALL_ON), _plan(fetches[3:], feeds, **ALL_ON)
    grads = _run(plan, values)[1:3]
    for k, grad in enumerate(grads):
        np.testing.assert_allclose(grad, _central_differences(lplan, values, values[k]), rtol=1e-5, atol=1e-6)


def test_blas_free_tiles_leave_blas_threads_alone(monkeypatch):
    """``over_tiles(..., blas=False)`` (the batch norm's passes) splits its tiles as before but
    never sets BLAS's thread count; the default still holds BLAS to one thread."""
    import contextlib
    from tensorweave.kernels.cpu import batch_norm_kernels as bnk
    from tensorweave.kernels.cpu import tiles
    entered = []

    @contextlib.contextmanager
    def counted():
        entered.append(1)
        yield
    monkeypatch.setattr(tiles.threads, "single_threaded_blas", counted)
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: 2)
    monkeypatch.setattr(tiles.threads, "cores", lambda: 2)
    out = np.zeros(8)

    def run(b0, b1, _scratch):
        out[b0:b1] = np.arange(b0, b1)
    tiles.over_tiles(8, 1, 1, run, blas=False)
    assert entered == [] and out.tolist() == list(range(8))
    tiles.over_tiles(8, 1, 1, run)
    assert entered == [1]
    x = RNG.standard_normal((40, 3)).astype(np.float32)
    s, o = np.ones(3, np.float32), np.zeros(3, np.float32)
    whole = bnk._batch_norm_training(x, s, o, 1e-3, "NHWC", relu=True)
    monkeypatch.setattr(bnk, "PASS_ROWS", 7)         # several elementwise tiles, on two threads
    entered.clear()
    split = bnk._batch_norm_training(x, s, o, 1e-3, "NHWC", relu=True)
    assert entered == [] and all(_same(a, b) for a, b in zip(whole, split))


def test_a_fused_loop_splits_its_flat_arrays_by_rows_and_passes_scalars_through(forced):
    from tensorweave.kernels.cpu import fused_loop_kernels as flk
    out, a, seen = np.zeros(int(np.prod(SHAPE))), np.arange(np.prod(SHAPE), dtype=np.float64), []

    def loop(o, x, s):
        o[:] = x * s
        seen.append(len(o))
    split_passes.flat_by_rows(loop, [out, a, np.float64(2)], SHAPE, out.nbytes)
    assert forced == [4] and len(seen) == 4 and sum(seen) == out.size and np.array_equal(out, a * 2)
    split_passes.flat_by_rows(loop, [out, a, np.float64(3)], (), 0)      # a 0-d node: one call, whole
    assert forced == [4] and np.array_equal(out, a * 3)
