"""CPU kernels for ``ops/fft_ops.py`` (SciPy's pocketfft keeps single precision single)."""
import numpy as np
import scipy.fft

from tensorweave.core.registry import register_kernel as k


def _axes(rank):
    return tuple(range(-rank, 0))


@k("FFT")
def _fft(x, rank, inverse):
    fn = scipy.fft.ifftn if inverse else scipy.fft.fftn
    return np.asarray(fn(x, axes=_axes(rank)), dtype=x.dtype)


@k("RFFT")
def _rfft(x, rank):
    return np.asarray(scipy.fft.rfftn(x, axes=_axes(rank)), dtype=np.result_type(x.dtype, np.complex64))


@k("IRFFT")
def _irfft(x, rank, n):
    shape = list(x.shape[-rank:-1]) + [n]
    return np.asarray(scipy.fft.irfftn(x, s=shape, axes=_axes(rank)), dtype=np.real(x[:0]).dtype)
