"""CPU kernels of Adamax's fused update (``ResourceApplyAdamax``, its sparse and group forms;
ops/training_ops.py): one compiled pass over the weight and its slots ``m`` (momentum) and ``u``
(norm), in place, with the decoupled weight decay first — ``training_kernels``' helpers and order.

The arithmetic is the op-built rule's (keras/optimizers/adamax.py), operation for operation, in
the variable's dtype::

    m = m + (g - m) * (1 - beta_1);  u = max(beta_2 * u, |g|)
    w = w - (lr * m) / ((1 - beta_1**t) * (u + epsilon))

``max`` as ``np.maximum`` (NaN wins), so the bits equal the rule's (tests/test_opt21_fused_updates.py).

>>> import numpy as np
>>> w, m, u = np.ones(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32)
>>> _adamax_flat(w, m, u, np.array([4.0, -1.0], np.float32), *_adamax_scalars(w.dtype, 0.1, 1, 0.9, 0.999, 1e-7))
>>> [round(x, 4) for x in w.tolist()]    # the first step moves each weight by ~lr
[0.9, 1.1]
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu.jit import njit
from tensorweave.kernels.cpu.training_kernels import _dense, _grouped, _sparse, decay


@njit
def _adamax_one(w, m, u, g, lr, c1, b2, denominator, eps):
    """One element's ``(w, m, u)`` (the rule's operations; shared with the gradient bucket's loop,
    distribute/fused_rules.py)."""
    mi = m + (g - m) * c1
    a = b2 * u
    b = abs(g)
    ui = a if (a >= b or a != a) else b          # np.maximum: a NaN on either side wins
    return w - (lr * mi) / (denominator * (ui + eps)), mi, ui


def _adamax_numpy(w, m, u, g, lr, c1, b2, denominator, eps):
    """:func:`_adamax_flat` in NumPy, the same bits (the bucket's twin while its loop compiles)."""
    mi = m + (g - m) * c1
    ui = np.maximum(b2 * u, np.abs(g))
    w[:] = w - (lr * mi) / (denominator * (ui + eps))
    m[:] = mi
    u[:] = ui


@njit
def _adamax_flat(w, m, u, g, lr, c1, b2, denominator, eps):
    for i in range(w.shape[0]):
        w[i], m[i], u[i] = _adamax_one(w[i], m[i], u[i], g[i], lr, c1, b2, denominator, eps)


@njit
def _adamax_rows(w, m, u, idx, g, lr, c1, b2, denominator, eps):
    for r in range(idx.shape[0]):
        _adamax_flat(w[idx[r]], m[idx[r]], u[idx[r]], g[r], lr, c1, b2, denominator, eps)


def _adamax_scalars(dtype, lr, step, beta_1, beta_2, epsilon):
    """``(lr, 1 - beta_1, beta_2, 1 - beta_1**t, epsilon)`` in ``dtype``, as the rule rounds them."""
    t = dtype.type
    return t(lr), t(1 - beta_1), t(beta_2), t(1) - np.power(t(beta_1), t(step)), t(epsilon)


@register_kernel("ResourceApplyAdamax", "CPU")
def _apply_adamax(var, m, u, lr, step, grad, beta_1, beta_2, epsilon, weight_decay=0.0):
    (w, mm, uu), g = _dense("Adamax update", (var, m, u), grad)
    decay(w, lr, weight_decay)
    _adamax_flat(w, mm, uu, g, *_adamax_scalars(w.dtype, lr, step, beta_1, beta_2, epsilon))
    return ()


@register_kernel("ResourceSparseApplyAdamax", "CPU")
def _sparse_apply_adamax(var, m, u, lr, step, values, indices, beta_1, beta_2, epsilon):
    (w, mm, uu), idx, rows = _sparse("Sparse Adamax update", (var, m, u), values, indices)
    _adamax_rows(w, mm, uu, idx, rows, *_adamax_scalars(w.dtype, lr, step, beta_1, beta_2, epsilon))
    return ()


register_kernel("ResourceGroupApplyAdamax", "CPU")(_grouped(_apply_adamax, 2))
