"""The LSTM's span gradients with both weight gradients as one product per span (``rnn_common.SpanGrads``,
issue 18 session 22): ``dx``, ``d kernel`` and ``d recurrent_kernel`` against a float64 NumPy reference for
spans of every length (features and units of different sizes, so the split of the joint product's rows
shows), the two weight gradients as separate contiguous arrays, and the LSTM gradients against float64
finite differences with more features than units."""
import numpy as np
import pytest

from fd_util import assert_grads
from opinfos.rnn import ref_lstm
from tensorweave.kernels.cpu import lstm_kernels as lstm
from tensorweave.kernels.cpu import rnn_common as rc
from tensorweave.kernels.cpu import rnn_overlap


def _case(seed, b=3, t=9, f=5, u=2, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, t, f)).astype(dtype)
    kernel = rng.standard_normal((f, 4 * u)).astype(dtype)
    res = rng.standard_normal((b, t, 7 * u)).astype(dtype)       # the reserve: h_prev in its last u columns
    dz = rng.standard_normal((t, b, 4 * u)).astype(dtype)        # time-major
    return x, kernel, res, dz


def _reference(x, kernel, res, dz, u):
    b, t, f = x.shape
    rows = np.swapaxes(dz, 0, 1).reshape(b * t, -1)              # batch-major rows, as x's
    h_prev = res[:, :, -u:].reshape(b * t, u)
    return (rows @ kernel.T).reshape(b, t, f), x.reshape(b * t, f).T @ rows, h_prev.T @ rows


@pytest.mark.parametrize("chunk", [1, 2, 3, 9, 20])
@pytest.mark.parametrize("f,u", [(5, 2), (2, 5), (4, 4)])
def test_span_gradients_match_the_float64_reference(chunk, f, u):
    x, kernel, res, dz = _case(chunk * 10 + f, f=f, u=u)
    spans = rnn_overlap.spans(x.shape[1], chunk)
    grads = rc.SpanGrads(x, kernel, res, u, dz, np.dtype(np.float64), len(spans), one_thread=True)
    for i, (a, e) in reversed(list(enumerate(spans))):
        for task in grads.tasks(i, a, e):
            task()
    got = grads.results()
    want = _reference(x, kernel, res, dz, u)
    for g, w, name in zip(got, want, ("dx", "d kernel", "d recurrent_kernel")):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)
    assert got[1].flags.c_contiguous and got[2].flags.c_contiguous


def test_span_gradients_in_any_task_order_give_the_same_bits():
    """Tasks run in another order (a helper thread finishing early spans first) add the parts in
    the same order: the same bits as the backward loop's order."""
    x, kernel, res, dz = _case(7, t=11, dtype=np.float32)
    spans = rnn_overlap.spans(11, 2)
    results = []
    for order in (reversed(range(len(spans))), range(len(spans))):
        grads = rc.SpanGrads(x, kernel, res, 2, dz, np.dtype(np.float32), len(spans), one_thread=True)
        for i in order:
            for task in grads.tasks(i, *spans[i]):
                task()
        results.append(grads.results())
    for a, b in zip(*results):
        assert np.array_equal(a, b)


def test_a_zero_length_sequence_gives_zero_weight_gradients():
    x, kernel, res, dz = _case(3, t=0)
    grads = rc.SpanGrads(x, kernel, res, 2, dz, np.dtype(np.float64), 0, one_thread=True)
    dx, dk, drk = grads.results()
    assert dx.shape == (3, 0, 5) and dk.shape == (5, 8) and drk.shape == (2, 8)
    assert not dk.any() and not drk.any()


def test_lstm_gradients_with_more_features_than_units_match_finite_differences(monkeypatch):
    """Spans of 2 steps forced on: the joint product's rows split at the right place (F != U)."""
    monkeypatch.setattr(rnn_overlap, "enabled", lambda plan: True)
    monkeypatch.setattr(rnn_overlap, "CHUNK_STEPS", 2)
    rng = np.random.default_rng(26)
    b, t, f, u = 2, 5, 4, 2
    args = [rng.standard_normal(s) * sc for s, sc in (((b, t, f), 1), ((b, u), 1), ((b, u), 1),
                                                       ((f, 4 * u), 0.5), ((u, 4 * u), 0.5), ((4 * u,), 1))]
    attrs = dict(activation="tanh", recurrent_activation="sigmoid", go_backwards=True, zero_output_for_mask=False)
    got = lstm.lstm_sequence(*args, **attrs)
    for a, w in zip(got[:3], ref_lstm(*args, None, **attrs)):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)
    d_outs = [rng.standard_normal(o.shape) for o in got[:3]]
    grads = lstm.lstm_sequence_grad(*args[:-1], got[-1], *d_outs, **attrs)

    def loss(vals):
        return float(sum((o * d).sum() for o, d in zip(lstm.lstm_sequence(*vals, **attrs)[:3], d_outs)))
    assert_grads(grads, loss, args, which=(0, 3, 4))    # dx, d kernel, d recurrent_kernel
