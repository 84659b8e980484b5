"""``keras.random``: Keras 3's random functions and ``SeedGenerator``.

``seed`` is, as in Keras: None (the global generator: a new draw each call), an int (a fixed
stateless draw: the same numbers every call), or a ``SeedGenerator`` (a stateful seed held in a
variable, advanced by each draw, so a model that owns one draws new numbers at every step,
also inside a compiled training step, and repeats them from the same initial seed). Numbers
are tensorweave's (its counter-based generator), not TensorFlow's bit for bit.

>>> from tensorweave import keras
>>> gen = keras.random.SeedGenerator(1337)
>>> a, b = keras.random.normal((2,), seed=gen), keras.random.normal((2,), seed=gen)
>>> bool((a.numpy() != b.numpy()).all())
True
>>> bool((keras.random.uniform((3,), seed=7).numpy() == keras.random.uniform((3,), seed=7).numpy()).all())
True
"""
import numpy as np

import tensorweave as tw
from tensorweave.core.context import init_scope
from tensorweave.keras import backend


class SeedGenerator:
    """A seed state ``[counter, seed]`` in a non-trainable int64 variable; ``next()`` returns
    the current state and advances the counter."""

    def __init__(self, seed=None, name=None, **kwargs):
        if seed is None:
            seed = int(np.random.randint(0, 2 ** 31 - 1))     # seeded by keras.utils.set_random_seed
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"SeedGenerator: `seed` must be an int or None. Received: seed={seed!r}")
        self.name = name or "seed_generator"
        self._initial_seed = int(seed)
        with init_scope():
            self.state = tw.Variable(np.array([0, int(seed)], np.int64), trainable=False, name=f"{self.name}/state")

    def next(self, ordered=True):
        current = tw.identity(self.state)
        with tw.control_dependencies([current]):
            self.state.assign_add(tw.constant([1, 0], tw.int64), read_value=False)
        return current

    def get_config(self):
        return {"seed": self._initial_seed}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def draw_seed(seed):
    """The stateless seed tensor of a ``seed`` argument, or None for the global generator."""
    if seed is None:
        return None
    if isinstance(seed, SeedGenerator):
        return seed.next()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return tw.constant([int(seed), 0], tw.int64)
    if isinstance(seed, (tw.Tensor, tw.Variable)) or hasattr(seed, "shape"):
        return tw.cast(seed, tw.int64)
    raise ValueError("Argument `seed` must be either an integer or an instance of `SeedGenerator`. "
                     f"Received: seed={seed} (of type {type(seed)})")


def _dtype(dtype):
    return tw.as_dtype(dtype or backend.floatx())


def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    s = draw_seed(seed)
    if s is None:
        return tw.random.normal(shape, mean=mean, stddev=stddev, dtype=_dtype(dtype))
    return tw.random.stateless_normal(shape, seed=s, mean=mean, stddev=stddev, dtype=_dtype(dtype))


def uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
    s = draw_seed(seed)
    if s is None:
        return tw.random.uniform(shape, minval=minval, maxval=maxval, dtype=_dtype(dtype))
    return tw.random.stateless_uniform(shape, seed=s, minval=minval, maxval=maxval, dtype=_dtype(dtype))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    s = draw_seed(seed)
    if s is None:
        return tw.random.truncated_normal(shape, mean=mean, stddev=stddev, dtype=_dtype(dtype))
    return tw.random.stateless_truncated_normal(shape, seed=s, mean=mean, stddev=stddev, dtype=_dtype(dtype))


def randint(shape, minval, maxval, dtype="int32", seed=None):
    """Integers uniform in ``[minval, maxval)``."""
    s = draw_seed(seed)
    if s is None:
        s = tw.random.uniform([2], minval=0, maxval=2 ** 31 - 1, dtype=tw.int64)
    return tw.random.stateless_uniform(shape, seed=s, minval=minval, maxval=maxval, dtype=tw.as_dtype(dtype))


def categorical(logits, num_samples, dtype="int32", seed=None):
    """``num_samples`` class ids per row of ``logits``."""
    s = draw_seed(seed)
    if s is None:
        return tw.cast(tw.random.categorical(logits, num_samples), dtype)
    return tw.random.stateless_categorical(logits, num_samples, seed=s, dtype=tw.as_dtype(dtype))


def dropout(inputs, rate, noise_shape=None, seed=None):
    """Zeroes entries with probability ``rate`` and scales the rest by ``1 / (1 - rate)``."""
    x = tw.convert_to_tensor(inputs)
    shape = tw.shape(x) if noise_shape is None else noise_shape
    keep = tw.greater_equal(uniform(shape, dtype=x.dtype, seed=seed), tw.cast(rate, x.dtype))
    return tw.where(keep, x / tw.cast(1.0 - rate, x.dtype), tw.zeros_like(x))


def shuffle(x, axis=0, seed=None):
    """``x`` with its entries along ``axis`` in a random order."""
    x = tw.convert_to_tensor(x)
    n = tw.shape(x)[axis]
    order = tw.argsort(uniform(tw.reshape(n, [1]), seed=seed))
    return tw.gather(x, order, axis=axis)
