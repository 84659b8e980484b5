"""Self-attention in a training step as two plan steps: the forward (scores, softmax, weighted sum,
the probabilities kept for the backward) and the backward (the value, query and key gradients),
a (batch, head) pair at a time; the plan nodes ``runtime/passes/attention_train.py`` makes
(``FusedAttentionTrain``, ``FusedAttentionGrad``: never graph ops).

Why: the transformer step ran attention as three forward and five backward plan steps, each
product a stack of 64 products of 64x64x32 (32 sequences x 2 heads): ~7.7 ms of the step's ~34 ms
CPU at load 3.6 for ~100 MFLOP, ~1.4 ms at one core's GEMM rate (issue 18 session 21, tr25). Here
each pair's products are ``cblas_?gemm`` calls from compiled code on one MKL thread on strided
views of the ``[B, T, H, D]`` operands, and the softmax (forward) or its gradient (backward) runs
on the pair's ``[T, S]`` tile while it is in cache:

- forward: the inference step's blocks of pairs (``attention_kernels._fused``: scores and the
  rows' shift, the exponentials, normalize and combine), the tiles written into the ``[B, H, T,
  S]`` probabilities the backward reads: its bits. The float32 exponentials are
  ``attention_kernels.exp_tiles``' (vector lanes, within 1 ulp of ``e^x``; NumPy's float32 ``exp``
  runs scalar without AVX-512: 0.39 of the forward's ~1.4 ms on the AMD EPYC, issue 18 session 25),
  so the float32 probabilities are within a few ulp of the ``Softmax`` kernel's, not its bits;
  float64 keeps NumPy's ``exp`` and the kernel's bits;
- backward, per pair: ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - rowsum(dP * P))``
  (``layer_norm_loops.softmax_grad``: the ``SoftmaxGrad`` kernel's row loop, its bits on the same
  ``dP``), ``dQ = dS K``, ``dK = dS^T Q`` (the query as the graph's dot reads it: Keras scales it
  before, and that scale's gradient stays a graph step).

The products may differ from the stacked ones in the last bits (another GEMM blocking).

Which way a class of shapes runs is measured (``gemm.tuner()``, ``attention-train:<class>,p<parts>``
and ``attention-grad:...``), as ``attention_kernels`` does at inference: ``"apart"`` the graph's
steps (the incumbent; also where MKL is not loaded or rows are not unit-stride), ``"one"`` fused on
the calling thread (the choice under load, untimed), ``"rows"`` fused with blocks of pairs shared
with the intra-op threads (``gemm.share_tasks``). Timed on a quiet machine only.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import attention_train as a
>>> q = k = v = np.ones((1, 2, 1, 2), np.float32)
>>> out, probs = a.attention_forward(k, q, v, dot="aecd,abcd->acbe", combine="acbe,aecd->abcd")
>>> out.tolist(), probs.tolist()
([[[[1.0, 1.0]], [[1.0, 1.0]]]], [[[[0.5, 0.5], [0.5, 0.5]]]])
"""
import functools

import numpy as np

from tensorweave.kernels.cpu import (attention_kernels, gemm, gemm_tuning, layer_norm_kernels, layer_norm_loops,
                                     linalg_kernels, nn_kernels)
from tensorweave.kernels.cpu.jit import njit

_NO_TRANS, _TRANS = gemm._NO_TRANS, gemm._TRANS
_softmax_grad = layer_norm_loops.softmax_grad.dispatcher

#: the equations of the backward's four products, in the letters of the forward's ``dot``
#: (``aecd,abcd->acbe``): ``dP``, ``dV``, ``dK``, ``dQ`` (``runtime/passes/attention_train.py``
#: matches the graph's by their layout)
GRAD_EQUATIONS = ("abcd,aecd->acbe", "abcd,acbe->aecd", "acbe,abcd->aecd", "acbe,aecd->abcd")


