"""CPU kernels for ``SimpleRNNSequence`` and ``SimpleRNNSequenceGrad`` (``ops/rnn_ops.py``):
``h' = act(x_t @ kernel + bias + h @ recurrent_kernel)`` over a whole sequence and its
backpropagation through time, in ``rnn_common``'s frame (one small GEMM and one compiled pass
per step, the step loops compiled whole with the product called from inside: ``rnn_gemm``).
The reserve holds per batch row and original time step ``[act output, h_{t-1}]``.
"""
import functools

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import gemm
from tensorweave.kernels.cpu import rnn_common as rc
from tensorweave.kernels.cpu import rnn_gemm
from tensorweave.kernels.cpu.jit import njit, njit_twin
from tensorweave.kernels.cpu.rnn_activations import (CODES, activate, copy_into, derivative, fill,
                                                      output_gradient, repeat_output)
from tensorweave.ops.rnn_ops import SIMPLE_RESERVE


@njit
def _forward_step(z, res, bias, h, h_next, out, mask, ti, s, act, zero_output):
    """One step for every batch row; ``z`` holds ``h @ recurrent_kernel``, the reserve's first
    ``units`` columns at ``ti`` hold ``x_t @ kernel`` on entry and the activation on exit."""
    u = h.shape[1]
    for b in range(z.shape[0]):
        r = res[b, ti]
        pre, zb, hb, hn, ob = r[:u], z[b], h[b], h_next[b], out[b, s]
        for j in range(u):
            pre[j] = (pre[j] + bias[j]) + zb[j]
        activate(act, r, 0, u)
        copy_into(r[u:], hb)
        if mask[b, ti]:
            copy_into(hn, pre)
            copy_into(ob, pre)
        else:                                       # the state carries over; the output repeats or is 0
            copy_into(hn, hb)
            repeat_output(ob, out, b, s, zero_output)


@njit
def _backward_step(res, d_out, dz, dh, dh_mm, carry, dht, mask, ti, s, tn, act, zero_output):
    """One reverse step for every batch row: writes ``dz[:, ti]``. ``dh``, ``dh_mm`` and
    ``carry`` work as in ``lstm_kernels._backward_step``; ``dht`` is ``[U]`` scratch."""
    u = dh.shape[1]
    for b in range(dz.shape[0]):
        dhb, cy, dout, g_ = dh[b], carry[b], d_out[b, s], dz[b, ti]
        if tn >= 0 and mask[b, tn]:
            copy_into(dhb, dh_mm[b])
        if not output_gradient(dht, dout, dhb, cy, not mask[b, ti], zero_output):
            fill(g_, 0)
            continue
        derivative(act, res[b, ti, :u], g_)
        for j in range(u):
            g_[j] *= dht[j]


# ---- the step loops: one source, compiled (the product called from inside) or run as its twin -----
def _forward_steps(mm, interface, fn, h, h_next, rk, z, res, bias, out, m, act, zero_output, go_backwards):
    """The forward step loop, products by ``mm(interface, fn, a, b, out)`` (``rnn_gemm``); returns
    the last state."""
    t = res.shape[1]
    for s in range(t):
        ti = t - 1 - s if go_backwards else s
        mm(interface, fn, h, rk, z)
        _forward_step(z, res, bias, h, h_next, out, m, ti, s, act, zero_output)
        h, h_next = h_next, h
    return h


def _backward_steps(mm, interface, fn, res, d_out, dz, dh, dh_mm, carry, dht, rk_t, m, act, zero_output,
                    go_backwards):
    """The backward step loop, products by ``mm``; returns the original index of the last step
    processed (-1 for none), whose recurrent gradient ``dh_mm`` holds."""
    t = res.shape[1]
    tn = -1
    for s in range(t - 1, -1, -1):
        ti = t - 1 - s if go_backwards else s
        _backward_step(res, d_out, dz, dh, dh_mm, carry, dht, m, ti, s, tn, act, zero_output)
        mm(interface, fn, dz[:, ti], rk_t, dh_mm)
        tn = ti
    return tn


