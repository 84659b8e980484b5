"""The GRU kernels' sequence-wide products cut into spans of steps and run beside the step loop
(``rnn_overlap.forward`` / ``backward``, ``rnn_common.SpanGrads`` with the recurrent side's column
blocks; issue 18 session 23): the float64 reference forward and float64 finite-difference gradients
with many spans, both ``reset_after`` forms; the same bits whichever thread ran a span; within
float32 rounding of the single-span path; the span loops' probes; a zero-length sequence."""
import numpy as np
import pytest

from fd_util import assert_grads
from opinfos.rnn import ref_gru
from tensorweave.kernels.cpu import gru_kernels as gru
from tensorweave.kernels.cpu import rnn_common as rc
from tensorweave.kernels.cpu import rnn_overlap

CASES = [(ra, gb, masked, zo) for ra, gb, masked, zo in
         ((True, False, False, False), (True, True, True, False), (False, False, True, True), (False, True, False, False))]


def _inputs(dtype, seed=0, b=3, t=11, f=4, u=3):
    rng = np.random.default_rng(seed)

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    mask = rng.random((b, t)) > 0.3
    return (r(b, t, f), r(b, u), r(f, 3 * u, scale=0.5), r(u, 3 * u, scale=0.5), r(3 * u), r(3 * u)), mask


def _attrs(reset_after, go_backwards, zero_output=False):
    return dict(activation="tanh", recurrent_activation="sigmoid", reset_after=reset_after,
                go_backwards=go_backwards, zero_output_for_mask=zero_output)


def _spans(monkeypatch, on=True, chunk=2):
    """Overlap forced on (off) whatever the plan and the cores, ``chunk`` steps a span."""
    monkeypatch.setattr(rnn_overlap, "enabled", lambda plan: on)
    monkeypatch.setattr(rnn_overlap, "CHUNK_STEPS", chunk)
    monkeypatch.setattr(rnn_overlap, "SPAN_WORK", 0)


def _both(args, mask, attrs, seed=4):
    got = gru.gru_sequence(*args, mask, **attrs)
    rng = np.random.default_rng(seed)
    d_out = rng.standard_normal(got[0].shape).astype(got[0].dtype)
    d_h = rng.standard_normal(got[1].shape).astype(got[1].dtype)
    return got + gru.gru_sequence_grad(*args[:4], got[-1], d_out, d_h, mask, **attrs)


@pytest.mark.parametrize("reset_after,go_backwards,masked,zero_output", CASES)
def test_forward_with_many_spans_matches_the_float64_reference(monkeypatch, reset_after, go_backwards, masked,
                                                               zero_output):
    _spans(monkeypatch)
    args, mask = _inputs(np.float64, seed=1)
    mask = mask if masked else None
    attrs = _attrs(reset_after, go_backwards, zero_output)
    got = gru.gru_sequence(*args, mask, **attrs)
    for a, w in zip(got[:2], ref_gru(*args, mask, **attrs)):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reset_after,go_backwards,masked", [(True, False, True), (False, True, True),
                                                            (True, True, False)])
def test_gradients_with_many_spans_match_float64_finite_differences(monkeypatch, reset_after, go_backwards,
                                                                    masked):
    _spans(monkeypatch, chunk=3)
    args, mask = _inputs(np.float64, seed=2, t=7, f=5, u=2)      # F != U: the part's row blocks split right
    mask = mask if masked else None
    attrs = _attrs(reset_after, go_backwards)
    out, h, res = gru.gru_sequence(*args, mask, **attrs)
    rng = np.random.default_rng(3)
    d_out, d_h = rng.standard_normal(out.shape), rng.standard_normal(h.shape)
    grads = gru.gru_sequence_grad(*args[:4], res, d_out, d_h, mask, **attrs)
    assert len(grads) == len(args)

    def loss(vals):
        o, hn, _ = gru.gru_sequence(*vals, mask, **attrs)
        return float((o * d_out).sum() + (hn * d_h).sum())
    assert_grads(grads, loss, list(args))


@pytest.mark.parametrize("reset_after,go_backwards,masked,zero_output", CASES)
def test_the_same_bits_whichever_thread_runs_a_span(monkeypatch, reset_after, go_backwards, masked, zero_output):
    args, mask = _inputs(np.float32, seed=5, b=5, t=13, f=6, u=4)
    mask = mask if masked else None
    attrs = _attrs(reset_after, go_backwards, zero_output)
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


def test_span_gradients_with_column_blocks_match_numpy():
    """``SpanGrads(blocks=...)``: the kernel's gradient ``x^T @ dz``, the recurrent one block by block
    (different reserve columns and gradients per block), summed over spans."""
    rng = np.random.default_rng(7)
    b, t, f, u = 3, 9, 5, 2
    x, res = rng.standard_normal((b, t, f)), rng.standard_normal((b, t, 5 * u))
    dz, drec = rng.standard_normal((t, b, 3 * u)), rng.standard_normal((t, b, 3 * u))
    kernel = rng.standard_normal((f, 3 * u))
    cut = rnn_overlap.spans(t, 4)
    blocks = [(4 * u, dz, 0, 2 * u), (3 * u, drec, 2 * u, 3 * u)]
    grads = rc.SpanGrads(x, kernel, res, u, dz, np.dtype(np.float64), len(cut), one_thread=True, blocks=blocks)
    for i, (s0, s1) in enumerate(cut):
        for task in grads.tasks(i, s0, s1):
            task()
    dx, dk, drk = grads.results()
    rows = dz.reshape(t * b, 3 * u)
    tm = np.swapaxes(res, 0, 1).reshape(t * b, 5 * u)
    np.testing.assert_allclose(dx, np.swapaxes((rows @ kernel.T).reshape(t, b, f), 0, 1), rtol=1e-12)
    np.testing.assert_allclose(dk, np.swapaxes(x, 0, 1).reshape(t * b, f).T @ rows, rtol=1e-12)
    want = np.concatenate([tm[:, 4 * u:].T @ rows[:, :2 * u],
                           tm[:, 3 * u:4 * u].T @ drec.reshape(t * b, 3 * u)[:, 2 * u:]], axis=1)
    np.testing.assert_allclose(drk, want, rtol=1e-12)


def test_the_span_loops_probe_their_first_or_last_steps():
    steps = rnn_overlap.PROBE_STEPS
    assert gru._forward_rows.probe(("a", 5, 20)) == ("a", 5, 5 + steps)
    assert gru._forward_rows.probe(("a", 5, 6)) == ("a", 5, 6)
    assert gru._backward_rows.probe(("a", 5, 20)) == ("a", 20 - steps, 20)
    assert gru._backward_rows.probe(("a", 19, 20)) == ("a", 19, 20)


@pytest.mark.parametrize("on", [True, False])
def test_a_zero_length_sequence(monkeypatch, on):
    _spans(monkeypatch, on=on)
    args, mask = _inputs(np.float32, seed=8, t=0)
    attrs = _attrs(True, False)
    out, h, res = gru.gru_sequence(*args, None, **attrs)
    assert out.shape == (3, 0, 3) and np.array_equal(h, args[1])
    dx, dh0, dk, drk, dib, drb = gru.gru_sequence_grad(*args[:4], res, out, h + 1, None, **attrs)
    assert dx.shape == (3, 0, 4) and np.array_equal(dh0, h + 1)
    assert not (dk.any() or drk.any() or dib.any() or drb.any())
