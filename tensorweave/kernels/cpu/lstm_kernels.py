"""CPU kernels for ``LSTMSequence`` and ``LSTMSequenceGrad`` (``ops/rnn_ops.py``): the whole
sequence forward, and backpropagation through time, with the per-step elementwise work compiled.

The frame (input projection and weight gradients as single GEMMs over all steps, one small
GEMM per step, batch-major layout, masks) is ``rnn_common``'s. Per step the compiled pass
(``_forward_step`` / ``_backward_step``) does the gate activations, the cell update and the
mask logic for every batch row, without allocating; the step loops (``_forward_steps`` /
``_backward_steps``) are compiled whole with the product called from inside (``rnn_gemm``).

The reserve holds per batch row and original time step ``[i, f, g, o, act(c_t), c_{t-1},
h_{t-1}]`` (activated gates, then the states entering the step). Backward recomputes the
activation derivatives from the saved outputs.

Measured (B=32, T=80, F=128, U=128, float32, one core, CPU time): forward ~9 ms (was ~18 with
NumPy per-step ufuncs), backward ~15 ms (was ~19-20), of which ~6 and ~12 ms are GEMMs; in the
``lstm`` benchmark's step on 2 cores 8.1 and 12.8 ms. Compiled step loops on one thread (issue 18):
forward + backward 59 -> 40 ms CPU at load 14 (the per-step Python and ``gemm.matmul``'s checks
gone, MKL's second thread no longer spinning between steps).

The sequence-wide products run beside the loop (``rnn_overlap``, issue 18 session 12): the input
projection goes to a time-major ``[T, B, 4U]`` array (a span of steps is one block of rows) that the
forward pass reads, and the backward pass writes ``dz`` time-major, so each span's ``dx``, ``d kernel``
and ``d recurrent_kernel`` products (``rnn_common.SpanGrads``) can start as soon as the loop has
left the span. The loops with the library call built in (``_forward_rows`` / ``_backward_rows``)
are built at install (``aot_kernels``).
"""
import contextlib
import functools

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import gemm
from tensorweave.kernels.cpu import rnn_common as rc
from tensorweave.kernels.cpu import rnn_gemm, rnn_overlap
from tensorweave.kernels.cpu.jit import njit, njit_twin
from tensorweave.kernels.cpu.rnn_activations import (CODES, activate, copy_into, derivative, fill,
                                                      output_gradient, repeat_output)
from tensorweave.ops.rnn_ops import LSTM_RESERVE


# ---- compiled steps -----------------------------------------------------------------------------
# Loops write one array each: with more, LLVM needs too many runtime aliasing checks between
# the array views and leaves the loop scalar (measured ~25% slower per step).
@njit
def _forward_step(z, p, res, bias, h, c, h_next, c_next, out, mask, ti, s, act, ract, zero_output):
    """One step for every batch row: ``z`` holds ``h @ recurrent_kernel`` ``[B, 4U]``, ``p`` the
    step's ``x_t @ kernel``; the reserve's gate columns at time ``ti`` get the activated gates.
    Writes the new states and ``out[:, s]``."""
    u = h.shape[1]
    for b in range(z.shape[0]):
        r = res[b, ti]
        pre, zb, pb = r[:4 * u], z[b], p[b]
        for j in range(4 * u):
            pre[j] = (pb[j] + bias[j]) + zb[j]
        activate(ract, r, 0, 2 * u)                 # i, f
        activate(act, r, 2 * u, 3 * u)              # g
        activate(ract, r, 3 * u, 4 * u)             # o
        cb, hb, cn, hn, ob = c[b], h[b], c_next[b], h_next[b], out[b, s]
        copy_into(r[5 * u:6 * u], cb)
        copy_into(r[6 * u:], hb)
        if mask[b, ti]:
            i, f, g, o, tc = r[:u], r[u:2 * u], r[2 * u:3 * u], r[3 * u:4 * u], r[4 * u:5 * u]
            for j in range(u):
                cn[j] = f[j] * cb[j] + i[j] * g[j]
            copy_into(tc, cn)
            activate(act, r, 4 * u, 5 * u)          # act(c')
            for j in range(u):
                hn[j] = o[j] * tc[j]
            copy_into(ob, hn)
        else:                                       # states carry over; the output repeats or is 0
            fill(r[4 * u:5 * u], 0)                 # unread, but the reserve is an output: no stale bytes
            copy_into(cn, cb)
            copy_into(hn, hb)
            repeat_output(ob, out, b, s, zero_output)


