"""A product whose class chose MKL's threads, run beside another thread's product (``gemm.blocks_here``:
the mlp's dX2 on the calling thread while dW2 runs on the helper, ``runtime/overlap.py``), takes MKL's
one-thread call there, not its threaded one (``gemm._in_pair``, issue 18 mlp30): the same library, the
bits of its threaded call on the mlp's shapes; outside such a pair, and under ``TW_GEMM_PAIR_THREADS=1``,
MKL's threads as before. The Keras mlp step keeps its bits with every class on MKL's threads."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm
from test_mlp18_overlap import _train

F32 = np.dtype(np.float32)
needs_mkl1 = pytest.mark.skipif(F32 not in gemm._gemm_serial, reason="needs MKL with a per-thread setting")
#: the mlp step's five products (m, k, n, A read transposed, B read transposed)
MLP = {"fwd1": (128, 784, 512, False, False), "fwd2": (128, 512, 512, False, False),
       "dW2": (512, 128, 512, True, False), "dX2": (128, 512, 512, False, True), "dW1": (784, 128, 512, True, False)}


def _operands(m, k, n, ta, tb, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    return a, b


@needs_mkl1
@pytest.mark.parametrize("name", sorted(MLP))
def test_mkl_threads_and_its_one_thread_call_give_the_same_bits_on_the_mlp_shapes(name):
    m, k, n, ta, tb = MLP[name]
    a, b = _operands(m, k, n, ta, tb, seed=len(name))
    op_a = (gemm._TRANS if ta else gemm._NO_TRANS, m if ta else k)
    op_b = (gemm._TRANS if tb else gemm._NO_TRANS, k if tb else n)
    threads, one = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    gemm._gemm[F32](op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], threads, n)
    gemm._gemm_serial[F32](op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], one, n)
    np.testing.assert_array_equal(one, threads)
    np.testing.assert_allclose(one, (a.T if ta else a).astype(np.float64) @ (b.T if tb else b), rtol=1e-4, atol=1e-3)


@pytest.fixture
def calls(monkeypatch):
    """Every product above a tiny one-thread size on two parts, its class choosing MKL's threads;
    MKL's two calls replaced by NumPy stand-ins that record ``"threads"`` or ``"one"``."""
    seen = []

    def stand_in(tag):
        def call(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
            seen.append(tag)
            c[...] = (a.T if trans_a == gemm._TRANS else a) @ (b.T if trans_b == gemm._TRANS else b)
        return call
    monkeypatch.setitem(gemm._gemm, F32, stand_in("threads"))
    monkeypatch.setitem(gemm._gemm_serial, F32, stand_in("one"))
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setitem(gemm._split, "pair", True)
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_share", lambda: 2)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm, "_threaded_choice", lambda *args: "mkl")
    monkeypatch.setattr(gemm, "_sleeping_after", lambda run: run)
    return seen


def test_inside_blocks_here_an_mkl_class_takes_the_one_thread_call(calls):
    a, b = _operands(48, 40, 64, False, False, seed=1)
    outside = gemm.matmul(a, b)
    with gemm.blocks_here(2):
        assert gemm._in_pair(F32)
        inside = gemm.matmul(a, b)
    assert calls == ["threads", "one"]
    np.testing.assert_array_equal(inside, a @ b)
    np.testing.assert_array_equal(outside, a @ b)


def test_the_switch_keeps_mkls_threads_inside_blocks_here(calls, monkeypatch):
    monkeypatch.setitem(gemm._split, "pair", False)
    a, b = _operands(48, 40, 64, False, False, seed=2)
    with gemm.blocks_here(2):
        assert not gemm._in_pair(F32)
        got = gemm.matmul(a, b)
    assert calls == ["threads"]
    np.testing.assert_array_equal(got, a @ b)


def test_other_choices_inside_blocks_here_are_left_as_they_were(calls, monkeypatch):
    monkeypatch.setattr(gemm, "_threaded_choice", lambda *args: "one")
    monkeypatch.setattr(gemm, "_run_one", lambda a, b, out, *args: (calls.append("run_one"), np.matmul(a, b, out=out)))
    a, b = _operands(48, 40, 64, False, False, seed=3)
    with gemm.blocks_here(2):
        gemm.matmul(a, b)
    assert calls == ["run_one"]


def test_without_mkls_one_thread_call_the_threaded_one_stays(calls, monkeypatch):
    monkeypatch.delitem(gemm._gemm_serial, F32)
    with gemm.blocks_here(2):
        assert not gemm._in_pair(F32)


@pytest.mark.parametrize("value, pair", [(None, True), ("0", True), ("1", False)])
def test_the_switch_is_read_from_the_environment(value, pair):
    env = {k: v for k, v in os.environ.items() if k != "TW_GEMM_PAIR_THREADS"}
    if value is not None:
        env["TW_GEMM_PAIR_THREADS"] = value
    code = "from tensorweave.kernels.cpu import gemm; gemm.load(); print(gemm._split['pair'])"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert got.stdout.split()[-1] == str(pair)


@needs_mkl1
def test_the_keras_mlp_step_with_every_class_on_mkls_threads_keeps_its_bits(monkeypatch):
    real = gemm.split_parts
    monkeypatch.setattr(gemm, "split_parts", lambda: real() if gemm.inside_blocks_here() else 2)
    monkeypatch.setattr(gemm, "_share", lambda: gemm.split_parts())
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setattr(gemm, "_threaded_choice", lambda *args: "mkl")
    serial, inside = gemm._gemm_serial[F32], []

    def counted(*args):
        inside.append(gemm.inside_blocks_here())
        return serial(*args)
    monkeypatch.setitem(gemm._gemm_serial, F32, counted)
    monkeypatch.setitem(gemm._split, "pair", False)
    before = _train(True)
    assert not any(inside)
    monkeypatch.setitem(gemm._split, "pair", True)
    after = _train(True)
    assert any(inside)            # the pair's products took the one-thread call
    off = _train(False)
    assert before[0] == after[0] == off[0]
    for x, y, z in zip(before[1], after[1], off[1]):
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(z, x)
