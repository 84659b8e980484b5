"""OpInfos for complex numbers and tw.signal (ops/complex_ops.py, ops/fft_ops.py, signal.py).

Complex ops are checked through real parts: each entry builds a complex tensor from two float
tensors and returns the real and imaginary parts of the result, so the generic float64
finite-difference check covers the complex gradients (TF's ``dL/dRe + i dL/dIm`` convention).
"""
import numpy as np
import scipy.fft

import tensorweave as tw
from tensorweave.ops.complex_ops import complex_abs
from opinfo import OpInfo, Sample, arr

F = (tw.float32, tw.float64)
TOL = {tw.float32: (1e-4, 1e-4)}


def _parts(z):
    return tw.math.real(z), tw.math.imag(z)


def _np_parts(z, dtype):
    return np.real(z).astype(dtype), np.imag(z).astype(dtype)


def _pair_samples(shapes):
    def gen(dtype, rng):
        return [Sample((arr(rng, s, dtype), arr(rng, s, dtype)), name="x".join(map(str, s))) for s in shapes]
    return gen


def _real_samples(shapes, **kw):
    def gen(dtype, rng):
        return [Sample((arr(rng, s, dtype),), dict(kw), name="x".join(map(str, s))) for s in shapes]
    return gen


def _c(fn):
    """A complex transform checked on (re, im) in and (re, im) out."""
    return lambda re, im, **kw: _parts(fn(tw.complex(re, im), **kw))


def _np_c(fn):
    return lambda re, im, **kw: _np_parts(fn(re + 1j * im, **kw), re.dtype)


def _rfft_ref(axes):
    def ref(x, fft_length=None):
        return _np_parts(np.fft.rfftn(x, s=fft_length, axes=axes), x.dtype)
    return ref


def _irfft_ref(axes):
    def ref(re, im, fft_length=None):
        return np.fft.irfftn(re + 1j * im, s=fft_length, axes=axes).astype(re.dtype)
    return ref


def _frame_ref(x, frame_length, frame_step, pad_end=False):
    n = x.shape[-1]
    if pad_end:
        frames = -(-n // frame_step)
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, max((frames - 1) * frame_step + frame_length - n, 0))])
    else:
        frames = max(0, 1 + (n - frame_length) // frame_step)
    return np.stack([x[..., i * frame_step:i * frame_step + frame_length] for i in range(frames)], axis=-2)


def _ola_ref(x, frame_step):
    frames, length = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + ((frames - 1) * frame_step + length,), x.dtype)
    for i in range(frames):
        out[..., i * frame_step:i * frame_step + length] += x[..., i, :]
    return out


def _hann(n, dtype):
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(dtype)


def _stft_ref(x, frame_length, frame_step, fft_length):
    frames = _frame_ref(x, frame_length, frame_step) * _hann(frame_length, x.dtype)
    return _np_parts(np.fft.rfft(frames, n=fft_length), x.dtype)


def _stft_op(x, **kw):
    return _parts(tw.signal.stft(x, **kw))


