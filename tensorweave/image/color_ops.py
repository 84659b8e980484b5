"""Colour and intensity: dtype conversion, brightness/contrast/gamma/saturation/hue, colour spaces,
standardisation and image statistics, as compositions of elementwise ops (so differentiable).

Integer images are worked on as float32 in [0, 1] and converted back with saturation, as TF does.

>>> import tensorweave as tw
>>> rgb = tw.constant([[[1.0, 0.0, 0.0]]])
>>> tw.image.rgb_to_hsv(rgb).numpy().tolist()
[[[0.0, 1.0, 1.0]]]
>>> tw.image.convert_image_dtype(tw.constant([[[255]]], tw.uint8), tw.float32).numpy().tolist()
[[[1.0]]]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.image.crop_ops import as_image
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import random_ops as R
from tensorweave.ops import reduce_ops as Rd
from tensorweave.ops.linalg_ops import tensordot


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """Converts between image dtypes, rescaling: floats live in [0, 1], integers in [0, MAX]."""
    x = convert_to_tensor(image)
    dtype = _dt.as_dtype(dtype)
    src = x.dtype
    if not (src.is_floating or src.is_integer) or not (dtype.is_floating or dtype.is_integer):
        raise TypeError(f"convert_image_dtype: expected integer or float images and dtypes, got {src.name} "
                        f"-> {dtype.name}")
    if src is dtype:
        return x
    if src.is_integer and dtype.is_integer:
        s_bits, d_bits = src.size * 8 - (0 if src.is_unsigned else 1), dtype.size * 8 - (0 if dtype.is_unsigned else 1)
        if s_bits > d_bits:
            return M.cast(M.floordiv(x, M.cast(2 ** (s_bits - d_bits), src)), dtype)
        return M.cast(x, dtype) * (2 ** (d_bits - s_bits))
    if src.is_integer:
        return M.cast(x, dtype) * (1.0 / src.max)
    if dtype.is_floating:
        return M.cast(x, dtype)
    scaled = x * (dtype.max + 0.5)
    if saturate:
        scaled = M.clip_by_value(scaled, float(dtype.min), float(dtype.max))
    return M.cast(scaled, dtype)


def _as_float(image, what):
    x = convert_to_tensor(image)
    if not (x.dtype.is_floating or x.dtype.is_integer):
        raise TypeError(f"{what}: expected an integer or float image, got {x.dtype.name}")
    return x, x.dtype, (x if x.dtype.is_floating else convert_image_dtype(x, _dt.float32))


def _scalar(v, dtype):
    """``v`` as ``dtype``: Python numbers convert directly (no float32 rounding first), tensors cast."""
    return M.cast(v, dtype) if hasattr(v, "dtype") else convert_to_tensor(v, dtype=dtype)


def _back(y, dtype):
    return y if dtype.is_floating else convert_image_dtype(y, dtype, saturate=True)


def adjust_brightness(image, delta):
    """Adds ``delta`` to every channel (of the [0, 1] float form for integer images)."""
    x, d, f = _as_float(image, "adjust_brightness")
    return _back(f + _scalar(delta, f.dtype), d)


def adjust_contrast(images, contrast_factor):
    """Moves each channel away from its per-image mean: ``(x - mean) * factor + mean``."""
    x, d, f = _as_float(images, "adjust_contrast")
    mean = Rd.reduce_mean(f, axis=[-3, -2], keepdims=True)
    return _back((f - mean) * _scalar(contrast_factor, f.dtype) + mean, d)


def adjust_gamma(image, gamma=1, gain=1):
    """``gain * image ** gamma`` (on the [0, 1] form for integer images)."""
    x, d, f = _as_float(image, "adjust_gamma")
    if float(gamma) < 0:
        raise ValueError(f"adjust_gamma: gamma must be non-negative, got {gamma}")
    return _back(gain * f ** gamma, d)


_GRAY = np.array([0.2989, 0.5870, 0.1140])


def rgb_to_grayscale(images, name=None):
    """Luma ``0.2989 R + 0.5870 G + 0.1140 B``, keeping a channel axis of size 1."""
    x, d, f = _as_float(images, "rgb_to_grayscale")
    g = Rd.reduce_sum(f * A.constant(_GRAY.astype(f.dtype.np_dtype)), axis=-1, keepdims=True)
    return _back(g, d)


def grayscale_to_rgb(images, name=None):
    """Repeats the single channel three times."""
    from tensorweave.ops.indexing_ops import tile
    x = convert_to_tensor(images)
    return tile(x, [1] * (x.shape.rank - 1) + [3])


def rgb_to_hsv(images, name=None):
    """RGB in [0, 1] to hue, saturation, value (hue in [0, 1))."""
    x = convert_to_tensor(images)
    r, g, b = A.unstack(x, axis=-1)
    v = M.maximum(M.maximum(r, g), b)
    mn = M.minimum(M.minimum(r, g), b)
    rng = v - mn
    s = M.where(v > 0, M.div_no_nan(rng, v), A.zeros_like(v))
    safe = M.where(rng > 0, rng, A.ones_like(rng))
    h = M.where(M.equal(v, r), (g - b) / safe,
                M.where(M.equal(v, g), 2.0 + (b - r) / safe, 4.0 + (r - g) / safe))
    h = M.where(rng > 0, h / 6.0, A.zeros_like(h))
    h = M.where(h < 0, h + 1.0, h)
    return A.stack([h, s, v], axis=-1)


def hsv_to_rgb(images, name=None):
    """Hue, saturation, value to RGB."""
    x = convert_to_tensor(images)
    h, s, v = A.unstack(x, axis=-1)
    h6 = (h - M.floor(h)) * 6.0

    def channel(n):
        k = M.floormod(h6 + n, 6.0)
        return v - v * s * M.maximum(M.minimum(M.minimum(k, 4.0 - k), A.ones_like(k)), A.zeros_like(k))
    return A.stack([channel(5.0), channel(3.0), channel(1.0)], axis=-1)


def _matrix(images, m, what):
    x = convert_to_tensor(images)
    if x.shape[-1] != 3:
        raise ValueError(f"{what}: the last dimension must be 3 (channels), got shape {x.shape.as_list()}")
    return tensordot(x, A.constant(np.asarray(m, x.dtype.np_dtype)), [[x.shape.rank - 1], [0]])


_YIQ = [[0.299, 0.59590059, 0.2115], [0.587, -0.27455667, -0.52273617], [0.114, -0.32134392, 0.31119955]]
_YIQ_INV = [[1, 1, 1], [0.95598634, -0.27201283, -1.10674021], [0.6208248, -0.64720424, 1.70423049]]
_YUV_INV = [[1, 1, 1], [0, -0.394642334, 2.03206185], [1.13988303, -0.58062185, 0]]
_YUV = [[0.299, -0.14714119, 0.61497538], [0.587, -0.28886916, -0.51496512], [0.114, 0.43601035, -0.10001026]]


def rgb_to_yiq(images):
    """RGB to the YIQ colour space."""
    return _matrix(images, _YIQ, "rgb_to_yiq")


def yiq_to_rgb(images):
    """YIQ to RGB."""
    return _matrix(images, _YIQ_INV, "yiq_to_rgb")


def rgb_to_yuv(images):
    """RGB to the YUV colour space."""
    return _matrix(images, _YUV, "rgb_to_yuv")


def yuv_to_rgb(images):
    """YUV to RGB."""
    return _matrix(images, _YUV_INV, "yuv_to_rgb")


def adjust_saturation(image, saturation_factor, name=None):
    """Scales the HSV saturation by ``saturation_factor`` (clipped to [0, 1])."""
    x, d, f = _as_float(image, "adjust_saturation")
    h, s, v = A.unstack(rgb_to_hsv(f), axis=-1)
    s = M.clip_by_value(s * _scalar(saturation_factor, f.dtype), 0.0, 1.0)
    return _back(hsv_to_rgb(A.stack([h, s, v], axis=-1)), d)


def adjust_hue(image, delta, name=None):
    """Rotates the HSV hue by ``delta`` (in [-1, 1], a fraction of a turn)."""
    x, d, f = _as_float(image, "adjust_hue")
    if isinstance(delta, (int, float)) and not -1.0 <= delta <= 1.0:
        raise ValueError(f"adjust_hue: delta must be in [-1, 1], got {delta}")
    h, s, v = A.unstack(rgb_to_hsv(f), axis=-1)
    h = M.floormod(h + _scalar(delta, h.dtype), 1.0)
    return _back(hsv_to_rgb(A.stack([h, s, v], axis=-1)), d)


def per_image_standardization(image):
    """``(x - mean) / max(stddev, 1/sqrt(N))`` per image, N its number of elements; float32 out."""
    x = as_image(image, "per_image_standardization")
    f = M.cast(x, _dt.float32) if not x.dtype.is_floating else x
    axes = [-3, -2, -1]
    n = int(np.prod(x.shape.as_list()[-3:]))
    mean = Rd.reduce_mean(f, axis=axes, keepdims=True)
    std = M.sqrt(Rd.reduce_mean(M.square(f - mean), axis=axes, keepdims=True))
    return (f - mean) / M.maximum(std, 1.0 / np.sqrt(n))


def image_gradients(image):
    """``(dy, dx)``: forward differences along height and width, zero in the last row/column."""
    from tensorweave.ops.indexing_ops import pad
    x = as_image(image, "image_gradients", ranks=(4,))
    dy = pad(x[:, 1:] - x[:, :-1], [[0, 0], [0, 1], [0, 0], [0, 0]])
    dx = pad(x[:, :, 1:] - x[:, :, :-1], [[0, 0], [0, 0], [0, 1], [0, 0]])
    return dy, dx


def total_variation(images, name=None):
    """The sum of absolute differences of neighbouring pixels (per image for a batch)."""
    x = as_image(images, "total_variation")
    axes = [-3, -2, -1]
    if x.shape.rank == 3:
        dh, dw = x[1:] - x[:-1], x[:, 1:] - x[:, :-1]
    else:
        dh, dw = x[:, 1:] - x[:, :-1], x[:, :, 1:] - x[:, :, :-1]
    return Rd.reduce_sum(M.abs(dh), axis=axes) + Rd.reduce_sum(M.abs(dw), axis=axes)


def psnr(a, b, max_val, name=None):
    """Peak signal-to-noise ratio in dB per image: ``10 log10(max_val^2 / mse)``."""
    x, y = convert_to_tensor(a), convert_to_tensor(b)
    x = convert_image_dtype(x, _dt.float32) if not x.dtype.is_floating else x
    y = convert_image_dtype(y, _dt.float32) if not y.dtype.is_floating else y
    mse = Rd.reduce_mean(M.squared_difference(x, y), axis=[-3, -2, -1])
    mv = M.cast(convert_to_tensor(max_val), x.dtype)
    return 20.0 * M.log(mv) / np.log(10.0) - 10.0 / np.log(10.0) * M.log(mse)


def _uniform(lo, hi, seed):
    return R.uniform([], lo, hi, seed=seed)


def random_brightness(image, max_delta, seed=None):
    """``adjust_brightness`` by a delta drawn from [-max_delta, max_delta)."""
    if max_delta < 0:
        raise ValueError(f"random_brightness: max_delta must be non-negative, got {max_delta}")
    return adjust_brightness(image, _uniform(-max_delta, max_delta, seed))


def random_contrast(image, lower, upper, seed=None):
    """``adjust_contrast`` by a factor drawn from [lower, upper)."""
    if not 0 <= lower < upper:
        raise ValueError(f"random_contrast: need 0 <= lower < upper, got {lower}, {upper}")
    return adjust_contrast(image, _uniform(lower, upper, seed))


def random_saturation(image, lower, upper, seed=None):
    """``adjust_saturation`` by a factor drawn from [lower, upper)."""
    if not 0 <= lower < upper:
        raise ValueError(f"random_saturation: need 0 <= lower < upper, got {lower}, {upper}")
    return adjust_saturation(image, _uniform(lower, upper, seed))


def random_hue(image, max_delta, seed=None):
    """``adjust_hue`` by a delta drawn from [-max_delta, max_delta) (max_delta <= 0.5)."""
    if not 0 <= max_delta <= 0.5:
        raise ValueError(f"random_hue: max_delta must be in [0, 0.5], got {max_delta}")
    return adjust_hue(image, _uniform(-max_delta, max_delta, seed))
