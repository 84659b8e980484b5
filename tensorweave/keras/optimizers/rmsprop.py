"""RMSprop (Hinton, lecture 6e) — Keras 3's ``keras.optimizers.RMSprop``.

With ``v`` the moving mean of squared gradients (and ``a`` of gradients when centered)::

    v = rho * v + (1 - rho) * g**2
    a = rho * a + (1 - rho) * g                   # centered only
    denominator = v - a**2 + epsilon              # centered; else v + epsilon
    increment = learning_rate * g / sqrt(denominator)
    mom = momentum * mom + increment; w = w - mom # momentum > 0
    w = w - increment                             # momentum == 0

>>> import tensorweave as tw
>>> w = tw.Variable([1.0])
>>> _ = tw.keras.optimizers.RMSprop(learning_rate=0.01, rho=0.0).apply([tw.constant([4.0])], [w])
>>> round(float(w.numpy()[0]), 4)   # with rho=0, the step is lr * sign(g)
0.99
"""
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast
from tensorweave.ops import math_ops as M
from tensorweave.ops import training_ops


class RMSprop(Optimizer):
    """RMSprop. Args: ``learning_rate=0.001``, ``rho=0.9``, ``momentum=0.0``, ``epsilon=1e-7``,
    ``centered=False``, plus the base Optimizer arguments."""

    # TF1's RMSPropOptimizer starts the mean square at one, Keras at zero.
    _velocity_initializer = "zeros"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, name="rmsprop",
                 **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon
        self.centered = bool(centered)
        self._velocities, self._momentums, self._average_gradients = [], [], []

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._velocities += [self.add_variable_from_reference(v, "velocity", initializer=self._velocity_initializer)
                             for v in variables]
        if self.momentum > 0:
            self._momentums += [self.add_variable_from_reference(v, "momentum") for v in variables]
        if self.centered:
            self._average_gradients += [self.add_variable_from_reference(v, "average_gradient") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        if variable.dtype in training_ops.FUSED_DTYPES:   # one in-place pass (same arithmetic)
            i = self._get_variable_index(variable)
            values, indices = self._fused_gradient(gradient)
            training_ops.apply_rmsprop(
                variable, self._velocities[i], self._momentums[i] if self.momentum > 0 else None,
                self._average_gradients[i] if self.centered else None, self._lr_in(variable.dtype, learning_rate),
                values, self.rho, self.momentum, self.epsilon, self.centered, indices=indices,
                weight_decay=self._decay_of(variable))
            return
        lr = _cast(learning_rate, variable.dtype)
        rho, eps, momentum, centered = self.rho, self.epsilon, self.momentum, self.centered
        i = self._get_variable_index(variable)
        slots = [self._velocities[i]]
        if momentum > 0:
            slots.append(self._momentums[i])
        if centered:
            slots.append(self._average_gradients[i])

        def rule(g, w, v, *rest):
            rest = list(rest)
            mom = rest.pop(0) if momentum > 0 else None
            avg = rest.pop(0) if centered else None
            v = rho * v + (1 - rho) * M.square(g)
            if centered:
                avg = rho * avg + (1 - rho) * g
                denominator = v - M.square(avg) + eps
            else:
                denominator = v + eps
            increment = (lr * g) / M.sqrt(denominator)
            out = [v]
            if momentum > 0:
                mom = momentum * mom + increment
                w = w - mom
                out.append(mom)
            else:
                w = w - increment
            if centered:
                out.append(avg)
            return (w, *out)

        self._apply_update(rule, gradient, variable, slots)

    _DECAY_FOLDING_STEP = update_step

    def get_config(self):
        config = super().get_config()
        config.update({"rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon,
                       "centered": self.centered})
        return config
