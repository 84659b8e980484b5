"""The LSTM and SimpleRNN kernels' step loops compiled with the product called from inside, and the
loops' one-thread library (MKL or NumPy's OpenBLAS) for all three recurrences (issue 18, rnn18):
a NumPy float64 reference forward, float64 finite-difference gradients of every input, the
compiled loops giving their Python twins' bits on each library, thread settings restored, eager ==
graph, and the Keras layers' results unchanged from the per-step ``gemm.matmul`` path."""
import ctypes

import numpy as np
import pytest

from fd_util import assert_grads
from opinfos.rnn import ref_lstm, ref_simple
from tensorweave.kernels.cpu import gemm, rnn_gemm
from tensorweave.kernels.cpu import gru_kernels as gru
from tensorweave.kernels.cpu import lstm_kernels as lstm
from tensorweave.kernels.cpu import simple_rnn_kernels as simple
from tensorweave.kernels.cpu.jit import compile_now

needs_mkl = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
LIBRARIES = ["mkl1", "mkl_threads", "openblas1"]
CASES = [(gb, masked) for gb in (False, True) for masked in (False, True)]


def _inputs(kind, dtype, seed=0, b=3, t=5, f=4, u=3):
    rng = np.random.default_rng(seed)

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    gates = 4 if kind == "lstm" else 1
    states = (r(b, u), r(b, u)) if kind == "lstm" else (r(b, u),)
    mask = rng.random((b, t)) > 0.3
    return (r(b, t, f),) + states + (r(f, gates * u, scale=0.5), r(u, gates * u, scale=0.5), r(gates * u)), mask


def _attrs(kind, go_backwards, zero_output=False):
    attrs = dict(activation="tanh", go_backwards=go_backwards, zero_output_for_mask=zero_output)
    if kind == "lstm":
        attrs["recurrent_activation"] = "sigmoid"
    return attrs


def _kernels(kind):
    return (lstm, lstm.lstm_sequence, lstm.lstm_sequence_grad) if kind == "lstm" else (
        simple, simple.simple_rnn_sequence, simple.simple_rnn_sequence_grad)


def _forward_backward(kind, args, mask, attrs, seed=4):
    """The forward kernel's outputs, then the gradient kernel's for seeded output gradients."""
    _, forward, backward = _kernels(kind)
    got = forward(*args, mask, **attrs)
    states = got[1:-1]
    rng = np.random.default_rng(seed)
    d_out = rng.standard_normal(got[0].shape).astype(got[0].dtype)
    d_states = [rng.standard_normal(s.shape).astype(s.dtype) for s in states]
    weights = args[:-1]                      # the gradient kernels take no bias
    return got + backward(*weights, got[-1], d_out, *d_states, mask, **attrs)


def _force(monkeypatch, module, mode):
    """Makes ``module``'s step loops run as their twin or compiled (now, on this thread)."""
    for name in ("_forward_loop", "_backward_loop"):
        kernel = getattr(module, name)

        def run(*a, kernel=kernel):
            return kernel.twin(*a) if mode == "twin" else compile_now(kernel, *a)(*a)
        run.twin = kernel.twin
        monkeypatch.setattr(module, name, run)


def _forced_plan(library):
    """``rnn_gemm.plan`` giving every loop ``library``'s products."""
    def plan(dtype, m, n, k):
        fn, set_local, _ = gemm.compiled_gemm(dtype, m, n, k)
        if library == "openblas1":
            address, interface = rnn_gemm.openblas_gemm(dtype)
            return rnn_gemm.Plan(interface, address, 1, rnn_gemm._openblas_swap)
        return rnn_gemm.Plan(rnn_gemm.LP64, fn, 1 if library == "mkl1" else 0, rnn_gemm._mkl_swap(set_local))
    return plan


def _needs(library):
    if library == "openblas1" and rnn_gemm.openblas_gemm(np.float32) is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting its thread count")


@needs_mkl
@pytest.mark.parametrize("kind", ["lstm", "simple"])
@pytest.mark.parametrize("go_backwards,masked", CASES)
def test_compiled_forward_matches_numpy_reference(monkeypatch, kind, go_backwards, masked):
    args, mask = _inputs(kind, np.float64)
    mask = mask if masked else np.ones_like(mask)
    module, forward, _ = _kernels(kind)
    _force(monkeypatch, module, "compiled")
    got = forward(*args, mask, **_attrs(kind, go_backwards))[:-1]
    reference = ref_lstm if kind == "lstm" else ref_simple
    want = reference(*args, mask, **_attrs(kind, go_backwards))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@needs_mkl
