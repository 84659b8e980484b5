"""CPU kernels of the fused optimizer updates (ops/training_ops.py): one compiled pass
over the weights and slots, written in place; sparse forms loop over the given rows.

The arithmetic is the unfused rule's (keras/optimizers/*.py), in the variable's dtype,
operation for operation — for Adam::

    m += (g - m) * (1 - beta_1);  v += (g*g - v) * (1 - beta_2)
    w -= (m * alpha) / (sqrt(v) + epsilon),  alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)

so results equal the op-by-op optimizers' to rounding.

Decoupled weight decay (``weight_decay`` attr, Keras' ``weight_decay=``: AdamW, SGD, RMSprop,
Adagrad) runs first, as the optimizer's own step orders it: ``w = w - (w * weight_decay) * lr``
over the whole weight (:func:`decay`), then the update reads the decayed ``w``. The same
operations as the optimizer's op-by-op decay (``Optimizer._apply_weight_decay``), so the same
bits; folded into the update op, a ZeRO-1 plan can shard it with the update
(``distribute/zero_update.py``).
"""
import functools

import numba
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import gemm, prefetch, split_passes
from tensorweave.kernels.cpu.jit import njit, njit_twin, parallel_loops
from tensorweave.kernels import threads


def _decay_numpy(w, wd, lr):
    np.subtract(w, (w * wd) * lr, out=w)


@njit_twin(_decay_numpy)
def _decay_flat(w, wd, lr):
    for i in range(w.shape[0]):
        w[i] = w[i] - (w[i] * wd) * lr


def decay_factors(dtype, lr, weight_decay):
    """``(weight_decay, lr)`` in ``dtype`` for :func:`_decay_flat`, or None (no decay)."""
    if not weight_decay:
        return None
    t = np.dtype(dtype).type
    return t(weight_decay), t(lr)


def decay(w, lr, weight_decay):
    """Decoupled weight decay of the flat weight storage ``w`` in place (module docstring)."""
    factors = decay_factors(w.dtype, lr, weight_decay)
    if factors is not None:
        _decay_flat(w, *factors)


def _adam_numpy(w, m, v, g, alpha, c1, c2, eps, chunks=1):
    """:func:`_adam_flat`'s arithmetic in NumPy (the same bits; elementwise, so chunks do not
    matter): the update while the loops compile in the background."""
    mi = m + (g - m) * c1
    vi = v + (g * g - v) * c2
    m[:] = mi
    v[:] = vi
    w[:] = w - (mi * alpha) / (np.sqrt(vi) + eps)


@njit_twin(_adam_numpy)
def _adam_flat(w, m, v, g, alpha, c1, c2, eps):
    for i in range(w.shape[0]):
        gi = g[i]
        mi = m[i] + (gi - m[i]) * c1
        vi = v[i] + (gi * gi - v[i]) * c2
        m[i] = mi
        v[i] = vi
        w[i] = w[i] - (mi * alpha) / (np.sqrt(vi) + eps)


# AMSGrad in a loop of its own: a branch in the loop above would stop it vectorizing.
@njit
def _adam_flat_amsgrad(w, m, v, vh, g, alpha, c1, c2, eps):
    for i in range(w.shape[0]):
        gi = g[i]
        mi = m[i] + (gi - m[i]) * c1
        vi = v[i] + (gi * gi - v[i]) * c2
        m[i] = mi
        v[i] = vi
        hi = vh[i]
        if hi > vi or hi != hi:   # max() that keeps NaN, as np.maximum
            vi = hi
        vh[i] = vi
        w[i] = w[i] - (mi * alpha) / (np.sqrt(vi) + eps)


#: A dense Adam update of at least this many elements runs one chunk per intra-op thread:
#: the mlp's update (670k floats, memory-bound) 0.45 -> 0.25 ms on 2 cores, its step (medians
#: alternating in one process) 2.8-3.6 -> 2.6-3.2 ms. A Python thread pool's hand-off (~50 µs
#: each way) ate the gain; numba's OpenMP pool hands the chunks over without Python.
PARALLEL_MIN = 1 << 16


def _adam_chunks_twin(w, m, v, g, alpha, c1, c2, eps, chunks):
    """While the parallel loop compiles: the one-thread loop (built ahead of time where it was,
    ``aot.py``; else its own twin). Elementwise, so the same bits."""
    _adam_flat(w, m, v, g, alpha, c1, c2, eps)


@njit_twin(_adam_chunks_twin, parallel=True)
def _adam_chunks(w, m, v, g, alpha, c1, c2, eps, chunks):
    n = w.shape[0]
    for c in numba.prange(chunks):   # the vectorised one-thread loop on each chunk
        s, e = n * c // chunks, n * (c + 1) // chunks
        _adam_flat(w[s:e], m[s:e], v[s:e], g[s:e], alpha, c1, c2, eps)


