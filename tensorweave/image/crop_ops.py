"""Flips, rotations, crops and pads of images ``[h, w, c]`` or ``[batch, h, w, c]`` (composites of
``reverse``, ``transpose``, ``slice`` and ``pad``, so differentiable and graph-ready).

>>> import tensorweave as tw
>>> img = tw.reshape(tw.range(6), [2, 3, 1])
>>> tw.image.flip_left_right(img)[..., 0].numpy().tolist()
[[2, 1, 0], [5, 4, 3]]
>>> tw.image.crop_to_bounding_box(img, 1, 1, 1, 2)[..., 0].numpy().tolist()
[[4, 5]]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import random_ops as R
from tensorweave.ops.indexing_ops import pad, reverse, slice as slice_
from tensorweave.ops.math_ops import where


def as_image(image, what, ranks=(3, 4)):
    x = convert_to_tensor(image)
    if x.shape.rank not in ranks:
        raise ValueError(f"{what}: 'image' must have rank {' or '.join(map(str, ranks))} "
                         f"([height, width, channels] or [batch, height, width, channels]), got shape "
                         f"{x.shape.as_list() if x.shape.rank is not None else 'unknown'}")
    return x


def _hw(x):
    return x.shape[-3], x.shape[-2]


def flip_left_right(image):
    """Mirrors the width axis."""
    x = as_image(image, "flip_left_right")
    return reverse(x, [x.shape.rank - 2])


def flip_up_down(image):
    """Mirrors the height axis."""
    x = as_image(image, "flip_up_down")
    return reverse(x, [x.shape.rank - 3])


def transpose(image, name=None):
    """Swaps height and width."""
    x = as_image(image, "transpose")
    perm = list(range(x.shape.rank))
    perm[-3], perm[-2] = perm[-2], perm[-3]
    return A.transpose(x, perm)


def rot90(image, k=1, name=None):
    """Rotates by ``k`` quarter turns counter-clockwise."""
    x = as_image(image, "rot90")
    k = int(k) % 4
    if k == 1:
        return flip_up_down(transpose(x))
    if k == 2:
        return flip_up_down(flip_left_right(x))
    if k == 3:
        return transpose(flip_up_down(x))
    return x


def _check_box(what, h, w, oh, ow, th, tw_, crop):
    for name, v in (("offset_height", oh), ("offset_width", ow)):
        if v < 0:
            raise ValueError(f"{what}: {name} must be >= 0, got {v}")
    for name, v in (("target_height", th), ("target_width", tw_)):
        if v <= 0:
            raise ValueError(f"{what}: {name} must be > 0, got {v}")
    if crop and (h < th + oh or w < tw_ + ow):
        raise ValueError(f"{what}: the box [{oh}:{oh + th}, {ow}:{ow + tw_}] does not fit in an image of "
                         f"height {h} and width {w}")
    if not crop and (th < h + oh or tw_ < w + ow):
        raise ValueError(f"{what}: an image of height {h} and width {w} at offset ({oh}, {ow}) does not fit "
                         f"in target {th}x{tw_}")


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """The ``target_height x target_width`` window whose top-left corner is at the offsets."""
    x = as_image(image, "crop_to_bounding_box")
    h, w = _hw(x)
    args = [int(v) for v in (offset_height, offset_width, target_height, target_width)]
    _check_box("crop_to_bounding_box", h, w, *args, crop=True)
    lead = x.shape.rank - 3
    return slice_(x, [0] * lead + [args[0], args[1], 0], [-1] * lead + [args[2], args[3], -1])


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """Zero-pads to ``target_height x target_width`` with the image's corner at the offsets."""
    x = as_image(image, "pad_to_bounding_box")
    h, w = _hw(x)
    oh, ow, th, tw_ = (int(v) for v in (offset_height, offset_width, target_height, target_width))
    _check_box("pad_to_bounding_box", h, w, oh, ow, th, tw_, crop=False)
    lead = x.shape.rank - 3
    return pad(x, [[0, 0]] * lead + [[oh, th - h - oh], [ow, tw_ - w - ow], [0, 0]])


def central_crop(image, central_fraction):
    """The centred region covering ``central_fraction`` of each side (TF's rounding)."""
    x = as_image(image, "central_crop")
    f = float(central_fraction)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"central_crop: central_fraction must be within (0, 1], got {central_fraction}")
    if f == 1.0:
        return x
    h, w = _hw(x)
    sh, sw = int((h - h * f) / 2), int((w - w * f) / 2)
    return crop_to_bounding_box(x, sh, sw, h - 2 * sh, w - 2 * sw)


def resize_with_crop_or_pad(image, target_height, target_width):
    """Crops centrally and/or zero-pads centrally to the target size."""
    x = as_image(image, "resize_with_crop_or_pad")
    h, w = _hw(x)
    th, tw_ = int(target_height), int(target_width)
    cropped = crop_to_bounding_box(x, max((h - th) // 2, 0), max((w - tw_) // 2, 0), min(th, h), min(tw_, w))
    return pad_to_bounding_box(cropped, max((th - h) // 2, 0), max((tw_ - w) // 2, 0), th, tw_)


def random_crop(value, size, seed=None, name=None):
    """A window of shape ``size`` at a uniformly random offset of ``value`` (any rank)."""
    x = convert_to_tensor(value)
    size = [int(s) for s in np.ravel(size)]
    shape = x.shape.as_list()
    if len(size) != len(shape) or any(s > d for s, d in zip(size, shape)):
        raise ValueError(f"random_crop: size {size} must have one entry per dimension of shape {shape}, "
                         "each at most that dimension")
    limit = np.asarray([d - s + 1 for d, s in zip(shape, size)], np.int32)
    offset = R.uniform([len(size)], 0, 2 ** 30, dtype=_dt.int32, seed=seed) % A.constant(limit)
    return slice_(x, offset, size)


def _random_flip(image, axis_from_end, seed, what):
    x = as_image(image, what)
    if x.shape.rank == 3:
        flip = R.uniform([], seed=seed) < 0.5
        return where(flip, reverse(x, [3 - axis_from_end]), x)
    flips = A.reshape(R.uniform([x.shape[0] if x.shape[0] is not None else A.shape(x)[0]], seed=seed) < 0.5,
                      [-1, 1, 1, 1])
    return where(flips, reverse(x, [4 - axis_from_end]), x)


def random_flip_left_right(image, seed=None):
    """Mirrors each image left-right with probability 1/2."""
    return _random_flip(image, 2, seed, "random_flip_left_right")


def random_flip_up_down(image, seed=None):
    """Mirrors each image top-bottom with probability 1/2."""
    return _random_flip(image, 3, seed, "random_flip_up_down")
