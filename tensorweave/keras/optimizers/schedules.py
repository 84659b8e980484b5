"""Learning-rate schedules (``tw.keras.optimizers.schedules``): the rate as a function of the step.

A schedule is called with the optimizer's ``iterations`` (a step count, a tensor or
a Python int) and returns the rate for that step, computed with tensorweave ops so
the same schedule runs eagerly, inside ``tw.function`` and in a TF1 graph. As in
Keras, the rate is computed in float32 (the optimizer casts it to each variable's dtype).

>>> import tensorweave as tw
>>> from tensorweave.keras.optimizers import schedules
>>> s = schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
>>> [round(float(s(step)), 4) for step in (0, 9, 10, 25)]
[0.1, 0.1, 0.05, 0.025]
>>> opt = tw.keras.optimizers.SGD(learning_rate=s)
"""
import math

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M

_MODULE = "keras.optimizers.schedules"


class LearningRateSchedule:
    """Base class: subclasses define ``__call__(step)`` and ``get_config()``.

    >>> class Halve(LearningRateSchedule):
    ...     def __init__(self, rate):
    ...         self.rate = rate
    ...     def __call__(self, step):
    ...         return self.rate / (1.0 + M.cast(step, "float32"))
    ...     def get_config(self):
    ...         return {"rate": self.rate}
    >>> float(Halve(1.0)(1))
    0.5
    >>> Halve.from_config(Halve(2.0).get_config()).rate
    2.0
    """

    def __call__(self, step):
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override "
                                  "`__call__(self, step)`.")

    def get_config(self):
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override `get_config()` "
                                  "in order to be serializable.")

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "name")
        return f"{type(self).__name__}({args})"


def _check_decay_steps(decay_steps):
    if decay_steps is None or decay_steps <= 0:
        raise ValueError(f"Argument `decay_steps` must be > 0. Received: decay_steps={decay_steps}")


