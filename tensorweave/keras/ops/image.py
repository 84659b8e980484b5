"""``keras.ops.image``: resizing, projective transforms, colour conversion, padding/cropping and
patches, for batches (or single images) in channels-last layout by default.

``resize`` follows TensorFlow's half-pixel-centre sampling (``tf.image.resize``); ``affine_transform``
follows ``ImageProjectiveTransformV3`` (the op behind Keras' random-augmentation layers).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.ops.image.resize(np.ones((1, 4, 4, 3), "float32"), (2, 2)).shape
TensorShape([1, 2, 2, 3])
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.ops._dtypes import cast_to, floatx, is_float, to_tensor
from tensorweave.keras.ops._symbolic import export


def _channels_first(data_format):
    from tensorweave.keras.ops.nn import _channels_first as cf
    return cf(data_format)


def _as_batch(images, data_format):
    """(NHWC tensor, was_single, channels_first)."""
    x = to_tensor(images)
    if x.shape.rank not in (3, 4):
        raise ValueError(f"expected images of rank 3 (one image) or 4 (a batch), got shape {x.shape}")
    single = x.shape.rank == 3
    if single:
        x = tw.expand_dims(x, 0)
    cf = _channels_first(data_format)
    if cf:
        x = tw.transpose(x, [0, 2, 3, 1])
    return x, single, cf


def _restore(x, single, cf):
    if cf:
        x = tw.transpose(x, [0, 3, 1, 2])
    return tw.squeeze(x, 0) if single else x


def _resize_axis(x, axis, out_n, method):
    n = x.shape.as_list()[axis]
    if n == out_n:
        return x
    scale = n / out_n
    dst = np.arange(out_n, dtype=np.float64)
    if method == "nearest":
        src = np.minimum(np.floor((dst + 0.5) * scale), n - 1).astype(np.int32)
        return tw.gather(x, tw.constant(src), axis=axis)
    src = np.clip((dst + 0.5) * scale - 0.5, 0, n - 1)
    lo = np.floor(src).astype(np.int32)
    hi = np.minimum(lo + 1, n - 1).astype(np.int32)
    frac = (src - lo).astype(x.dtype.np_dtype)
    shape = [1] * x.shape.rank
    shape[axis] = out_n
    w = tw.reshape(tw.constant(frac), shape)
    a = tw.gather(x, tw.constant(lo), axis=axis)
    b = tw.gather(x, tw.constant(hi), axis=axis)
    return a + (b - a) * w


def resize(images, size, interpolation="bilinear", antialias=False, crop_to_aspect_ratio=False,
           pad_to_aspect_ratio=False, fill_mode="constant", fill_value=0.0, data_format=None):
    if interpolation not in ("bilinear", "nearest"):
        raise ValueError(f"resize: interpolation must be 'bilinear' or 'nearest' in tensorweave, got "
                         f"{interpolation!r}")
    if antialias:
        raise ValueError("resize: antialias=True is not available in tensorweave; pass antialias=False")
    x, single, cf = _as_batch(images, data_format)
    in_dtype = x.dtype
    if not is_float(in_dtype):
        x = tw.cast(x, floatx())
    h, w = int(size[0]), int(size[1])
    ih, iw = x.shape.as_list()[1:3]
    if crop_to_aspect_ratio:
        ch = min(ih, int(round(iw * h / w)))
        cw = min(iw, int(round(ih * w / h)))
        top, left = (ih - ch) // 2, (iw - cw) // 2
        x = x[:, top:top + ch, left:left + cw, :]
    elif pad_to_aspect_ratio:
        ph = max(ih, int(round(iw * h / w)))
        pw = max(iw, int(round(ih * w / h)))
        top, left = (ph - ih) // 2, (pw - iw) // 2
        x = tw.pad(x, [[0, 0], [top, ph - ih - top], [left, pw - iw - left], [0, 0]],
                   constant_values=tw.cast(fill_value, x.dtype))
    x = _resize_axis(_resize_axis(x, 1, h, interpolation), 2, w, interpolation)
    if not is_float(in_dtype):
        x = tw.cast(tw.round(x), in_dtype) if interpolation == "bilinear" else tw.cast(x, in_dtype)
    return _restore(x, single, cf)


def _map_coord(c, n, mode):
    if mode == "nearest":
        return tw.clip_by_value(c, 0.0, float(n - 1))
    if mode == "reflect":
        if n <= 1:
            return tw.zeros_like(c)
        sz2 = 2.0 * n
        m = c - sz2 * tw.floor(c / sz2)            # into [0, 2n)
        m = tw.where(tw.greater_equal(m, float(n)), sz2 - m - 1, m)
        return tw.clip_by_value(m, 0.0, float(n - 1))
    if mode == "wrap":  # TensorFlow's rule: shifts by whole image lengths, counted in (n - 1) steps
        if n <= 1:
            return tw.zeros_like(c)
        sz = float(n - 1)

        def trunc(v):
            return tw.where(tw.less(v, 0.0), tw.ceil(v), tw.floor(v))
        m = tw.where(tw.less(c, 0.0), c + n * (trunc(-c / sz) + 1),
                     tw.where(tw.greater(c, sz), c - n * trunc(c / sz), c))
        return tw.clip_by_value(m, 0.0, sz)
    if mode == "mirror":
        if n <= 1:
            return tw.zeros_like(c)
        sz2 = 2.0 * (n - 1)
        m = c - sz2 * tw.floor(c / sz2)
        return tw.where(tw.greater(m, float(n - 1)), sz2 - m, m)
    return c  # constant: out-of-range reads give fill_value


def _read(x, bidx, yi, xi, h, w, fill):
    """x[b, yi, xi, :] with fill outside the image (yi, xi: int32 [B, H, W])."""
    inside = tw.logical_and(tw.logical_and(tw.greater_equal(yi, 0), tw.less(yi, h)),
                            tw.logical_and(tw.greater_equal(xi, 0), tw.less(xi, w)))
    idx = tw.stack([bidx, tw.clip_by_value(yi, 0, h - 1), tw.clip_by_value(xi, 0, w - 1)], -1)
    vals = tw.gather_nd(x, idx)
    return tw.where(tw.expand_dims(inside, -1), vals, tw.zeros_like(vals) + tw.cast(fill, x.dtype))


def affine_transform(images, transform, interpolation="bilinear", fill_mode="constant", fill_value=0,
                     data_format=None):
    """Samples each output pixel ``(x, y)`` at ``((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k)``,
    ``k = c0 x + c1 y + 1``, for ``transform = [a0, a1, a2, b0, b1, b2, c0, c1]`` per image."""
    if interpolation not in ("bilinear", "nearest"):
        raise ValueError(f"affine_transform: interpolation must be 'bilinear' or 'nearest', got {interpolation!r}")
    if fill_mode not in ("constant", "nearest", "reflect", "wrap", "mirror"):
        raise ValueError(f"affine_transform: fill_mode must be one of constant, nearest, reflect, wrap, mirror; "
                         f"got {fill_mode!r}")
    x, single, cf = _as_batch(images, data_format)
    in_dtype = x.dtype
    if not is_float(in_dtype):
        x = tw.cast(x, floatx())
    t = cast_to(transform, "float32")
    if t.shape.rank == 1:
        t = tw.expand_dims(t, 0)
    b = tw.shape(x)[0]
    h, w = x.shape.as_list()[1:3]
    t = t + tw.zeros(tw.stack([b, 8]), dtype=tw.float32)
    gy, gx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    gx, gy = tw.constant(gx)[None], tw.constant(gy)[None]

    def coef(i):
        return tw.reshape(t[:, i], [-1, 1, 1])
    k = coef(6) * gx + coef(7) * gy + 1.0
    sx = (coef(0) * gx + coef(1) * gy + coef(2)) / k
    sy = (coef(3) * gx + coef(4) * gy + coef(5)) / k
    sx, sy = _map_coord(sx, w, fill_mode), _map_coord(sy, h, fill_mode)
    bidx = tw.reshape(tw.range(b), [-1, 1, 1]) + tw.zeros([1, h, w], dtype=tw.int32)
    fill = float(fill_value)
    if interpolation == "nearest":
        # rounds halves up, as TensorFlow's kernel (tw.round would round them to even)
        out = _read(x, bidx, tw.cast(tw.floor(sy + 0.5), tw.int32), tw.cast(tw.floor(sx + 0.5), tw.int32), h, w,
                    fill)
    else:
        y0, x0 = tw.floor(sy), tw.floor(sx)
        wy, wx = tw.expand_dims(sy - y0, -1), tw.expand_dims(sx - x0, -1)
        y0i, x0i = tw.cast(y0, tw.int32), tw.cast(x0, tw.int32)
        v00 = _read(x, bidx, y0i, x0i, h, w, fill)
        v01 = _read(x, bidx, y0i, x0i + 1, h, w, fill)
        v10 = _read(x, bidx, y0i + 1, x0i, h, w, fill)
        v11 = _read(x, bidx, y0i + 1, x0i + 1, h, w, fill)
        wy, wx = tw.cast(wy, x.dtype), tw.cast(wx, x.dtype)
        top = v00 + (v01 - v00) * wx
        bot = v10 + (v11 - v10) * wx
        out = top + (bot - top) * wy
    if not is_float(in_dtype):
        out = tw.cast(tw.round(out), in_dtype)
    return _restore(out, single, cf)


def rgb_to_grayscale(images, data_format=None):
    x, single, cf = _as_batch(images, data_format)
    in_dtype = x.dtype
    xf = tw.cast(x, floatx()) if not is_float(in_dtype) else x
    gray = tw.reduce_sum(xf * tw.constant(np.array([0.2989, 0.587, 0.114], xf.dtype.np_dtype)), -1, keepdims=True)
    if not is_float(in_dtype):
        gray = tw.cast(gray, in_dtype)
    return _restore(gray, single, cf)


def rgb_to_hsv(images, data_format=None):
    x, single, cf = _as_batch(images, data_format)
    return _restore(tw.image.rgb_to_hsv(x), single, cf)


def hsv_to_rgb(images, data_format=None):
    x, single, cf = _as_batch(images, data_format)
    return _restore(tw.image.hsv_to_rgb(x), single, cf)


def pad_images(images, top_padding=None, left_padding=None, bottom_padding=None, right_padding=None,
               target_height=None, target_width=None, data_format=None):
    x, single, cf = _as_batch(images, data_format)
    h, w = x.shape.as_list()[1:3]
    top = top_padding if top_padding is not None else (target_height - h - bottom_padding
                                                      if bottom_padding is not None else 0)
    left = left_padding if left_padding is not None else (target_width - w - right_padding
                                                         if right_padding is not None else 0)
    bottom = bottom_padding if bottom_padding is not None else target_height - h - top
    right = right_padding if right_padding is not None else target_width - w - left
    if min(top, left, bottom, right) < 0:
        raise ValueError(f"pad_images: the paddings must be non-negative, got top={top}, left={left}, "
                         f"bottom={bottom}, right={right} for images of size {h}x{w}")
    out = tw.pad(x, [[0, 0], [int(top), int(bottom)], [int(left), int(right)], [0, 0]])
    return _restore(out, single, cf)


def crop_images(images, top_cropping=None, left_cropping=None, bottom_cropping=None, right_cropping=None,
                target_height=None, target_width=None, data_format=None):
    x, single, cf = _as_batch(images, data_format)
    h, w = x.shape.as_list()[1:3]
    top = top_cropping if top_cropping is not None else (h - target_height - bottom_cropping
                                                         if bottom_cropping is not None else 0)
    left = left_cropping if left_cropping is not None else (w - target_width - right_cropping
                                                            if right_cropping is not None else 0)
    th = target_height if target_height is not None else h - top - bottom_cropping
    tw_ = target_width if target_width is not None else w - left - right_cropping
    if top < 0 or left < 0 or th <= 0 or tw_ <= 0 or top + th > h or left + tw_ > w:
        raise ValueError(f"crop_images: the crop (top={top}, left={left}, height={th}, width={tw_}) does not fit "
                         f"images of size {h}x{w}")
    out = x[:, int(top):int(top + th), int(left):int(left + tw_), :]
    return _restore(out, single, cf)


def extract_patches(images, size, strides=None, dilation_rate=1, padding="valid", data_format=None):
    """Patches of ``size`` as channels: ``[..., rows, cols, size_h * size_w * channels]``."""
    x, single, cf = _as_batch(images, data_format)
    ph, pw = (int(size), int(size)) if np.ndim(size) == 0 else (int(size[0]), int(size[1]))
    strides = (ph, pw) if strides is None else strides
    c = x.shape.as_list()[3]
    # an identity kernel turns each patch into channels, in (row, col, channel) order
    eye = np.eye(ph * pw * c, dtype=x.dtype.np_dtype).reshape(ph, pw, c, ph * pw * c)
    out = tw.nn.convolution(x, tw.constant(eye), strides=strides, padding=str(padding).upper(),
                            dilations=dilation_rate)
    return _restore(out, single, cf)


export(globals(), skip={"floatx", "is_float", "cast_to", "to_tensor", "export"})
