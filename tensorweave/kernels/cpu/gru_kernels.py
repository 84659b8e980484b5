"""CPU kernels for ``GRUSequence`` and ``GRUSequenceGrad`` (``ops/rnn_ops.py``) in
``rnn_common``'s frame, the per-step elementwise work compiled.

Gate order ``(z, r, h)``; ``h' = z h + (1 - z) hh``. With ``reset_after`` (Keras 3's default)
``hh = act(x W_h + b_h + r * (h U_h + rb_h))``: one GEMM per step (``h @ recurrent_kernel``).
Without it ``hh = act(x W_h + b_h + (r * h) U_h + rb_h)``: the candidate's GEMM needs ``r``,
so a step is GEMM, compiled pass, GEMM, compiled pass (backward likewise).

The reserve holds per batch row and original time step ``[z, r, hh, rh, h_{t-1}]`` where
``rh`` is ``h U_h + rb_h`` (``reset_after``; the gradient of ``r`` needs it) or ``r * h``
(the operand of ``d U_h``).

The step loops (``_forward_steps`` / ``_backward_steps``) are compiled whole with the products
called from inside (``rnn_gemm``); run as Python they are the twin.

Backward: a step's gradient into ``h_{t-1}`` has a direct part (``dh' z``, and ``r * d(r h)``
without ``reset_after``), which the compiled pass writes into ``dh``, and the recurrent GEMM's
part, added at the start of the next pass. Masked rows get zero gate gradients, so the GEMM
adds nothing to them and their ``dh`` passes through unchanged.
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
from tensorweave.ops.rnn_ops import GRU_RESERVE


# ---- compiled passes (loops write one array each, so that LLVM vectorizes them) ----------------
@njit
def _forward_gates(rec, res, ib, rb, h, ti, ract, reset_after):
    """``z, r`` and ``rh`` for every row; ``rec`` is ``h @ recurrent_kernel`` (all three gates
    with ``reset_after``, else only ``z, r``)."""
    u = h.shape[1]
    rb_h = rb[2 * u:]                   # slices, not offset indices: those keep loops scalar
    for b in range(h.shape[0]):
        r_, rc_, hb = res[b, ti], rec[b], h[b]
        for j in range(2 * u):
            r_[j] = (r_[j] + ib[j]) + (rc_[j] + rb[j])
        activate(ract, r_, 0, 2 * u)
        copy_into(r_[4 * u:], hb)
        rh = r_[3 * u:4 * u]
        if reset_after:
            rc_h = rc_[2 * u:]
            for j in range(u):
                rh[j] = rc_h[j] + rb_h[j]
        else:
            r = r_[u:2 * u]
            for j in range(u):
                rh[j] = r[j] * hb[j]


@njit
def _forward_state(rec_h, res, ib, rb, h, h_next, out, mask, ti, s, act, reset_after, zero_output):
    """``hh`` and the new state for every row; ``rec_h`` is ``(r * h) @ U_h`` without
    ``reset_after`` (unused with it)."""
    u = h.shape[1]
    ib_h, rb_h = ib[2 * u:], rb[2 * u:]
    for b in range(h.shape[0]):
        r_, hb, hn, ob = res[b, ti], h[b], h_next[b], out[b, s]
        z, r, hh, rh = r_[:u], r_[u:2 * u], r_[2 * u:3 * u], r_[3 * u:4 * u]
        if reset_after:
            for j in range(u):
                hh[j] = (hh[j] + ib_h[j]) + r[j] * rh[j]
        else:
            rcb = rec_h[b]
            for j in range(u):
                hh[j] = (hh[j] + ib_h[j]) + (rcb[j] + rb_h[j])
        activate(act, r_, 2 * u, 3 * u)
        if mask[b, ti]:
            for j in range(u):
                hn[j] = hh[j] + z[j] * (hb[j] - hh[j])
            copy_into(ob, hn)
        else:                                       # the state carries over; the output repeats or is 0
            copy_into(hn, hb)
            repeat_output(ob, out, b, s, zero_output)


@njit
def _backward_gates(res, d_out, dz, drec, dh, dh_mm, carry, scratch, mask, ti, s, add_mm, act, ract,
                    reset_after, zero_output):
    """Gate gradients for every row: ``dz[:, ti]`` gets ``[dZ_z, dZ_r, dZ_hh]`` (``dZ_r`` only
    with ``reset_after``; else ``_backward_reset`` fills it), ``drec[:, ti]`` (``reset_after``)
    the recurrent side ``[dZ_z, dZ_r, d(h U_h + rb_h)]``; ``dh`` becomes the direct part."""
    u = dh.shape[1]
    one = dh.dtype.type(1)
    dht, dzr, dhh_ = scratch[:u], scratch[u:3 * u], scratch[3 * u:4 * u]
    for b in range(dh.shape[0]):
        dhb, cy, dout, g_ = dh[b], carry[b], d_out[b, s], dz[b, ti]
        if add_mm:
            mm = dh_mm[b]
            for j in range(u):
                dhb[j] += mm[j]
        if not output_gradient(dht, dout, dhb, cy, not mask[b, ti], zero_output):
            fill(g_, 0)
            if reset_after:
                dr = drec[b, ti]
                fill(dr, 0)
            continue
        r_ = res[b, ti]
        z, r, hh, rh, hp = r_[:u], r_[u:2 * u], r_[2 * u:3 * u], r_[3 * u:4 * u], r_[4 * u:]
        derivative(ract, r_[:2 * u], dzr)
        derivative(act, hh, dhh_)
        gz, gr, ghh = g_[:u], g_[u:2 * u], g_[2 * u:]
        for j in range(u):
            gz[j] = dht[j] * (hp[j] - hh[j]) * dzr[j]
        for j in range(u):
            ghh[j] = dht[j] * (one - z[j]) * dhh_[j]
        for j in range(u):
            dhb[j] = dht[j] * z[j]
        if reset_after:
            d_r = dzr[u:]
            for j in range(u):
                gr[j] = ghh[j] * rh[j] * d_r[j]
            dr = drec[b, ti]
            copy_into(dr[:2 * u], g_[:2 * u])
            dr_h = dr[2 * u:]
            for j in range(u):
                dr_h[j] = ghh[j] * r[j]


@njit
def _backward_reset(res, dz, dh, d_rh, scratch, mask, ti, ract):
    """Without ``reset_after``: ``dZ_r`` from ``d(r * h) = dZ_hh @ U_h^T`` (in ``d_rh``), and
    that product's direct part ``r * d(r * h)`` added to ``dh``."""
    u = dh.shape[1]
    dr_ = scratch[:u]
    for b in range(dh.shape[0]):
        if not mask[b, ti]:
            continue
        r_, dhb, drh, g_ = res[b, ti], dh[b], d_rh[b], dz[b, ti]
        r, hp = r_[u:2 * u], r_[4 * u:]
        derivative(ract, r, dr_)
        gr = g_[u:2 * u]
        for j in range(u):
            gr[j] = drh[j] * hp[j] * dr_[j]
        for j in range(u):
            dhb[j] += drh[j] * r[j]


