"""CPU kernels for ``ops/rnn_ops.py``: whole-sequence LSTM, GRU and simple RNN, forward and
backpropagation through time.

Layout: inside a kernel every per-step quantity is stored *units by batch* (``[units, batch]``,
time-major across steps: ``[time, k * units, batch]``), the transpose of the user-facing
``[batch, units]``. Then each gate of a step is a contiguous block of rows, and every
per-step ufunc call runs on contiguous memory (NumPy is several times slower on the strided
column slices a ``[batch, 4 * units]`` layout would give). Per step there is one small GEMM
(``recurrent_kernel^T @ h``) and a handful of in-place ufunc calls; the input projection of
all steps is one GEMM before the loop, and the weight gradients three GEMMs after it.

The backward step works on cache-sized blocks too: it recomputes the gate derivatives from
the saved activations (precomputing them for all steps as ``[time, 4 * units, batch]``
temporaries measured ~2x slower, from memory traffic), runs one GEMM for the recurrent
gradient, and copies its pre-activation gradients, transposed, into a ``[time * batch, G]``
buffer that the three weight-gradient GEMMs read after the loop. The reserve space (an output
of raw bytes) holds the gate activations and the state sequence, in the layout above.

Measured (B=32, T=80, F=128, U=128, float32, 2-core Xeon): about 11-12 ms forward and 18-19 ms
backward, of which ~16 ms is GEMM; the rest is NumPy per-call overhead on small blocks, which a
compiled (numba) step would remove.

float16/bfloat16 inputs are computed in float32 and rounded once at the end.
"""
import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.util import low_precision
from tensorweave.ops.rnn_ops import GRU_RESERVE, SIMPLE_RESERVE


# ---- activations --------------------------------------------------------------------------------
def _sigmoid(x, out):
    # 0.5 * tanh(0.5 x) + 0.5: NumPy's tanh is vectorized; scipy's expit is several times slower
    np.multiply(x, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _hard_sigmoid(x, out):
    np.multiply(x, 1.0 / 6.0, out=out)
    out += 0.5
    return np.clip(out, 0.0, 1.0, out=out)


def _linear(x, out):
    if out is not x:
        np.copyto(out, x)
    return out


_ACT = {
    "tanh": lambda x, out: np.tanh(x, out=out),
    "sigmoid": _sigmoid,
    "relu": lambda x, out: np.maximum(x, 0, out=out),
    "linear": _linear,
    "hard_sigmoid": _hard_sigmoid,
}


def _deriv(name, y, out):
    """The activation's derivative as a function of its output ``y``, written into ``out``."""
    if name == "tanh":
        np.multiply(y, y, out=out)
        np.subtract(1, out, out=out)
    elif name == "sigmoid":
        np.subtract(1, y, out=out)
        out *= y
    elif name == "relu":
        np.greater(y, 0, out=out)
    elif name == "hard_sigmoid":
        np.logical_and(y > 0, y < 1, out=out)
        out *= 1.0 / 6.0
    else:
        out.fill(1)
    return out


# ---- layout helpers -----------------------------------------------------------------------------
def _work_dtype(x):
    return np.dtype(np.float32) if x.dtype in low_precision() else x.dtype


def _w(a, wd):
    return a if a.dtype == wd else a.astype(wd)


def _time_major(x, go_backwards):
    """``[T, B, ...]`` contiguous, in processed order."""
    t = np.swapaxes(x, 0, 1)
    return np.ascontiguousarray(t[::-1] if go_backwards else t)


def _project(x, kernel, bias, go_backwards):
    """``(x_t @ kernel + bias)^T`` for every step in processed order: ``[T, G, B]`` (one GEMM on
    the ``[B, T, F]`` input, then one transposing copy)."""
    b, t, f = x.shape
    g = kernel.shape[1]
    xw = np.matmul(x.reshape(b * t, f), kernel)
    xw += bias
    xw = xw.reshape(b, t, g).transpose(1, 2, 0)
    return np.ascontiguousarray(xw[::-1] if go_backwards else xw)


def _units_major(a, wd):
    """A ``[B, U]`` state as a contiguous ``[U, B]`` work array."""
    return np.ascontiguousarray(_w(a, wd).T)


def _step_masks(mask, go_backwards):
    """The mask as bool ``[T, 1, B]`` in processed order (or None)."""
    if mask is None:
        return None
    return _time_major(mask.astype(bool)[..., None], go_backwards).transpose(0, 2, 1)


def _reserve_bytes(ws):
    return ws.view(np.uint8)


def _reserve_floats(reserve, wd, rows, b):
    """The reserve space (raw bytes ``[T, rows, B * itemsize]``) as floats ``[T, rows, B]``."""
    return np.ascontiguousarray(reserve).view(wd).reshape(reserve.shape[0], rows, b)


def _outputs(o_t, dt):
    """``[T, U, B]`` work outputs -> ``[B, T, U]``."""
    return np.ascontiguousarray(o_t.transpose(2, 0, 1), dtype=dt)


def _state_out(s, dt):
    """A ``[U, B]`` work state -> a fresh ``[B, U]`` array."""
    return np.ascontiguousarray(s.T, dtype=dt)


def _prev(states, first):
    """States before each step: ``[first, states[0], ..., states[T-2]]``."""
    out = np.empty_like(states)
    if states.shape[0]:
        out[0] = first
        out[1:] = states[:-1]
    return out


def _grads_out(d_out, d_state, wd):
    """Incoming gradients: outputs ``[B, T, U]`` -> ``[T, U, B]``; a state ``[B, U]`` -> ``[U, B]``."""
    return np.ascontiguousarray(_w(d_out, wd).transpose(1, 2, 0)), _units_major(d_state, wd)


def _rows(a):
    """``[T, G, B]`` -> ``[T * B, G]`` (contiguous), the operand layout of the weight-gradient GEMMs."""
    t, g, b = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1)).reshape(t * b, g)


