"""Adamax (Kingma & Ba, 2015, section 7.1): Adam with the infinity norm — Keras 3's
``keras.optimizers.Adamax``.

At step ``t`` (1-based), with the first moment ``m`` and the weighted infinity norm ``u``
(both zero-initialized)::

    m = m + (g - m) * (1 - beta_1)
    u = max(beta_2 * u, |g|)
    w = w - (learning_rate * m) / ((1 - beta_1**t) * (u + epsilon))

With an IndexedSlices gradient only the touched rows of ``w``, ``m`` and ``u`` change (as the
lazy Adam of :mod:`adam`).

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.Adamax(learning_rate=0.1).apply([tw.constant([5.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # the first step moves by about learning_rate
0.9
"""
from tensorweave.keras.optimizers.moments import MomentOptimizer
from tensorweave.keras.optimizers.optimizer import _cast
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class Adamax(MomentOptimizer):
    """Adamax. Args: ``learning_rate=0.001``, ``beta_1=0.9``, ``beta_2=0.999``,
    ``epsilon=1e-7``, plus the base Optimizer arguments. Slots: ``momentum``, ``norm``."""

    SLOT_NAMES = ("momentum", "norm")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="adamax", **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic, same bits)
            values, indices = self._fused_gradient(gradient)
            training_ops.apply_adamax(variable, *self.moments(variable), self._lr_in(variable.dtype, learning_rate),
                                      self._once("step", lambda: self.iterations + 1), values, self.beta_1,
                                      self.beta_2, self.epsilon, indices=indices,
                                      weight_decay=self._decay_of(variable))
            return
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        beta_1_power = M.pow(_cast(self.beta_1, dtype), M.cast(self.iterations + 1, dtype))
        b1, b2, eps = self.beta_1, self.beta_2, self.epsilon

        def rule(g, w, m, u):
            m = m + (g - m) * (1 - b1)
            u = M.maximum(b2 * u, M.abs(g))
            return w - (lr * m) / ((1 - beta_1_power) * (u + eps)), m, u

        self._apply_update(rule, gradient, variable, self.moments(variable))

    _DECAY_FOLDING_STEP = update_step
