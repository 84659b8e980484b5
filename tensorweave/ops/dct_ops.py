"""Discrete cosine transforms and the spectral helpers built on them (``tw.signal.dct``, ``mdct``,
mel filter banks, MFCCs, Kaiser/Vorbis windows).

A DCT of length ``N`` is a product with an ``N x N`` cosine matrix (SciPy's unnormalised or
orthonormal DCT of the identity, which is TF's convention), so it is differentiable and exact;
``idct`` is the DCT of the inverse type, unnormalised as in TF (``idct(dct(x)) = 2N x``).

>>> import tensorweave as tw
>>> [round(float(v), 4) for v in tw.signal.dct(tw.constant([1.0, 2.0, 3.0]), norm="ortho")]
[3.4641, -1.4142, 0.0]
"""
import functools

import numpy as np
import scipy.fft
import scipy.special

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import math_ops as M
from tensorweave.ops.indexing_ops import pad
from tensorweave.ops.linalg_ops import tensordot

__all__ = ["dct", "idct", "kaiser_window", "kaiser_bessel_derived_window", "vorbis_window",
           "linear_to_mel_weight_matrix", "mfccs_from_log_mel_spectrograms"]


@functools.lru_cache(maxsize=64)
def _matrix(n, kind, norm):
    m = scipy.fft.dct(np.eye(n), type=kind, norm=norm, axis=0)
    m.flags.writeable = False
    return m


def _check(kind, norm, axis, what):
    if kind not in (1, 2, 3, 4):
        raise ValueError(f"{what}: type must be 1, 2, 3 or 4, got {kind}")
    if norm not in (None, "ortho"):
        raise ValueError(f"{what}: norm must be None or 'ortho', got {norm!r}")
    if kind == 1 and norm == "ortho":
        raise ValueError(f"{what}: normalization is not supported for the type-I DCT")
    if axis != -1:
        raise NotImplementedError(f"{what}: only axis=-1 is supported (as in TF)")


def dct(input, type=2, n=None, axis=-1, norm=None, name=None):  # noqa: A002 - TF's names
    """The DCT of ``type`` 1-4 over the last axis (``n`` crops or zero-pads it first)."""
    _check(type, norm, axis, "dct")
    x = convert_to_tensor(input)
    if not x.dtype.is_floating:
        raise TypeError(f"dct needs a float tensor, got {x.dtype.name}")
    length = x.shape[-1]
    if n is not None:
        n = int(n)
        x = x[..., :n] if n <= length else pad(x, [[0, 0]] * (x.shape.rank - 1) + [[0, n - length]])
        length = n
    if type == 1 and length < 2:
        raise ValueError("dct: the type-I DCT needs at least 2 points")
    m = convert_to_tensor(_matrix(length, type, norm).T.astype(x.dtype.np_dtype))
    return tensordot(x, m, [[x.shape.rank - 1], [0]])


def idct(input, type=2, n=None, axis=-1, norm=None, name=None):  # noqa: A002
    """The inverse DCT: the DCT of the inverse type (2 <-> 3; 1 and 4 are their own), unnormalised."""
    _check(type, norm, axis, "idct")
    return dct(input, {1: 1, 2: 3, 3: 2, 4: 4}[type], n, axis, norm)


def kaiser_window(window_length, beta=12.0, dtype=_dt.float32, name=None):
    """The (symmetric) Kaiser window ``I0(beta sqrt(1 - (2n/(N-1) - 1)^2)) / I0(beta)``."""
    dtype = _dt.as_dtype(dtype)
    return convert_to_tensor(np.kaiser(int(window_length), float(beta)).astype(dtype.np_dtype), dtype=dtype)


def kaiser_bessel_derived_window(window_length, beta=12.0, dtype=_dt.float32, name=None):
    """The Kaiser-Bessel-derived window (Princen-Bradley: its squares overlap-add to 1 at half overlap)."""
    dtype = _dt.as_dtype(dtype)
    half = int(window_length) // 2
    k = np.kaiser(half + 1, float(beta))
    c = np.cumsum(k)
    w = np.sqrt(c[:-1] / c[-1])
    return convert_to_tensor(np.concatenate([w, w[::-1]]).astype(dtype.np_dtype), dtype=dtype)


def vorbis_window(window_length, dtype=_dt.float32, name=None):
    """The Vorbis power-complementary window ``sin(pi/2 sin^2(pi (n + 1/2) / N))``."""
    dtype = _dt.as_dtype(dtype)
    n = np.arange(int(window_length))
    w = np.sin(np.pi / 2 * np.sin(np.pi * (n + 0.5) / int(window_length)) ** 2)
    return convert_to_tensor(w.astype(dtype.np_dtype), dtype=dtype)


def _hz_to_mel(f):
    return 1127.0 * np.log1p(np.asarray(f) / 700.0)


def linear_to_mel_weight_matrix(num_mel_bins=20, num_spectrogram_bins=129, sample_rate=8000, lower_edge_hertz=125.0,
                                upper_edge_hertz=3800.0, dtype=_dt.float32, name=None):
    """``[num_spectrogram_bins, num_mel_bins]`` triangular mel filters (HTK mel scale), DC row zero."""
    dtype = _dt.as_dtype(dtype)
    if not 0.0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2:
        raise ValueError(f"linear_to_mel_weight_matrix: need 0 <= lower_edge_hertz < upper_edge_hertz <= "
                         f"sample_rate / 2, got {lower_edge_hertz}, {upper_edge_hertz}, {sample_rate}")
    np_dt = dtype.np_dtype
    freqs = np.linspace(0.0, sample_rate / 2.0, int(num_spectrogram_bins), dtype=np_dt)[1:]
    mel = _hz_to_mel(freqs).astype(np_dt)[:, None]
    edges = np.linspace(_hz_to_mel(lower_edge_hertz), _hz_to_mel(upper_edge_hertz), int(num_mel_bins) + 2).astype(np_dt)
    lo, centre, hi = edges[:-2][None], edges[1:-1][None], edges[2:][None]
    w = np.maximum(0.0, np.minimum((mel - lo) / (centre - lo), (hi - mel) / (hi - centre))).astype(np_dt)
    return convert_to_tensor(np.pad(w, [[1, 0], [0, 0]]), dtype=dtype)


def mfccs_from_log_mel_spectrograms(log_mel_spectrograms, name=None):
    """MFCCs: the orthonormal-scaled type-II DCT of log-mel spectrograms over the last axis."""
    x = convert_to_tensor(log_mel_spectrograms)
    n = x.shape[-1]
    return dct(x, type=2) * M.rsqrt(convert_to_tensor(2.0 * n, dtype=x.dtype))