@njit
def _backward_step(res, d_out, dz, dh, dh_mm, dc, carry, scratch, mask, ti, s, tn, act, ract, zero_output):
    """One reverse step for every batch row: writes the pre-activation gradients ``dz[ti]``
    and updates ``dc`` (the gradient of ``c`` entering step ``ti``) in place.

    ``dh`` is the gradient of ``h`` leaving the step: on entry it is still the one of the step
    processed before (original index ``tn``, or -1), and ``dh_mm`` holds that step's
    ``dz @ recurrent_kernel^T``, taken for the rows the step did not mask (a masked row's
    gradient skips the step unchanged). ``carry`` is the gradient of a repeated output that
    reaches back to the step that produced it; ``scratch`` is ``[7U]``."""
    u = dh.shape[1]
    deriv, dht, dct = scratch[:5 * u], scratch[5 * u:6 * u], scratch[6 * u:]
    di, df, dg, do, dtc = deriv[:u], deriv[u:2 * u], deriv[2 * u:3 * u], deriv[3 * u:4 * u], deriv[4 * u:]
    for b in range(dh.shape[0]):
        dhb, dcb, cy, dout = dh[b], dc[b], carry[b], d_out[b, s]
        if tn >= 0 and mask[b, tn]:
            copy_into(dhb, dh_mm[b])
        g_ = dz[ti, b]
        if not output_gradient(dht, dout, dhb, cy, not mask[b, ti], zero_output):
            fill(g_, 0)
            continue
        r = res[b, ti]
        derivative(ract, r[:2 * u], deriv[:2 * u])
        derivative(act, r[2 * u:3 * u], dg)
        derivative(ract, r[3 * u:4 * u], do)
        derivative(act, r[4 * u:5 * u], dtc)
        i, f, g, o, tc, cp = r[:u], r[u:2 * u], r[2 * u:3 * u], r[3 * u:4 * u], r[4 * u:5 * u], r[5 * u:6 * u]
        gi, gf, gg, go = g_[:u], g_[u:2 * u], g_[2 * u:3 * u], g_[3 * u:]
        for j in range(u):
            go[j] = dht[j] * tc[j] * do[j]
        for j in range(u):
            dct[j] = dcb[j] + dht[j] * o[j] * dtc[j]
        for j in range(u):
            gi[j] = dct[j] * g[j] * di[j]
        for j in range(u):
            gf[j] = dct[j] * cp[j] * df[j]
        for j in range(u):
            gg[j] = dct[j] * i[j] * dg[j]
        for j in range(u):
            dcb[j] = dct[j] * f[j]


# ---- the step loops: one source, compiled (the product called from inside) or run as its twin -----
def _forward_steps(mm, interface, fn, hs, cs, rk, z, proj, res, bias, out, m, act, ract, zero_output,
                   go_backwards, s0, s1):
    """Processed steps ``s0 <= s < s1`` of the forward loop, products by ``mm(interface, fn, a, b,
    out)`` (``rnn_gemm``); the states entering step ``s`` are ``hs[s % 2]``, ``cs[s % 2]``."""
    t = res.shape[1]
    for s in range(s0, s1):
        ti = t - 1 - s if go_backwards else s
        h, h_next, c, c_next = hs[s % 2], hs[1 - s % 2], cs[s % 2], cs[1 - s % 2]
        mm(interface, fn, h, rk, z)
        _forward_step(z, proj[ti], res, bias, h, c, h_next, c_next, out, m, ti, s, act, ract, zero_output)


def _backward_steps(mm, interface, fn, res, d_out, dz, dh, dh_mm, dc, carry, scratch, rk_t, m, act, ract,
                    zero_output, go_backwards, s0, s1, tn):
    """Processed steps ``s1 > s >= s0`` of the backward loop (after the step of original index
    ``tn``, -1 for none), products by ``mm``; returns the original index of the last step
    processed: ``dh_mm`` holds its recurrent gradient, not yet in ``dh``."""
    t = res.shape[1]
    for s in range(s1 - 1, s0 - 1, -1):
        ti = t - 1 - s if go_backwards else s
        _backward_step(res, d_out, dz, dh, dh_mm, dc, carry, scratch, m, ti, s, tn, act, ract, zero_output)
        mm(interface, fn, dz[ti], rk_t, dh_mm)
        tn = ti
    return tn


_forward_loop = njit_twin(_forward_steps)(_forward_steps)
_backward_loop = njit_twin(_backward_steps)(_backward_steps)


# the loops with the library call built in (``rnn_gemm.rows``): no function-typed argument, so
# they can be built ahead of time (``aot_kernels``) and a cold process compiles nothing
@njit_twin(functools.partial(_forward_steps, rnn_gemm.rows))
def _forward_rows(interface, fn, hs, cs, rk, z, proj, res, bias, out, m, act, ract, zero_output, go_backwards, s0,
                  s1):
    _forward_loop(rnn_gemm.rows, interface, fn, hs, cs, rk, z, proj, res, bias, out, m, act, ract, zero_output,
                  go_backwards, s0, s1)


@njit_twin(functools.partial(_backward_steps, rnn_gemm.rows))
def _backward_rows(interface, fn, res, d_out, dz, dh, dh_mm, dc, carry, scratch, rk_t, m, act, ract, zero_output,
                   go_backwards, s0, s1, tn):
    return _backward_loop(rnn_gemm.rows, interface, fn, res, d_out, dz, dh, dh_mm, dc, carry, scratch, rk_t, m,
                          act, ract, zero_output, go_backwards, s0, s1, tn)