@njit(parallel=True)
def _adam_amsgrad_chunks(w, m, v, vh, g, alpha, c1, c2, eps, chunks):
    n = w.shape[0]
    for c in numba.prange(chunks):
        s, e = n * c // chunks, n * (c + 1) // chunks
        _adam_flat_amsgrad(w[s:e], m[s:e], v[s:e], vh[s:e], g[s:e], alpha, c1, c2, eps)


def _chunks(n):
    """Chunks a dense update of ``n`` elements runs in (elementwise: the bits do not depend on it)."""
    if n < PARALLEL_MIN:
        return 1
    k = threads.intra_op_threads()
    return k if k > 1 and parallel_loops(wait=False) else 1


@njit
def _adam_rows(w, m, v, vh, idx, g, alpha, c1, c2, eps, amsgrad):
    n = idx.shape[0]
    for r in range(n):
        if r + prefetch.AHEAD < n:         # the tables' rows come from memory: ask ahead (prefetch.py)
            k = idx[r + prefetch.AHEAD]
            prefetch.row(w, k)
            prefetch.row(m, k)
            prefetch.row(v, k)
            if amsgrad:
                prefetch.row(vh, k)
        i = idx[r]
        if amsgrad:
            _adam_flat_amsgrad(w[i], m[i], v[i], vh[i], g[r], alpha, c1, c2, eps)
        else:
            _adam_flat(w[i], m[i], v[i], g[r], alpha, c1, c2, eps)


_last_coefficients = [(None, None)]   # [(key, value)]: every variable of a step asks the same


def _coefficients(dtype, lr, step, beta_1, beta_2):
    """Adam's ``(alpha, 1 - beta_1, 1 - beta_2)`` in ``dtype``; the last result is reused for
    the next variable of the same step (NumPy scalar arithmetic costs ~10 µs a call). One
    tuple read and one store, so concurrent updates never pair a key with another's value."""
    key = (dtype, float(lr), int(step), beta_1, beta_2)
    last_key, last_value = _last_coefficients[0]
    if last_key == key:
        return last_value
    value = _compute_coefficients(dtype, lr, step, beta_1, beta_2)
    _last_coefficients[0] = (key, value)
    return value


def _compute_coefficients(dtype, lr, step, beta_1, beta_2):
    t = dtype.type
    one = t(1)
    b1_power = np.power(t(beta_1), t(step))
    b2_power = np.power(t(beta_2), t(step))
    alpha = t(lr) * np.sqrt(one - b2_power) / (one - b1_power)
    return alpha, t(1 - beta_1), t(1 - beta_2)


@njit
def _momentum_flat(w, m, g, lr, momentum, nesterov):
    for i in range(w.shape[0]):
        mi = m[i] * momentum - g[i] * lr
        m[i] = mi
        w[i] = w[i] + ((mi * momentum - g[i] * lr) if nesterov else mi)


@njit
def _sgd_flat(w, g, lr):
    for i in range(w.shape[0]):
        w[i] = w[i] - g[i] * lr


@njit
def _adagrad_flat(w, acc, g, lr, eps):
    for i in range(w.shape[0]):
        a = acc[i] + g[i] * g[i]
        acc[i] = a
        w[i] = w[i] - (lr * g[i]) / np.sqrt(a + eps)


@njit
def _rmsprop_flat(w, v, mom, avg, g, lr, rho, one_minus_rho, momentum, eps, use_momentum, centered):
    for i in range(w.shape[0]):
        gi = g[i]
        vi = rho * v[i] + one_minus_rho * (gi * gi)
        v[i] = vi
        if centered:
            ai = rho * avg[i] + one_minus_rho * gi
            avg[i] = ai
            denominator = vi - ai * ai + eps
        else:
            denominator = vi + eps
        increment = (lr * gi) / np.sqrt(denominator)
        if use_momentum:
            mi = momentum * mom[i] + increment
            mom[i] = mi
            w[i] = w[i] - mi
        else:
            w[i] = w[i] - increment


# The row loops below ask for their tables' rows ahead, as _adam_rows does (prefetch.ahead); the slots an
# RMSprop without momentum or centering leaves unused are its velocity again (asked for twice: a hint more)
@njit
def _rmsprop_rows(w, v, mom, avg, idx, g, lr, rho, one_minus_rho, momentum, eps, use_momentum, centered):
    for r in range(idx.shape[0]):
        prefetch.ahead((w, v, mom, avg), idx, r)
        i = idx[r]
        _rmsprop_flat(w[i], v[i], mom[i], avg[i], g[r], lr, rho, one_minus_rho, momentum, eps, use_momentum,
                      centered)


