"""The LSTM kernels' sequence-wide products cut into spans of steps and run beside the step loop on a
helper thread (``rnn_overlap``, issue 18 session 12), and the loops' plan without MKL or with
per-class tuning: the float64 reference forward and float64 finite-difference gradients with many
spans; the same bits whichever thread ran a span's products; within float32 rounding of the
single-span path; a failing product raised on the kernel's thread with OpenBLAS's count restored;
the counted one-thread hold; the plan's library under ``TW_BLAS=numpy`` / ``TW_BLAS_TUNE=1``."""
import threading

import numpy as np
import pytest

from fd_util import assert_grads
from opinfos.rnn import ref_lstm
from tensorweave.kernels.cpu import gemm, rnn_gemm, rnn_overlap
from tensorweave.kernels.cpu import lstm_kernels as lstm
from tensorweave.kernels.cpu import rnn_common as rc

CASES = [(False, False, False), (True, True, False), (True, False, True), (False, True, True)]


def _inputs(dtype, seed=0, b=3, t=11, f=4, u=3):
    rng = np.random.default_rng(seed)

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    mask = rng.random((b, t)) > 0.3
    return (r(b, t, f), r(b, u), r(b, u), r(f, 4 * u, scale=0.5), r(u, 4 * u, scale=0.5), r(4 * u)), mask


def _attrs(go_backwards, zero_output=False):
    return dict(activation="tanh", recurrent_activation="sigmoid", go_backwards=go_backwards,
                zero_output_for_mask=zero_output)


def _spans(monkeypatch, on=True, chunk=2):
    """Overlap forced on (off) whatever the plan and the cores, ``chunk`` steps a span."""
    monkeypatch.setattr(rnn_overlap, "enabled", lambda plan: on)
    monkeypatch.setattr(rnn_overlap.spans, "__defaults__", (chunk,))


def _both(args, mask, attrs, seed=4):
    got = lstm.lstm_sequence(*args, mask, **attrs)
    rng = np.random.default_rng(seed)
    d_out = rng.standard_normal(got[0].shape).astype(got[0].dtype)
    d_h, d_c = (rng.standard_normal(s.shape).astype(s.dtype) for s in got[1:3])
    return got + lstm.lstm_sequence_grad(*args[:-1], got[-1], d_out, d_h, d_c, mask, **attrs)


def test_spans_cover_the_steps_in_order():
    for t in (0, 1, 2, 5, 8, 80, 81):
        for chunk in (1, 2, 8):
            got = rnn_overlap.spans(t, chunk)
            assert [s for s0, s1 in got for s in range(s0, s1)] == list(range(t))
            assert all(s1 - s0 <= chunk for s0, s1 in got)
    assert rnn_overlap.spans(80)[0] == (0, 4) and rnn_overlap.spans(80)[1] == (4, 12)
    assert rnn_overlap.spans(0) == [] and rnn_overlap.spans(1, 8) == [(0, 1)]
    for t, s0, s1 in ((10, 0, 3), (10, 7, 10), (5, 2, 3)):
        assert rnn_overlap.original(s0, s1, t, False) == (s0, s1)
        a, e = rnn_overlap.original(s0, s1, t, True)
        assert sorted(range(a, e)) == sorted(t - 1 - s for s in range(s0, s1))