OPS = [
    OpInfo("complex_parts", lambda re, im: _parts(tw.complex(re, im)), lambda re, im: (re, im), F,
           _pair_samples([(3, 4), ()])),
    OpInfo("complex_abs", lambda re, im: complex_abs(tw.complex(re, im)),
           lambda re, im: np.abs(re + 1j * im).astype(re.dtype), F, _pair_samples([(3, 4)]), tol=TOL),
    OpInfo("angle", lambda re, im: tw.math.angle(tw.complex(re, im)),
           lambda re, im: np.angle(re + 1j * im).astype(re.dtype), F, _pair_samples([(3, 4)]), tol=TOL),
    OpInfo("conj", _c(tw.math.conj), _np_c(np.conj), F, _pair_samples([(2, 3)])),
    OpInfo("signal.fft", _c(tw.signal.fft), _np_c(np.fft.fft), F, _pair_samples([(5,), (2, 4)]), tol=TOL),
    OpInfo("signal.ifft", _c(tw.signal.ifft), _np_c(np.fft.ifft), F, _pair_samples([(5,), (2, 4)]), tol=TOL),
    OpInfo("signal.fft2d", _c(tw.signal.fft2d), _np_c(np.fft.fft2), F, _pair_samples([(3, 4), (2, 3, 2)]), tol=TOL),
    OpInfo("signal.ifft2d", _c(tw.signal.ifft2d), _np_c(np.fft.ifft2), F, _pair_samples([(3, 4)]), tol=TOL),
    OpInfo("signal.fft3d", _c(tw.signal.fft3d), _np_c(lambda z: np.fft.fftn(z, axes=(-3, -2, -1))), F,
           _pair_samples([(2, 3, 2)]), tol=TOL),
    OpInfo("signal.ifft3d", _c(tw.signal.ifft3d), _np_c(lambda z: np.fft.ifftn(z, axes=(-3, -2, -1))), F,
           _pair_samples([(2, 2, 3)]), tol=TOL),
    OpInfo("signal.rfft", lambda x, **kw: _parts(tw.signal.rfft(x, **kw)), _rfft_ref((-1,)), F,
           lambda d, rng: _real_samples([(6,), (2, 5)])(d, rng) + _real_samples([(2, 5)], fft_length=[8])(d, rng)
           + _real_samples([(2, 5)], fft_length=[3])(d, rng), tol=TOL),
    OpInfo("signal.rfft2d", lambda x, **kw: _parts(tw.signal.rfft2d(x, **kw)), _rfft_ref((-2, -1)), F,
           lambda d, rng: _real_samples([(3, 4), (2, 3, 5)])(d, rng) + _real_samples([(3, 4)], fft_length=[4, 6])(d, rng),
           tol=TOL),
    OpInfo("signal.rfft3d", lambda x: _parts(tw.signal.rfft3d(x)), _rfft_ref((-3, -2, -1)), F,
           _real_samples([(2, 3, 4)]), tol=TOL),
    OpInfo("signal.irfft", lambda re, im, **kw: tw.signal.irfft(tw.complex(re, im), **kw), _irfft_ref((-1,)), F,
           lambda d, rng: _pair_samples([(4,), (2, 5)])(d, rng)
           + [Sample(s.args, {"fft_length": [7]}, "odd") for s in _pair_samples([(2, 4)])(d, rng)]
           + [Sample(s.args, {"fft_length": [4]}, "crop") for s in _pair_samples([(2, 5)])(d, rng)], tol=TOL),
    OpInfo("signal.irfft2d", lambda re, im, **kw: tw.signal.irfft2d(tw.complex(re, im), **kw), _irfft_ref((-2, -1)),
           F, lambda d, rng: _pair_samples([(3, 3)])(d, rng)
           + [Sample(s.args, {"fft_length": [3, 5]}, "odd") for s in _pair_samples([(3, 3)])(d, rng)], tol=TOL),
    OpInfo("signal.irfft3d", lambda re, im: tw.signal.irfft3d(tw.complex(re, im)), _irfft_ref((-3, -2, -1)), F,
           _pair_samples([(2, 2, 3)]), tol=TOL),
    OpInfo("signal.fftshift", tw.signal.fftshift, np.fft.fftshift, F, _real_samples([(5,), (3, 4)])),
    OpInfo("signal.ifftshift", tw.signal.ifftshift, np.fft.ifftshift, F, _real_samples([(5,), (3, 4)])),
    OpInfo("signal.frame", tw.signal.frame, _frame_ref, F,
           lambda d, rng: _real_samples([(10,), (2, 9)], frame_length=4, frame_step=3)(d, rng)
           + _real_samples([(2, 9)], frame_length=4, frame_step=3, pad_end=True)(d, rng)),
    OpInfo("signal.overlap_and_add", tw.signal.overlap_and_add, _ola_ref, F,
           _real_samples([(3, 4), (2, 3, 5)], frame_step=2)),
    OpInfo("signal.dct", tw.signal.dct,
           lambda x, type=2, norm=None, n=None: scipy.fft.dct(x, type=type, norm=norm, n=n, axis=-1).astype(x.dtype), F,
           lambda d, rng: _real_samples([(3, 6)])(d, rng) + _real_samples([(2, 5)], type=1)(d, rng)
           + _real_samples([(2, 5)], type=3, norm="ortho")(d, rng) + _real_samples([(4,)], type=4, n=6)(d, rng),
           tol=TOL),
    OpInfo("signal.mfccs", tw.signal.mfccs_from_log_mel_spectrograms,
           lambda x: (scipy.fft.dct(x, type=2, axis=-1) / np.sqrt(2 * x.shape[-1])).astype(x.dtype), F,
           _real_samples([(3, 8)]), tol=TOL),
    OpInfo("signal.stft", _stft_op, _stft_ref, F,
           _real_samples([(20,), (2, 24)], frame_length=8, frame_step=4, fft_length=8), tol=TOL),
]
