"""CPU kernels for ``ops/special_ops.py``."""
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
