"""CPU kernels of Lion's fused update (``ResourceApplyLion``, its sparse and group forms;
ops/training_ops.py): one compiled pass over the weight and its momentum, in place, with the
decoupled weight decay first — the helpers and the order of ``training_kernels``' updates.

The arithmetic is the op-built rule's (keras/optimizers/lion.py), operation for operation, in
the variable's dtype (``1 - beta`` rounded in it, as the rule computes it from the cast beta)::

    w = w - lr * sign(m * beta_1 + g * (1 - beta_1));  m = m * beta_2 + g * (1 - beta_2)

so the bits equal the rule's (tests/test_opt21_fused_updates.py). A module of its own: the
ahead-of-time build of ``training_kernels`` stays valid.

>>> import numpy as np
>>> w, m = np.ones(3, np.float32), np.zeros(3, np.float32)
>>> _lion_flat(w, m, np.array([2.0, -1.0, 0.0], np.float32), *_lion_scalars(w.dtype, 0.5, 0.9, 0.99))
>>> w.tolist(), [round(x, 3) for x in m.tolist()]
([0.5, 1.5, 1.0], [0.02, -0.01, 0.0])
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu.jit import njit
from tensorweave.kernels.cpu.training_kernels import _dense, _grouped, _sparse, decay


@njit
def _lion_one(w, m, g, lr, b1, c1, b2, c2):
    """One element's ``(w, m)``: Lion's rule (keras/optimizers/lion.py) operation for operation;
    c1, c2: 1 - beta in the dtype. Shared with the gradient bucket's loop (distribute/fused_rules.py)."""
    c = m * b1 + g * c1
    # lr * sign(c) in the dtype (a float64 literal would widen it): lr, -lr, or lr * c for 0 and NaN
    if c > 0:
        w = w - lr
    elif c < 0:
        w = w + lr
    else:
        w = w - lr * c
    return w, m * b2 + g * c2


def _lion_numpy(w, m, g, lr, b1, c1, b2, c2):
    """:func:`_lion_flat` in NumPy, the same bits (the bucket's twin while its loop compiles)."""
    c = m * b1 + g * c1
    w[:] = np.where(c > 0, w - lr, np.where(c < 0, w + lr, w - lr * c))
    m[:] = m * b2 + g * c2


@njit
def _lion_flat(w, m, g, lr, b1, c1, b2, c2):
    for i in range(w.shape[0]):
        w[i], m[i] = _lion_one(w[i], m[i], g[i], lr, b1, c1, b2, c2)


@njit
def _lion_rows(w, m, idx, g, lr, b1, c1, b2, c2):
    for r in range(idx.shape[0]):
        _lion_flat(w[idx[r]], m[idx[r]], g[r], lr, b1, c1, b2, c2)


def _lion_scalars(dtype, lr, beta_1, beta_2):
    # (1 - beta) rounded in the dtype, as the rule computes it from the cast beta
    t = dtype.type
    return t(lr), t(beta_1), t(1) - t(beta_1), t(beta_2), t(1) - t(beta_2)


@register_kernel("ResourceApplyLion", "CPU")
def _apply_lion(var, m, lr, grad, beta_1, beta_2, weight_decay=0.0):
    (w, mm), g = _dense("Lion update", (var, m), grad)
    decay(w, lr, weight_decay)
    _lion_flat(w, mm, g, *_lion_scalars(w.dtype, lr, beta_1, beta_2))
    return ()


@register_kernel("ResourceSparseApplyLion", "CPU")
def _sparse_apply_lion(var, m, lr, values, indices, beta_1, beta_2):
    (w, mm), idx, rows = _sparse("Sparse Lion update", (var, m), values, indices)
    _lion_rows(w, mm, idx, rows, *_lion_scalars(w.dtype, lr, beta_1, beta_2))
    return ()


register_kernel("ResourceGroupApplyLion", "CPU")(_grouped(_apply_lion, 1))
