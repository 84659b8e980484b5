"""Nadam (Dozat, 2016): Adam with Nesterov momentum — Keras 3's ``keras.optimizers.Nadam``.

At step ``t`` (1-based), with the momentum schedule ``mu_t = beta_1 * (1 - 0.5 * 0.96**t)``
and its running product ``u_product`` (one scalar of the optimizer, advanced once per step)::

    u_product = u_product * mu_t
    m = m + (g - m) * (1 - beta_1)
    v = v + (g**2 - v) * (1 - beta_2)
    m_hat = mu_{t+1} * m / (1 - u_product * mu_{t+1}) + (1 - mu_t) * g / (1 - u_product)
    w = w - m_hat * learning_rate / (sqrt(v / (1 - beta_2**t)) + epsilon)

With an IndexedSlices gradient only the touched rows of ``w``, ``m`` and ``v`` change.

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.Nadam(learning_rate=0.1).apply([tw.constant([5.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # lr * (m_hat / sqrt(v_hat)) = 0.1 * 5.3056 / 5: the look-ahead adds 6%
0.8937
"""
from tensorweave.keras.optimizers.moments import MomentOptimizer
from tensorweave.keras.optimizers.optimizer import _cast
from tensorweave.core import dtypes as _dt
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class Nadam(MomentOptimizer):
    """Nadam. Args: ``learning_rate=0.001``, ``beta_1=0.9``, ``beta_2=0.999``,
    ``epsilon=1e-7``, plus the base Optimizer arguments. Slots: ``momentum``, ``velocity``; and
    the scalar ``u_product`` (in the first variable's dtype, after the slots, as Keras)."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="nadam", **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, name, **kwargs)
        self._u_product = None

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        if self._u_product is None:
            dtype = variables[0].dtype if variables else _dt.float32
            self._u_product = self.add_variable([], initializer="ones", dtype=dtype, name="u_product")

    def _next_u_product(self):
        """``u_product * mu_t``, assigned once per ``apply``; the updates read this value (the
        assign consumes it, so in a TF1 graph the old value is read before it is written)."""
        def advance():
            u = self._u_product
            step = M.cast(self.iterations + 1, u.dtype)
            new = u.value() * self.beta_1 * (1.0 - 0.5 * M.pow(_cast(0.96, u.dtype), step))
            u.assign(new, read_value=False)
            return new
        return self._once("u_product", advance)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        if dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic, same bits)
            values, indices = self._fused_gradient(gradient)
            training_ops.apply_nadam(variable, *self.moments(variable), self._lr_in(dtype, learning_rate),
                                     self._once("step", lambda: self.iterations + 1),
                                     self._once(("u_product", dtype), lambda: M.cast(self._next_u_product(), dtype)),
                                     values, self.beta_1, self.beta_2, self.epsilon, indices=indices,
                                     weight_decay=self._decay_of(variable))
            return
        lr = _cast(learning_rate, dtype)
        step = M.cast(self.iterations + 1, dtype)
        decay = _cast(0.96, dtype)
        beta_1, beta_2 = _cast(self.beta_1, dtype), _cast(self.beta_2, dtype)
        u_t = beta_1 * (1.0 - 0.5 * M.pow(decay, step))
        u_t_1 = beta_1 * (1.0 - 0.5 * M.pow(decay, step + 1))
        u_product_t = M.cast(self._next_u_product(), dtype)
        u_product_t_1 = u_product_t * u_t_1
        beta_2_power = M.pow(beta_2, step)
        eps = self.epsilon

        def rule(g, w, m, v):
            m = m + (g - m) * (1 - beta_1)
            v = v + (M.square(g) - v) * (1 - beta_2)
            m_hat = (u_t_1 * m) / (1 - u_product_t_1) + ((1 - u_t) * g) / (1 - u_product_t)
            v_hat = v / (1 - beta_2_power)
            return w - (m_hat * lr) / (M.sqrt(v_hat) + eps), m, v

        self._apply_update(rule, gradient, variable, self.moments(variable))

    _DECAY_FOLDING_STEP = update_step
