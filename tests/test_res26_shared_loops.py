"""Two mends of session 22 (res26, issue 18), same bits as before:

- the batch norm's three gradient-sum loops (``grad_sums``, ``grad_sums_relu``,
  ``grad_sums_relu_select``) share one accumulation (``batch_norm_loops._add_group`` /
  ``_add_row``): on the same selected gradient they give the same sums bit for bit, with the
  row groups of four and every remainder, NaN, inf and negative zero; each still equals its twin;
- ``tiles.over_tiles`` cancels a helper that has not started when the calling thread ran out of
  tiles (``conv_batch1.over_bands`` is now a call of it): every tile runs once, a started helper
  is waited for, ``share`` caps the threads, BLAS is left alone with ``blas=False``."""
import threading

import numpy as np
import pytest

import served_loop

from tensorweave.kernels import threads
from tensorweave.kernels.cpu import batch_norm_loops as loops
from tensorweave.kernels.cpu import conv_batch1, tiles

RNG = np.random.default_rng(2622)


def _same(p, q):
    return p.dtype == q.dtype and p.shape == q.shape and p.tobytes() == q.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 4, 7, 38])
def test_the_three_gradient_sums_agree_bit_for_bit_and_with_their_twins(rows, dtype):
    c = 6
    g, f, x = ((RNG.standard_normal((rows, c)) * 3 + 0.5).astype(dtype) for _ in range(3))
    if rows > 3:
        g[1, 2], f[2, 1], x[3, 0], g[0, 5] = np.inf, np.nan, -0.0, -0.0
        f[0, 3] = 0.0                                    # a zero feature is dead (not > 0)
    mean = RNG.standard_normal(c)
    sel = np.where(f > 0, g, np.zeros((), dtype))
    cases = ((loops.grad_sums, [sel, x, mean], ()),
             (loops.grad_sums_relu, [g, f, x, mean], ()),
             (loops.grad_sums_relu_select, [g, f, x, np.full((rows, c), 7, dtype), mean], (3,)))
    sums = []
    for loop, args, written in cases:
        got = []
        for fn in (served_loop.compiled(loop, *args, np.ones(c), np.ones(c)), loop.twin):
            copied = [a.copy() for a in args] + [np.ones(c), np.ones(c)]   # (sums start from 1)
            fn(*copied)
            got.append([copied[i] for i in written] + copied[-2:])
        for p, q in zip(*got):
            assert _same(p, q), loop.py_func.__name__
        if written:
            assert _same(got[0][0], sel)                 # the select it writes
        sums.append(got[0][-2:])
    for other in sums[1:]:
        assert _same(sums[0][0], other[0]) and _same(sums[0][1], other[1])
    # (and the sums are the float64 sums they stand for, to rounding)
    with np.errstate(invalid="ignore"):
        want = 1 + sel.astype(np.float64).sum(0), 1 + (sel * (x.astype(np.float64) - mean)).sum(0)
    for p, q in zip(sums[0], want):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-9)


class _Pool:
    """An intra-op pool whose helpers never start (cancelled) or run at once when waited for."""

    def __init__(self, starts):
        self.starts, self.submitted, self.waited = starts, 0, 0

    def submit(self, fn):
        pool = self
        pool.submitted += 1

        class Future:
            def cancel(self):
                return not pool.starts

            def result(self):
                pool.waited += 1
                fn()
        return Future()


def _runtime(monkeypatch, pool, blas_threads=2):
    monkeypatch.setattr(tiles, "current_runtime", lambda: type("R", (), {"intra_op_pool": lambda self: pool})())
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: blas_threads)
    monkeypatch.setattr(tiles.threads, "cores", lambda: 2)


@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("starts", [False, True])
def test_over_tiles_cancels_a_helper_not_started_and_waits_for_a_started_one(monkeypatch, starts, blas):
    pool, ran = _Pool(starts), []
    _runtime(monkeypatch, pool)
    tiles.over_tiles(7, 2, 4, lambda b0, b1, scratch: ran.append((b0, b1)), blas=blas)   # 2 images a tile
    assert sorted(ran) == [(0, 2), (2, 4), (4, 6), (6, 7)]      # every tile once
    assert pool.submitted == 1 and pool.waited == (1 if starts else 0)


@pytest.mark.parametrize("blas", [True, False, None])
def test_blas_is_set_to_one_thread_only_where_asked(monkeypatch, blas):
    entered = []
    monkeypatch.setattr(threads, "single_threaded_blas", lambda: entered.append(1) or _nothing())
    _runtime(monkeypatch, _Pool(True))
    asked = {} if blas is None else {"blas": blas}          # (None: the default, BLAS on one thread)
    tiles.over_tiles(4, 1, 1, lambda b0, b1, scratch: None, **asked)
    assert entered == ([] if blas is False else [1])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("share, helpers", [(1, 0), (2, 1), (5, 1)])
def test_share_caps_the_threads_instead_of_the_intra_op_count(monkeypatch, share, helpers):
    pool = _Pool(True)
    _runtime(monkeypatch, pool, blas_threads=1)          # (the intra-op count would say: none)
    tiles.over_tiles(6, 1, 3, lambda b0, b1, scratch: None, share=share)
    assert pool.submitted == helpers                     # (two tiles: one helper at most)


def test_over_bands_runs_on_the_calling_threads_share_without_touching_blas(monkeypatch):
    pool, ran, calls = _Pool(False), [], []
    _runtime(monkeypatch, pool, blas_threads=1)
    monkeypatch.setattr(conv_batch1.gemm, "threads_here", lambda: 2)
    monkeypatch.setattr(threads, "single_threaded_blas", lambda: calls.append(1) or _nothing())
    conv_batch1.over_bands(5, 2, lambda r0, r1, scratch: ran.append((r0, r1, threading.get_ident())))
    assert [r[:2] for r in ran] == [(0, 2), (2, 4), (4, 5)] and pool.submitted == 1 and pool.waited == 0
    assert calls == [] and {r[2] for r in ran} == {threading.get_ident()}
    monkeypatch.setattr(conv_batch1.gemm, "threads_here", lambda: None)     # (no OpenBLAS: one thread)
    conv_batch1.over_bands(5, 2, lambda r0, r1, scratch: None)
    assert pool.submitted == 1
