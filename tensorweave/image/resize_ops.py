"""``tw.image.resize`` and friends, with TensorFlow 2's sampling rules.

Every method but nearest neighbour is separable, so a resize is two matrix products with
interpolation matrices built once per (input size, output size, method) in NumPy: ``out =
Wh @ image @ Ww^T``. Gradients then come from the products, for free and exact. Nearest
neighbour is a ``gather`` (it keeps integer dtypes, as TF does).

The matrices follow TF's kernels (half-pixel centres throughout):

* ``bilinear`` / ``bicubic`` / ``area`` without antialiasing: TF's ``ResizeBilinear`` (``in = (o + 0.5)
  * scale - 0.5``, clamped taps), ``ResizeBicubic`` (Keys' cubic with ``a = -0.5``; taps outside the
  image get weight 0 and the rest are renormalised) and the legacy ``ResizeArea`` (box averages,
  no half-pixel shift; ``area`` ignores ``antialias``, as in TF);
* ``lanczos3``/``lanczos5``/``gaussian``/``mitchellcubic``, and any method with ``antialias=True``:
  TF's ``ScaleAndTranslate`` sampling: kernel weights at ``(i + 0.5 - (o + 0.5) * scale) / ks``,
  normalised, where the kernel is stretched by ``ks = max(scale, 1)`` when antialiasing a
  downscale.

>>> import tensorweave as tw
>>> img = tw.reshape(tw.range(16.0), [4, 4, 1])
>>> tw.image.resize(img, [2, 2])[..., 0].numpy().tolist()
[[2.5, 4.5], [10.5, 12.5]]
>>> tw.image.resize(img, [2, 2], method="nearest")[..., 0].numpy().tolist()
[[5.0, 7.0], [13.0, 15.0]]
"""
import functools

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops.linalg_ops import einsum


class ResizeMethod:
    """The names of ``tw.image.resize``'s ``method`` argument."""
    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    GAUSSIAN = "gaussian"
    MITCHELLCUBIC = "mitchellcubic"


METHODS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic")


# ---- 1-D kernels of ScaleAndTranslate: (radius, function of the distance) ------------------
def _lanczos(r):
    def k(x):
        x = np.abs(x)
        with np.errstate(all="ignore"):
            v = r * np.sin(np.pi * x) * np.sin(np.pi * x / r) / (np.pi * np.pi * x * x)
        return np.where(x < 1e-6, 1.0, np.where(x > r, 0.0, v))
    return r, k


def _cubic(b, c):
    def k(x):
        x = np.abs(x)
        return np.where(x >= 2, 0.0, np.where(
            x >= 1, ((-b - 6 * c) * x ** 3 + (6 * b + 30 * c) * x ** 2 + (-12 * b - 48 * c) * x + (8 * b + 24 * c)) / 6,
            ((12 - 9 * b - 6 * c) * x ** 3 + (-18 + 12 * b + 6 * c) * x ** 2 + (6 - 2 * b)) / 6))
    return 2.0, k


def _keys(x, a=-0.5):
    x = np.abs(x)
    return np.where(x >= 2, 0.0, np.where(x >= 1, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a,
                                          ((a + 2) * x - (a + 3)) * x * x + 1))


_KERNELS = {
    "lanczos3": _lanczos(3.0), "lanczos5": _lanczos(5.0),
    "gaussian": (1.5, lambda x: np.where(np.abs(x) < 1.5, np.exp(-x * x / (2 * 0.25)), 0.0)),
    "mitchellcubic": _cubic(1 / 3, 1 / 3),
    "bicubic": (2.0, _keys),
    "bilinear": (1.0, lambda x: np.maximum(0.0, 1.0 - np.abs(x))),
    "area": (0.5, lambda x: np.where(np.abs(x) < 0.5, 1.0, np.where(np.abs(x) == 0.5, 0.5, 0.0))),
}


def _scale_and_translate(n_in, n_out, method, antialias):
    scale = n_in / n_out
    ks = max(scale, 1.0) if antialias else 1.0
    radius, kern = _KERNELS[method]
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        centre = (o + 0.5) * scale
        lo = max(int(np.ceil(centre - radius * ks - 0.5)), 0)
        hi = min(int(np.floor(centre + radius * ks - 0.5)), n_in - 1)
        if hi < lo:
            continue
        i = np.arange(lo, hi + 1)
        v = kern((i + 0.5 - centre) / ks)
        total = v.sum()
        if abs(total) > 1000 * np.finfo(np.float32).eps:
            w[o, lo:hi + 1] = v / total
    return w


def _bilinear(n_in, n_out):
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = (o + 0.5) * scale - 0.5
        f = np.floor(x)
        lo, hi = max(int(f), 0), min(int(np.ceil(x)), n_in - 1)
        frac = x - f
        w[o, lo] += 1 - frac
        w[o, hi] += frac
    return w


