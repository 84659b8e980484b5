"""``tw.train.ExponentialMovingAverage``: shadow copies of variables that follow them slowly.

``apply(var_list)`` creates one non-trainable shadow variable per variable (initialised to its
value) and moves each shadow ``shadow -= (1 - decay) * (shadow - var)``; with ``num_updates`` the
decay is ``min(decay, (1 + num_updates) / (10 + num_updates))``, as in TF. Eagerly the update
happens at once; in a graph ``apply`` returns the op that performs it.

>>> import tensorweave as tw
>>> w = tw.Variable(0.0)
>>> ema = tw.train.ExponentialMovingAverage(decay=0.9)
>>> _ = ema.apply([w])
>>> _ = w.assign(10.0)
>>> _ = ema.apply([w])
>>> round(float(ema.average(w)), 4)
1.0
"""
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import math_ops as M
from tensorweave.ops.control_flow_ops import group


class ExponentialMovingAverage:
    """Maintains moving averages of variables (see the module docstring)."""

    def __init__(self, decay, num_updates=None, zero_debias=False, name="ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("ExponentialMovingAverage: zero_debias=True is not supported")
        self._decay, self._num_updates, self._name = decay, num_updates, name
        self._averages = {}

    @property
    def name(self):
        return self._name

    def _current_decay(self, dtype):
        d = convert_to_tensor(self._decay, dtype=dtype) if not hasattr(self._decay, "dtype") else \
            M.cast(self._decay, dtype)
        if self._num_updates is None:
            return d
        n = M.cast(self._num_updates.read_value() if hasattr(self._num_updates, "read_value") else
                   convert_to_tensor(self._num_updates), dtype)
        return M.minimum(d, (1.0 + n) / (10.0 + n))

    def apply(self, var_list=None):
        """Creates shadows on first sight and updates every shadow of ``var_list``."""
        if var_list is None:
            raise ValueError("ExponentialMovingAverage.apply: pass the variables (var_list) to average")
        updates = []
        for var in var_list:
            if not var.dtype.is_floating:
                raise TypeError(f"ExponentialMovingAverage: {var.name} is {var.dtype.name}; only float variables "
                                "can be averaged")
            key = var.ref()
            if key not in self._averages:
                self._averages[key] = self._make_shadow(var)
            shadow = self._averages[key]
            decay = self._current_decay(var.dtype)
            updates.append(shadow.assign_sub((1.0 - decay) * (shadow.read_value() - var.read_value())))
        return group(*updates)

    def _make_shadow(self, var):
        """The shadow of ``var``: a non-trainable variable starting at its value."""
        from tensorweave.core.context import init_scope
        from tensorweave.ops.variables import Variable
        with init_scope():
            return Variable(var.read_value(), trainable=False, name=self.average_name(var))

    def average(self, var):
        """The shadow variable of ``var`` (None before ``apply``)."""
        return self._averages.get(var.ref())

    def average_name(self, var):
        base = var.name.split(":")[0]
        return f"{base}/{self._name}"

    def variables_to_restore(self, moving_avg_variables=None):
        """``{shadow name: variable}`` for restoring averages into the variables themselves."""
        return {self.average_name(k.deref()): k.deref() for k in self._averages}
