"""TF1's ``tf.image``: ``tw.image`` plus TF1's resize functions with TF1's sampling rules
(``resize_images``, ``resize_bilinear``, ``resize_nearest_neighbor``, ``resize_bicubic``,
``resize_area``: ``align_corners`` and the legacy, non-half-pixel grid by default), integer
``ResizeMethod`` values, and the TF1 spellings ``resize_image_with_crop_or_pad``,
``resize_image_with_pad``, ``crop_and_resize(box_ind=)``, ``extract_image_patches``...

TF1's legacy grid maps output pixel ``o`` to input ``o * in / out`` (``align_corners``:
``o * (in - 1) / (out - 1)``; ``half_pixel_centers``: TF2's ``(o + 0.5) * in / out - 0.5``).
Bilinear and bicubic are separable: a resize is two products with interpolation matrices, so
the gradients are exact; legacy bicubic is Keys' cubic with ``a = -0.75`` on edge-clamped taps.

>>> import tensorweave.compat.v1 as tf
>>> img = tf.reshape(tf.range(16.0), [1, 4, 4, 1])
>>> tf.image.resize_bilinear(img, [2, 2])[0, :, :, 0].numpy().tolist()
[[0.0, 2.0], [8.0, 10.0]]
>>> tf.image.resize_images(img, [3, 3], align_corners=True)[0, :, :, 0].numpy().tolist()
[[0.0, 1.5, 3.0], [6.0, 7.5, 9.0], [12.0, 13.5, 15.0]]
"""
import functools

import numpy as np

from tensorweave.image import *  # noqa: F401,F403 - TF1 code uses the TF2 names too
from tensorweave import image as _image
from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as _A
from tensorweave.ops import math_ops as _M
from tensorweave.ops.linalg_ops import einsum as _einsum


class ResizeMethod:
    """TF1's resize methods (ints; ``tw.image.ResizeMethod`` has TF2's names)."""
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


_METHOD_NAMES = {0: "bilinear", 1: "nearest", 2: "bicubic", 3: "area"}


def _position(o, n_in, n_out, align_corners, half_pixel):
    if align_corners:
        return o * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    if half_pixel:
        return (o + 0.5) * (n_in / n_out) - 0.5
    return o * (n_in / n_out)


@functools.lru_cache(maxsize=256)
def _matrix(n_in, n_out, method, align_corners, half_pixel):
    """The ``[n_out, n_in]`` interpolation matrix of one axis (float64)."""
    if half_pixel and not align_corners and method in ("bilinear", "bicubic"):
        return _image.resize_ops.interpolation_matrix(n_in, n_out, method)   # TF2's grid: tw.image's matrices
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = _position(o, n_in, n_out, align_corners, half_pixel)
        f = int(np.floor(x))
        if method == "bilinear":
            frac = x - f
            w[o, min(max(f, 0), n_in - 1)] += 1 - frac
            w[o, min(max(f + 1, 0), n_in - 1)] += frac
        elif method == "bicubic":
            # TF's legacy kernel: Keys' cubic with a = -0.75, weights from a 1024-step table, taps clamped
            t = np.floor((x - f) * 1024 + 0.5) / 1024
            a = -0.75
            for k, d in zip(range(f - 1, f + 3), (1 + t, t, 1 - t, 2 - t)):
                d = abs(d)
                v = ((a + 2) * d - (a + 3)) * d * d + 1 if d <= 1 else ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
                w[o, min(max(k, 0), n_in - 1)] += v
        elif method == "area":
            scale = (n_in - 1) / (n_out - 1) if align_corners and n_out > 1 else n_in / n_out
            lo, hi = o * scale, min((o + 1) * scale, n_in)
            for i in range(int(np.floor(lo)), int(np.ceil(hi))):
                w[o, min(i, n_in - 1)] += (min(i + 1, hi) - max(i, lo)) / scale
    w.flags.writeable = False
    return w