def _bicubic(n_in, n_out):
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = (o + 0.5) * scale - 0.5
        f = int(np.floor(x))
        # TF reads the weights from a table of 1024 steps per pixel: quantise the same way.
        t = np.floor((x - f) * 1024 + 0.5) / 1024
        taps = np.arange(f - 1, f + 3)
        v = _keys(t - np.arange(-1, 3))
        inside = (taps >= 0) & (taps < n_in)
        v = np.where(inside, v, 0.0)
        w[o, taps[inside]] = v[inside] / v.sum()
    return w


def _area(n_in, n_out):
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        a, b = o * scale, min((o + 1) * scale, n_in)
        for i in range(int(np.floor(a)), int(np.ceil(b))):
            w[o, i] = (min(i + 1, b) - max(i, a)) / scale
    return w


@functools.lru_cache(maxsize=256)
def interpolation_matrix(n_in, n_out, method, antialias=False):
    """The ``[n_out, n_in]`` matrix of one axis of a resize (float64, read-only)."""
    if method != "area" and (antialias or method in ("lanczos3", "lanczos5", "gaussian", "mitchellcubic")):
        w = _scale_and_translate(n_in, n_out, method, antialias)
    else:
        w = {"bilinear": _bilinear, "bicubic": _bicubic, "area": _area}[method](n_in, n_out)
    w.flags.writeable = False
    return w


def nearest_indices(n_in, n_out):
    scale = n_in / n_out
    return np.minimum(np.floor((np.arange(n_out) + 0.5) * scale), n_in - 1).astype(np.int32)


# ---- the public functions -------------------------------------------------------------------
def _as_images(images, what):
    x = convert_to_tensor(images)
    if x.shape.rank not in (3, 4):
        raise ValueError(f"{what}: 'images' must have rank 3 [height, width, channels] or 4 "
                         f"[batch, height, width, channels], got shape {x.shape.as_list() if x.shape.rank is not None else None}")
    return x


def _target_size(size, h, w, preserve_aspect_ratio):
    size = [int(v) for v in np.ravel(np.asarray(size.numpy() if hasattr(size, "numpy") else size))]
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"resize: 'size' must be two positive integers [new_height, new_width], got {size}")
    if preserve_aspect_ratio:
        scale = min(size[0] / h, size[1] / w)
        size = [max(int(round(h * scale)), 1), max(int(round(w * scale)), 1)]
    return size


def resize_float(images, size, method, antialias):
    """Resizes a float tensor ``[b, h, w, c]``/``[h, w, c]`` keeping its dtype (the differentiable core)."""
    x = convert_to_tensor(images)
    h, w = x.shape[-3], x.shape[-2]
    oh, ow = size
    if method == "nearest":
        x = A.gather(x, nearest_indices(h, oh), axis=x.shape.rank - 3)
        return A.gather(x, nearest_indices(w, ow), axis=x.shape.rank - 2)
    wh = convert_to_tensor(interpolation_matrix(h, oh, method, antialias).astype(x.dtype.np_dtype))
    ww = convert_to_tensor(interpolation_matrix(w, ow, method, antialias).astype(x.dtype.np_dtype))
    return einsum("pw,...hwc->...hpc", ww, einsum("oh,...hwc->...owc", wh, x))


def resize(images, size, method=ResizeMethod.BILINEAR, preserve_aspect_ratio=False, antialias=False, name=None):
    """Resizes ``images`` to ``size = [height, width]``.

    Returns float32 for every method but ``nearest``, which keeps the input dtype (TF's rule).
    """
    x = _as_images(images, "resize")
    method = str(method).lower()
    if method not in METHODS:
        raise ValueError(f"resize: unknown method {method!r}; expected one of {list(METHODS)}")
    h, w = x.shape[-3], x.shape[-2]
    if h is None or w is None:
        raise ValueError("resize needs static height and width")
    size = _target_size(size, h, w, preserve_aspect_ratio)
    if method == "nearest":
        return resize_float(x, size, method, False)
    if x.dtype is not _dt.float32:
        x = M.cast(x, _dt.float32)
    return resize_float(x, size, method, bool(antialias))


def resize_with_pad(image, target_height, target_width, method=ResizeMethod.BILINEAR, antialias=False):
    """Resizes keeping the aspect ratio, then zero-pads to ``[target_height, target_width]``."""
    from tensorweave.image.crop_ops import pad_to_bounding_box
    x = _as_images(image, "resize_with_pad")
    h, w = x.shape[-3], x.shape[-2]
    ratio = max(w / target_width, h / target_height)   # TF's float rounding, step by step
    fh, fw = h / ratio, w / ratio
    resized = resize(x, [int(np.floor(fh)), int(np.floor(fw))], method=method, antialias=antialias)
    return pad_to_bounding_box(resized, max(int(np.floor((target_height - fh) / 2)), 0),
                               max(int(np.floor((target_width - fw) / 2)), 0), target_height, target_width)
