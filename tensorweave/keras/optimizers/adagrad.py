"""Adagrad (Duchi et al., 2011) — Keras 3's ``keras.optimizers.Adagrad``.

With the running sum of squared gradients ``accumulator`` (starting at
``initial_accumulator_value``)::

    accumulator = accumulator + g**2
    w = w - learning_rate * g / sqrt(accumulator + epsilon)

With an IndexedSlices gradient only the touched rows change (TF's ResourceSparseApplyAdagrad);
since an untouched row's gradient is zero this equals the dense update.

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.Adagrad(1.0, initial_accumulator_value=0.0, epsilon=0.0).apply(
...     [tw.constant([3.0])], [w])
>>> float(w.numpy()[0])   # 1 - 3 / sqrt(9)
0.0
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class Adagrad(Optimizer):
    """Adagrad. Args: ``learning_rate=0.001``, ``initial_accumulator_value=0.1``,
    ``epsilon=1e-7``, plus the base Optimizer arguments."""

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, name="adagrad", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if initial_accumulator_value < 0:
            raise ValueError("`initial_accumulator_value` must be non-negative. Received: "
                             f"initial_accumulator_value={initial_accumulator_value}")
        self.initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon
        self._accumulators = []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._accumulators += [self.add_variable_from_reference(v, "accumulator",
                                                                initializer=float(self.initial_accumulator_value))
                               for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic)
            values, indices = self._fused_gradient(gradient)
            training_ops.apply_adagrad(variable, self._accumulators[self._get_variable_index(variable)],
                                       self._lr_in(variable.dtype, learning_rate), values, self.epsilon,
                                       indices=indices, weight_decay=self._decay_of(variable))
            return
        lr = _cast(learning_rate, variable.dtype)
        eps = self.epsilon

        def rule(g, w, accumulator):
            accumulator = accumulator + M.square(g)
            return w - (lr * g) / M.sqrt(accumulator + eps), accumulator

        self._apply_update(rule, gradient, variable, [self._accumulators[self._get_variable_index(variable)]])

    _DECAY_FOLDING_STEP = update_step

    def get_config(self):
        config = super().get_config()
        config.update({"initial_accumulator_value": self.initial_accumulator_value, "epsilon": self.epsilon})
        return config
