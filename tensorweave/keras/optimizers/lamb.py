"""LAMB (You et al., 2020, "Large Batch Optimization for Deep Learning") — Keras 3's
``keras.optimizers.Lamb``: Adam's step scaled per weight by a trust ratio.

At step ``t`` (1-based), with moments ``m``, ``v`` (zero-initialized)::

    m = m + (g - m) * (1 - beta_1)
    v = v + (g**2 - v) * (1 - beta_2)
    update = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
    ratio = ||w|| / ||update||        # 1 where either norm is 0
    w = w - ratio * learning_rate * update

The norms are over the whole weight. On a sharded weight (``sbp=S(0)`` and the like) each rank
sums the squares of its shard — a partial sum (``P``) — and the global interpreter all-reduces
it (``P → B``) before the square root: every shard is scaled by the whole weight's ratio, as on
one device. A sparse (IndexedSlices) gradient is used densely, as Keras does: the ratio needs
every row.

>>> import tensorweave as tw
>>> w = tw.Variable([3.0, 4.0])
>>> _ = tw.keras.optimizers.Lamb(learning_rate=0.1).apply([tw.constant([1.0, 1.0])], [w])
>>> [round(float(x), 4) for x in w.numpy()]   # |w| = 5, the update (1, 1): ratio 5 / sqrt(2)
[2.6464, 3.6464]
"""
from tensorweave.keras.optimizers.moments import MomentOptimizer
from tensorweave.keras.optimizers.optimizer import _cast, densify
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R


def trust_ratio(w, update):
    """``||w|| / ||update||``, 1 where either norm is zero (LAMB's layer-wise scale)."""
    w_norm = M.sqrt(R.reduce_sum(M.square(w)))
    g_norm = M.sqrt(R.reduce_sum(M.square(update)))
    one = _cast(1.0, w.dtype)
    return M.where(M.greater(w_norm, 0), M.where(M.greater(g_norm, 0), w_norm / g_norm, one), one)


class Lamb(MomentOptimizer):
    """LAMB. Args: ``learning_rate=0.001``, ``beta_1=0.9``, ``beta_2=0.999``,
    ``epsilon=1e-7``, plus the base Optimizer arguments. Slots: ``momentum``, ``velocity``."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="lamb", **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = _cast(learning_rate, dtype)
        step = M.cast(self.iterations + 1, dtype)
        beta_1_power = M.pow(_cast(self.beta_1, dtype), step)
        beta_2_power = M.pow(_cast(self.beta_2, dtype), step)
        b1, b2, eps = self.beta_1, self.beta_2, self.epsilon

        def rule(g, w, m, v):
            m = m + (g - m) * (1 - b1)
            v = v + (M.square(g) - v) * (1 - b2)
            update = (m / (1.0 - beta_1_power)) / (M.sqrt(v / (1.0 - beta_2_power)) + eps)
            return w - (trust_ratio(w, update) * lr) * update, m, v

        self._apply_update(rule, densify(gradient, variable), variable, self.moments(variable))