@njit
def _momentum_rows(w, m, idx, g, lr, momentum, nesterov):
    for r in range(idx.shape[0]):
        prefetch.ahead((w, m), idx, r)
        _momentum_flat(w[idx[r]], m[idx[r]], g[r], lr, momentum, nesterov)


@njit
def _sgd_rows(w, idx, g, lr):
    for r in range(idx.shape[0]):
        prefetch.ahead((w,), idx, r)
        _sgd_flat(w[idx[r]], g[r], lr)


@njit
def _adagrad_rows(w, acc, idx, g, lr, eps):
    for r in range(idx.shape[0]):
        prefetch.ahead((w, acc), idx, r)
        _adagrad_flat(w[idx[r]], acc[idx[r]], g[r], lr, eps)


# ---- kernels: check shapes, take the storages (copy-on-write), run the loop ----------------------
def _dense(name, handles, grad):
    # ~1 µs a variable: ravel, not reshape(-1) (3x the cost), of storages that are C-contiguous
    arrays = [h._storage_for_update() for h in handles]
    w = arrays[0]
    if getattr(grad, "shape", None) != w.shape:
        raise errors.InvalidArgumentError(f"{name} of '{handles[0].name}': gradient shape {tuple(np.shape(grad))} "
                                          f"does not match the variable's {w.shape}")
    if type(grad) is not np.ndarray or grad.dtype != w.dtype or not grad.flags.c_contiguous:
        grad = np.ascontiguousarray(grad, dtype=w.dtype)
    return [a.ravel() for a in arrays], grad.ravel()


def _sparse(name, handles, values, indices):
    var = handles[0]
    shape = var._read().shape
    if np.shape(values) != (len(indices),) + shape[1:]:
        raise errors.InvalidArgumentError(
            f"{name} of '{var.name}' (shape {shape}): {len(indices)} indices but gradient rows of shape "
            f"{tuple(np.shape(values))}")
    if len(indices) and (indices.min() < 0 or indices.max() >= shape[0]):
        bad = indices.min() if indices.min() < 0 else indices.max()
        raise errors.InvalidArgumentError(f"{name} of '{var.name}': index {bad} is not in [0, {shape[0]})")
    cols = int(np.prod(shape[1:], dtype=np.int64))      # (explicit: reshape(0, -1) is ambiguous)
    arrays = [h._storage_for_update().reshape(shape[0], cols) for h in handles]
    rows = np.ascontiguousarray(values, dtype=arrays[0].dtype).reshape(len(indices), cols)
    return arrays, np.ascontiguousarray(indices), rows


@register_kernel("ResourceApplyAdam", "CPU")
def _apply_adam(*inputs, beta_1, beta_2, epsilon, amsgrad, weight_decay=0.0):
    n = 4 if amsgrad else 3
    lr, step, grad = inputs[n:]
    arrays, g = _dense("Adam update", inputs[:n], grad)
    decay(arrays[0], lr, weight_decay)
    dtype = arrays[0].dtype
    coeffs = _coefficients(dtype, lr, step, beta_1, beta_2) + (dtype.type(epsilon),)
    chunks = _chunks(g.shape[0])
    if chunks > 1:
        (_adam_amsgrad_chunks if amsgrad else _adam_chunks)(*arrays, g, *coeffs, chunks)
    elif amsgrad:
        _adam_flat_amsgrad(*arrays, g, *coeffs)
    else:
        _adam_flat(*arrays, g, *coeffs)
    return ()


@register_kernel("ResourceSparseApplyAdam", "CPU")
def _sparse_apply_adam(*inputs, beta_1, beta_2, epsilon, amsgrad):
    n = 4 if amsgrad else 3
    lr, step, values, indices = inputs[n:]
    (w, m, v, *vh), idx, rows = _sparse("Sparse Adam update", inputs[:n], values, indices)
    dtype = w.dtype
    coeffs = _coefficients(dtype, lr, step, beta_1, beta_2) + (dtype.type(epsilon),)
    vh = vh[0] if amsgrad else v
    parts = split_passes.parts_for(3 * rows.nbytes, len(idx))
    if parts < 2 or not (idx[1:] >= idx[:-1]).all():
        _adam_rows(w, m, v, vh, idx, rows, *coeffs, amsgrad)
        return ()
    # (large, indices sorted — a Keras embedding's gradient comes out of UniqueSegmentSum so —: runs
    # of the rows, no copies, shared over the threads, each cut before an index's first occurrence,
    # so a row's updates, duplicates included, stay in order on one thread: the same bits)
    cuts = split_passes.index_cuts(idx, parts * split_passes.BLOCKS_PER_PART)
    gemm.share_tasks([functools.partial(_adam_rows, w, m, v, vh, idx[a:b], rows[a:b], *coeffs, amsgrad)
                      for a, b in zip(cuts, cuts[1:]) if b > a], parts)
    return ()


