"""Central finite differences for the gradient tests of the fused kernels (the recurrent ones:
``test_rnn18_*``, ``test_rnn26_*``).

``numeric_grad(loss, args, i)`` perturbs one element of ``args[i]`` at a time, in float64, and
leaves ``args`` as it found them (each evaluation gets fresh copies), so a loss may write into
its inputs.

>>> import numpy as np
>>> args = [np.array([1.0, 2.0]), np.array([3.0])]
>>> numeric_grad(lambda v: float((v[0] ** 2).sum() * v[1][0]), args, 0).round(6).tolist()
[6.0, 12.0]
>>> args[0].tolist()
[1.0, 2.0]
>>> numeric_grad(lambda v: float(v[0][0] * 1.0000001), [np.array([0.5])], 0).round(8).tolist()
[1.0000001]
>>> ones = [np.ones(1), np.ones(1)]
>>> assert_grads([np.ones(1), np.zeros(1)], lambda v: float(v[0][0] + v[1][0]), ones)  # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: ...input 1...
"""
import numpy as np


def numeric_grad(loss, args, i, eps=1e-6):
    """The gradient of ``loss(args)`` (a float) with respect to ``args[i]`` (float64 arrays), by
    central differences of step ``eps``."""
    numeric = np.zeros_like(args[i], dtype=np.float64)
    for j in range(args[i].size):
        plus, minus = [a.copy() for a in args], [a.copy() for a in args]
        plus[i].flat[j] += eps
        minus[i].flat[j] -= eps
        numeric.flat[j] = (loss(plus) - loss(minus)) / (2 * eps)
    return numeric


def assert_grads(grads, loss, args, which=None, rtol=1e-6, atol=1e-7):
    """Each ``grads[i]`` (``i`` in ``which``, default every argument) within ``rtol``/``atol`` of
    :func:`numeric_grad`."""
    for i in range(len(args)) if which is None else which:
        np.testing.assert_allclose(grads[i], numeric_grad(loss, args, i), rtol=rtol, atol=atol,
                                   err_msg=f"input {i}")
