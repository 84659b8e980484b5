"""CPU kernels for ``ops/special_ops.py`` and the special functions of ``ops/math_extra_ops.py``."""
import numpy as np
import scipy.special

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.util import quiet, via_float32


def _same(fn):
    return quiet(via_float32(lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False)))


for _name, _fn in {"Asin": np.arcsin, "Acos": np.arccos, "Sinh": np.sinh, "Cosh": np.cosh,
                   "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
                   "Lgamma": scipy.special.gammaln, "Digamma": scipy.special.digamma,
                   "Trigamma": lambda x: scipy.special.polygamma(1, x), "Erfc": scipy.special.erfc}.items():
    k(_name)(_same(_fn))

for _name, _fn in {"Erfinv": scipy.special.erfinv, "Ndtri": scipy.special.ndtri, "BesselI0": scipy.special.i0,
                   "BesselI0e": scipy.special.i0e, "BesselI1": scipy.special.i1,
                   "BesselI1e": scipy.special.i1e}.items():
    k(_name)(_same(_fn))


def _binary(fn):
    return quiet(via_float32(lambda a, x: np.asarray(fn(a, x)).astype(x.dtype, copy=False)))


k("Polygamma")(_binary(lambda n, x: scipy.special.polygamma(n, x)))
k("Zeta")(_binary(scipy.special.zeta))
k("Igamma")(_binary(scipy.special.gammainc))
k("Igammac")(_binary(scipy.special.gammaincc))


@k("InvertPermutation")
def _invert_permutation(x):
    x = np.asarray(x)
    if x.ndim != 1 or not np.array_equal(np.sort(x), np.arange(x.size)):
        raise ValueError(f"invert_permutation: x must be a permutation of 0..{x.size - 1}, got {x.tolist()}"[:200])
    out = np.empty_like(x)
    out[x] = np.arange(x.size, dtype=x.dtype)
    return out