@register_kernel("ResourceApplyKerasMomentum", "CPU")
def _apply_momentum(*inputs, momentum, nesterov, weight_decay=0.0):
    n = 2 if momentum else 1
    lr, grad = inputs[n:]
    arrays, g = _dense("SGD update", inputs[:n], grad)
    decay(arrays[0], lr, weight_decay)
    t = arrays[0].dtype.type
    if momentum:
        _momentum_flat(*arrays, g, t(lr), t(momentum), nesterov)
    else:
        _sgd_flat(*arrays, g, t(lr))
    return ()


@register_kernel("ResourceSparseApplyKerasMomentum", "CPU")
def _sparse_apply_momentum(*inputs, momentum, nesterov):
    n = 2 if momentum else 1
    lr, values, indices = inputs[n:]
    arrays, idx, rows = _sparse("Sparse SGD update", inputs[:n], values, indices)
    t = arrays[0].dtype.type
    if momentum:
        _momentum_rows(*arrays, idx, rows, t(lr), t(momentum), nesterov)
    else:
        _sgd_rows(*arrays, idx, rows, t(lr))
    return ()


@register_kernel("ResourceApplyAdagradV2", "CPU")
def _apply_adagrad(var, acc, lr, grad, epsilon, weight_decay=0.0):
    arrays, g = _dense("Adagrad update", (var, acc), grad)
    decay(arrays[0], lr, weight_decay)
    t = arrays[0].dtype.type
    _adagrad_flat(*arrays, g, t(lr), t(epsilon))
    return ()


@register_kernel("ResourceSparseApplyAdagradV2", "CPU")
def _sparse_apply_adagrad(var, acc, lr, values, indices, epsilon):
    arrays, idx, rows = _sparse("Sparse Adagrad update", (var, acc), values, indices)
    t = arrays[0].dtype.type
    _adagrad_rows(*arrays, idx, rows, t(lr), t(epsilon))
    return ()


def _rmsprop_args(arrays, lr, rho, momentum, epsilon, centered):
    # Unused slots are stood in for by the velocity (never written: the flags skip them).
    w, v = arrays[:2]
    rest = list(arrays[2:])
    mom = rest.pop(0) if momentum > 0 else v
    avg = rest.pop(0) if centered else v
    t = w.dtype.type
    return (w, v, mom, avg), (t(lr), t(rho), t(1 - rho), t(momentum), t(epsilon), momentum > 0, centered)


@register_kernel("ResourceApplyKerasRMSprop", "CPU")
def _apply_rmsprop(*inputs, rho, momentum, epsilon, centered, weight_decay=0.0):
    n = 2 + (momentum > 0) + centered
    lr, grad = inputs[n:]
    arrays, g = _dense("RMSprop update", inputs[:n], grad)
    decay(arrays[0], lr, weight_decay)
    slots, scalars = _rmsprop_args(arrays, lr, rho, momentum, epsilon, centered)
    _rmsprop_flat(*slots, g, *scalars)
    return ()


@register_kernel("ResourceSparseApplyKerasRMSprop", "CPU")
def _sparse_apply_rmsprop(*inputs, rho, momentum, epsilon, centered):
    n = 2 + (momentum > 0) + centered
    lr, values, indices = inputs[n:]
    arrays, idx, rows = _sparse("Sparse RMSprop update", inputs[:n], values, indices)
    slots, scalars = _rmsprop_args(arrays, lr, rho, momentum, epsilon, centered)
    _rmsprop_rows(*slots, idx, rows, *scalars)
    return ()


# ---- grouped updates: the one-variable kernel for each variable of the group --------------------
def _grouped(kernel, num_scalars):
    def run(*inputs, num_variables, **attrs):
        n = num_variables
        k = (len(inputs) - num_scalars) // n - 1
        scalars = inputs[n * k:n * k + num_scalars]
        for i in range(n):
            kernel(*inputs[i * k:(i + 1) * k], *scalars, inputs[n * k + num_scalars + i], **attrs)
        return ()
    return run


for _name, _kernel, _num_scalars in (("Adam", _apply_adam, 2), ("KerasMomentum", _apply_momentum, 1),
                                     ("AdagradV2", _apply_adagrad, 1), ("KerasRMSprop", _apply_rmsprop, 1)):
    register_kernel(f"ResourceGroupApply{_name}", "CPU")(_grouped(_kernel, _num_scalars))