@pytest.mark.parametrize("go_backwards,masked,zero_output", CASES)
def test_forward_with_many_spans_matches_the_float64_reference(monkeypatch, go_backwards, masked, zero_output):
    _spans(monkeypatch)
    args, mask = _inputs(np.float64, seed=1)
    mask = mask if masked else None
    attrs = _attrs(go_backwards, zero_output)
    got = lstm.lstm_sequence(*args, mask, **attrs)
    want = ref_lstm(*args, mask, **attrs)
    for a, b in zip(got[:3], want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("go_backwards,masked,zero_output", CASES[:2])
def test_gradients_with_many_spans_match_float64_finite_differences(monkeypatch, go_backwards, masked, zero_output):
    _spans(monkeypatch, chunk=3)
    args, mask = _inputs(np.float64, seed=2, t=7)
    mask = mask if masked else None
    attrs = _attrs(go_backwards, zero_output)
    got = lstm.lstm_sequence(*args, mask, **attrs)
    rng = np.random.default_rng(3)
    d_outs = [rng.standard_normal(o.shape) for o in got[:3]]
    grads = lstm.lstm_sequence_grad(*args[:-1], got[-1], *d_outs, mask, **attrs)
    assert len(grads) == len(args)

    def loss(vals):
        return float(sum((o * d).sum() for o, d in zip(lstm.lstm_sequence(*vals, mask, **attrs)[:3], d_outs)))
    assert_grads(grads, loss, args)


@pytest.mark.parametrize("go_backwards,masked,zero_output", CASES)
def test_the_same_bits_whichever_thread_runs_a_span(monkeypatch, go_backwards, masked, zero_output):
    args, mask = _inputs(np.float32, seed=5, b=5, t=13, f=6, u=4)
    mask = mask if masked else None
    attrs = _attrs(go_backwards, zero_output)
    _spans(monkeypatch)
    helper = _both(args, mask, attrs)
    again = _both(args, mask, attrs)
    with monkeypatch.context() as m:               # no helper thread: the kernel's thread runs every task
        m.setattr(rnn_overlap._helper, "submit", lambda job: None)
        inline = _both(args, mask, attrs)
    for a, b, c in zip(helper, again, inline):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    _spans(monkeypatch, on=False)                  # one span, the products on the library's threads
    single = _both(args, mask, attrs)
    for a, b in zip(helper, single):
        if a.dtype == np.uint8:
            a, b = a.view(np.float32), b.view(np.float32)
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6)


def _openblas_count():
    found = gemm._openblas_threads()
    return found[0]() if found else None


def test_a_failing_span_product_raises_on_the_kernels_thread(monkeypatch):
    _spans(monkeypatch)
    args, mask = _inputs(np.float32, seed=6)
    attrs = _attrs(False)
    got = lstm.lstm_sequence(*args, mask, **attrs)
    before = _openblas_count()
    calls = []
    real = rc.SpanGrads.tasks

    def tasks(self, i, a, e):
        calls.append(threading.current_thread().name)
        dw, dx = real(self, i, a, e)

        def broken():
            raise FloatingPointError(f"span {i}")
        return (broken, dx) if i == 1 else (dw, dx)
    monkeypatch.setattr(rc.SpanGrads, "tasks", tasks)
    d = [np.ones_like(o) for o in got[:3]]
    with pytest.raises(FloatingPointError, match="span 1"):
        lstm.lstm_sequence_grad(*args[:-1], got[-1], *d, mask, **attrs)
    assert calls and _openblas_count() == before


def test_the_one_thread_hold_is_shared_with_the_split_products():
    """A split product's hold (gemm) and a recurrent kernel's ending out of order restore the count
    once, when the last of them ends (two separate counters left it at 1 for good)."""
    found = gemm._openblas_threads()
    if found is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting its thread count")
    get, put = found
    before = get()
    put(2)
    try:
        split = gemm._openblas_one_thread()
        split.__enter__()
        kernel = rnn_overlap.one_thread()
        kernel.__enter__()
        split.__exit__(None, None, None)
        assert get() == 1                           # the kernel still holds it
        kernel.__exit__(None, None, None)
        assert get() == 2
    finally:
        put(before)


def test_the_one_thread_hold_is_counted(monkeypatch):
    found = gemm._openblas_threads()
    if found is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting its thread count")
    get, put = found
    before = get()
    put(2)
    try:
        with rnn_overlap.one_thread():
            assert get() == 1
            with rnn_overlap.one_thread():
                assert get() == 1
            assert get() == 1                       # the inner holder does not restore
        assert get() == 2
        outer = rnn_overlap.one_thread()
        outer.__enter__()
        inner = rnn_overlap.one_thread()
        inner.__enter__()
        outer.__exit__(None, None, None)            # holders ending out of order (two kernels' threads)
        assert get() == 1
        inner.__exit__(None, None, None)
        assert get() == 2
    finally:
        put(before)


def test_overlap_only_where_it_pays(monkeypatch):
    from tensorweave.kernels import threads
    one = rnn_gemm.Plan(rnn_gemm.LP64, 0, 1, None)
    many = rnn_gemm.Plan(rnn_gemm.LP64, 0, 0, None)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(rnn_overlap, "ENABLED", True)
    assert rnn_overlap.enabled(one) and not rnn_overlap.enabled(many) and not rnn_overlap.enabled(None)
    monkeypatch.setattr(threads, "cores", lambda: 1)
    assert not rnn_overlap.enabled(one)
    monkeypatch.setattr(threads, "cores", lambda: 3)
    assert rnn_overlap.enabled(one)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(rnn_overlap, "ENABLED", False)           # TW_RNN_OVERLAP=0
    assert not rnn_overlap.enabled(one)


