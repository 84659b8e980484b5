"""FTRL-Proximal (McMahan et al., 2013) — Keras 3's ``keras.optimizers.Ftrl``.

With ``n`` the sum of squared gradients (from ``initial_accumulator_value``), ``z`` the
linear term, ``p = -learning_rate_power`` (0.5 by default) and
``l2' = l2 + beta / (2 * learning_rate)``::

    g' = g + 2 * l2_shrinkage * w
    n_new = n + g**2
    z = z + g' - (n_new**p - n**p) / learning_rate * w
    w = (clip(z, -l1, l1) - z) / (n_new**p / learning_rate + 2 * l2')
    n = n_new

L1 regularization makes weights exactly zero while ``|z| <= l1`` (sparse models).

>>> import tensorweave as tw
>>> w = tw.Variable([0.0, 0.0])
>>> opt = tw.keras.optimizers.Ftrl(learning_rate=0.5, l1_regularization_strength=1.0)
>>> _ = opt.apply([tw.constant([0.5, -3.0])], [w])
>>> [round(float(x), 4) for x in w.numpy()]   # the small gradient leaves its weight at 0
[0.0, 0.3315]
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M


class Ftrl(Optimizer):
    """FTRL-Proximal. Args: ``learning_rate=0.001``, ``learning_rate_power=-0.5``,
    ``initial_accumulator_value=0.1``, ``l1_regularization_strength=0.0``,
    ``l2_regularization_strength=0.0``, ``l2_shrinkage_regularization_strength=0.0``,
    ``beta=0.0``, plus the base Optimizer arguments."""

    def __init__(self, learning_rate=0.001, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 l2_shrinkage_regularization_strength=0.0, beta=0.0, name="ftrl", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if initial_accumulator_value < 0.0:
            raise ValueError("`initial_accumulator_value` needs to be positive or zero. Received: "
                             f"initial_accumulator_value={initial_accumulator_value}.")
        if learning_rate_power > 0.0:
            raise ValueError("`learning_rate_power` needs to be negative or zero. Received: "
                             f"learning_rate_power={learning_rate_power}.")
        for arg, value in (("l1_regularization_strength", l1_regularization_strength),
                           ("l2_regularization_strength", l2_regularization_strength),
                           ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength)):
            if value < 0.0:
                raise ValueError(f"`{arg}` needs to be positive or zero. Received: {arg}={value}.")
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.l2_shrinkage_regularization_strength = l2_shrinkage_regularization_strength
        self.beta = beta
        self._accumulators, self._linears = [], []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._accumulators += [self.add_variable_from_reference(v, "accumulator",
                                                                initializer=float(self.initial_accumulator_value))
                               for v in variables]
        self._linears += [self.add_variable_from_reference(v, "linear") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        p = -self.learning_rate_power
        l1 = self.l1_regularization_strength
        l2 = self.l2_regularization_strength + self.beta / (2.0 * lr)
        shrink = self.l2_shrinkage_regularization_strength
        i = self._get_variable_index(variable)

        def rule(g, w, accum, linear):
            g_shrunk = g + (2 * shrink) * w
            new_accum = accum + M.square(g)
            linear = linear + (g_shrunk - ((M.pow(new_accum, p) - M.pow(accum, p)) / lr) * w)
            quadratic = M.pow(new_accum, p) / lr + 2 * l2
            w = (M.clip_by_value(linear, -l1, l1) - linear) / quadratic
            return w, new_accum, linear

        self._apply_update(rule, gradient, variable, [self._accumulators[i], self._linears[i]])

    def get_config(self):
        config = super().get_config()
        config.update({"learning_rate_power": self.learning_rate_power,
                       "initial_accumulator_value": self.initial_accumulator_value,
                       "l1_regularization_strength": self.l1_regularization_strength,
                       "l2_regularization_strength": self.l2_regularization_strength,
                       "l2_shrinkage_regularization_strength": self.l2_shrinkage_regularization_strength,
                       "beta": self.beta})
        return config
