"""The bit generator behind every random stream: NumPy's Philox keyed by a tuple of ints.

It sits at the bottom so that both the random ops (``ops/random_ops.py``: ``Generator.split``
draws from a stream) and their kernels (``kernels/cpu/random_kernels.py``) use the same one
without the ops layer importing kernels.

>>> a = philox((3, 1, 2)).random(2)
>>> b = philox((3, 1, 2)).random(2)
>>> bool((a == b).all())
True
"""
import numpy as np


def philox(key):
    """A NumPy Generator for ``key`` (a tuple of non-negative ints; None: fresh OS entropy).

    ``SeedSequence`` hashes the key, so the stream depends on every word of it and is the
    same in every process (unlike Python's ``hash``).
    """
    if key is None:
        return np.random.Generator(np.random.Philox())
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([int(w) for w in key])))
