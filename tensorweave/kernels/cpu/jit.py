"""The one way CPU kernels compile loops: numba's ``njit`` with the project's settings.

- ``nogil=True``: compiled loops release the GIL, so the executor's thread pool can run
  two of them at once.
- ``cache=True``: the machine code is kept on disk (next to the source, or in the user's
  cache directory when the package is read-only), so only the first process pays for
  compiling each kernel and dtype.
- ``error_model="numpy"``: division by zero gives inf/NaN as in NumPy instead of raising;
  without the zero check loops with a division vectorize (2.6x on the Adam update).
- no ``fastmath``: results must match the NumPy references bit for bit where the
  arithmetic is the same (no reassociation, NaN and inf kept).

>>> import numpy as np
>>> from tensorweave.kernels.cpu.jit import njit
>>> @njit
... def total(a):
...     s = 0.0
...     for x in a:
...         s += x
...     return s
>>> float(total(np.arange(4.0)))
6.0
"""
import os

import numba


def njit(fn=None, **options):
    """``numba.njit`` with ``nogil`` and on-disk caching (skipped for functions that have
    no source file, such as ones typed at a prompt). Usable bare or with numba options."""
    def compile_(f):
        cache = os.path.isfile(f.__code__.co_filename)
        return numba.njit(f, **{"nogil": True, "cache": cache, "error_model": "numpy", **options})
    return compile_ if fn is None else compile_(fn)
