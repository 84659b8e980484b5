"""A stack of products (``gemm._batched``) on one thread or on MKL's threads by its size against a
threshold measured per machine (kernels/cpu/stack_route.py, issue 18 session 17, tx21): the walk
from scripted timings (no clock), the tuner's named threshold per dtype with the 2-D products'
threshold as its default, no walk for stacks above anything it could answer, and both ways equal
to float64 NumPy, the one-thread way with the bits of ``matmul(one_thread=True)``."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning, stack_route

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
RNG = np.random.default_rng(21)
needs_batch = pytest.mark.skipif(not gemm._gemm_batch or not gemm._gemm_serial,
                                 reason="MKL's batched GEMM (and its per-thread setting) is not loaded")


def _ways(monkeypatch):
    """The calls of the one-thread library choice (``gemm._serial_library``), by stack count."""
    ways = []
    real = gemm._serial_library

    def recorded(a, b, out, op_a, op_b, m, n, k, run_mkl, count=1, seen=None):
        ways.append(count)
        return real(a, b, out, op_a, op_b, m, n, k, run_mkl, count, seen)
    monkeypatch.setattr(gemm, "_serial_library", recorded)
    monkeypatch.setattr(gemm, "_share", lambda: 2)       # (an xdist worker's share is one thread)
    return ways


@needs_batch
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-14)])
@pytest.mark.parametrize("limit,one", [(0, False), (10 ** 9, True)])
def test_a_stack_under_the_threshold_runs_on_one_thread(monkeypatch, dtype, tol, limit, one):
    monkeypatch.setattr(stack_route, "_limit", {F32: limit, F64: limit})
    ways = _ways(monkeypatch)
    a = RNG.standard_normal((6, 40, 32)).astype(dtype)
    b = RNG.standard_normal((6, 32, 48)).astype(dtype)
    got = gemm.matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.dtype == a.dtype and np.max(np.abs(got - want) / (np.abs(want) + 1)) < tol
    assert (6 in ways) == one
    if one:     # the bits of the caller's own one-thread request
        np.testing.assert_array_equal(got, gemm.matmul(a, b, one_thread=True))


@needs_batch
def test_the_threshold_is_exclusive_and_read_per_dtype(monkeypatch):
    work = 4 * 40 * 48 * 32
    ways = _ways(monkeypatch)
    a, b = RNG.standard_normal((4, 40, 32)), RNG.standard_normal((4, 32, 48))
    monkeypatch.setattr(stack_route, "_limit", {F64: work, F32: 10 ** 9})
    gemm.matmul(a, b)                                   # at the threshold: the threads
    assert ways == []
    monkeypatch.setattr(stack_route, "_limit", {F64: work + 1, F32: 0})
    gemm.matmul(a, b)
    assert set(ways) == {4}


def test_the_walk_falls_to_each_rung_the_threads_win(monkeypatch):
    """Scripted timings: the threads win by half from 48 on, lose below; the walk stops at 32."""
    sides = []

    def runners(dtype, side):
        sides.append(side)
        return {"serial": lambda: side, "threaded": lambda: side}
    monkeypatch.setattr(stack_route, "runners", runners)
    monkeypatch.setattr(gemm_tuning, "_time_call",
                        lambda backend, run: 1e-3 * (0.5 if backend == "threaded" and run() >= 48 else 1.0))
    assert stack_route.walk(F32) == (stack_route.LADDER_COUNT * 48 ** 3, True)
    assert sides == sorted((s for s in stack_route.LADDER if s >= 32), reverse=True)


def test_threads_never_winning_put_every_stack_up_to_the_ceiling_on_one_thread(monkeypatch):
    monkeypatch.setattr(stack_route, "runners", lambda dtype, side: {"serial": int, "threaded": int})
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: 2e-3 if backend == "threaded" else 1e-3)
    assert stack_route.walk(F64) == (stack_route.ceiling(), True)


class _Tuner:
    def __init__(self, value):
        self.value, self.asked = value, []

    def threshold(self, name, walk, default):
        self.asked.append((name, default))
        return self.value


def test_the_threshold_is_the_tuners_named_one_kept_per_dtype(monkeypatch):
    if not gemm._gemm_batch or not gemm._gemm_serial:
        pytest.skip("MKL's batched GEMM is not loaded: no stack runs there, none is timed")
    tuner = _Tuner(12345)
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    monkeypatch.setattr(gemm, "serial_work", lambda dtype: 777)
    monkeypatch.setattr(stack_route, "_limit", {})
    assert stack_route.one_thread_work(np.float32) == 12345 == stack_route.one_thread_work(np.float32)
    assert stack_route.one_thread_work(np.float64) == 12345
    assert tuner.asked == [("stack-serial:float32", 777), ("stack-serial:float64", 777)]
    assert stack_route.on_one_thread(np.float32, 12344) and not stack_route.on_one_thread(np.float32, 12345)


def test_one_core_and_large_stacks_ask_nothing(monkeypatch):
    tuner = _Tuner(10 ** 12)
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(stack_route, "_limit", {})
    assert stack_route.on_one_thread(np.float32, stack_route.ceiling()) is False    # above any walk's answer
    assert tuner.asked == [] and stack_route._limit == {}
    monkeypatch.setattr(gemm, "_cores", lambda: 1)
    assert stack_route.on_one_thread(np.float32, 1 << 17) is False
    assert stack_route.one_thread_work(np.float32) == 0 and tuner.asked == []


@needs_batch
def test_attention_scores_under_the_threshold_match_einsum(monkeypatch):
    """The transformer's scores stack (batch x heads products, under the split threshold) through
    the one-thread way."""
    monkeypatch.setattr(stack_route, "_limit", {F32: 10 ** 9, F64: 10 ** 9})
    monkeypatch.setattr(einsum_matmul, "_min_split", {F32: 10 ** 12, F64: 10 ** 12})
    ways = _ways(monkeypatch)
    k, q = RNG.standard_normal((4, 32, 2, 16)), RNG.standard_normal((4, 24, 2, 16))
    got = einsum_matmul.contract(k, q, "aecd", "abcd", "acbe")
    np.testing.assert_allclose(got, np.einsum("aecd,abcd->acbe", k, q), rtol=1e-12, atol=1e-12)
    assert set(ways) == {8}