def _input_grads(dz_rows, x, go_backwards, kernel, wd):
    """From the pre-activation gradients in row layout (``[T * B, G]``, processed order): ``dx``
    (``[B, T, F]``) and the kernel's gradient."""
    b, t, f = x.shape
    x_tm = _time_major(_w(x, wd), go_backwards).reshape(t * b, f)
    dx = np.matmul(dz_rows, _w(kernel, wd).T).reshape(t, b, f)
    dx = np.ascontiguousarray(np.swapaxes(dx[::-1] if go_backwards else dx, 0, 1), dtype=x.dtype)
    return dx, np.matmul(x_tm.T, dz_rows)


def _masked_output(mask_t, cand, prev_out, zero_output):
    return np.where(mask_t, cand, 0 if zero_output else prev_out)


class _MaskedBackward:
    """Routes the gradients of a masked step: ``h_t = m h' + (1 - m) h_{t-1}`` and
    ``o_t = m h' + (1 - m) o_{t-1}`` (or 0 with ``zero_output_for_mask``)."""

    def __init__(self, mask, zero_output, shape, wd):
        self.m = mask.astype(wd)            # [T, 1, B]
        self.keep = 1 - self.m
        self.zero_output = zero_output
        self.carry = np.zeros(shape, wd)    # gradient of o_t arriving from later masked steps

    def step(self, t, d_out_t, dh):
        """(gradient into the step's candidate h', the part of dh that skips the step)."""
        m, keep = self.m[t], self.keep[t]
        g = d_out_t if self.zero_output else d_out_t + self.carry
        if not self.zero_output:
            self.carry = g * keep
        total = g + dh
        total *= m
        return total, dh * keep


def _masked(mask, go_backwards, zero_output, shape, wd):
    if mask is None:
        return None
    return _MaskedBackward(_step_masks(mask, go_backwards), zero_output, shape, wd)


