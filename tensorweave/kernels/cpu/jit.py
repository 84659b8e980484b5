"""The one way CPU kernels compile loops: numba's ``njit`` with the project's settings.

- ``nogil=True``: compiled loops release the GIL, so the executor's thread pool can run
  two of them at once.
- no on-disk cache: numba's cache files are pickles, and tensorweave loads no pickle from
  any file; each process compiles a kernel (per dtype) on its first call instead, lazily,
  so only the kernels a program uses cost compile time (~0.1-0.5 s each).
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
import numba


def njit(fn=None, **options):
    """``numba.njit`` with the settings above. Usable bare or with numba options."""
    def compile_(f):
        return numba.njit(f, **{"nogil": True, "cache": False, "error_model": "numpy", **options})
    return compile_ if fn is None else compile_(fn)