@pytest.mark.parametrize("kind,go_backwards,zero_output",
                         [("lstm", False, False), ("lstm", True, True), ("simple", True, False),
                          ("simple", False, True)])
def test_gradients_match_float64_finite_differences(monkeypatch, kind, go_backwards, zero_output):
    args, mask = _inputs(kind, np.float64, seed=1)
    attrs = _attrs(kind, go_backwards, zero_output)
    module, forward, backward = _kernels(kind)
    _force(monkeypatch, module, "compiled")
    got = forward(*args, mask, **attrs)
    outs = got[:-1]
    rng = np.random.default_rng(2)
    d_outs = [rng.standard_normal(o.shape) for o in outs]
    grads = backward(*args[:-1], got[-1], *d_outs, mask, **attrs)
    assert len(grads) == len(args)

    def loss(vals):
        return float(sum((o * d).sum() for o, d in zip(forward(*vals, mask, **attrs)[:-1], d_outs)))
    assert_grads(grads, loss, args)


def _thread_settings(dtype):
    """``(MKL's per-thread setting, OpenBLAS's count)`` now, leaving them as found."""
    set_local = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(gemm._gemm_serial[np.dtype(dtype)].args[0])
    mkl = set_local(0)
    set_local(mkl)
    found = gemm._openblas_threads()
    return mkl, found[0]() if found else None


@needs_mkl
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("kind", ["lstm", "simple"])
@pytest.mark.parametrize("go_backwards,masked", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_loops_give_the_twins_bits(monkeypatch, library, kind, go_backwards, masked, dtype):
    _needs(library)
    args, mask = _inputs(kind, dtype, seed=3, b=4, t=6, f=5, u=4)
    mask = mask if masked else np.ones_like(mask)
    attrs = _attrs(kind, go_backwards, zero_output=masked and go_backwards)
    module = _kernels(kind)[0]
    before = _thread_settings(dtype)
    results = {}
    for mode in ("twin", "compiled"):
        with monkeypatch.context() as m:
            m.setattr(rnn_gemm, "plan", _forced_plan(library))
            _force(m, module, mode)
            results[mode] = _forward_backward(kind, args, mask, attrs)
    for a, b in zip(results["twin"], results["compiled"]):
        assert np.array_equal(a, b)
    assert _thread_settings(dtype) == before


@needs_mkl
@pytest.mark.parametrize("library", ["mkl1", "openblas1"])
@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_loops_on_either_library_give_the_twins_bits(monkeypatch, library, reset_after):
    _needs(library)
    rng = np.random.default_rng(7)
    b, t, f, u = 3, 5, 4, 3
    args = [rng.standard_normal(s).astype(np.float32) for s in ((b, t, f), (b, u), (f, 3 * u), (u, 3 * u), (3 * u,),
                                                                (3 * u,))]
    mask = rng.random((b, t)) > 0.3
    attrs = dict(activation="tanh", recurrent_activation="sigmoid", reset_after=reset_after, go_backwards=False,
                 zero_output_for_mask=False)
    results = {}
    for mode in ("twin", "compiled"):
        with monkeypatch.context() as m:
            m.setattr(rnn_gemm, "plan", _forced_plan(library))
            _force(m, gru, mode)
            out, h, res = gru.gru_sequence(*args, mask, **attrs)
            results[mode] = (out, h, res) + gru.gru_sequence_grad(*args[:4], res, out * 0.5, h * 2, mask, **attrs)
    for a, b in zip(results["twin"], results["compiled"]):
        assert np.array_equal(a, b)


@needs_mkl
def test_the_loop_plan_follows_the_one_thread_library_and_the_sizes(monkeypatch):
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1000)
    found = rnn_gemm.openblas_gemm(np.float32)
    calls = []

    def library(answer):
        def serial_library(dtype, m, n, k):
            calls.append((m, n, k))
            return answer
        return serial_library
    monkeypatch.setattr(gemm, "serial_library", library("numpy1"))
    p = rnn_gemm.plan(np.float32, 32, 512, 128)    # above serial_work, under LOOP_SERIAL_WORK: one thread
    assert calls == [(32, 512, 128)] and p.threads == 1
    if found is not None:
        assert (p.fn, p.interface, p.swap) == (found[0], found[1], rnn_gemm._openblas_swap)
    monkeypatch.setattr(gemm, "serial_library", library("mkl1"))
    p = rnn_gemm.plan(np.float32, 32, 512, 128)
    assert (p.interface, p.fn, p.threads) == (rnn_gemm.LP64, gemm._gemm[np.dtype(np.float32)].args[-1], 1)
    side = round(rnn_gemm.LOOP_SERIAL_WORK ** (1 / 3)) + 1   # above both bounds: MKL on its threads, no timing
    calls.clear()
    p = rnn_gemm.plan(np.float32, side, side, side)
    assert (p.interface, p.threads, calls) == (rnn_gemm.LP64, 0, [])
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), side ** 3 + 1)
    assert rnn_gemm.plan(np.float32, side, side, side).threads == 1
    assert rnn_gemm.plan(np.float32, 0, 512, 128) is None         # an empty batch: the Python path
    monkeypatch.setitem(gemm._tuning, "on", True)                  # per-class tuning: the large ones per product
    assert rnn_gemm.plan(np.float32, side, side, side) is None
    assert rnn_gemm.plan(np.float32, 32, 512, 128).threads == 1   # the small ones: the one-thread library