def test_the_loop_plan_without_mkl_or_with_tuning(monkeypatch):
    found = rnn_gemm.openblas_gemm(np.float32)
    if found is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting its thread count")
    monkeypatch.setattr(gemm, "compiled_gemm", lambda *a: None)   # TW_BLAS=numpy, or TW_BLAS_TUNE=1
    with monkeypatch.context() as m:                 # no MKL loaded: NumPy's OpenBLAS on one thread
        m.setattr(gemm, "_gemm_serial", {})
        p = rnn_gemm.plan(np.float32, 32, 512, 128)
        assert (p.interface, p.fn, p.threads, p.swap) == (found[1], found[0], 1, rnn_gemm._openblas_swap)
        side = round(rnn_gemm.LOOP_SERIAL_WORK ** (1 / 3)) + 1
        assert rnn_gemm.plan(np.float32, side, side, side) is None   # large: matmul decides per product
        assert rnn_gemm.plan(np.int32, 32, 512, 128) is None
    if not gemm._gemm_serial:
        return
    for answer in ("numpy1", "mkl1"):               # MKL loaded, tuning on: the measured one-thread library
        monkeypatch.setattr(gemm, "serial_library", lambda *a, answer=answer: answer)
        p = rnn_gemm.plan(np.float32, 32, 512, 128)
        want = found[0] if answer == "numpy1" else gemm._gemm_serial[np.dtype(np.float32)].args[2]
        assert (p.fn, p.threads) == (want, 1)


def test_the_compiled_loops_without_mkl_match_the_reference(monkeypatch):
    """``TW_BLAS=numpy`` (MKL's calls removed): the compiled loops call NumPy's OpenBLAS."""
    if rnn_gemm.openblas_gemm(np.float64) is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting its thread count")
    monkeypatch.setattr(gemm, "compiled_gemm", lambda *a: None)
    monkeypatch.setattr(gemm, "_gemm_serial", {})
    monkeypatch.setattr(gemm, "_gemm", {})
    assert rnn_gemm.plan(np.float64, 3, 12, 3).interface == rnn_gemm.openblas_gemm(np.float64)[1]
    args, mask = _inputs(np.float64, seed=9)
    attrs = _attrs(True)
    got = lstm.lstm_sequence(*args, mask, **attrs)
    for a, b in zip(got[:3], ref_lstm(*args, mask, **attrs)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_keras_lstm_gradients_with_and_without_overlap(monkeypatch):
    import tensorweave as tw
    x = tw.constant(np.random.default_rng(11).standard_normal((4, 10, 3)).astype(np.float32))

    def run(overlap):
        _spans(monkeypatch, on=overlap, chunk=3)
        tw.keras.utils.set_random_seed(11)
        layer = tw.keras.layers.LSTM(5, return_sequences=True, go_backwards=True)
        with tw.GradientTape() as tape:
            y = layer(x)
            loss = tw.reduce_sum(y * y)
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return [np.asarray(y)] + [np.asarray(g) for g in grads], layer
    got, layer = run(True)
    want, _ = run(False)
    k, rk, b = (np.asarray(w, np.float64) for w in layer.trainable_weights)
    ref = ref_lstm(np.asarray(x), np.zeros((4, 5)), np.zeros((4, 5)), k, rk, b, go_backwards=True)[0]
    np.testing.assert_allclose(got[0], ref, rtol=2e-5, atol=2e-5)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("value,enabled", [("0", False), ("1", True), ("", True), (None, True)])
def test_the_environment_switch(monkeypatch, value, enabled):
    import importlib.util
    if value is None:
        monkeypatch.delenv("TW_RNN_OVERLAP", raising=False)
    else:
        monkeypatch.setenv("TW_RNN_OVERLAP", value)
    spec = importlib.util.spec_from_file_location("rnn18_overlap_copy", rnn_overlap.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)                 # a fresh copy reads the variable (stdlib imports only)
    assert module.ENABLED is enabled


def test_one_helper_thread_runs_the_jobs():
    seen = []

    def job(done):
        seen.append((threading.current_thread().name, threading.get_ident()))
        done.set()
    for _ in range(2):
        done = threading.Event()
        rnn_overlap._helper.submit(lambda done=done: job(done))
        assert done.wait(120)
    assert seen[0][0] == "tw-rnn" and seen[0] == seen[1]
