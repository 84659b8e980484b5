"""SGD with optional momentum and Nesterov momentum (Keras 3 ``keras.optimizers.SGD``).

Update, with velocity ``m`` (zero-initialized)::

    m = momentum * m - learning_rate * g
    w = w + m                                      # plain momentum
    w = w + momentum * m - learning_rate * g       # nesterov=True
    w = w - learning_rate * g                      # momentum == 0 (no slot)

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> opt = tw.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
>>> for _ in range(2):
...     _ = opt.apply([tw.constant([1.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # 1 - 0.1 - (0.09 + 0.1)
0.71
"""
import numbers

from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import training_ops


class SGD(Optimizer):
    """Gradient descent (with momentum).

    Args: ``learning_rate=0.01``, ``momentum=0.0`` (in [0, 1]), ``nesterov=False``, plus the
    :class:`~tensorweave.keras.optimizers.Optimizer` arguments (``weight_decay``,
    ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``use_ema``, ...).
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not isinstance(momentum, numbers.Real) or momentum < 0 or momentum > 1:
            raise ValueError(f"`momentum` must be a float between [0, 1]. Received: momentum={momentum}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self._momentums = []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        if self.momentum != 0:
            self._momentums += [self.add_variable_from_reference(v, "momentum") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic)
            values, indices = self._fused_gradient(gradient)
            slot = self._momentums[self._get_variable_index(variable)] if self.momentum else None
            training_ops.apply_momentum(variable, slot, self._lr_in(variable.dtype, learning_rate), values,
                                        self.momentum, self.nesterov, indices=indices,
                                        weight_decay=self._decay_of(variable))
            return
        lr = _cast(learning_rate, variable.dtype)
        if self.momentum == 0:
            self._apply_update(lambda g, w: (w - g * lr,), gradient, variable)
            return
        momentum, nesterov = self.momentum, self.nesterov

        def rule(g, w, m):
            m = m * momentum - g * lr
            if nesterov:
                return w + (m * momentum - g * lr), m
            return w + m, m

        self._apply_update(rule, gradient, variable, [self._momentums[self._get_variable_index(variable)]])

    _DECAY_FOLDING_STEP = update_step

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "nesterov": self.nesterov})
        return config