def _float_tensor(value, dtype=None):
    """A Python number as a float32 tensor (Keras' default); tensors keep their dtype."""
    t = convert_to_tensor(value, dtype=dtype) if not hasattr(value, "_tw_tensor_") else convert_to_tensor(value)
    if not t.dtype.is_floating:
        t = M.cast(t, _dt.float32)
    return t


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``; with ``staircase`` the
    exponent is floored (the rate drops every ``decay_steps`` steps).

    >>> s = ExponentialDecay(1.0, decay_steps=2, decay_rate=0.5)
    >>> round(float(s(1)), 6)
    0.707107
    """

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name="ExponentialDecay"):
        _check_decay_steps(decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step):
        lr = _float_tensor(self.initial_learning_rate)
        dtype = lr.dtype
        p = M.cast(step, dtype) / M.cast(self.decay_steps, dtype)
        if self.staircase:
            p = M.floor(p)
        return lr * M.pow(M.cast(self.decay_rate, dtype), p)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class InverseTimeDecay(LearningRateSchedule):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (floored ratio with
    ``staircase``).

    >>> float(InverseTimeDecay(1.0, decay_steps=1, decay_rate=1.0)(3))
    0.25
    """

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name="InverseTimeDecay"):
        _check_decay_steps(decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step):
        lr = _float_tensor(self.initial_learning_rate)
        dtype = lr.dtype
        p = M.cast(step, dtype) / M.cast(self.decay_steps, dtype)
        if self.staircase:
            p = M.floor(p)
        return lr / (1 + M.cast(self.decay_rate, dtype) * p)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, and ``values[-1]`` after the last boundary.

    >>> s = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    >>> [float(s(x)) for x in (0, 10, 11, 20, 21)]
    [1.0, 1.0, 0.5, 0.5, 0.10000000149011612]
    """

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        if len(boundaries) != len(values) - 1:
            raise ValueError("The length of boundaries should be 1 less than the length of values. "
                             f"Received: boundaries={boundaries} of length {len(boundaries)}, and "
                             f"values={values} of length {len(values)}.")
        self.boundaries = list(boundaries)
        self.values = list(values)
        self.name = name

    def __call__(self, step):
        # Comparisons in float64 so that int64 steps and int or float boundaries compare exactly.
        x = M.cast(step, _dt.float64)
        values = [convert_to_tensor(v) for v in self.values]
        dtype = values[0].dtype
        values = [M.cast(v, dtype) for v in values]
        result = values[-1]
        for b, v in zip(reversed(self.boundaries), reversed(values[:-1])):
            result = M.where(M.less_equal(x, M.cast(b, _dt.float64)), v, result)
        return result

    def get_config(self):
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """Decays from ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps``
    along ``(1 - step / decay_steps) ** power``; with ``cycle`` it restarts with a longer
    period each time it reaches the end.

    >>> float(PolynomialDecay(1.0, decay_steps=4, end_learning_rate=0.0)(1))
    0.75
    """

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                 name="PolynomialDecay"):
        _check_decay_steps(decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def __call__(self, step):
        lr = _float_tensor(self.initial_learning_rate)
        dtype = lr.dtype
        end = M.cast(self.end_learning_rate, dtype)
        power = M.cast(self.power, dtype)
        s = M.cast(step, dtype)
        steps = M.cast(self.decay_steps, dtype)
        if self.cycle:
            # The period grows to the next multiple of decay_steps (step 0 counts as one period).
            mult = M.where(M.equal(s, 0), A.ones_like(s), M.ceil(s / steps))
            steps = steps * mult
        else:
            s = M.minimum(s, steps)
        p = s / steps
        return (lr - end) * M.pow(1 - p, power) + end

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power, "cycle": self.cycle,
                "name": self.name}


class CosineDecay(LearningRateSchedule):
    """Cosine decay (Loshchilov & Hutter, SGDR) from the initial rate to ``alpha`` times it
    over ``decay_steps``, optionally after a linear warm-up of ``warmup_steps`` steps from
    ``initial_learning_rate`` to ``warmup_target`` (the decay then starts from ``warmup_target``).

    >>> s = CosineDecay(1.0, decay_steps=10, alpha=0.1)
    >>> [round(float(s(x)), 4) for x in (0, 5, 10, 15)]
    [1.0, 0.55, 0.1, 0.1]
    >>> w = CosineDecay(0.0, decay_steps=10, warmup_target=1.0, warmup_steps=4)
    >>> [round(float(w(x)), 4) for x in (0, 2, 4, 9, 14)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay", warmup_target=None,
                 warmup_steps=0):
        _check_decay_steps(decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps

    def _decay(self, step, decay_steps, decay_from, dtype):
        fraction = step / decay_steps
        cosine = 0.5 * (1.0 + M.cos(A.constant(math.pi, dtype=dtype) * fraction))
        return decay_from * ((1 - self.alpha) * cosine + self.alpha)

    def __call__(self, step):
        lr = _float_tensor(self.initial_learning_rate)
        dtype = lr.dtype
        decay_steps = M.cast(self.decay_steps, dtype)
        s = M.cast(step, dtype)
        if self.warmup_target is None:
            return self._decay(M.minimum(s, decay_steps), decay_steps, lr, dtype)
        target = M.cast(self.warmup_target, dtype)
        warmup_steps = M.cast(self.warmup_steps, dtype)
        s = M.minimum(s, decay_steps + warmup_steps)
        # Both branches are computed and one selected (no graph-level cond needed); with
        # warmup_steps == 0 the warm-up branch divides by zero but is never selected.
        warm = (target - lr) * M.div_no_nan(s, warmup_steps) + lr
        decayed = self._decay(s - warmup_steps, decay_steps, target, dtype)
        return M.where(M.less(s, warmup_steps), warm, decayed)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name, "warmup_target": self.warmup_target,
                "warmup_steps": self.warmup_steps}


_ALL = {c.__name__: c for c in (ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay, PolynomialDecay,
                                 CosineDecay)}


def serialize(learning_rate_schedule):
    """A JSON-compatible dict (Keras' format: module, class_name, config, registered_name).

    >>> serialize(ExponentialDecay(0.1, 100, 0.9))["class_name"]
    'ExponentialDecay'
    """
    if not isinstance(learning_rate_schedule, LearningRateSchedule):
        raise ValueError(f"serialize: expected a LearningRateSchedule, got {learning_rate_schedule!r}")
    cls = type(learning_rate_schedule)
    registered = None if cls.__name__ in _ALL and _ALL[cls.__name__] is cls else cls.__name__
    return {"module": _MODULE, "class_name": cls.__name__, "config": learning_rate_schedule.get_config(),
            "registered_name": registered}


def deserialize(config, custom_objects=None):
    """Rebuilds a schedule from :func:`serialize`'s dict (``custom_objects`` maps names of
    user-defined schedule classes to the classes)."""
    if isinstance(config, LearningRateSchedule):
        return config
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got {config!r}")
    name = config["class_name"]
    table = dict(_ALL)
    table.update(custom_objects or {})
    cls = table.get(name) or table.get(config.get("registered_name") or "")
    if cls is None:
        raise ValueError(f"Unknown learning rate schedule: '{name}'. Known: {sorted(_ALL)}. "
                         "Hint: pass custom_objects={'" + name + "': YourSchedule}")
    return cls.from_config(dict(config.get("config", {})))
