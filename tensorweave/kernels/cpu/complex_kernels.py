"""CPU kernels for ``ops/complex_ops.py``."""
import numpy as np

from tensorweave.core.registry import register_kernel as k


@k("Complex")
def _complex(x, y):
    out = np.empty(np.broadcast_shapes(np.shape(x), np.shape(y)),
                   np.complex64 if np.asarray(x).dtype == np.float32 else np.complex128)
    out.real, out.imag = x, y
    return out


k("Real")(lambda x: np.array(np.real(x)))
k("Imag")(lambda x: np.array(np.imag(x)) if np.iscomplexobj(x) else np.zeros_like(x))
k("Conj")(np.conj)
k("ComplexAbs")(np.abs)
k("Angle")(lambda x: np.angle(x).astype(np.real(x).dtype))