# ---- the step loops: one source, compiled (the product called from inside) or run as its twin -----
def _forward_steps(mm, interface, fn, h, h_next, rk_zr, rk_h, rec, rec_h, res, ib, rb, out, m, act, ract,
                   reset_after, zero_output, go_backwards):
    """The forward step loop, products by ``mm(interface, fn, a, b, out)`` (``rnn_gemm``); returns
    the last state. Compiled, there is no Python between steps: a GRU step is ~20 µs of work, and
    each trip through Python cost ~15 µs."""
    t = res.shape[1]
    u = h.shape[1]
    for s in range(t):
        ti = t - 1 - s if go_backwards else s
        mm(interface, fn, h, rk_zr, rec)
        _forward_gates(rec, res, ib, rb, h, ti, ract, reset_after)
        if not reset_after:
            mm(interface, fn, res[:, ti, 3 * u:4 * u], rk_h, rec_h)
        _forward_state(rec_h, res, ib, rb, h, h_next, out, m, ti, s, act, reset_after, zero_output)
        h, h_next = h_next, h
    return h


def _backward_steps(mm, interface, fn, res, d_out, dz, drec, dh, dh_mm, d_rh, carry, scratch, rk_t, rk_zr_t,
                    rk_h_t, m, act, ract, reset_after, zero_output, go_backwards):
    """The backward step loop, products by ``mm`` (``dh_mm`` ends with the first step's recurrent
    part, not yet added to ``dh``)."""
    t = res.shape[1]
    u = dh.shape[1]
    for s in range(t - 1, -1, -1):
        ti = t - 1 - s if go_backwards else s
        _backward_gates(res, d_out, dz, drec, dh, dh_mm, carry, scratch, m, ti, s, s < t - 1, act, ract,
                        reset_after, zero_output)
        if reset_after:
            mm(interface, fn, drec[:, ti], rk_t, dh_mm)
        else:
            mm(interface, fn, dz[:, ti, 2 * u:], rk_h_t, d_rh)
            _backward_reset(res, dz, dh, d_rh, scratch, m, ti, ract)
            mm(interface, fn, dz[:, ti, :2 * u], rk_zr_t, dh_mm)


_forward_loop = njit_twin(_forward_steps)(_forward_steps)
_backward_loop = njit_twin(_backward_steps)(_backward_steps)


# the loops with the library call built in (``rnn_gemm.rows``), built ahead of time (``aot_kernels``);
# the forward returns nothing: the last state is ``h`` after an even number of steps, else ``h_next``
@njit_twin(functools.partial(_forward_steps, rnn_gemm.rows))
def _forward_rows(interface, fn, h, h_next, rk_zr, rk_h, rec, rec_h, res, ib, rb, out, m, act, ract, reset_after,
                  zero_output, go_backwards):
    _forward_loop(rnn_gemm.rows, interface, fn, h, h_next, rk_zr, rk_h, rec, rec_h, res, ib, rb, out, m, act, ract,
                  reset_after, zero_output, go_backwards)


