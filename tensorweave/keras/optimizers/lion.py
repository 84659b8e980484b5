"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms") — Keras 3's
``keras.optimizers.Lion``.

With the momentum ``m`` (zero-initialized), the step is the sign of an interpolation::

    w = w - learning_rate * sign(m * beta_1 + g * (1 - beta_1))
    m = m * beta_2 + g * (1 - beta_2)

Every element moves by exactly ``learning_rate`` (or not at all), so Lion's rate is typically
3-10x smaller than AdamW's. With an IndexedSlices gradient only the touched rows change.

>>> import tensorweave as tw
>>> w = tw.Variable([1.0, 1.0])
>>> _ = tw.keras.optimizers.Lion(learning_rate=0.1).apply([tw.constant([5.0, -0.01])], [w])
>>> [round(float(x), 4) for x in w.numpy()]
[0.9, 1.1]
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class Lion(Optimizer):
    """Lion. Args: ``learning_rate=0.001``, ``beta_1=0.9`` (in (0, 1]), ``beta_2=0.99``, plus
    the base Optimizer arguments. Slot: ``momentum``."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.99, name="lion", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if beta_1 <= 0 or beta_1 > 1:
            raise ValueError("Argument `beta_1` must be in the [0, 1] range. Otherwise, the optimizer degenerates "
                             f"to SignSGD. Received: beta_1={beta_1}.")
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self._momentums = []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._momentums += self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic, same bits)
            values, indices = self._fused_gradient(gradient)
            training_ops.apply_lion(variable, self._momentums[self._get_variable_index(variable)],
                                    self._lr_in(variable.dtype, learning_rate), values, self.beta_1, self.beta_2,
                                    indices=indices, weight_decay=self._decay_of(variable))
            return
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        # Keras casts the betas first: (1 - beta) is then rounded in the variable's dtype
        beta_1, beta_2 = _cast(self.beta_1, dtype), _cast(self.beta_2, dtype)

        def rule(g, w, m):
            w = w - lr * M.sign(m * beta_1 + g * (1.0 - beta_1))
            return w, m * beta_2 + g * (1.0 - beta_2)

        self._apply_update(rule, gradient, variable, [self._momentums[self._get_variable_index(variable)]])

    _DECAY_FOLDING_STEP = update_step

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2})
        return config
