"""Keras' FFT ops on (real, imaginary) pairs, over the complex FFT primitives of ``tw.signal``.

>>> import numpy as np
>>> from tensorweave import keras
>>> re, im = keras.ops.rfft(np.array([0.0, 1.0, 0.0, -1.0], "float32"))
>>> re.numpy().round(6).tolist(), im.numpy().round(6).tolist()
([0.0, 0.0, 0.0], [0.0, -2.0, 0.0])
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.ops._dtypes import cast_to, result_type, to_tensor


def _f(x):
    x = to_tensor(x)
    return cast_to(x, result_type(x.dtype, float))


def _pair(x, what):
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise ValueError(f"{what} takes a tuple (real, imag) of two tensors, got {type(x).__name__}")
    re, im = _f(x[0]), _f(x[1])
    if re.shape.as_list() != im.shape.as_list():
        raise ValueError(f"{what}: the real and imaginary parts must have the same shape, got {re.shape} and "
                         f"{im.shape}")
    return re, im


def _to_complex(re, im):
    """``(re, im)`` as one complex tensor (``tw.signal`` has float32/float64 kernels only)."""
    if re.dtype not in (tw.float32, tw.float64):
        re, im = tw.cast(re, tw.float32), tw.cast(im, tw.float32)
    return tw.complex(re, im)


def _from_complex(z, dtype):
    re, im = tw.math.real(z), tw.math.imag(z)
    return (re, im) if re.dtype == dtype else (tw.cast(re, dtype), tw.cast(im, dtype))


def fft(x):
    re, im = _pair(x, "fft")
    return _from_complex(tw.signal.fft(_to_complex(re, im)), re.dtype)


def fft2(x):
    re, im = _pair(x, "fft2")
    return _from_complex(tw.signal.fft2d(_to_complex(re, im)), re.dtype)


def ifft2(x):
    re, im = _pair(x, "ifft2")
    return _from_complex(tw.signal.ifft2d(_to_complex(re, im)), re.dtype)


def rfft(x, fft_length=None):
    x = _f(x)
    n = x.shape.as_list()[-1] if fft_length is None else int(fft_length)
    y = x if x.dtype in (tw.float32, tw.float64) else tw.cast(x, tw.float32)
    return _from_complex(tw.signal.rfft(y, [n]), x.dtype)


def irfft(x, fft_length=None):
    re, im = _pair(x, "irfft")
    n = 2 * (re.shape.as_list()[-1] - 1) if fft_length is None else int(fft_length)
    out = tw.signal.irfft(_to_complex(re, im), [n])
    return out if out.dtype == re.dtype else tw.cast(out, re.dtype)


def _window(window, length, dtype):
    if window is None:
        return None
    if isinstance(window, str):
        if window not in ("hann", "hamming"):
            raise ValueError(f'window must be "hann", "hamming", None or a tensor, got {window!r}')
        n = np.arange(length)
        a = 0.5 if window == "hann" else 0.54
        return (a - (1 - a) * np.cos(2 * np.pi * n / length)).astype(dtype.np_dtype)   # periodic
    w = np.asarray(window.numpy() if hasattr(window, "numpy") else window, dtype.np_dtype)
    if w.shape != (length,):
        raise ValueError(f"The shape of `window` must be [sequence_length] = [{length}], got {list(w.shape)}")
    return w


def stft(x, sequence_length, sequence_stride, fft_length, window="hann", center=True):
    x = _f(x)
    if fft_length < sequence_length:
        raise ValueError(f"stft: fft_length ({fft_length}) must be at least sequence_length ({sequence_length})")
    if center:
        x = tw.pad(x, [[0, 0]] * (x.shape.rank - 1) + [[fft_length // 2, fft_length // 2]], mode="REFLECT")
    l_pad = (fft_length - sequence_length) // 2
    win = _window(window, sequence_length, x.dtype)
    if win is None:
        win = np.ones(sequence_length, x.dtype.np_dtype)
    win = np.pad(win, (l_pad, fft_length - sequence_length - l_pad))
    frames = tw.signal.frame(x, fft_length, sequence_stride) * tw.constant(win)
    return rfft(frames, fft_length)


def istft(x, sequence_length, sequence_stride, fft_length, length=None, window="hann", center=True):
    """The inverse of :func:`stft`: frames back by ``irfft``, windowed overlap-add divided by the summed
    squared window."""
    re, im = _pair(x, "istft")
    frames = irfft((re, im), fft_length)                       # [..., count, fft_length]
    l_pad = (fft_length - sequence_length) // 2
    win = _window(window, sequence_length, frames.dtype)
    if win is None:
        win = np.ones(sequence_length, frames.dtype.np_dtype)
    win = np.pad(win, (l_pad, fft_length - sequence_length - l_pad))
    count = frames.shape.as_list()[-2]
    total = fft_length + sequence_stride * (count - 1)
    out = tw.signal.overlap_and_add(frames * tw.constant(win), sequence_stride)
    pos = (np.arange(count)[:, None] * sequence_stride + np.arange(fft_length)[None, :]).reshape(-1)
    norm = np.zeros(total)
    np.add.at(norm, pos, np.tile(win.astype(np.float64) ** 2, count))
    out = out / tw.constant(np.where(norm > 1e-10, norm, 1.0).astype(frames.dtype.np_dtype))
    start = fft_length // 2 if center else 0
    end = total - fft_length // 2 if center else total
    if length is not None:
        end = start + int(length)
    return out[..., start:end]
