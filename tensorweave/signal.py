"""``tw.signal``: Fourier transforms, windows, framing and short-time Fourier transforms.

The transforms are primitives (``ops/fft_ops.py``, with gradients); ``frame``,
``overlap_and_add``, ``stft`` and ``inverse_stft`` are compositions of ``gather``,
``unsorted_segment_sum`` and the transforms, so they are differentiable too.

>>> import tensorweave as tw
>>> tw.signal.hann_window(4).numpy().tolist()
[0.0, 0.5, 1.0, 0.5]
>>> tw.signal.frame(tw.range(5), 2, 2).numpy().tolist()
[[0, 1], [2, 3]]
>>> s = tw.signal.stft(tw.ones([64]), frame_length=16, frame_step=8)
>>> s.shape, s.dtype
(TensorShape([7, 9]), tw.complex64)
"""
import math as _math

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops.fft_ops import (fft, fft2d, fft3d, fftnd, fftshift, ifft, ifft2d, ifft3d,  # noqa: F401
                                     ifftnd, ifftshift, irfft, irfft2d, irfft3d, irfftnd, rfft, rfft2d,
                                     rfft3d, rfftnd)
from tensorweave.ops.indexing_ops import pad, reverse
from tensorweave.ops.dct_ops import (dct, idct, kaiser_bessel_derived_window, kaiser_window,  # noqa: F401
                                     linear_to_mel_weight_matrix, mfccs_from_log_mel_spectrograms, vorbis_window)

__all__ = ["fft", "ifft", "fft2d", "ifft2d", "fft3d", "ifft3d", "fftnd", "ifftnd", "rfft", "irfft", "rfft2d",
           "irfft2d", "rfft3d", "irfft3d", "rfftnd", "irfftnd", "fftshift", "ifftshift", "hann_window",
           "hamming_window", "frame", "overlap_and_add", "stft", "inverse_stft", "inverse_stft_window_fn", "dct", "idct", "mdct",
           "inverse_mdct", "kaiser_window", "kaiser_bessel_derived_window", "vorbis_window",
           "linear_to_mel_weight_matrix", "mfccs_from_log_mel_spectrograms"]


def _window(window_length, periodic, dtype, a, b, what):
    dtype = _dt.as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(f"{what}: dtype must be a floating type, got {dtype.name}")
    n = int(window_length)
    if n == 1:
        return A.ones([1], dtype)
    denom = n if periodic else n - 1
    w = a - b * np.cos(2.0 * np.pi * np.arange(n) / denom)
    return convert_to_tensor(w.astype(dtype.np_dtype), dtype=dtype)


def hann_window(window_length, periodic=True, dtype=_dt.float32, name=None):
    """The Hann window ``0.5 - 0.5 cos(2 pi n / N)``; ``periodic`` (the default) suits spectral analysis."""
    return _window(window_length, periodic, dtype, 0.5, 0.5, "hann_window")


def hamming_window(window_length, periodic=True, dtype=_dt.float32, name=None):
    """The Hamming window ``0.54 - 0.46 cos(2 pi n / N)``."""
    return _window(window_length, periodic, dtype, 0.54, 0.46, "hamming_window")


