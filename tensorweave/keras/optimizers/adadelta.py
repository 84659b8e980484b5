"""Adadelta (Zeiler, 2012) — Keras 3's ``keras.optimizers.Adadelta``.

With moving means of squared gradients ``E[g²]`` and of squared updates ``E[Δ²]``::

    E[g²] = rho * E[g²] + (1 - rho) * g**2
    Δ = -sqrt(E[Δ²] + epsilon) * g / sqrt(E[g²] + epsilon)
    E[Δ²] = rho * E[Δ²] + (1 - rho) * Δ**2
    w = w + learning_rate * Δ

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.Adadelta(learning_rate=1.0, rho=0.0, epsilon=1e-6).apply(
...     [tw.constant([1.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # first step: -sqrt(eps) * g / sqrt(g**2)
0.999
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M


class Adadelta(Optimizer):
    """Adadelta. Args: ``learning_rate=0.001``, ``rho=0.95``, ``epsilon=1e-7``, plus the base
    Optimizer arguments."""

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, name="adadelta", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.rho = rho
        self.epsilon = epsilon
        self._accumulated_grads, self._accumulated_delta_vars = [], []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._accumulated_grads += [self.add_variable_from_reference(v, "accumulated_grad") for v in variables]
        self._accumulated_delta_vars += [self.add_variable_from_reference(v, "accumulated_delta_var")
                                         for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        lr = _cast(learning_rate, variable.dtype)
        rho, eps = self.rho, self.epsilon
        i = self._get_variable_index(variable)

        def rule(g, w, acc_grad, acc_delta):
            acc_grad = rho * acc_grad + (1 - rho) * M.square(g)
            delta = -(M.sqrt(acc_delta + eps) * g) / M.sqrt(acc_grad + eps)
            acc_delta = rho * acc_delta + (1 - rho) * M.square(delta)
            return w + lr * delta, acc_grad, acc_delta

        self._apply_update(rule, gradient, variable, [self._accumulated_grads[i], self._accumulated_delta_vars[i]])

    def get_config(self):
        config = super().get_config()
        config.update({"rho": self.rho, "epsilon": self.epsilon})
        return config