def _nearest(n_in, n_out, align_corners, half_pixel):
    o = np.arange(n_out)
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        idx = np.floor(o * scale + 0.5)           # TF rounds half away from zero (positions are >= 0)
    elif half_pixel:
        idx = np.floor((o + 0.5) * (n_in / n_out))
    else:
        idx = np.floor(o * (n_in / n_out))
    return np.minimum(idx, n_in - 1).astype(np.int32)


def _size(size):
    value = size.numpy() if hasattr(size, "numpy") else size
    from tensorweave.core.graph import constant_value
    if hasattr(size, "op") and not hasattr(size, "numpy"):
        value = constant_value(size)
        if value is None:
            raise ValueError("resize: size must be known when the graph is built")
    out = [int(v) for v in np.ravel(np.asarray(value))]
    if len(out) != 2 or min(out) <= 0:
        raise ValueError(f"resize: 'size' must be two positive integers [new_height, new_width], got {out}")
    return out


def _resize(images, size, method, align_corners, half_pixel, what, keep_dtype=False):
    if align_corners and half_pixel:
        raise ValueError(f"{what}: if half_pixel_centers is True, align_corners must be False")
    x = convert_to_tensor(images)
    if x.shape.rank not in (3, 4):
        raise ValueError(f"{what}: 'images' must have rank 3 or 4, got shape {x.shape}")
    h, w = x.shape[-3], x.shape[-2]
    if h is None or w is None:
        raise ValueError(f"{what}: needs static height and width")
    oh, ow = _size(size)
    if method == "nearest":
        x = _A.gather(x, _nearest(h, oh, align_corners, half_pixel), axis=x.shape.rank - 3)
        return _A.gather(x, _nearest(w, ow, align_corners, half_pixel), axis=x.shape.rank - 2)
    if x.dtype is not _dt.float32 and not (keep_dtype and x.dtype.is_floating):
        x = _M.cast(x, _dt.float32)
    wh = convert_to_tensor(_matrix(h, oh, method, align_corners, half_pixel).astype(x.dtype.np_dtype))
    ww = convert_to_tensor(_matrix(w, ow, method, align_corners, half_pixel).astype(x.dtype.np_dtype))
    return _einsum("pw,...hwc->...hpc", ww, _einsum("oh,...hwc->...owc", wh, x))


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF1's bilinear resize (float32 out)."""
    return _resize(images, size, "bilinear", align_corners, half_pixel_centers, "resize_bilinear")