# ---- GRU ----------------------------------------------------------------------------------------
@k("GRUSequence")
def gru_sequence(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask=None, *, activation,
                 recurrent_activation, reset_after, go_backwards, zero_output_for_mask):
    dt, wd = x.dtype, _work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    act, ract = _ACT[activation], _ACT[recurrent_activation]
    xw = _project(_w(x, wd), _w(kernel, wd), _w(input_bias, wd), go_backwards)
    rk_t = np.ascontiguousarray(_w(recurrent_kernel, wd).T)          # [3U, U]
    rb = _w(recurrent_bias, wd)[:, None]
    rk_zr_t, rk_h_t = rk_t[:2 * u], rk_t[2 * u:]
    masks = _step_masks(mask, go_backwards)
    ws = np.empty((t, GRU_RESERVE * u, b), wd)    # rows: z, r, hh, rh, h
    o_t = ws[:, 4 * u:] if masks is None else np.empty((t, u, b), wd)
    h = _units_major(h0, wd)
    rec = np.empty((3 * u, b), wd)
    prev_out = np.zeros((u, b), wd)
    for s in range(t):
        row = ws[s]
        zr, r, hh, rh, hn = row[:2 * u], row[u:2 * u], row[2 * u:3 * u], row[3 * u:4 * u], row[4 * u:]
        xs = xw[s]
        if reset_after:
            np.matmul(rk_t, h, out=rec)
            rec += rb
            np.add(xs[:2 * u], rec[:2 * u], out=zr)
            ract(zr, zr)
            np.copyto(rh, rec[2 * u:])                 # h @ U_h + rb_h, kept for the gradient of r
            np.multiply(r, rh, out=hh)
        else:
            np.matmul(rk_zr_t, h, out=rec[:2 * u])
            rec[:2 * u] += rb[:2 * u]
            np.add(xs[:2 * u], rec[:2 * u], out=zr)
            ract(zr, zr)
            np.multiply(r, h, out=rh)                  # r * h, kept for the gradient of U_h
            np.matmul(rk_h_t, rh, out=hh)
            hh += rb[2 * u:]
        hh += xs[2 * u:]
        act(hh, hh)
        np.subtract(h, hh, out=hn)                     # h' = hh + z * (h - hh)
        hn *= row[:u]
        hn += hh
        if masks is not None:
            m = masks[s]
            prev_out = o_t[s] = _masked_output(m, hn, prev_out, zero_output_for_mask)
            np.copyto(hn, h, where=~m)
        h = hn
    return _outputs(o_t, dt), _state_out(h, dt), _reserve_bytes(ws)


@k("GRUSequenceGrad")
def gru_sequence_grad(x, h0, kernel, recurrent_kernel, reserve, d_out, d_h, mask=None, *, activation,
                      recurrent_activation, reset_after, go_backwards, zero_output_for_mask):
    wd = _work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    ws = _reserve_floats(reserve, wd, GRU_RESERVE * u, b)
    h0 = _units_major(h0, wd)
    rk = np.ascontiguousarray(_w(recurrent_kernel, wd))                # [U, 3U]
    rk_zr, rk_h = rk[:, :2 * u], rk[:, 2 * u:]
    d_out_t, dh = _grads_out(d_out, d_h, wd)
    masked = _masked(mask, go_backwards, zero_output_for_mask, (u, b), wd)
    # per step: dZ_z, dZ_r, dZ_hh, then (reset_after) the gradient of h U_h + rb_h
    g = np.empty((4 * u, b), wd)
    g_rows = np.empty((t, b, 4 * u), wd)
    d_zr = np.empty((2 * u, b), wd)
    d_h = np.empty((u, b), wd)
    for s in range(t - 1, -1, -1):
        row = ws[s]
        z, r, hh, rh = row[:u], row[u:2 * u], row[2 * u:3 * u], row[3 * u:4 * u]
        h_prev = ws[s - 1, 4 * u:] if s else h0
        if masked is None:
            dht = d_out_t[s] + dh
        else:
            dht, dh_keep = masked.step(s, d_out_t[s], dh)
        _deriv(recurrent_activation, row[:2 * u], d_zr)
        _deriv(activation, hh, d_h)
        dz, dr, dhh, drec = g[:u], g[u:2 * u], g[2 * u:3 * u], g[3 * u:]
        np.subtract(h_prev, hh, out=dz)                        # h' = z h + (1 - z) hh
        dz *= d_zr[:u]
        dz *= dht
        np.subtract(1, z, out=dhh)
        dhh *= d_h
        dhh *= dht
        if reset_after:                                        # hh = act(x_h + r * (h U_h + rb_h))
            np.multiply(dhh, rh, out=dr)
            dr *= d_zr[u:]
            np.multiply(dhh, r, out=drec)
            dh = np.matmul(rk_zr, g[:2 * u])
            dh += np.matmul(rk_h, drec)
        else:                                                  # hh = act(x_h + (r * h) U_h + rb_h)
            d_rh = np.matmul(rk_h, dhh)
            np.multiply(d_rh, h_prev, out=dr)
            dr *= d_zr[u:]
            dh = np.matmul(rk_zr, g[:2 * u])
            d_rh *= r
            dh += d_rh
        dht *= z
        dh += dht
        if masked is not None:
            dh += dh_keep
        np.copyto(g_rows[s], g.T)
    g2 = g_rows.reshape(t * b, 4 * u)
    dxz = g2[:, :3 * u]                                        # gradients of the input projection
    dx, dk = _input_grads(dxz, x, go_backwards, kernel, wd)
    dib = dxz.sum(axis=0)
    hp = _rows(_prev(ws[:, 4 * u:], h0))
    drk = np.empty((u, 3 * u), wd)
    drk[:, :2 * u] = np.matmul(hp.T, g2[:, :2 * u])
    if reset_after:       # the recurrent side saw (dZ_z, dZ_r, gradient of h U_h + rb_h)
        drk[:, 2 * u:] = np.matmul(hp.T, g2[:, 3 * u:])
        drb = np.concatenate([dib[:2 * u], g2[:, 3 * u:].sum(axis=0)])
    else:                 # U_h multiplied r * h_prev (kept in the reserve)
        drk[:, 2 * u:] = np.matmul(_rows(ws[:, 3 * u:4 * u]).T, g2[:, 2 * u:3 * u])
        drb = dib
    xd = x.dtype
    return dx, _state_out(dh, xd), dk.astype(xd), drk.astype(xd), dib.astype(xd), drb.astype(xd)


