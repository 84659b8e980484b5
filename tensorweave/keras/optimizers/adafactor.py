"""Adafactor (Shazeer & Stern, 2018) — Keras 3's ``keras.optimizers.Adafactor``: Adam-like
steps whose second moment of a weight of rank >= 2 is *factored* into row and column means.

At step ``t`` (1-based), with ``rho = min(learning_rate, 1 / sqrt(t))`` (``relative_step``
also caps the rate itself the same way), ``beta_2 = 1 - t**beta_2_decay`` and
``g2 = g**2 + epsilon_1``::

    r = beta_2 * r + (1 - beta_2) * mean(g2, axis=-1)          # rank >= 2: factored
    c = beta_2 * c + (1 - beta_2) * mean(g2, axis=-2)
    v = (r / mean(r, axis=-1))[..., None] * c[..., None, :]
    v = beta_2 * v + (1 - beta_2) * g2                          # rank < 2
    u = g / sqrt(v);  u = u / max(1, rms(u) / clip_threshold)
    w = w - max(epsilon_2, rms(w)) * rho * u

``rms`` and the means are over the whole weight (and its rows/columns). On a sharded weight
the row/column statistics follow the weight's layout: with ``S(0)`` rows, ``r`` is split the
same way and ``c`` (a mean over the split rows: a partial sum, all-reduced) is ``B`` on every
rank; ``rms`` is all-reduced likewise (``P → B``), so the shards step as the whole weight
does. Sparse (IndexedSlices) gradients are used densely (the factors need every row).

>>> import tensorweave as tw
>>> w = tw.Variable([[1.0, -2.0], [3.0, 4.0]])
>>> opt = tw.keras.optimizers.Adafactor(learning_rate=0.5)
>>> _ = opt.apply([tw.constant([[1.0, 1.0], [1.0, 1.0]])], [w])
>>> [v.shape.as_list() for v in opt.variables[2:]]   # r (rows), c (columns), velocity
[[2], [2], [2, 2]]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.sbp import B, Split
from tensorweave.keras.optimizers.optimizer import Optimizer, _cast, _initial, densify
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R


def _rms(x):
    return M.sqrt(R.reduce_mean(M.square(x)))


def reduced_layout(variable, axis):
    """The placement and SBP of a statistic of ``variable`` reduced over its ``axis``: a split
    of that axis becomes ``B`` (the reduction all-reduces it), later split axes shift down."""
    if not getattr(variable, "is_global", False):
        return {}
    ndim = len(variable.shape)
    axis %= ndim

    def reduced(s):
        if not isinstance(s, Split):
            return B
        return B if s.axis == axis else Split(s.axis - (s.axis > axis))
    return {"placement": variable.placement, "sbp": tuple(reduced(s) for s in variable.sbp)}


class Adafactor(Optimizer):
    """Adafactor. Args: ``learning_rate=0.001``, ``beta_2_decay=-0.8``, ``epsilon_1=1e-30``,
    ``epsilon_2=1e-3``, ``clip_threshold=1.0``, ``relative_step=True``, plus the base Optimizer
    arguments. Variables per weight, in Keras' order: ``r`` and ``c`` (the row and column
    statistics; int32 scalars, unused, for a weight of rank < 2) and the slot ``velocity``."""

    def __init__(self, learning_rate=0.001, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0,
                 relative_step=True, name="adafactor", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_2_decay = beta_2_decay
        self.epsilon_1 = epsilon_1
        self.epsilon_2 = epsilon_2
        self.clip_threshold = clip_threshold
        self.relative_step = relative_step
        self._r, self._c, self._v = [], [], []

    def _statistic(self, variable, axis):
        base = variable.name.split(":")[0].replace("/", "_")
        if len(variable.shape) < 2:   # Keras keeps an unused int32 zero here
            return self._make_variable(_initial("zeros", [], _dt.int32), _dt.int32, base, shape=[])
        shape = variable.shape.as_list()
        del shape[axis]
        layout = reduced_layout(variable, axis)
        init = (lambda shape, dtype: _initial("zeros", shape, dtype)()) if layout else \
            _initial("zeros", shape, variable.dtype)
        return self._make_variable(init, variable.dtype, base, shape=shape, **layout)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        for v in variables:
            self._r.append(self._statistic(v, -1))
            self._c.append(self._statistic(v, -2))
            self._v.append(self.add_variable_from_reference(v, "velocity"))

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        step = M.cast(self.iterations + 1, dtype)
        if not callable(self._learning_rate) and self.relative_step:
            lr = M.minimum(lr, 1 / M.sqrt(step))
        rho_t = M.minimum(lr, 1 / M.sqrt(step))
        beta_2_t = 1 - M.pow(step, _cast(self.beta_2_decay, dtype))
        eps_1, eps_2, clip = self.epsilon_1, _cast(self.epsilon_2, dtype), self.clip_threshold
        factored = len(variable.shape) >= 2
        one = _cast(1.0, dtype)

        def rule(g, w, v, r=None, c=None):
            alpha_t = M.maximum(eps_2, _rms(w)) * rho_t
            g2 = M.square(g) + eps_1
            if factored:
                r = beta_2_t * r + (1 - beta_2_t) * R.reduce_mean(g2, axis=-1)
                c = beta_2_t * c + (1 - beta_2_t) * R.reduce_mean(g2, axis=-2)
                v = A.expand_dims(r / R.reduce_mean(r, axis=-1, keepdims=True), -1) * A.expand_dims(c, -2)
            else:
                v = beta_2_t * v + (1 - beta_2_t) * g2
            u_t = g / M.sqrt(v)
            u_t_hat = u_t / M.maximum(one, _rms(u_t) / clip)
            return (w - alpha_t * u_t_hat, v) + ((r, c) if factored else ())

        i = self._get_variable_index(variable)
        slots = [self._v[i]] + ([self._r[i], self._c[i]] if factored else [])
        self._apply_update(rule, densify(gradient, variable), variable, slots)

    def get_config(self):
        config = super().get_config()
        config.update({"beta_2_decay": self.beta_2_decay, "epsilon_1": self.epsilon_1, "epsilon_2": self.epsilon_2,
                       "clip_threshold": self.clip_threshold, "relative_step": self.relative_step})
        return config
