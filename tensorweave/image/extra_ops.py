"""More of ``tw.image``: edges, patches, SSIM, box crops, non-max suppression, box drawing, and the
stateless random augmentations.

Edges, patches, SSIM and ``crop_and_resize`` are compositions of slicing, ``gather_nd`` and
arithmetic, so gradients reach the images; the box arguments and non-max suppression are
computed with NumPy (their results are indices, with no gradient in TF either).

>>> import tensorweave as tw
>>> img = tw.reshape(tw.range(16.0), [1, 4, 4, 1])
>>> tw.image.extract_patches(img, [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")[0, 0, 0].numpy().tolist()
[0.0, 1.0, 4.0, 5.0]
>>> float(tw.image.ssim(img, img, 15.0, filter_size=3)[0])
1.0
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import EagerTensor
from tensorweave.image.color_ops import (adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation,
                                         convert_image_dtype)
from tensorweave.image.crop_ops import as_image
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import random_ops as R
from tensorweave.ops import reduce_ops as Rd
from tensorweave.ops.indexing_ops import gather_nd, pad, reverse, slice as slice_


def _np(t):
    return t.numpy() if isinstance(t, EagerTensor) else np.asarray(t)


def sobel_edges(image):
    """``[batch, h, w, channels, 2]``: the Sobel responses (d/dy, d/dx), with reflected borders."""
    x = as_image(image, "sobel_edges", ranks=(4,))
    p = pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
    h, w = x.shape[1], x.shape[2]
    ky = np.array([[-1, -2, -1], [0, 0, 0], [1, 2, 1]], np.float64)
    outs = []
    for k in (ky, ky.T):
        acc = None
        for i in range(3):
            for j in range(3):
                if k[i, j]:
                    term = p[:, i:i + h, j:j + w, :] * float(k[i, j])
                    acc = term if acc is None else acc + term
        outs.append(acc)
    return A.stack(outs, axis=-1)


def extract_patches(images, sizes, strides, rates, padding, name=None):
    """Each ``sizes[1] x sizes[2]`` patch (dilated by ``rates``) flattened into the depth axis:
    ``[batch, out_rows, out_cols, kh * kw * channels]``."""
    x = as_image(images, "extract_patches", ranks=(4,))
    _, kh, kw, _ = (int(v) for v in sizes)
    _, sh, sw, _ = (int(v) for v in strides)
    _, rh, rw, _ = (int(v) for v in rates)
    padding = str(padding).upper()
    h, w = x.shape[1], x.shape[2]
    eh, ew = (kh - 1) * rh + 1, (kw - 1) * rw + 1
    if padding == "VALID":
        oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
    elif padding == "SAME":
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + eh - h, 0), max((ow - 1) * sw + ew - w, 0)
        x = pad(x, [[0, 0], [ph // 2, ph - ph // 2], [pw // 2, pw - pw // 2], [0, 0]])
    else:
        raise ValueError(f"extract_patches: padding must be 'VALID' or 'SAME', got {padding!r}")
    cols = []
    for i in range(kh):
        for j in range(kw):
            cols.append(x[:, i * rh:i * rh + (oh - 1) * sh + 1:sh, j * rw:j * rw + (ow - 1) * sw + 1:sw, :])
    return A.concat(cols, axis=-1)


def _gaussian(size, sigma):
    c = np.arange(size) - (size - 1) / 2.0
    g = np.exp(-0.5 * c * c / (sigma * sigma))
    return g / g.sum()


def _blur(x, g):
    n = len(g)
    h, w = x.shape[-3], x.shape[-2]
    rows = None
    for i in range(n):
        t = x[..., i:i + h - n + 1, :, :] * float(g[i])
        rows = t if rows is None else rows + t
    out = None
    for j in range(n):
        t = rows[..., :, j:j + w - n + 1, :] * float(g[j])
        out = t if out is None else out + t
    return out


def _ssim_parts(img1, img2, max_val, filter_size, filter_sigma, k1, k2):
    x, y = convert_to_tensor(img1), convert_to_tensor(img2)
    if not x.dtype.is_floating:
        max_val = convert_image_dtype(convert_to_tensor(max_val, dtype=x.dtype), _dt.float32)
        x, y = convert_image_dtype(x, _dt.float32), convert_image_dtype(y, _dt.float32)
    if x.shape[-3] < filter_size or x.shape[-2] < filter_size:
        raise ValueError(f"ssim: images of shape {x.shape.as_list()} are smaller than filter_size {filter_size}")
    g = _gaussian(int(filter_size), float(filter_sigma))
    c1 = (k1 * max_val) ** 2
    c2 = (k2 * max_val) ** 2
    mu_x, mu_y = _blur(x, g), _blur(y, g)
    num0 = mu_x * mu_y * 2.0
    den0 = M.square(mu_x) + M.square(mu_y)
    lum = (num0 + c1) / (den0 + c1)
    num1 = _blur(x * y, g) * 2.0
    den1 = _blur(M.square(x) + M.square(y), g)
    cs = (num1 - num0 + c2) / (den1 - den0 + c2)
    return lum, cs


def ssim(img1, img2, max_val, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03, return_index_map=False):
    """Structural similarity per image (Wang et al. 2004, Gaussian window), as TF computes it."""
    lum, cs = _ssim_parts(img1, img2, max_val, filter_size, filter_sigma, k1, k2)
    m = lum * cs
    if return_index_map:
        return Rd.reduce_mean(m, axis=-1)
    return Rd.reduce_mean(m, axis=[-3, -2, -1])


def _bilinear_sample(image, ys, xs, extrapolation_value):
    """Bilinear samples of ``image [h, w, c]`` at float coordinates (NumPy arrays of one shape)."""
    h, w = image.shape[0], image.shape[1]
    y0, x0 = np.floor(ys), np.floor(xs)
    fy, fx = (ys - y0)[..., None], (xs - x0)[..., None]
    inside = (ys >= 0) & (ys <= h - 1) & (xs >= 0) & (xs <= w - 1)

    def at(yy, xx):
        idx = np.stack([np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)], axis=-1).astype(np.int64)
        return gather_nd(image, A.constant(idx))
    top = at(y0, x0) * A.constant((1 - fx).astype(image.dtype.np_dtype)) + \
        at(y0, x0 + 1) * A.constant(fx.astype(image.dtype.np_dtype))
    bot = at(y0 + 1, x0) * A.constant((1 - fx).astype(image.dtype.np_dtype)) + \
        at(y0 + 1, x0 + 1) * A.constant(fx.astype(image.dtype.np_dtype))
    val = top * A.constant((1 - fy).astype(image.dtype.np_dtype)) + bot * A.constant(fy.astype(image.dtype.np_dtype))
    return M.where(A.constant(inside[..., None]), val, A.fill(A.shape(val), convert_to_tensor(
        float(extrapolation_value), dtype=image.dtype)))


def crop_and_resize(image, boxes, box_indices, crop_size, method="bilinear", extrapolation_value=0.0, name=None):
    """Crops normalised boxes ``[y1, x1, y2, x2]`` from ``image[box_indices]`` and resizes them to
    ``crop_size`` (float32 ``[num_boxes, crop_h, crop_w, channels]``)."""
    x = as_image(image, "crop_and_resize", ranks=(4,))
    if not x.dtype.is_floating or x.dtype is not _dt.float32:
        x = M.cast(x, _dt.float32)
    b = np.asarray(_np(convert_to_tensor(boxes)), np.float64).reshape(-1, 4)
    bi = np.asarray(_np(convert_to_tensor(box_indices))).reshape(-1)
    ch, cw = (int(v) for v in np.ravel(crop_size))
    h, w = x.shape[1], x.shape[2]
    if method not in ("bilinear", "nearest"):
        raise ValueError(f"crop_and_resize: method must be 'bilinear' or 'nearest', got {method!r}")
    crops = []
    for (y1, x1, y2, x2), k in zip(b, bi):
        ys = y1 * (h - 1) + np.arange(ch) * ((y2 - y1) * (h - 1) / (ch - 1)) if ch > 1 else \
            np.array([0.5 * (y1 + y2) * (h - 1)])
        xs = x1 * (w - 1) + np.arange(cw) * ((x2 - x1) * (w - 1) / (cw - 1)) if cw > 1 else \
            np.array([0.5 * (x1 + x2) * (w - 1)])
        yy, xx = np.meshgrid(ys, xs, indexing="ij")
        if method == "nearest":
            yy, xx = np.round(yy), np.round(xx)
        crops.append(_bilinear_sample(x[int(k)], yy, xx, extrapolation_value))
    if not crops:
        return A.zeros([0, ch, cw, x.shape[-1]], _dt.float32)
    return A.stack(crops)


def _iou(a, b):
    ya1, xa1, ya2, xa2 = np.minimum(a[0], a[2]), np.minimum(a[1], a[3]), np.maximum(a[0], a[2]), np.maximum(a[1], a[3])
    yb1, xb1, yb2, xb2 = (np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 0], b[:, 2]),
                          np.maximum(b[:, 1], b[:, 3]))
    inter = np.maximum(np.minimum(ya2, yb2) - np.maximum(ya1, yb1), 0) * \
        np.maximum(np.minimum(xa2, xb2) - np.maximum(xa1, xb1), 0)
    union = (ya2 - ya1) * (xa2 - xa1) + (yb2 - yb1) * (xb2 - xb1) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _nms(boxes, scores, max_out, iou_threshold, score_threshold, overlaps=None):
    b = np.asarray(_np(convert_to_tensor(boxes)), np.float64)
    s = np.asarray(_np(convert_to_tensor(scores)), np.float64)
    order = [i for i in np.argsort(-s, kind="stable") if s[i] > score_threshold]
    keep = []
    for i in order:
        if len(keep) >= max_out:
            break
        if keep:
            ov = overlaps[i, keep] if overlaps is not None else _iou(b[i], b[keep])
            if np.any(ov > iou_threshold):
                continue
        keep.append(i)
    return np.asarray(keep, np.int32)


def non_max_suppression(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"), name=None):
    """Indices of the highest-scoring boxes, greedily dropping boxes overlapping a kept one by more
    than ``iou_threshold`` (IoU)."""
    return A.constant(_nms(boxes, scores, int(max_output_size), float(iou_threshold), float(score_threshold)))


def non_max_suppression_with_scores(boxes, scores, max_output_size, iou_threshold=0.5,
                                    score_threshold=float("-inf"), soft_nms_sigma=0.0, name=None):
    """``(indices, their scores)``; only hard suppression (``soft_nms_sigma=0``)."""
    if soft_nms_sigma:
        raise NotImplementedError("non_max_suppression_with_scores: soft NMS (soft_nms_sigma > 0) is not supported")
    keep = _nms(boxes, scores, int(max_output_size), float(iou_threshold), float(score_threshold))
    s = np.asarray(_np(convert_to_tensor(scores)))
    return A.constant(keep), A.constant(s[keep])


def non_max_suppression_overlaps(overlaps, scores, max_output_size, overlap_threshold=0.5,
                                 score_threshold=float("-inf"), name=None):
    """Non-max suppression with a precomputed ``[n, n]`` overlap matrix."""
    ov = np.asarray(_np(convert_to_tensor(overlaps)))
    return A.constant(_nms(np.zeros((len(ov), 4)), scores, int(max_output_size), float(overlap_threshold),
                           float(score_threshold), overlaps=ov))


def non_max_suppression_padded(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                               pad_to_max_output_size=False, name=None, sorted_input=False, canonicalized_coordinates=False,
                               tile_size=512):
    """``(indices, number valid)``, indices zero-padded to ``max_output_size`` when asked."""
    keep = _nms(boxes, scores, int(max_output_size), float(iou_threshold), float(score_threshold))
    n = len(keep)
    if pad_to_max_output_size:
        keep = np.concatenate([keep, np.zeros(int(max_output_size) - n, np.int32)])
    return A.constant(keep), A.constant(np.int32(n))


def draw_bounding_boxes(images, boxes, colors, name=None):
    """Draws 1-pixel box outlines (normalised ``[y1, x1, y2, x2]``) in the given RGBA ``colors``."""
    x = as_image(images, "draw_bounding_boxes", ranks=(4,))
    img = np.array(_np(x))
    b = np.asarray(_np(convert_to_tensor(boxes)), np.float64)
    col = np.asarray(_np(convert_to_tensor(colors)), np.float64)
    h, w, c = img.shape[1:]
    for n in range(img.shape[0]):
        for k, (y1, x1, y2, x2) in enumerate(b[n]):
            color = col[k % len(col)][:c].astype(img.dtype)
            t, lft, bt, rt = (int(y1 * (h - 1)), int(x1 * (w - 1)), int(y2 * (h - 1)), int(x2 * (w - 1)))
            if t > bt or lft > rt:
                continue
            ct, cl, cb, cr = max(t, 0), max(lft, 0), min(bt, h - 1), min(rt, w - 1)
            if 0 <= t < h:
                img[n, t, cl:cr + 1] = color
            if 0 <= bt < h:
                img[n, bt, cl:cr + 1] = color
            if 0 <= lft < w:
                img[n, ct:cb + 1, lft] = color
            if 0 <= rt < w:
                img[n, ct:cb + 1, rt] = color
    return A.constant(img)


# ---- stateless random augmentations: the same seed (a pair of ints) gives the same result -------------
def _su(seed, lo, hi, shape=()):
    return R.stateless_uniform(list(shape), seed, lo, hi)


def stateless_random_flip_left_right(image, seed):
    x = as_image(image, "stateless_random_flip_left_right")
    return _stateless_flip(x, seed, x.shape.rank - 2)


def stateless_random_flip_up_down(image, seed):
    x = as_image(image, "stateless_random_flip_up_down")
    return _stateless_flip(x, seed, x.shape.rank - 3)


def _stateless_flip(x, seed, axis):
    if x.shape.rank == 3:
        return M.where(_su(seed, 0.0, 1.0) < 0.5, reverse(x, [axis]), x)
    flips = A.reshape(_su(seed, 0.0, 1.0, [x.shape[0]]) < 0.5, [-1, 1, 1, 1])
    return M.where(flips, reverse(x, [axis]), x)


def stateless_random_brightness(image, max_delta, seed):
    return adjust_brightness(image, _su(seed, -max_delta, max_delta))


def stateless_random_contrast(image, lower, upper, seed):
    return adjust_contrast(image, _su(seed, lower, upper))


def stateless_random_saturation(image, lower, upper, seed):
    return adjust_saturation(image, _su(seed, lower, upper))


def stateless_random_hue(image, max_delta, seed):
    return adjust_hue(image, _su(seed, -max_delta, max_delta))


def stateless_random_crop(value, size, seed, name=None):
    x = convert_to_tensor(value)
    size = [int(s) for s in np.ravel(size)]
    limit = np.asarray([d - s + 1 for d, s in zip(x.shape.as_list(), size)], np.int32)
    u = _np(_su(seed, 0.0, 1.0, [len(size)]))
    offset = np.minimum((u * limit).astype(np.int32), limit - 1)
    return slice_(x, offset.tolist(), size)


def stateless_random_jpeg_quality(image, min_jpeg_quality, max_jpeg_quality, seed):
    from tensorweave.image.codec_ops import adjust_jpeg_quality
    q = int(_np(_su(seed, float(min_jpeg_quality), float(max_jpeg_quality))))
    return adjust_jpeg_quality(image, q)


def random_jpeg_quality(image, min_jpeg_quality, max_jpeg_quality, seed=None):
    from tensorweave.image.codec_ops import adjust_jpeg_quality
    q = int(_np(R.uniform([], float(min_jpeg_quality), float(max_jpeg_quality), seed=seed)))
    return adjust_jpeg_quality(image, q)


_MS_SSIM_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def ssim_multiscale(img1, img2, max_val, power_factors=_MS_SSIM_WEIGHTS, filter_size=11, filter_sigma=1.5, k1=0.01,
                    k2=0.03):
    """Multi-scale SSIM (Wang et al. 2003): contrast-structure terms at each halving scale and SSIM at
    the coarsest, weighted by ``power_factors`` (images must be at least ``filter_size * 2^(scales-1)``)."""
    from tensorweave.ops import nn_ops
    x, y = convert_to_tensor(img1), convert_to_tensor(img2)
    if not x.dtype.is_floating:
        max_val = float(convert_image_dtype(convert_to_tensor(max_val, dtype=x.dtype), _dt.float32))
        x, y = convert_image_dtype(x, _dt.float32), convert_image_dtype(y, _dt.float32)
    mcs = []
    for k in range(len(power_factors)):
        if k > 0:
            pads = [[0, 0], [0, int(x.shape[-3]) % 2], [0, int(x.shape[-2]) % 2], [0, 0]]
            x, y = (nn_ops.avg_pool2d(pad(t, pads, mode="SYMMETRIC"), 2, 2, "VALID") for t in (x, y))
        lum, cs = _ssim_parts(x, y, max_val, filter_size, filter_sigma, k1, k2)
        ssim_pc = Rd.reduce_mean(lum * cs, axis=[-3, -2])
        mcs.append(M.maximum(Rd.reduce_mean(cs, axis=[-3, -2]), 0.0))
    mcs[-1] = M.maximum(ssim_pc, 0.0)
    stacked = A.stack(mcs, axis=-1)
    weights = A.constant(np.asarray(power_factors, stacked.dtype.np_dtype))
    return Rd.reduce_mean(Rd.reduce_prod(stacked ** weights, axis=-1), axis=-1)


def _sample_box(h, w, rng, min_object_covered, aspect_ratio_range, area_range, max_attempts, boxes):
    for _ in range(max_attempts):
        area = rng.uniform(*area_range) * h * w
        ratio = rng.uniform(*aspect_ratio_range)
        bh = int(round(np.sqrt(area / ratio)))
        bw = int(round(np.sqrt(area * ratio)))
        if not (0 < bh <= h and 0 < bw <= w):
            continue
        y0, x0 = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
        if len(boxes):
            yy1, xx1, yy2, xx2 = boxes[:, 0] * h, boxes[:, 1] * w, boxes[:, 2] * h, boxes[:, 3] * w
            inter = np.maximum(np.minimum(yy2, y0 + bh) - np.maximum(yy1, y0), 0) * \
                np.maximum(np.minimum(xx2, x0 + bw) - np.maximum(xx1, x0), 0)
            covered = inter / np.maximum((yy2 - yy1) * (xx2 - xx1), 1e-12)
            if not np.any(covered >= min_object_covered):
                continue
        return y0, x0, bh, bw
    return 0, 0, h, w


def _distorted_box(image_size, bounding_boxes, rng, min_object_covered, aspect_ratio_range, area_range,
                   max_attempts, use_image_if_no_bounding_boxes):
    h, w = (int(v) for v in np.ravel(_np(convert_to_tensor(image_size)))[:2])
    boxes = np.asarray(_np(convert_to_tensor(bounding_boxes)), np.float64).reshape(-1, 4)
    if not len(boxes) and not use_image_if_no_bounding_boxes:
        raise ValueError("sample_distorted_bounding_box: no bounding boxes; pass use_image_if_no_bounding_boxes=True")
    y0, x0, bh, bw = _sample_box(h, w, rng, float(min_object_covered), aspect_ratio_range, area_range,
                                 int(max_attempts), boxes)
    begin = A.constant(np.array([y0, x0, 0], np.int32))
    size = A.constant(np.array([bh, bw, -1], np.int32))
    bbox = A.constant(np.array([[[y0 / h, x0 / w, (y0 + bh) / h, (x0 + bw) / w]]], np.float32))
    return begin, size, bbox


def sample_distorted_bounding_box(image_size, bounding_boxes, seed=0, min_object_covered=0.1,
                                  aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
                                  use_image_if_no_bounding_boxes=False, name=None):
    """A random crop ``(begin, size, bbox)`` for ``tw.slice``: its area fraction in ``area_range``, aspect
    ratio in ``aspect_ratio_range``, covering at least ``min_object_covered`` of some box (else the image)."""
    s = int(_np(R.uniform([], 0, 2 ** 31 - 1, dtype=_dt.int64, seed=seed or None)))
    return _distorted_box(image_size, bounding_boxes, np.random.default_rng(s), min_object_covered,
                          aspect_ratio_range, area_range, max_attempts, use_image_if_no_bounding_boxes)


def stateless_sample_distorted_bounding_box(image_size, bounding_boxes, seed, min_object_covered=0.1,
                                            aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
                                            use_image_if_no_bounding_boxes=False, name=None):
    """``sample_distorted_bounding_box`` determined by ``seed`` (a pair of ints)."""
    rng = np.random.default_rng([int(v) & 0xFFFFFFFF for v in np.ravel(seed)])
    return _distorted_box(image_size, bounding_boxes, rng, min_object_covered, aspect_ratio_range, area_range,
                          max_attempts, use_image_if_no_bounding_boxes)
