"""The GRU kernels' step loops compiled with MKL called from inside (issue 18, rnn18): the same
bits as their Python twin, a NumPy reference forward, float64 finite-difference gradients, and
the calling thread's MKL setting restored."""
import ctypes

import numpy as np
import pytest

from fd_util import assert_grads
from tensorweave.kernels.cpu import gemm, gru_kernels as g, rnn_gemm
from tensorweave.kernels.cpu.jit import compile_now

needs_mkl = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
CASES = [(ra, gb, masked) for ra in (True, False) for gb in (False, True) for masked in (False, True)]


def _inputs(dtype, seed=0, b=3, t=5, f=4, u=3):
    rng = np.random.default_rng(seed)

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    mask = rng.random((b, t)) > 0.3
    return (r(b, t, f), r(b, u), r(f, 3 * u, scale=0.5), r(u, 3 * u, scale=0.5), r(3 * u), r(3 * u)), mask


def _attrs(reset_after, go_backwards):
    return dict(activation="tanh", recurrent_activation="sigmoid", reset_after=reset_after,
                go_backwards=go_backwards, zero_output_for_mask=False)


def _reference(x, h0, k, rk, ib, rb, mask, reset_after, go_backwards):
    """A NumPy GRU (Keras' equations), float64."""
    def sig(v):
        return 1 / (1 + np.exp(-v))
    u = h0.shape[1]
    h, outs = h0, []
    order = range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])
    for ti in order:
        xz = x[:, ti] @ k + ib
        if reset_after:
            hr = h @ rk + rb
            z, r = sig(xz[:, :u] + hr[:, :u]), sig(xz[:, u:2 * u] + hr[:, u:2 * u])
            hh = np.tanh(xz[:, 2 * u:] + r * hr[:, 2 * u:])
        else:
            hr = h @ rk[:, :2 * u] + rb[:2 * u]
            z, r = sig(xz[:, :u] + hr[:, :u]), sig(xz[:, u:2 * u] + hr[:, u:2 * u])
            hh = np.tanh(xz[:, 2 * u:] + (r * h) @ rk[:, 2 * u:] + rb[2 * u:])
        new = z * h + (1 - z) * hh
        keep = mask[:, ti:ti + 1]
        out = np.where(keep, new, outs[-1] if outs else 0 * new)
        h = np.where(keep, new, h)
        outs.append(out)
    return np.stack(outs, axis=1), h


@pytest.mark.parametrize("reset_after,go_backwards,masked", CASES)
def test_forward_matches_numpy_reference(reset_after, go_backwards, masked):
    args, mask = _inputs(np.float64)
    mask = mask if masked else np.ones_like(mask)
    out, h, _ = g.gru_sequence(*args, mask, **_attrs(reset_after, go_backwards))
    want_out, want_h = _reference(*args, mask, reset_after, go_backwards)
    np.testing.assert_allclose(h, want_h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reset_after,go_backwards", [(True, False), (False, True)])
def test_gradients_match_float64_finite_differences(reset_after, go_backwards):
    args, mask = _inputs(np.float64, seed=1)
    attrs = _attrs(reset_after, go_backwards)
    rng = np.random.default_rng(2)
    out, h, res = g.gru_sequence(*args, mask, **attrs)
    d_out, d_h = rng.standard_normal(out.shape), rng.standard_normal(h.shape)
    dx, dh0, dk, drk, dib, drb = g.gru_sequence_grad(*args[:4], res, d_out, d_h, mask, **attrs)

    def loss(vals):
        o, hn, _ = g.gru_sequence(*vals, mask, **attrs)
        return float((o * d_out).sum() + (hn * d_h).sum())
    assert_grads((dx, dh0, dk, drk, dib, drb), loss, list(args))


def _compiled(kernel, *args):
    compile_now(kernel, *args)
    return kernel


@needs_mkl
@pytest.mark.parametrize("reset_after,go_backwards,masked", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_loops_give_the_twins_bits_and_restore_the_thread_setting(monkeypatch, dtype, reset_after,
                                                                         go_backwards, masked):
    set_local = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(gemm._gemm_serial[np.dtype(dtype)].args[0])
    before = set_local(0)          # start from 'none' (an earlier test in the process may have left a setting)
    args, mask = _inputs(dtype, seed=3, b=4, t=6, f=5, u=4)
    mask = mask if masked else np.ones_like(mask)
    attrs = _attrs(reset_after, go_backwards)
    calls = {"forward": [], "backward": []}
    results = {}
    for mode in ("twin", "compiled"):
        for name in ("_forward_loop", "_backward_loop"):
            kernel = getattr(g, name)
            twin = kernel.twin

            def run(*a, kernel=kernel, twin=twin, name=name):
                calls["forward" if "forward" in name else "backward"].append(mode)
                return twin(*a) if mode == "twin" else _compiled(kernel, *a)(*a)
            monkeypatch.setattr(g, name, run)
        out, h, res = g.gru_sequence(*args, mask, **attrs)
        rng = np.random.default_rng(4)
        grads = g.gru_sequence_grad(*args[:4], res, rng.standard_normal(out.shape).astype(dtype),
                                    rng.standard_normal(h.shape).astype(dtype), mask, **attrs)
        results[mode] = (out, h, res) + grads
        monkeypatch.undo()
    assert calls == {"forward": ["twin", "compiled"], "backward": ["twin", "compiled"]}
    for a, b in zip(results["twin"], results["compiled"]):
        assert np.array_equal(a, b)
    assert set_local(before) == 0


@needs_mkl
def test_step_loop_threads_follow_the_serial_threshold(monkeypatch):
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 32 * 192 * 64 + 1)
    assert gemm.compiled_gemm(np.float32, 32, 192, 64)[2] == 1
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 32 * 192 * 64)
    assert gemm.compiled_gemm(np.float32, 32, 192, 64)[2] == 0
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)
    assert gemm.compiled_gemm(np.float32, 32, 192, 64)[2] == 0
    monkeypatch.setitem(gemm._tuning, "on", True)        # per-class choices are made in gemm.matmul
    assert gemm.compiled_gemm(np.float32, 32, 192, 64) is None


def test_without_a_plan_the_python_loop_gives_the_same_results(monkeypatch):
    args, mask = _inputs(np.float64, seed=5)
    attrs = _attrs(True, False)
    want = g.gru_sequence(*args, mask, **attrs)
    monkeypatch.setattr(rnn_gemm, "plan", lambda *a: None)     # (no library to call from compiled code)
    monkeypatch.setattr(rnn_gemm, "rows", lambda *a: pytest.fail("a compiled-loop product ran"))
    got = g.gru_sequence(*args, mask, **attrs)
    for a, b in zip(want[:2] + (want[2].view(np.float64),), got[:2] + (got[2].view(np.float64),)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_layer_eager_equals_graph(reset_after):
    import tensorweave as tw
    tw.keras.utils.set_random_seed(6)
    layer = tw.keras.layers.GRU(4, return_sequences=True, return_state=True, reset_after=reset_after)
    x = tw.constant(np.random.default_rng(6).standard_normal((3, 5, 2)).astype(np.float32))
    eager = layer(x)
    graph = tw.function(lambda v: layer(v))(x)
    for a, b in zip(eager, graph):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