@njit
def grad_pairs(fn, set_local, probs, g, q, k, v, dq, dk, dv, ds, scale, p0, p1):
    """For pairs ``p = p0 .. p1 - 1`` (``b, h = divmod(p, heads)``), ``probs[p]`` the ``[T, S]``
    probabilities and ``g`` the output's gradient: ``dv = P^T g``, ``ds = g v^T`` turned into the
    scores' gradient in place (``softmax_grad``, ``scale``), ``dq = ds k``, ``dk = ds^T q``; each
    product on one MKL thread. ``ds``: one ``[T, S]`` scratch tile."""
    heads, t, d, n, dvw = q.shape[2], q.shape[1], q.shape[3], k.shape[1], v.shape[3]
    item = q.itemsize
    before = gemm.set_threads_local(set_local, 1)
    for p in range(p0, p1):
        b, h = p // heads, p % heads
        tile, gp = probs[p], g[b, :, h, :]
        lg = g.strides[1] // item
        gemm._cblas_gemm(fn, _TRANS, _NO_TRANS, n, dvw, t, tile, n, gp, lg, dv[b, :, h, :], dv.strides[1] // item)
        gemm._cblas_gemm(fn, _NO_TRANS, _TRANS, t, n, dvw, gp, lg, v[b, :, h, :], v.strides[1] // item, ds, n)
        _softmax_grad(tile, ds, scale, ds)
        gemm._cblas_gemm(fn, _NO_TRANS, _NO_TRANS, t, d, n, ds, n, k[b, :, h, :], k.strides[1] // item,
                         dq[b, :, h, :], dq.strides[1] // item)
        gemm._cblas_gemm(fn, _TRANS, _NO_TRANS, n, d, t, ds, n, q[b, :, h, :], q.strides[1] // item,
                         dk[b, :, h, :], dk.strides[1] // item)
    gemm.set_threads_local(set_local, before)


def fused_forward(k, q, v, fn, set_local, parts):
    """``(out, probs)`` fused (see the module docstring): ``attention_kernels``' blocks of pairs, their
    tiles written into the probabilities."""
    b, t, h, _ = q.shape
    n = k.shape[1]
    probs = np.empty((b, h, t, n), q.dtype)
    out = np.empty(q.shape[:3] + v.shape[3:], q.dtype)
    attention_kernels._fused(k, q, v, fn, set_local, parts, out, probs.reshape(b * h, t, n))
    return out, probs


def fused_backward(g, probs, q, k, v, fn, set_local, parts):
    """``(dq, dk, dv)`` fused (see the module docstring)."""
    b, h, t, n = probs.shape
    dq, dk, dv = np.empty(q.shape, q.dtype), np.empty(k.shape, q.dtype), np.empty(v.shape, q.dtype)
    p3 = probs.reshape(b * h, t, n)
    one = q.dtype.type(1.0)

    def run(p0, p1):
        grad_pairs(fn, set_local, p3, g, q, k, v, dq, dk, dv, np.empty((t, n), q.dtype), one, p0, p1)
    attention_kernels.over_pairs(b * h, t * n * q.itemsize, parts, run)
    return dq, dk, dv


def apart_forward(k, q, v, dot, combine):
    """The graph's forward steps: ``Einsum``, last-axis ``Softmax``, ``Einsum``; ``(out, probs)``."""
    probs = nn_kernels._softmax(linalg_kernels._einsum(k, q, equation=dot), -1)
    return linalg_kernels._einsum(probs, v, equation=combine), probs


def apart_backward(g, probs, q, k, v, equations):
    """The graph's backward steps (``equations``: ``dP``, ``dV``, ``dK``, ``dQ``'s); ``(dq, dk, dv)``."""
    e_dp, e_dv, e_dk, e_dq = equations
    ds = layer_norm_kernels._softmax_grad(probs, linalg_kernels._einsum(g, v, equation=e_dp), -1)
    dv = linalg_kernels._einsum(g, probs, equation=e_dv)
    return (linalg_kernels._einsum(ds, k, equation=e_dq), linalg_kernels._einsum(ds, q, equation=e_dk), dv)


def _fusable(k, q, v, *more):
    """``(fn, set_local)`` of MKL's one-thread GEMM, or None where the fused way cannot run
    (``attention_kernels._fusable``'s checks, and ``more`` operands 4-D, of the query's dtype,
    rows unit-stride)."""
    if any(x.ndim != 4 or x.dtype != q.dtype or x.strides[3] != x.itemsize for x in more):
        return None
    return attention_kernels._fusable(k, q, v)


#: this process's classes (tuples) -> "apart", "one" or "rows"
_chosen = {}


def _way(key, cls, runners):
    """The way class ``cls`` runs (``runners``: ``"apart"``, ``"one"`` and maybe ``"rows"``),
    timed on its first call on a quiet machine; fused on this thread, untimed, under load (as
    ``attention_kernels._way``)."""
    got = _chosen.get(key)
    if got is None:
        got = gemm.tuner().choose(cls, runners, incumbent="apart") if gemm_tuning.quiet() else \
            gemm.tuner().backend(cls) or "one"
        _chosen[key] = got
    return got


def _class(name, q, n, dv, parts):
    b, t, h, d = q.shape
    return f"{name}:{gemm_tuning.shape_class(t, n, d, q.dtype.name, False, True, b * h)}," \
           f"v{dv.bit_length()},p{parts}"


def attention_forward(k, q, v, *, dot, combine):
    """``(einsum(combine, P, v), P)`` with ``P = softmax(einsum(dot, k, q), -1)``, for ``k [B, S,
    H, D]``, ``q [B, T, H, D]``, ``v [B, S, H, Dv]`` (the layouts the pass checks)."""
    how = _fusable(k, q, v)
    if how is None:
        return apart_forward(k, q, v, dot, combine)
    parts = attention_kernels.pair_parts(q.shape[0] * q.shape[2])
    key = ("fwd", q.dtype.char, q.shape, k.shape[1], v.shape[3], parts)
    runners = {"apart": functools.partial(apart_forward, k, q, v, dot, combine),
               "one": functools.partial(fused_forward, k, q, v, *how, 1)}
    if parts > 1:
        runners["rows"] = functools.partial(fused_forward, k, q, v, *how, parts)
    way = _way(key, _class("attention-train", q, k.shape[1], v.shape[3], parts), runners)
    return runners[way]()


def attention_backward(g, probs, q, k, v, *, equations):
    """``(dq, dk, dv)`` of :func:`attention_forward` for the output gradient ``g`` and its
    probabilities ``probs`` (``equations``: the graph's ``dP``, ``dV``, ``dK``, ``dQ`` products)."""
    how = _fusable(k, q, v, g) if probs.flags.c_contiguous and probs.dtype == q.dtype else None
    if how is None:
        return apart_backward(g, probs, q, k, v, equations)
    parts = attention_kernels.pair_parts(q.shape[0] * q.shape[2])
    key = ("bwd", q.dtype.char, q.shape, k.shape[1], v.shape[3], parts)
    runners = {"apart": functools.partial(apart_backward, g, probs, q, k, v, equations),
               "one": functools.partial(fused_backward, g, probs, q, k, v, *how, 1)}
    if parts > 1:
        runners["rows"] = functools.partial(fused_backward, g, probs, q, k, v, *how, parts)
    way = _way(key, _class("attention-grad", q, k.shape[1], v.shape[3], parts), runners)
    return runners[way]()
