"""The LSTM's weight gradients summed over spans as they come (``rnn_overlap.OrderedSum``, issue 18
session 13): the parts added in a fixed order whatever order they arrive in (the same bits), and a
few part buffers alive instead of one per span."""
import itertools
import threading

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, rnn_overlap
from tensorweave.kernels.cpu import lstm_kernels as lstm
from tensorweave.kernels.cpu import rnn_common as rc

RNG = np.random.default_rng(1813)


def _sequential(parts, order):
    total = parts[order[0]].copy()
    for i in order[1:]:
        total += parts[i]
    return total


def _feed(parts, order, arrival):
    total = rnn_overlap.OrderedSum(parts[0].shape, parts[0].dtype, order)
    for i in arrival:
        buf = total.buffer()
        buf[...] = parts[i]
        total.put(i, buf)
    return total


@pytest.mark.parametrize("n", [1, 2, 4])
def test_parts_added_in_order_whatever_order_they_arrive(n):
    parts = [RNG.standard_normal((3, 5)).astype(np.float32) * 10 ** i for i in range(n)]
    order = list(range(n - 1, -1, -1))
    want = _sequential(parts, order)
    for arrival in itertools.permutations(range(n)):
        got = _feed(parts, order, arrival).result()
        assert np.array_equal(got, want), arrival
    # a different order gives other bits for these parts (so the order is what the test checks)
    if n == 4:
        assert not np.array_equal(_sequential(parts, order[::-1]), want)


def test_parts_in_turn_reuse_one_buffer():
    parts = [RNG.standard_normal(7) for _ in range(10)]
    total = _feed(parts, list(range(9, -1, -1)), range(9, -1, -1))
    assert total.buffers == 2                    # the total, and one part buffer reused
    total = _feed(parts, list(range(9, -1, -1)), range(10))
    assert total.buffers == 10                   # all out of turn: each waits in its own


def test_a_missing_part_is_an_error():
    total = _feed([np.ones(2)] * 3, [2, 1, 0], [2, 0])
    with pytest.raises(RuntimeError, match="2 of 3 parts not added"):
        total.result()


def test_the_lstm_weight_gradients_sum_the_spans_last_first_with_few_buffers(monkeypatch):
    b, t, f, u = 3, 13, 5, 4
    x = RNG.standard_normal((b, t, f)).astype(np.float32)
    h0, c0 = RNG.standard_normal((2, b, u)).astype(np.float32)
    kern = (RNG.standard_normal((f, 4 * u)) * 0.5).astype(np.float32)
    rk = (RNG.standard_normal((u, 4 * u)) * 0.5).astype(np.float32)
    bias = RNG.standard_normal(4 * u).astype(np.float32)
    attrs = dict(activation="tanh", recurrent_activation="sigmoid", go_backwards=False, zero_output_for_mask=False)
    monkeypatch.setattr(rnn_overlap, "enabled", lambda plan: True)
    monkeypatch.setattr(rnn_overlap.spans, "__defaults__", (2,))
    made = []

    class Recorded(rc.SpanGrads):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            made.append(self)
    monkeypatch.setattr(rc, "SpanGrads", Recorded)
    out, h, c, res = lstm.lstm_sequence(x, h0, c0, kern, rk, bias, **attrs)
    d_out = RNG.standard_normal(out.shape).astype(np.float32)
    grads = lstm.lstm_sequence_grad(x, h0, c0, kern, rk, res, d_out, h, c, **attrs)
    g, = made
    spans = rnn_overlap.spans(t)
    assert len(spans) == 7 and g.dw.buffers <= 3
    xt, floats = rc.time_major(x, np.float32), rc.reserve_floats(res, np.float32, b, t)
    parts = []
    for a, e in spans:                          # each span's product [x_t | h_prev]^T @ dz, as the task makes it
        rows = g.dz[a:e].reshape(-1, 4 * u)
        h_prev = np.swapaxes(floats[:, a:e, floats.shape[2] - u:], 0, 1)
        inputs = np.concatenate([xt[a:e], h_prev], axis=2).reshape(-1, f + u)
        parts.append(gemm.matmul(inputs.T, rows, out=np.empty((f + u, 4 * u), np.float32), one_thread=True))
    total = _sequential(parts, list(range(len(spans) - 1, -1, -1)))
    assert np.array_equal(grads[3], total[:f]) and np.array_equal(grads[4], total[f:])


def test_a_part_put_while_another_thread_adds_is_left_to_that_thread(monkeypatch):
    parts = [np.float32(1e8), np.float32(1.0), np.float32(-1e8)]
    parts = [np.full(2, p, np.float32) for p in parts]
    total = rnn_overlap.OrderedSum((2,), np.float32, [2, 1, 0])
    entered, release, first = threading.Event(), threading.Event(), []
    real_add = np.add

    class SlowNumPy:                                   # the first add waits until released
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def add(*args, **kw):
            if not first:
                first.append(1)
                entered.set()
                release.wait()
            return real_add(*args, **kw)
    monkeypatch.setattr(rnn_overlap, "np", SlowNumPy())

    def put(i):
        buf = total.buffer()
        buf[...] = parts[i]
        total.put(i, buf)
    put(2)                                             # the first term: no add
    adder = threading.Thread(target=put, args=(1,))
    adder.start()
    entered.wait()                                     # the helper is adding part 1
    put(0)                                             # handed over: returns without adding
    assert 0 in total.pending
    release.set()
    adder.join()
    assert np.array_equal(total.result(), _sequential(parts, [2, 1, 0]))
