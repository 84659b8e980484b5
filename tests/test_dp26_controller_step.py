"""The planned data-parallel step's per-step work made once (issue 13, session 22 dp26): the
controller's reads of the BLAS counts through the libraries' own getters (``rank_threads._reader``),
numba's count functions looked up once, the fetches' layouts worked out once, the loss pad's shapes
once per piece shape (``plan_ops._local_boxing``). Nothing here may change a bit: the planned MLP
on 1, 2 and 3 ranks (an uneven batch) gives the losses and weights of the general paths."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tensorweave as tw
from tensorweave.core.sbp import Partial, S
from tensorweave.distribute import plan_ops, rank_threads
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
from tensorweave.distribute.layout import Placement, shard_slices
from tensorweave.kernels import threads


def test_readers_read_what_threadpoolctl_reads():
    libs = threads._blas()
    if not libs:
        pytest.skip("no BLAS library found by threadpoolctl")
    for limit in (1, 2):
        with threadpool_limits(limit):
            for lib in libs:
                assert rank_threads._reader(lib)() == lib.num_threads
    assert rank_threads._reader(libs[0]) is rank_threads._reader(libs[0])     # looked up once
    for lib in libs:        # MKL's C getter and gemm's of NumPy's OpenBLAS, not threadpoolctl's property
        if lib.internal_api == "mkl":
            assert _address(rank_threads._reader(lib)) == _address(lib.dynlib.MKL_Get_Max_Threads)
        elif lib.internal_api == "openblas" and rank_threads._numpy_openblas_getter(lib) is not None:
            assert _address(rank_threads._reader(lib)) == _address(rank_threads._numpy_openblas_getter(lib))
    with threadpool_limits(1):
        n, counts = rank_threads.controller_counts(2)
    assert n == 1 and all(lib.internal_api == "mkl" and k == 1 for lib, k in counts)
    for mkl, others in ((2, 1), (1, 2)):        # each library read for itself (limits by prefix)
        limits = {lib.prefix: mkl if lib.internal_api == "mkl" else others for lib in libs}
        with threadpool_limits(limits=limits):
            n, counts = rank_threads.controller_counts(1)
            assert n == max(lib.num_threads for lib in libs)
            assert counts == [(lib, lib.num_threads) for lib in libs if lib.internal_api == "mkl"]


def _address(fn):
    """The C function behind a ctypes function (dp27 calls it through another ctypes type, holding the GIL)."""
    import ctypes
    return ctypes.cast(fn, ctypes.c_void_p).value


class _Lib:
    def __init__(self, api, count, layer=None):
        self.internal_api, self.num_threads, self.threading_layer = api, count, layer


def test_another_library_is_read_through_threadpoolctl():
    blis, omp = _Lib("blis", 3), _Lib("openblas", 5, "openmp")
    assert rank_threads._reader(blis)() == 3
    assert rank_threads._reader(omp)() == 5          # an OpenBLAS gemm does not read: threadpoolctl's
    blis.num_threads = 4
    assert rank_threads._reader(blis)() == 4          # read live each time
    other = _Lib("blis", 7)
    assert rank_threads._reader(other)() == 7         # its own reader, not another object's
    stale = _Lib("blis", 9)         # an entry left under its id by a library object since freed
    rank_threads._readers[id(stale)] = (object(), lambda: -1)
    assert rank_threads._reader(stale)() == 9
    rank_threads._readers.pop(id(stale), None)
    rank_threads._readers.pop(id(blis), None)
    rank_threads._readers.pop(id(omp), None)
    rank_threads._readers.pop(id(other), None)


def test_numba_count_functions_match_numba():
    import numba
    want = numba.get_num_threads()          # (launches numba's threads)
    get, put = rank_threads._numba_counts()
    assert get() == want
    assert rank_threads._numba_counts() == (get, put) == rank_threads._numba_launched[0]   # looked up once
    put(want)
    assert numba.get_num_threads() == want


@pytest.mark.parametrize("kind, dtype", [("sum", np.float32), ("max", np.int32), ("min", np.bool_),
                                         ("prod", np.float64), ("max", np.uint8), ("sum", np.int64)])
def test_one_pad_step_serves_changing_piece_shapes(kind, dtype):
    """The step caches its padded shapes per piece shape: pieces of other lengths, dtypes and ranks in
    turn (a re-planned step) still give the general path's pieces."""
    p = Placement("cpu", [0, 1, 2])
    for n in (7, 3, 7, 1, 12):
        plan = plan_boxing((n, 2), dtype, p, (S(0),), (Partial(kind),))
        value = (np.arange(2 * n).reshape(n, 2) % 5 + 1).astype(dtype)
        for index, where in enumerate(shard_slices((n, 2), p, (S(0),))):
            step = plan_ops._local_boxing(plan, index)
            for _ in range(2):
                got = step(value[where])
                want = run_boxing_on_rank(plan, index, value[where], None)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
    wide = plan_boxing((4, 6), np.float32, Placement("cpu", [[0, 1], [2, 3]]), (S(0), S(1)),
                       (Partial("sum"), Partial("max")))
    step = plan_ops._local_boxing(wide, 3)
    piece = np.full((2, 3), 2.5, np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(step(piece), run_boxing_on_rank(wide, 3, piece, None))
    np.testing.assert_array_equal(step(piece[:1]), run_boxing_on_rank(wide, 3, piece[:1], None))
    cols = plan_boxing((4, 6), np.int32, Placement("cpu", [0, 1]), (S(1),), (Partial("min"),))
    step = plan_ops._local_boxing(cols, 1)
    for rows in (4, 2, 4, 1):           # the same step, pieces of other lengths along the axis it keeps
        piece = np.arange(3 * rows, dtype=np.int32).reshape(rows, 3)
        got, want = step(piece), run_boxing_on_rank(cols, 1, piece, None)
        assert got.shape == want.shape == (rows, 6)
        np.testing.assert_array_equal(got, want)


def _train(ranks, batch, steps=4):
    rng = np.random.default_rng(5)
    sizes = (12, 16, 5)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    weights = [(rng.standard_normal((a, b)) * 0.3).astype(np.float32) for a, b in zip(sizes, sizes[1:])]
    p = tw.placement("cpu", ranks=list(range(ranks)))
    params = [tw.Variable(w, placement=p, sbp=tw.sbp.broadcast) for w in weights]
    params += [tw.Variable(np.zeros(b, np.float32), placement=p, sbp=tw.sbp.broadcast) for b in sizes[1:]]
    xg = tw.constant(x).to_global(placement=p, sbp=tw.sbp.split(0))
    yg = tw.constant(y).to_global(placement=p, sbp=tw.sbp.split(0))
    opt = tw.keras.optimizers.SGD(0.1)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(xg, params[0]) + params[2])
            logits = tw.matmul(h, params[1]) + params[3]
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=yg, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss, logits
    got = []
    for _ in range(steps):
        loss, logits = step()
        assert all(type(piece) is np.ndarray for piece in loss._pieces + logits._pieces)
        got.append((loss.numpy(), logits.numpy()))
    return got, [v.numpy() for v in params]


@pytest.mark.parametrize("ranks, batch", [(1, 8), (2, 8), (3, 7)])
def test_planned_training_keeps_its_bits(ranks, batch, monkeypatch):
    """The step as it runs now against the general paths (the loss pad by ``run_boxing_on_rank``, the
    counts through threadpoolctl, the fetches' layouts looked up each call): the same bits."""
    with threadpool_limits(1):
        fast = _train(ranks, batch)
        monkeypatch.setattr(plan_ops, "_local_boxing", lambda parsed, rank: None)
        monkeypatch.setattr(rank_threads, "_reader", lambda lib: lambda: lib.num_threads)
        slow = _train(ranks, batch)
    for (fl, fo), (sl, so) in zip(fast[0], slow[0]):
        np.testing.assert_array_equal(fl, sl)
        np.testing.assert_array_equal(fo, so)
    for a, b in zip(fast[1], slow[1]):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(fast[0][-1][0]) and fast[0][-1][0] < fast[0][0][0]
