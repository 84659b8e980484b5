"""OpInfos for the fused recurrent ops (ops/rnn_ops.py).

The references are plain per-step loops in float64 written from Keras' cell equations (one
batch row at a time for the mask logic), sharing no code with the time-major kernels.
"""
import numpy as np

import tensorweave as tw
from opinfo import FLOATS, OpInfo, Sample
from tensorweave.ops import rnn_ops

RNN_TOL = {tw.float32: (2e-5, 2e-5), tw.float16: (2e-2, 2e-2), tw.bfloat16: (5e-2, 5e-2)}


def _act(name, x):
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "hard_sigmoid":
        return np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    return x


def _run(step, x, states, mask, go_backwards, zero_output_for_mask):
    """Keras' masked loop: per batch row, a masked step keeps the states and repeats the
    previous output (zeros before any), or outputs zeros with ``zero_output_for_mask``."""
    x = np.asarray(x, np.float64)
    b, t, _ = x.shape
    order = list(range(t))[::-1] if go_backwards else list(range(t))
    states = [np.array(s, np.float64) for s in states]
    u = states[0].shape[1]
    outs = np.zeros((b, t, u))
    prev = np.zeros((b, u))
    for k, ti in enumerate(order):
        out, new = step(x[:, ti], states)
        for row in range(b):
            if mask is None or mask[row, ti]:
                for s, n in zip(states, new):
                    s[row] = n[row]
                prev[row] = out[row]
                outs[row, k] = out[row]
            else:
                outs[row, k] = 0.0 if zero_output_for_mask else prev[row]
    return outs, states


def _cast_all(like, *arrays):
    return tuple(np.asarray(a).astype(np.asarray(like).dtype) for a in arrays)


def ref_lstm(x, h0, c0, kernel, recurrent_kernel, bias, mask=None, activation="tanh",
             recurrent_activation="sigmoid", go_backwards=False, zero_output_for_mask=False):
    w, rw, b = (np.asarray(a, np.float64) for a in (kernel, recurrent_kernel, bias))
    u = w.shape[1] // 4

    def step(xt, states):
        h, c = states
        z = xt @ w + h @ rw + b
        i = _act(recurrent_activation, z[:, :u])
        f = _act(recurrent_activation, z[:, u:2 * u])
        g = _act(activation, z[:, 2 * u:3 * u])
        o = _act(recurrent_activation, z[:, 3 * u:])
        c2 = f * c + i * g
        h2 = o * _act(activation, c2)
        return h2, [h2, c2]
    outs, (h, c) = _run(step, x, [h0, c0], mask, go_backwards, zero_output_for_mask)
    return _cast_all(x, outs, h, c)


def ref_gru(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask=None, activation="tanh",
            recurrent_activation="sigmoid", reset_after=True, go_backwards=False, zero_output_for_mask=False):
    w, rw, ib, rb = (np.asarray(a, np.float64) for a in (kernel, recurrent_kernel, input_bias, recurrent_bias))
    u = w.shape[1] // 3

    def step(xt, states):
        (h,) = states
        xz = xt @ w + ib
        if reset_after:
            rz = h @ rw + rb
            z = _act(recurrent_activation, xz[:, :u] + rz[:, :u])
            r = _act(recurrent_activation, xz[:, u:2 * u] + rz[:, u:2 * u])
            hh = _act(activation, xz[:, 2 * u:] + r * rz[:, 2 * u:])
        else:
            z = _act(recurrent_activation, xz[:, :u] + h @ rw[:, :u] + rb[:u])
            r = _act(recurrent_activation, xz[:, u:2 * u] + h @ rw[:, u:2 * u] + rb[u:2 * u])
            hh = _act(activation, xz[:, 2 * u:] + (r * h) @ rw[:, 2 * u:] + rb[2 * u:])
        h2 = z * h + (1 - z) * hh
        return h2, [h2]
    outs, (h,) = _run(step, x, [h0], mask, go_backwards, zero_output_for_mask)
    return _cast_all(x, outs, h)