def resize_nearest_neighbor(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF1's nearest-neighbour resize (keeps the dtype)."""
    return _resize(images, size, "nearest", align_corners, half_pixel_centers, "resize_nearest_neighbor")


def resize_bicubic(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF1's bicubic resize (float32 out)."""
    return _resize(images, size, "bicubic", align_corners, half_pixel_centers, "resize_bicubic")


def resize_area(images, size, align_corners=False, name=None):
    """TF1's area (box-average) resize (float32 out)."""
    return _resize(images, size, "area", align_corners, False, "resize_area")


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False, preserve_aspect_ratio=False,
                  name=None):
    """TF1's ``resize_images``: ``method`` an int of :class:`ResizeMethod` (or a TF2 name), the legacy
    grid; float32 out except nearest neighbour; an image already of the target size is returned as is."""
    name_ = _METHOD_NAMES.get(method, str(method).lower() if isinstance(method, str) else None)
    if name_ not in ("bilinear", "nearest", "bicubic", "area"):
        raise ValueError(f"resize_images: unknown method {method!r}; use tf.image.ResizeMethod")
    x = convert_to_tensor(images)
    if x.shape.rank not in (3, 4):
        raise ValueError(f"resize_images: 'images' must have rank 3 or 4, got shape {x.shape}")
    h, w = x.shape[-3], x.shape[-2]
    oh, ow = _size(size)
    if preserve_aspect_ratio:
        scale = min(oh / h, ow / w)
        oh, ow = max(int(h * scale), 1), max(int(w * scale), 1)
    if (oh, ow) == (h, w):
        return x
    return _resize(x, [oh, ow], name_, align_corners, False, "resize_images")


def resize_image_with_pad(image, target_height, target_width, method=ResizeMethod.BILINEAR, align_corners=False):
    """Resizes keeping the aspect ratio (TF1's :func:`resize_images`), then zero-pads to the target."""
    x = convert_to_tensor(image)
    h, w = x.shape[-3], x.shape[-2]
    ratio = max(w / target_width, h / target_height)
    fh, fw = h / ratio, w / ratio
    resized = resize_images(x, [int(np.floor(fh)), int(np.floor(fw))], method, align_corners)
    return _image.pad_to_bounding_box(resized, max(int(np.floor((target_height - fh) / 2)), 0),
                                      max(int(np.floor((target_width - fw) / 2)), 0), target_height, target_width)


resize_image_with_crop_or_pad = _image.resize_with_crop_or_pad
transpose_image = _image.transpose


def crop_and_resize(image, boxes, box_ind=None, crop_size=None, method="bilinear", extrapolation_value=0,
                    name=None, box_indices=None):
    """``tw.image.crop_and_resize`` with TF1's ``box_ind`` spelling."""
    if (box_ind is None) == (box_indices is None):
        raise ValueError("crop_and_resize: give exactly one of box_ind and box_indices")
    return _image.crop_and_resize(image, boxes, box_ind if box_ind is not None else box_indices, crop_size,
                                  method=method, extrapolation_value=float(extrapolation_value), name=name)


# TF's default box colours, in order: yellow, blue, red, lime, purple, olive, maroon, navy, aqua, fuchsia
_DEFAULT_COLORS = [[1, 1, 0, 1], [0, 0, 1, 1], [1, 0, 0, 1], [0, 1, 0, 1], [0.5, 0, 0.5, 1], [0.5, 0.5, 0, 1],
                   [0.5, 0, 0, 1], [0, 0, 0.5, 1], [0, 1, 1, 1], [1, 0, 1, 1]]


def draw_bounding_boxes(images, boxes, name=None, colors=None):
    """``tw.image.draw_bounding_boxes`` with TF1's argument order; without ``colors``, TF's default
    colour table (the first channel set to 1 for one-channel images)."""
    if colors is None:
        colors = np.array(_DEFAULT_COLORS, np.float32)
        if convert_to_tensor(images).shape.as_list()[-1] == 1:
            colors[:, 0] = 1
    return _image.draw_bounding_boxes(images, boxes, colors, name=name)


def sample_distorted_bounding_box(image_size, bounding_boxes, seed=None, seed2=None, min_object_covered=0.1,
                                  aspect_ratio_range=None, area_range=None, max_attempts=None,
                                  use_image_if_no_bounding_boxes=None, name=None):
    """TF1's signature of ``tw.image.sample_distorted_bounding_box`` (``seed2`` joins the seed)."""
    return _image.sample_distorted_bounding_box(
        image_size, bounding_boxes, seed=(seed or 0) * 1000003 + (seed2 or 0), min_object_covered=min_object_covered,
        aspect_ratio_range=aspect_ratio_range or (0.75, 1.33), area_range=area_range or (0.05, 1.0),
        max_attempts=max_attempts or 100, use_image_if_no_bounding_boxes=bool(use_image_if_no_bounding_boxes),
        name=name)


def extract_image_patches(images, ksizes=None, strides=None, rates=None, padding=None, name=None, sizes=None):
    """TF1's name of ``extract_patches`` (``ksizes`` for ``sizes``)."""
    if (ksizes is None) == (sizes is None):
        raise ValueError("extract_image_patches: give exactly one of ksizes and sizes")
    return _image.extract_patches(images, ksizes if ksizes is not None else sizes, strides, rates, padding, name=name)