_forward_loop = njit_twin(_forward_steps)(_forward_steps)
_backward_loop = njit_twin(_backward_steps)(_backward_steps)


# the loops with the library call built in (``rnn_gemm.rows``), built ahead of time (``aot_kernels``);
# the forward returns nothing: the last state is ``h`` after an even number of steps, else ``h_next``
@njit_twin(functools.partial(_forward_steps, rnn_gemm.rows))
def _forward_rows(interface, fn, h, h_next, rk, z, res, bias, out, m, act, zero_output, go_backwards):
    _forward_loop(rnn_gemm.rows, interface, fn, h, h_next, rk, z, res, bias, out, m, act, zero_output, go_backwards)


@njit_twin(functools.partial(_backward_steps, rnn_gemm.rows))
def _backward_rows(interface, fn, res, d_out, dz, dh, dh_mm, carry, dht, rk_t, m, act, zero_output, go_backwards):
    return _backward_loop(rnn_gemm.rows, interface, fn, res, d_out, dz, dh, dh_mm, carry, dht, rk_t, m, act,
                          zero_output, go_backwards)


_forward_loop.with_rows, _backward_loop.with_rows = _forward_rows, _backward_rows
# the compiled kernels the twins call: compiled before a timing of loop against twin counts (``loop_choice``)
_forward_rows.needs, _backward_rows.needs = (rnn_gemm.rows, _forward_step), (rnn_gemm.rows, _backward_step)


@k("SimpleRNNSequence")
def simple_rnn_sequence(x, h0, kernel, recurrent_kernel, bias, mask=None, *, activation, go_backwards,
                        zero_output_for_mask):
    dt, wd = x.dtype, rc.work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    res = np.empty((b, t, SIMPLE_RESERVE * u), wd)
    rc.project_inputs(x, kernel, wd, res)
    rk, bias_w = rc.contiguous(recurrent_kernel, wd), rc.contiguous(bias, wd)
    m = rc.step_mask(mask, b, t)
    h = rc.contiguous(h0, wd).copy()
    h_next = np.empty_like(h)
    out = np.empty((b, t, u), wd)
    z = np.empty((b, u), wd)
    rnn_gemm.run(_forward_loop, rnn_gemm.plan(wd, b, u, u), h, h_next, rk, z, res, bias_w, out, m,
                 CODES[activation], zero_output_for_mask, go_backwards)
    return rc.cast_all(dt, out, h if t % 2 == 0 else h_next) + (rc.reserve_bytes(res),)


@k("SimpleRNNSequenceGrad")
def simple_rnn_sequence_grad(x, h0, kernel, recurrent_kernel, reserve, d_out, d_h, mask=None, *, activation,
                             go_backwards, zero_output_for_mask):
    wd = rc.work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    res = rc.reserve_floats(reserve, wd, b, t)
    d_out = rc.contiguous(d_out, wd)
    dh = rc.contiguous(d_h, wd).copy()
    dh_mm = np.empty_like(dh)
    carry = np.zeros_like(dh)
    dht = np.empty(u, wd)
    dz = np.empty((b, t, u), wd)
    rk_t = rc.contiguous(recurrent_kernel.T, wd)
    m = rc.step_mask(mask, b, t)
    tn = rnn_gemm.run(_backward_loop, rnn_gemm.plan(wd, b, u, u), res, d_out, dz, dh, dh_mm, carry, dht, rk_t, m,
                      CODES[activation], zero_output_for_mask, go_backwards)
    if tn >= 0:
        np.copyto(dh, dh_mm, where=m[:, tn, None])
    dx, dk = rc.input_grads(x, kernel, dz, wd)
    drk = gemm.matmul(rc.h_prev_rows(res, u).T, dz.reshape(b * t, u))
    return rc.cast_all(x.dtype, dx, dh, dk, drk, dz.sum(axis=(0, 1)))