@needs_mkl
@pytest.mark.parametrize("library", ["mkl1", "openblas1"])
def test_a_plan_restores_the_thread_setting_when_the_loop_fails(monkeypatch, library):
    _needs(library)
    before = _thread_settings(np.float32)
    plan = _forced_plan(library)(np.float32, 4, 4, 4)
    seen = []

    def loop(mm, interface, fn, x):
        seen.append(_thread_settings(np.float32))
        raise RuntimeError(x)
    with pytest.raises(RuntimeError, match="boom"):
        plan.run(loop, "boom")
    assert seen[0][0 if library == "mkl1" else 1] == 1
    assert _thread_settings(np.float32) == before


def test_without_a_plan_the_loops_run_in_python_through_matmul(monkeypatch):
    args, mask = _inputs("lstm", np.float64, seed=5)
    attrs = _attrs("lstm", False)
    want = _forward_backward("lstm", args, mask, attrs)
    monkeypatch.setattr(rnn_gemm, "plan", lambda *a: None)
    monkeypatch.setattr(rnn_gemm, "rows", lambda *a: pytest.fail("a compiled-loop product ran"))
    got = _forward_backward("lstm", args, mask, attrs)
    for a, b in zip(want, got):
        if a.dtype == np.uint8:
            a, b = a.view(np.float64), b.view(np.float64)
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def _layer(kind, **kw):
    import tensorweave as tw
    tw.keras.utils.set_random_seed(6)
    cls = tw.keras.layers.LSTM if kind == "lstm" else tw.keras.layers.SimpleRNN
    return cls(4, return_sequences=True, return_state=True, **kw)


@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_keras_layer_eager_equals_graph(kind):
    import tensorweave as tw
    layer = _layer(kind, go_backwards=True)
    x = tw.constant(np.random.default_rng(6).standard_normal((3, 5, 2)).astype(np.float32))
    eager = layer(x)
    graph = tw.function(lambda v: layer(v))(x)
    for a, b in zip(eager, graph):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@needs_mkl
@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_keras_layer_results_unchanged_from_the_per_step_matmul_path(monkeypatch, kind):
    import tensorweave as tw
    x = tw.constant(np.random.default_rng(8).standard_normal((32, 7, 6)).astype(np.float32))

    def run(layer):
        with tw.GradientTape() as tape:
            outs = layer(x)
            loss = tw.reduce_sum(outs[0] * outs[0]) + tw.reduce_sum(outs[1])
        return [np.asarray(o) for o in outs] + [np.asarray(g) for g in tape.gradient(loss, layer.trainable_weights)]
    module = _kernels(kind)[0]
    with monkeypatch.context() as m:
        _force(m, module, "compiled")
        compiled = run(_layer(kind))
    with monkeypatch.context() as m:
        m.setattr(rnn_gemm, "plan", lambda *a: None)
        before = run(_layer(kind))
    for a, b in zip(compiled, before):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6)