_forward_loop.with_rows, _backward_loop.with_rows = _forward_rows, _backward_rows
# timing loop against twin (``loop_choice``): the twins call these compiled kernels; a span's first
# (forward) or last (backward) PROBE_STEPS steps stand for the span
PROBE_STEPS = 2
_forward_rows.needs, _backward_rows.needs = (rnn_gemm.rows, _forward_step), (rnn_gemm.rows, _backward_step)
_forward_rows.probe = lambda args: args[:-1] + (min(args[-1], args[-2] + PROBE_STEPS),)
_backward_rows.probe = lambda args: args[:-3] + (max(args[-3], args[-2] - PROBE_STEPS),) + args[-2:]


# ---- kernels ------------------------------------------------------------------------------------
@k("LSTMSequence")
def lstm_sequence(x, h0, c0, kernel, recurrent_kernel, bias, mask=None, *, activation, recurrent_activation,
                  go_backwards, zero_output_for_mask):
    dt, wd = x.dtype, rc.work_dtype(x)
    b, t, f = x.shape
    u = h0.shape[1]
    res = np.empty((b, t, LSTM_RESERVE * u), wd)
    proj = np.empty((t, b, 4 * u), wd)                # x @ kernel, time-major: a span's rows are one block
    xt, kern = rc.time_major(x, wd), rc.contiguous(kernel, wd)
    rk, bias_w = rc.contiguous(recurrent_kernel, wd), rc.contiguous(bias, wd)
    m = rc.step_mask(mask, b, t)
    hs, cs = np.empty((2, b, u), wd), np.empty((2, b, u), wd)
    hs[0], cs[0] = h0, c0
    out = np.empty((b, t, u), wd)
    z = np.empty((b, 4 * u), wd)
    plan = rnn_gemm.plan(wd, b, 4 * u, u)
    overlap = rnn_overlap.enabled(plan)
    tasks = rnn_overlap.Tasks(overlap)

    def project(a, e):
        gemm.matmul(xt[a:e].reshape(-1, f), kern, out=proj[a:e].reshape(-1, 4 * u), one_thread=overlap)
    with rnn_overlap.one_thread() if overlap else contextlib.nullcontext():
        spans = rnn_overlap.spans(t) if overlap else [(0, t)] if t else []
        ready = [tasks.add(functools.partial(project, *rnn_overlap.original(s0, s1, t, go_backwards)))
                 for s0, s1 in spans]
        for (s0, s1), done in zip(spans, ready):
            tasks.wait(done)
            rnn_gemm.run(_forward_loop, plan, hs, cs, rk, z, proj, res, bias_w, out, m, CODES[activation],
                         CODES[recurrent_activation], zero_output_for_mask, go_backwards, s0, s1)
        tasks.finish()
    return rc.cast_all(dt, out, hs[t % 2], cs[t % 2]) + (rc.reserve_bytes(res),)


@k("LSTMSequenceGrad")
def lstm_sequence_grad(x, h0, c0, kernel, recurrent_kernel, reserve, d_out, d_h, d_c, mask=None, *, activation,
                       recurrent_activation, go_backwards, zero_output_for_mask):
    wd = rc.work_dtype(x)
    b, t, f = x.shape
    u = h0.shape[1]
    res = rc.reserve_floats(reserve, wd, b, t)
    d_out = rc.contiguous(d_out, wd)
    dh, dc = rc.contiguous(d_h, wd).copy(), rc.contiguous(d_c, wd).copy()
    dh_mm = np.empty_like(dh)
    carry = np.zeros_like(dh)
    scratch = np.empty(7 * u, wd)
    dz = np.empty((t, b, 4 * u), wd)                  # time-major: a span's rows are one block
    rk_t = rc.contiguous(recurrent_kernel.T, wd)     # contiguous: ~1.4x faster per-step GEMM than the view
    m = rc.step_mask(mask, b, t)
    plan = rnn_gemm.plan(wd, b, u, 4 * u)
    overlap = rnn_overlap.enabled(plan)
    spans = rnn_overlap.spans(t) if overlap else [(0, t)] if t else []
    grads = rc.SpanGrads(x, kernel, res, u, dz, wd, len(spans), overlap)
    tasks = rnn_overlap.Tasks(overlap)
    tn = -1
    with rnn_overlap.one_thread() if overlap else contextlib.nullcontext():
        for i, (s0, s1) in reversed(list(enumerate(spans))):
            tn = rnn_gemm.run(_backward_loop, plan, res, d_out, dz, dh, dh_mm, dc, carry, scratch, rk_t, m,
                              CODES[activation], CODES[recurrent_activation], zero_output_for_mask, go_backwards,
                              s0, s1, tn)
            for task in grads.tasks(i, *rnn_overlap.original(s0, s1, t, go_backwards)):
                tasks.add(task)
        tasks.finish()
    if tn >= 0:                                       # the first step's recurrent gradient
        np.copyto(dh, dh_mm, where=m[:, tn, None])
    dx, dk, drk = grads.results()
    return rc.cast_all(x.dtype, dx, dh, dc, dk, drk, dz.sum(axis=(0, 1)))
