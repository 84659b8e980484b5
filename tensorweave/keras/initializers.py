"""Weight initializers (``keras.initializers``): callables ``init(shape, dtype)``.

Random initializers draw with tensorweave's random ops, so ``keras.utils.set_random_seed``
(which sets the global seed) makes weights reproducible bit for bit.

>>> from tensorweave.keras import initializers
>>> initializers.get("zeros")((2,)).numpy()
array([0., 0.], dtype=float32)
"""
import math

import numpy as np

import tensorweave as tw


class Initializer:
    def __call__(self, shape, dtype=None):
        raise NotImplementedError

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _dtype(dtype):
    return tw.as_dtype(dtype or "float32")


class Zeros(Initializer):
    def __call__(self, shape, dtype=None):
        return tw.zeros(shape, _dtype(dtype))


class Ones(Initializer):
    def __call__(self, shape, dtype=None):
        return tw.ones(shape, _dtype(dtype))


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = value

    def __call__(self, shape, dtype=None):
        return tw.constant(np.broadcast_to(np.asarray(self.value, _dtype(dtype).np_dtype), tuple(shape)).copy())

    def get_config(self):
        return {"value": self.value if np.isscalar(self.value) else np.asarray(self.value).tolist()}


class RandomUniform(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None):
        return tw.random.uniform(shape, self.minval, self.maxval, dtype=_dtype(dtype), seed=self.seed)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return tw.random.normal(shape, self.mean, self.stddev, dtype=_dtype(dtype), seed=self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class TruncatedNormal(RandomNormal):
    def __call__(self, shape, dtype=None):
        return tw.random.truncated_normal(shape, self.mean, self.stddev, dtype=_dtype(dtype), seed=self.seed)


def _fans(shape):
    shape = tuple(shape)
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


class VarianceScaling(Initializer):
    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"Invalid mode {mode!r}")
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform", "normal"):
            raise ValueError(f"Invalid distribution {distribution!r}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape, dtype=None):
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        d = _dtype(dtype)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * scale)
            return tw.random.uniform(shape, -limit, limit, dtype=d, seed=self.seed)
        if self.distribution == "truncated_normal":
            # the stddev of a normal truncated at 2 sigma is 0.8796 of the untruncated one
            return tw.random.truncated_normal(shape, 0.0, math.sqrt(scale) / 0.87962566103423978, dtype=d,
                                              seed=self.seed)
        return tw.random.normal(shape, 0.0, math.sqrt(scale), dtype=d, seed=self.seed)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, "seed": self.seed}


def _preset(name, scale, mode, distribution):
    class Preset(VarianceScaling):
        def __init__(self, seed=None):
            super().__init__(scale, mode, distribution, seed)

        def get_config(self):
            return {"seed": self.seed}
    Preset.__name__ = Preset.__qualname__ = name
    return Preset


GlorotUniform = _preset("GlorotUniform", 1.0, "fan_avg", "uniform")
GlorotNormal = _preset("GlorotNormal", 1.0, "fan_avg", "truncated_normal")
HeUniform = _preset("HeUniform", 2.0, "fan_in", "uniform")
HeNormal = _preset("HeNormal", 2.0, "fan_in", "truncated_normal")
LecunUniform = _preset("LecunUniform", 1.0, "fan_in", "uniform")
LecunNormal = _preset("LecunNormal", 1.0, "fan_in", "truncated_normal")


class Orthogonal(Initializer):
    def __init__(self, gain=1.0, seed=None):
        self.gain, self.seed = gain, seed

    def __call__(self, shape, dtype=None):
        shape = tuple(shape)
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        from tensorweave.core.context import eager_mode
        with eager_mode():  # the QR step runs in NumPy, even while a TF1 graph is being built
            a = tw.random.normal((max(rows, cols), min(rows, cols)), dtype=tw.float32, seed=self.seed).numpy()
        q, r = np.linalg.qr(a.astype(np.float64))
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return tw.constant((self.gain * q[:rows, :cols]).reshape(shape).astype(_dtype(dtype).np_dtype))

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed}


class Identity(Initializer):
    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype=None):
        return tw.constant((self.gain * np.eye(*shape)).astype(_dtype(dtype).np_dtype))


_ALIASES = {"zeros": Zeros, "ones": Ones, "constant": Constant, "uniform": RandomUniform,
            "random_uniform": RandomUniform, "normal": RandomNormal, "random_normal": RandomNormal,
            "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform, "glorot_normal": GlorotNormal,
            "he_uniform": HeUniform, "he_normal": HeNormal, "lecun_uniform": LecunUniform,
            "lecun_normal": LecunNormal, "orthogonal": Orthogonal, "identity": Identity,
            "variance_scaling": VarianceScaling}
_CLASSES = {c.__name__: c for c in set(_ALIASES.values())}


def get(identifier):
    """An initializer from a name, a config dict, an instance or a callable."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        cls = _ALIASES.get(identifier) or _CLASSES.get(identifier)
        if cls is None:
            raise ValueError(f"Unknown initializer {identifier!r}; known: {sorted(_ALIASES)}")
        return cls()
    if isinstance(identifier, dict):
        cls = _CLASSES.get(identifier["class_name"])
        if cls is None:
            raise ValueError(f"Unknown initializer class {identifier['class_name']!r}")
        return cls.from_config(identifier.get("config", {}))
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret initializer {identifier!r}")


def serialize(init):
    if isinstance(init, Initializer):
        return {"class_name": type(init).__name__, "config": init.get_config()}
    raise ValueError(f"Cannot serialize the custom initializer {init!r}")


def deserialize(config, custom_objects=None):
    """The initializer described by :func:`serialize` (or a name)."""
    if isinstance(config, dict) and custom_objects and config.get("class_name") in custom_objects:
        return custom_objects[config["class_name"]].from_config(config.get("config", {}))
    return get(config)


# Keras' lower-case names are the classes (``initializers.glorot_uniform(seed=1)``).
globals().update(_ALIASES)

# TF2's ``tf.*_initializer`` names (``tf.random_normal_initializer(0.0, 0.02)``): tensorweave's
# namespace exposes them from here.
TF_NAMES = {"random_normal_initializer": RandomNormal, "random_uniform_initializer": RandomUniform,
            "truncated_normal_initializer": TruncatedNormal, "constant_initializer": Constant,
            "zeros_initializer": Zeros, "ones_initializer": Ones, "glorot_uniform_initializer": GlorotUniform,
            "glorot_normal_initializer": GlorotNormal, "orthogonal_initializer": Orthogonal,
            "variance_scaling_initializer": VarianceScaling}