@njit_twin(functools.partial(_backward_steps, rnn_gemm.rows))
def _backward_rows(interface, fn, res, d_out, dz, drec, dh, dh_mm, d_rh, carry, scratch, rk_t, rk_zr_t, rk_h_t, m,
                   act, ract, reset_after, zero_output, go_backwards):
    _backward_loop(rnn_gemm.rows, interface, fn, res, d_out, dz, drec, dh, dh_mm, d_rh, carry, scratch, rk_t,
                   rk_zr_t, rk_h_t, m, act, ract, reset_after, zero_output, go_backwards)


_forward_loop.with_rows, _backward_loop.with_rows = _forward_rows, _backward_rows
# the compiled kernels the twins call: compiled before a timing of loop against twin counts (``loop_choice``)
_forward_rows.needs = (rnn_gemm.rows, _forward_gates, _forward_state)
_backward_rows.needs = (rnn_gemm.rows, _backward_gates, _backward_reset)


# ---- kernels -------------------------------------------------------------------------------------
@k("GRUSequence")
def gru_sequence(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask=None, *, activation,
                 recurrent_activation, reset_after, go_backwards, zero_output_for_mask):
    dt, wd = x.dtype, rc.work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    res = np.empty((b, t, GRU_RESERVE * u), wd)
    rc.project_inputs(x, kernel, wd, res)
    rk = rc.contiguous(recurrent_kernel, wd)
    if reset_after:
        rk_zr = rk_h = rk
    else:
        rk_zr, rk_h = np.ascontiguousarray(rk[:, :2 * u]), np.ascontiguousarray(rk[:, 2 * u:])
    ib, rb = rc.contiguous(input_bias, wd), rc.contiguous(recurrent_bias, wd)
    m = rc.step_mask(mask, b, t)
    h = rc.contiguous(h0, wd).copy()
    h_next = np.empty_like(h)
    out = np.empty((b, t, u), wd)
    rec = np.empty((b, (3 if reset_after else 2) * u), wd)
    rec_h = np.empty((b, u), wd)
    args = (h, h_next, rk_zr, rk_h, rec, rec_h, res, ib, rb, out, m, CODES[activation], CODES[recurrent_activation],
            reset_after, zero_output_for_mask, go_backwards)
    rnn_gemm.run(_forward_loop, rnn_gemm.plan(wd, b, rk_zr.shape[1], u), *args)
    return rc.cast_all(dt, out, h if t % 2 == 0 else h_next) + (rc.reserve_bytes(res),)


@k("GRUSequenceGrad")
def gru_sequence_grad(x, h0, kernel, recurrent_kernel, reserve, d_out, d_h, mask=None, *, activation,
                      recurrent_activation, reset_after, go_backwards, zero_output_for_mask):
    wd = rc.work_dtype(x)
    b, t, _ = x.shape
    u = h0.shape[1]
    res = rc.reserve_floats(reserve, wd, b, t)
    d_out = rc.contiguous(d_out, wd)
    dh = rc.contiguous(d_h, wd).copy()
    dh_mm, d_rh = np.empty_like(dh), np.empty_like(dh)
    carry = np.zeros_like(dh)
    scratch = np.empty(4 * u, wd)
    dz = np.empty((b, t, 3 * u), wd)                          # input side: [dZ_z, dZ_r, dZ_hh]
    drec = np.empty((b, t, 3 * u) if reset_after else (1, 1, 1), wd)
    rk = rc.contiguous(recurrent_kernel, wd)
    rk_t = np.ascontiguousarray(rk.T)                         # [3U, U]
    rk_zr_t, rk_h_t = np.ascontiguousarray(rk_t[:2 * u]), np.ascontiguousarray(rk_t[2 * u:])
    m = rc.step_mask(mask, b, t)
    args = (res, d_out, dz, drec, dh, dh_mm, d_rh, carry, scratch, rk_t, rk_zr_t, rk_h_t, m, CODES[activation],
            CODES[recurrent_activation], reset_after, zero_output_for_mask, go_backwards)
    rnn_gemm.run(_backward_loop, rnn_gemm.plan(wd, b, u, 3 * u), *args)
    if t:
        dh += dh_mm
    dx, dk = rc.input_grads(x, kernel, dz, wd)
    dib = dz.sum(axis=(0, 1))
    hp = rc.h_prev_rows(res, u)
    if reset_after:      # the recurrent side saw (dZ_z, dZ_r, gradient of h U_h + rb_h)
        drec_rows = drec.reshape(b * t, 3 * u)
        drk = gemm.matmul(hp.T, drec_rows)
        drb = drec_rows.sum(axis=0)
    else:                # U_zr multiplied h_prev, U_h multiplied r * h_prev (kept in the reserve)
        rows = dz.reshape(b * t, 3 * u)
        rh = res.reshape(b * t, GRU_RESERVE * u)[:, 3 * u:4 * u]
        drk = np.concatenate([gemm.matmul(hp.T, rows[:, :2 * u]), gemm.matmul(rh.T, rows[:, 2 * u:])], axis=1)
        drb = dib
    return rc.cast_all(x.dtype, dx, dh, dk, drk, dib, drb)