def ref_simple(x, h0, kernel, recurrent_kernel, bias, mask=None, activation="tanh", go_backwards=False,
               zero_output_for_mask=False):
    w, rw, b = (np.asarray(a, np.float64) for a in (kernel, recurrent_kernel, bias))

    def step(xt, states):
        h2 = _act(activation, xt @ w + states[0] @ rw + b)
        return h2, [h2]
    outs, (h,) = _run(step, x, [h0], mask, go_backwards, zero_output_for_mask)
    return _cast_all(x, outs, h)


def _masks(b, t):
    """Row 0 masked at the start (and end), row 1 in the middle, row 2 entirely."""
    m = np.ones((b, t), bool)
    m[0, 0] = m[0, -1] = False
    if b > 1:
        m[1, t // 2] = False
    if b > 2:
        m[2, :] = False
    return m


def _samples(n_gates, n_states, n_biases, variants):
    def gen(dtype, rng):
        def a(*shape, scale=1.0):
            return (rng.uniform(-1, 1, size=shape) * scale).astype(dtype)

        def args(b, t, f, u, mask=False):
            xs = [a(b, t, f)] + [a(b, u, scale=0.5) for _ in range(n_states)]
            xs += [a(f, n_gates * u, scale=0.7), a(u, n_gates * u, scale=0.7)]
            xs += [a(n_gates * u, scale=0.3) for _ in range(n_biases)]
            if mask:
                xs.append(_masks(b, t))
            return tuple(xs)
        out = [Sample(args(2, 4, 3, 2), name="basic"),
               Sample(args(3, 5, 2, 2, mask=True), name="mask"),
               Sample(args(3, 4, 2, 2, mask=True), {"zero_output_for_mask": True}, name="mask_zero_output"),
               Sample(args(2, 4, 3, 2), {"go_backwards": True}, name="backwards"),
               Sample(args(3, 4, 2, 2, mask=True), {"go_backwards": True}, name="backwards_mask"),
               Sample(args(1, 1, 2, 3), name="one_step"),
               Sample(args(2, 0, 3, 2), name="empty_time")]
        for name, kw in variants:
            kw = dict(kw)
            with_mask = kw.pop("_mask", False)
            out.append(Sample(args(3, 4, 3, 2, mask=with_mask), kw, name=name))
        return out
    return gen


def _lstm(x, h0, c0, kernel, recurrent_kernel, bias, mask=None, **kw):
    return rnn_ops.lstm_sequence(x, h0, c0, kernel, recurrent_kernel, bias, mask, **kw)


def _gru(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask=None, **kw):
    return rnn_ops.gru_sequence(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask, **kw)


def _simple(x, h0, kernel, recurrent_kernel, bias, mask=None, **kw):
    return rnn_ops.simple_rnn_sequence(x, h0, kernel, recurrent_kernel, bias, mask, **kw)


OPS = [
    OpInfo("rnn.lstm_sequence", _lstm, ref_lstm, dtypes=FLOATS, tol=RNN_TOL,
           samples=_samples(4, 2, 1, [("relu_hard_sigmoid", {"activation": "relu",
                                                             "recurrent_activation": "hard_sigmoid"}),
                                      ("linear_tanh", {"activation": "linear", "recurrent_activation": "tanh"})])),
    OpInfo("rnn.gru_sequence", _gru, ref_gru, dtypes=FLOATS, tol=RNN_TOL,
           samples=_samples(3, 1, 2, [("reset_before", {"reset_after": False}),
                                      ("reset_before_mask_backwards", {"reset_after": False, "go_backwards": True,
                                                                       "_mask": True}),
                                      ("relu_hard_sigmoid", {"activation": "relu",
                                                             "recurrent_activation": "hard_sigmoid"})])),
    OpInfo("rnn.simple_rnn_sequence", _simple, ref_simple, dtypes=FLOATS, tol=RNN_TOL,
           samples=_samples(1, 1, 1, [("relu", {"activation": "relu"}), ("linear", {"activation": "linear"}),
                                      ("sigmoid", {"activation": "sigmoid"})])),
]
