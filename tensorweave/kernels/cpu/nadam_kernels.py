"""CPU kernels of Nadam's fused update (``ResourceApplyNadam``, its sparse and group forms;
ops/training_ops.py): one compiled pass over the weight and its slots ``m`` (momentum) and ``v``
(velocity), in place, with the decoupled weight decay first — ``training_kernels``' helpers and order.

The arithmetic is the op-built rule's (keras/optimizers/nadam.py), operation for operation, in
the variable's dtype; the step's scalars (``mu_t``, ``mu_{t+1}``, the products' complements,
``1 - beta_2**t``) made as the rule's scalar ops make them, from the step and the optimizer's
advanced ``u_product`` (an input: advanced once per step, shared by every variable)::

    m = m + (g - m) * (1 - beta_1);  v = v + (g * g - v) * (1 - beta_2)
    m_hat = (mu_{t+1} * m) / (1 - u_product * mu_{t+1}) + ((1 - mu_t) * g) / (1 - u_product)
    w = w - (m_hat * lr) / (sqrt(v / (1 - beta_2**t)) + epsilon)

so the bits equal the rule's (tests/test_opt21_fused_updates.py).

>>> import numpy as np
>>> w, m, v = np.ones(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32)
>>> u = np.float32(0.9) * (np.float32(1) - np.float32(0.5) * np.float32(0.96))      # u_product after step 1
>>> _nadam_flat(w, m, v, np.array([5.0], np.float32), *_nadam_scalars(w.dtype, 0.1, 1, u, 0.9, 0.999, 1e-7))
>>> round(float(w[0]), 4)                # as Nadam's docstring: the look-ahead adds 6 %
0.8937
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu.jit import njit
from tensorweave.kernels.cpu.training_kernels import _dense, _grouped, _sparse, decay


@njit
def _nadam_flat(w, m, v, g, lr, c1, c2, mu_next, keep_next, mu_rest, keep, correction, eps):
    # c1, c2: 1 - beta; keep_next, keep: 1 - u_product * mu_{t+1}, 1 - u_product; mu_rest: 1 - mu_t
    for i in range(w.shape[0]):
        gi = g[i]
        mi = m[i] + (gi - m[i]) * c1
        vi = v[i] + (gi * gi - v[i]) * c2
        m_hat = (mu_next * mi) / keep_next + (mu_rest * gi) / keep
        w[i] = w[i] - (m_hat * lr) / (np.sqrt(vi / correction) + eps)
        m[i] = mi
        v[i] = vi


@njit
def _nadam_rows(w, m, v, idx, g, lr, c1, c2, mu_next, keep_next, mu_rest, keep, correction, eps):
    for r in range(idx.shape[0]):
        _nadam_flat(w[idx[r]], m[idx[r]], v[idx[r]], g[r], lr, c1, c2, mu_next, keep_next, mu_rest, keep,
                    correction, eps)


def _nadam_scalars(dtype, lr, step, u_product, beta_1, beta_2, epsilon):
    """The loop's scalars in ``dtype``, each rounded as the rule's scalar ops round it."""
    t = dtype.type
    one, b1, b2, s = t(1), t(beta_1), t(beta_2), t(step)
    mu = b1 * (one - t(0.5) * np.power(t(0.96), s))
    mu_next = b1 * (one - t(0.5) * np.power(t(0.96), s + one))
    u = t(u_product)
    return (t(lr), one - b1, one - b2, mu_next, one - u * mu_next, one - mu, one - u,
            one - np.power(b2, s), t(epsilon))


@register_kernel("ResourceApplyNadam", "CPU")
def _apply_nadam(var, m, v, lr, step, u_product, grad, beta_1, beta_2, epsilon, weight_decay=0.0):
    (w, mm, vv), g = _dense("Nadam update", (var, m, v), grad)
    decay(w, lr, weight_decay)
    _nadam_flat(w, mm, vv, g, *_nadam_scalars(w.dtype, lr, step, u_product, beta_1, beta_2, epsilon))
    return ()


@register_kernel("ResourceSparseApplyNadam", "CPU")
def _sparse_apply_nadam(var, m, v, lr, step, u_product, values, indices, beta_1, beta_2, epsilon):
    (w, mm, vv), idx, rows = _sparse("Sparse Nadam update", (var, m, v), values, indices)
    _nadam_rows(w, mm, vv, idx, rows, *_nadam_scalars(w.dtype, lr, step, u_product, beta_1, beta_2, epsilon))
    return ()


register_kernel("ResourceGroupApplyNadam", "CPU")(_grouped(_apply_nadam, 3))
