"""Adam (Kingma & Ba, 2015), with AMSGrad, and AdamW (decoupled weight decay, Loshchilov &
Hutter, 2019) — Keras 3's ``keras.optimizers.Adam`` / ``AdamW``.

At step ``t`` (1-based), with first and second moments ``m``, ``v`` (zero-initialized)::

    m = m + (g - m) * (1 - beta_1)
    v = v + (g**2 - v) * (1 - beta_2)
    v_hat = max(v_hat, v)                         # amsgrad only; used in place of v below
    alpha = learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)
    w = w - alpha * m / (sqrt(v) + epsilon)

AdamW first shrinks the weights: ``w = w - w * weight_decay * learning_rate`` (for a dense
float gradient inside the fused update op, before its step: one op writes the weight, which a
ZeRO-1 plan shards, ``distribute/zero_update.py``).

With an IndexedSlices gradient only the touched rows of ``w``, ``m`` and ``v`` change
("lazy" Adam, as TensorFlow's LazyAdam and PyTorch's SparseAdam); the step count ``t``
is still the optimizer's.

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.Adam(learning_rate=0.1).apply([tw.constant([5.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # the first Adam step moves by about learning_rate
0.9
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class Adam(Optimizer):
    """Adam. Args: ``learning_rate=0.001``, ``beta_1=0.9``, ``beta_2=0.999``,
    ``epsilon=1e-7``, ``amsgrad=False``, plus the base Optimizer arguments."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, name="adam",
                 **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.amsgrad = bool(amsgrad)
        self._momentums, self._velocities, self._velocity_hats = [], [], []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._momentums += [self.add_variable_from_reference(v, "momentum") for v in variables]
        self._velocities += [self.add_variable_from_reference(v, "velocity") for v in variables]
        if self.amsgrad:
            self._velocity_hats += [self.add_variable_from_reference(v, "velocity_hat") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:
            self._fused_step(gradient, variable, learning_rate)
            return
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        step = M.cast(self.iterations + 1, dtype)
        beta_1_power = M.pow(_cast(self.beta_1, dtype), step)
        beta_2_power = M.pow(_cast(self.beta_2, dtype), step)
        alpha = lr * M.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        b1, b2, eps, amsgrad = self.beta_1, self.beta_2, self.epsilon, self.amsgrad
        i = self._get_variable_index(variable)
        slots = [self._momentums[i], self._velocities[i]] + ([self._velocity_hats[i]] if amsgrad else [])

        def rule(g, w, m, v, v_hat=None):
            m = m + (g - m) * (1 - b1)
            v = v + (M.square(g) - v) * (1 - b2)
            if amsgrad:
                v_hat = M.maximum(v_hat, v)
                return w - (m * alpha) / (M.sqrt(v_hat) + eps), m, v, v_hat
            return w - (m * alpha) / (M.sqrt(v) + eps), m, v

        self._apply_update(rule, gradient, variable, slots)

    def _fused_step(self, gradient, variable, learning_rate):
        # One in-place pass over weights and slots (ops/training_ops.py) instead of the
        # ~12 allocating elementwise ops of the rule above; same arithmetic.
        lr = self._lr_in(variable.dtype, learning_rate)
        step = self._once("step", lambda: self.iterations + 1)
        i = self._get_variable_index(variable)
        slots = (self._momentums[i], self._velocities[i])
        v_hat = self._velocity_hats[i] if self.amsgrad else None
        values, indices = self._fused_gradient(gradient)
        training_ops.apply_adam(variable, *slots, lr, step, values, self.beta_1, self.beta_2, self.epsilon,
                                v_hat=v_hat, indices=indices, weight_decay=self._decay_of(variable))

    _DECAY_FOLDING_STEP = update_step

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                       "amsgrad": self.amsgrad})
        return config


class AdamW(Adam):
    """Adam with decoupled weight decay. Args as :class:`Adam`, and ``weight_decay=0.004``.

    >>> import tensorweave as tw
    >>> opt = tw.keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
    >>> w = tw.Variable([2.0])
    >>> _ = opt.apply([tw.constant([0.0])], [w])   # zero gradient: only the decay acts
    >>> round(float(w.numpy()[0]), 4)              # 2 - 2 * 0.5 * 0.1
    1.9
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, name="adamw", **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, name=name, weight_decay=weight_decay, **kwargs)
        if self.weight_decay is None:
            raise ValueError("Argument `weight_decay` must be a float. Received: weight_decay=None")