def frame(signal, frame_length, frame_step, pad_end=False, pad_value=0, axis=-1, name=None):
    """Slides a window of ``frame_length`` by ``frame_step`` along ``axis``: that axis becomes two,
    ``[num_frames, frame_length]``. ``pad_end`` pads with ``pad_value`` so no sample is dropped."""
    x = convert_to_tensor(signal)
    rank = x.shape.rank
    axis = int(axis) % rank
    n = x.shape[axis]
    frame_length, frame_step = int(frame_length), int(frame_step)
    if pad_end:
        frames = -(-n // frame_step)
        extra = max((frames - 1) * frame_step + frame_length - n, 0)
        if extra:
            paddings = [[0, 0]] * rank
            paddings[axis] = [0, extra]
            x = pad(x, paddings, constant_values=pad_value)
    else:
        frames = max(0, 1 + (n - frame_length) // frame_step) if n >= frame_length else 0
    idx = (frame_step * np.arange(frames)[:, None] + np.arange(frame_length)[None, :]).astype(np.int32)
    return A.gather(x, idx.reshape(frames, frame_length), axis=axis)


def overlap_and_add(signal, frame_step, name=None):
    """Sums frames ``[..., frames, frame_length]`` placed ``frame_step`` apart: the inverse of ``frame``
    up to the overlap."""
    x = convert_to_tensor(signal)
    *outer, frames, length = x.shape.as_list()
    step = int(frame_step)
    out_len = (frames - 1) * step + length if frames else 0
    ids = (step * np.arange(frames)[:, None] + np.arange(length)[None, :]).reshape(-1).astype(np.int32)
    k = len(outer)
    flat = A.reshape(x, [-1, frames * length]) if k else A.reshape(x, [1, frames * length])
    summed = A.unsorted_segment_sum(A.transpose(flat), ids, out_len)     # [out_len, batch]
    return A.reshape(A.transpose(summed), outer + [out_len])


def _default_fft_length(frame_length):
    return 1 << max(0, _math.ceil(_math.log2(frame_length)))


def stft(signals, frame_length, frame_step, fft_length=None, window_fn=hann_window, pad_end=False, name=None):
    """The short-time Fourier transform of real ``signals [..., samples]``:
    ``[..., frames, fft_length // 2 + 1]`` complex (``fft_length`` defaults to the next power of 2)."""
    x = convert_to_tensor(signals)
    fft_length = _default_fft_length(frame_length) if fft_length is None else int(fft_length)
    framed = frame(x, frame_length, frame_step, pad_end=pad_end)
    if window_fn is not None:
        framed = framed * window_fn(frame_length, dtype=x.dtype)
    return rfft(framed, [fft_length])


def inverse_stft(stfts, frame_length, frame_step, fft_length=None, window_fn=hann_window, name=None):
    """Rebuilds a signal from ``stft`` output; with ``inverse_stft_window_fn(frame_step)`` as
    ``window_fn`` it inverts ``stft`` exactly (away from the ends)."""
    z = convert_to_tensor(stfts)
    fft_length = _default_fft_length(frame_length) if fft_length is None else int(fft_length)
    frames = irfft(z, [fft_length])
    if fft_length >= frame_length:
        frames = frames[..., :frame_length]
    else:
        frames = pad(frames, [[0, 0]] * (frames.shape.rank - 1) + [[0, frame_length - fft_length]])
    if window_fn is not None:
        frames = frames * window_fn(frame_length, dtype=frames.dtype)
    return overlap_and_add(frames, frame_step)


def inverse_stft_window_fn(frame_step, forward_window_fn=hann_window, name=None):
    """A window for ``inverse_stft`` that undoes ``forward_window_fn``'s overlapping squares."""
    def fn(frame_length, dtype):
        w = forward_window_fn(frame_length, dtype=dtype)
        sq = np.square(np.asarray(w.numpy(), np.float64))
        step = int(frame_step)
        reps = -(-frame_length // step)
        padded = np.pad(sq, (0, reps * step - frame_length)).reshape(reps, step).sum(0)
        denom = np.tile(padded, reps)[:frame_length]
        return w / convert_to_tensor(denom.astype(_dt.as_dtype(dtype).np_dtype))
    return fn


# ---- the modified DCT: composites of frame / overlap_and_add and the type-4 DCT ----------------
def mdct(signals, frame_length, window_fn=vorbis_window, pad_end=False, norm=None, name=None):
    """The modified DCT of frames of ``frame_length`` (a multiple of 4) at half overlap."""
    x = convert_to_tensor(signals)
    frame_length = int(frame_length)
    if frame_length % 4:
        raise ValueError(f"mdct: frame_length must be a multiple of 4, got {frame_length}")
    framed = frame(x, frame_length, frame_length // 2, pad_end=pad_end)
    if window_fn is not None:
        framed = framed * window_fn(frame_length, dtype=x.dtype)
    else:
        framed = framed * (1.0 / np.sqrt(2.0))
    a, b, c, d = A.split(framed, 4, axis=-1)
    last = framed.shape.rank - 1
    rearranged = A.concat([-reverse(c, [last]) - d, a - reverse(b, [last])], axis=-1)
    return dct(rearranged, type=4, norm=norm)


def inverse_mdct(mdcts, window_fn=vorbis_window, norm=None, name=None):
    """Inverts ``mdct`` by overlap-adding windowed frames (exact with a power-complementary window)."""
    z = convert_to_tensor(mdcts)
    half = z.shape[-1]
    y = dct(z, type=4, norm=norm)
    if norm is None:
        y = y * (0.5 / half)
    first, second = A.split(y, 2, axis=-1)
    last = y.shape.rank - 1
    frames = A.concat([second, -reverse(second, [last]), -reverse(first, [last]), -first], axis=-1)
    if window_fn is not None:
        frames = frames * window_fn(2 * half, dtype=z.dtype)
    else:
        frames = frames * (1.0 / np.sqrt(2.0))
    return overlap_and_add(frames, half)
