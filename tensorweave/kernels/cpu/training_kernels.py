"""CPU kernels of the fused optimizer updates (ops/training_ops.py): one compiled pass
over the weights and slots, written in place.

The arithmetic is the unfused rule's, in the variable's dtype, operation for operation::

    m += (g - m) * (1 - beta_1);  v += (g*g - v) * (1 - beta_2)
    w -= (m * alpha) / (sqrt(v) + epsilon),  alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)

so float64 results equal the op-by-op Adam's to rounding.
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu.jit import njit


@njit
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


@njit
def _adam_rows(w, m, v, vh, idx, g, alpha, c1, c2, eps, amsgrad):
    for r in range(idx.shape[0]):
        i = idx[r]
        if amsgrad:
            _adam_flat_amsgrad(w[i], m[i], v[i], vh[i], g[r], alpha, c1, c2, eps)
        else:
            _adam_flat(w[i], m[i], v[i], g[r], alpha, c1, c2, eps)


def _coefficients(dtype, lr, step, beta_1, beta_2):
    t = dtype.type
    one = t(1)
    b1_power = np.power(t(beta_1), t(step))
    b2_power = np.power(t(beta_2), t(step))
    alpha = t(lr) * np.sqrt(one - b2_power) / (one - b1_power)
    return alpha, t(1 - beta_1), t(1 - beta_2)


def _storages(handles, amsgrad):
    arrays = [h._storage_for_update() for h in handles]
    return arrays if amsgrad else arrays + [arrays[2]]   # v stands in for the unused v_hat


@register_kernel("ResourceApplyAdam", "CPU")
def _apply_adam(*inputs, beta_1, beta_2, epsilon, amsgrad):
    n = 4 if amsgrad else 3
    var = inputs[0]
    lr, step, grad = inputs[n:]
    if np.shape(grad) != var._read().shape:
        raise errors.InvalidArgumentError(
            f"Adam update of '{var.name}': gradient shape {tuple(np.shape(grad))} does not match the "
            f"variable's {var._read().shape}")
    w, m, v, vh = _storages(inputs[:n], amsgrad)
    alpha, c1, c2 = _coefficients(w.dtype, lr, step, beta_1, beta_2)
    g = np.ascontiguousarray(grad, dtype=w.dtype)
    flat = [a.reshape(-1) for a in (w, m, v, vh, g)]
    eps = w.dtype.type(epsilon)
    if amsgrad:
        _adam_flat_amsgrad(*flat, alpha, c1, c2, eps)
    else:
        _adam_flat(*flat[:3], flat[4], alpha, c1, c2, eps)
    return ()


@register_kernel("ResourceSparseApplyAdam", "CPU")
def _sparse_apply_adam(*inputs, beta_1, beta_2, epsilon, amsgrad):
    n = 4 if amsgrad else 3
    var = inputs[0]
    lr, step, values, indices = inputs[n:]
    shape = var._read().shape
    if np.shape(values) != (len(indices),) + shape[1:]:
        raise errors.InvalidArgumentError(
            f"Sparse Adam update of '{var.name}' (shape {shape}): {len(indices)} indices but gradient rows of "
            f"shape {tuple(np.shape(values))}")
    if len(indices) and (indices.min() < 0 or indices.max() >= shape[0]):
        bad = indices.min() if indices.min() < 0 else indices.max()
        raise errors.InvalidArgumentError(f"Sparse Adam update of '{var.name}': index {bad} is not in "
                                          f"[0, {shape[0]})")
    w, m, v, vh = (a.reshape(shape[0], -1) for a in _storages(inputs[:n], amsgrad))
    alpha, c1, c2 = _coefficients(w.dtype, lr, step, beta_1, beta_2)
    g = np.ascontiguousarray(values, dtype=w.dtype).reshape(len(indices), -1)
    _adam_rows(w, m, v, vh, np.ascontiguousarray(indices), g, alpha, c1, c2, w.dtype.type(epsilon), amsgrad)
    return ()