# ---- simple RNN ---------------------------------------------------------------------------------
@k("SimpleRNNSequence")
def simple_rnn_sequence(x, h0, kernel, recurrent_kernel, bias, mask=None, *, activation, go_backwards,
                        zero_output_for_mask):
    dt, wd = x.dtype, _work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    act = _ACT[activation]
    xw = _project(_w(x, wd), _w(kernel, wd), _w(bias, wd), go_backwards)
    rk_t = np.ascontiguousarray(_w(recurrent_kernel, wd).T)
    masks = _step_masks(mask, go_backwards)
    ws = np.empty((t, SIMPLE_RESERVE * u, b), wd)
    o_t = ws if masks is None else np.empty((t, u, b), wd)
    h = _units_major(h0, wd)
    prev_out = np.zeros((u, b), wd)
    for s in range(t):
        hn = ws[s]
        np.matmul(rk_t, h, out=hn)
        hn += xw[s]
        act(hn, hn)
        if masks is not None:
            m = masks[s]
            prev_out = o_t[s] = _masked_output(m, hn, prev_out, zero_output_for_mask)
            np.copyto(hn, h, where=~m)
        h = hn
    return _outputs(o_t, dt), _state_out(h, dt), _reserve_bytes(ws)


@k("SimpleRNNSequenceGrad")
def simple_rnn_sequence_grad(x, h0, kernel, recurrent_kernel, reserve, d_out, d_h, mask=None, *, activation,
                             go_backwards, zero_output_for_mask):
    wd = _work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    hs = _reserve_floats(reserve, wd, SIMPLE_RESERVE * u, b)
    d_out_t, dh = _grads_out(d_out, d_h, wd)
    rk = np.ascontiguousarray(_w(recurrent_kernel, wd))
    masked = _masked(mask, go_backwards, zero_output_for_mask, (u, b), wd)
    dp_rows = np.empty((t, b, u), wd)
    dpre = np.empty((u, b), wd)
    for s in range(t - 1, -1, -1):
        if masked is None:
            dht = d_out_t[s] + dh
        else:
            dht, dh_keep = masked.step(s, d_out_t[s], dh)
        _deriv(activation, hs[s], dpre)
        dpre *= dht
        dh = np.matmul(rk, dpre)
        np.copyto(dp_rows[s], dpre.T)
        if masked is not None:
            dh += dh_keep
    dp2 = dp_rows.reshape(t * b, u)
    dx, dk = _input_grads(dp2, x, go_backwards, kernel, wd)
    drk = np.matmul(_rows(_prev(hs, _units_major(h0, wd))).T, dp2)
    xd = x.dtype
    return dx, _state_out(dh, xd), dk.astype(xd), drk.astype(xd), dp2.sum(axis=0).astype(xd)
