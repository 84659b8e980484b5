"""OpInfos for tw.image (resize as interpolation-matrix products, crops, colour adjustments).

References are NumPy restatements of TF's sampling rules (loops over output pixels); the same
functions were compared with TensorFlow 2.21 on random images (all methods, up and down,
antialias on and off) to 1e-5, except Gaussian antialiased downscaling at the last row (2e-3).
"""
import numpy as np

import tensorweave as tw
from tensorweave.image.resize_ops import resize_float
from opinfo import OpInfo, Sample, arr

F = (tw.float32, tw.float64)
TOL = {tw.float32: (1e-4, 1e-5)}


def _bilinear_ref(x, size):
    def axis(n_in, n_out):
        s = n_in / n_out
        src = (np.arange(n_out) + 0.5) * s - 0.5
        lo = np.clip(np.floor(src).astype(int), 0, n_in - 1)
        hi = np.clip(np.ceil(src).astype(int), 0, n_in - 1)
        return lo, hi, src - np.floor(src)
    (yl, yh, fy), (xl, xh, fx) = axis(x.shape[-3], size[0]), axis(x.shape[-2], size[1])
    fy, fx = fy[:, None, None].astype(x.dtype), fx[None, :, None].astype(x.dtype)
    top = x[..., yl, :, :][..., :, xl, :] * (1 - fx) + x[..., yl, :, :][..., :, xh, :] * fx
    bot = x[..., yh, :, :][..., :, xl, :] * (1 - fx) + x[..., yh, :, :][..., :, xh, :] * fx
    return (top * (1 - fy) + bot * fy).astype(x.dtype)


def _nearest_ref(x, size):
    iy = np.minimum(np.floor((np.arange(size[0]) + 0.5) * x.shape[-3] / size[0]), x.shape[-3] - 1).astype(int)
    ix = np.minimum(np.floor((np.arange(size[1]) + 0.5) * x.shape[-2] / size[1]), x.shape[-2] - 1).astype(int)
    return x[..., iy, :, :][..., :, ix, :]


def _lanczos_ref(x, size, r=3.0):
    def w(n_in, n_out):
        s = n_in / n_out
        m = np.zeros((n_out, n_in))
        for o in range(n_out):
            c = (o + 0.5) * s
            for i in range(n_in):
                d = abs(i + 0.5 - c)
                m[o, i] = 1.0 if d < 1e-6 else (0.0 if d > r else r * np.sin(np.pi * d) * np.sin(np.pi * d / r) /
                                                 (np.pi * d) ** 2)
            m[o] /= m[o].sum()
        return m
    wy, wx = w(x.shape[-3], size[0]), w(x.shape[-2], size[1])
    return np.einsum("oh,pw,...hwc->...opc", wy, wx, x).astype(x.dtype)


def _img_samples(shapes, **kw):
    def gen(dtype, rng):
        return [Sample((arr(rng, s, dtype, 0, 1),), dict(kw), name="x".join(map(str, s))) for s in shapes]
    return gen


def _resize_samples(dtype, rng):
    return [Sample((arr(rng, (2, 5, 6, 2), dtype, 0, 1), (3, 4)), name="down"),
            Sample((arr(rng, (4, 3, 1), dtype, 0, 1), (7, 5)), name="up")]


def _contrast_ref(x, contrast_factor):
    f = contrast_factor
    m = x.mean(axis=(-3, -2), keepdims=True)
    return ((x - m) * f + m).astype(x.dtype)


def _hsv_ref(x):
    import colorsys
    flat = x.reshape(-1, 3).astype(np.float64)
    return np.array([colorsys.rgb_to_hsv(*p) for p in flat]).reshape(x.shape).astype(x.dtype)


def _std_ref(x):
    m = x.mean(axis=(-3, -2, -1), keepdims=True)
    s = np.maximum(x.std(axis=(-3, -2, -1), keepdims=True), 1 / np.sqrt(np.prod(x.shape[-3:])))
    return ((x - m) / s).astype(x.dtype)


OPS = [
    OpInfo("image.resize_bilinear", lambda x, size: resize_float(x, size, "bilinear", False), _bilinear_ref, F,
           _resize_samples, tol=TOL),
    OpInfo("image.resize_nearest", lambda x, size: resize_float(x, size, "nearest", False), _nearest_ref,
           F + (tw.uint8, tw.int32), _resize_samples),
    OpInfo("image.resize_lanczos3", lambda x, size: resize_float(x, size, "lanczos3", False), _lanczos_ref, F,
           _resize_samples, tol=TOL),
    OpInfo("image.flip_left_right", tw.image.flip_left_right, lambda x: x[..., ::-1, :], F + (tw.uint8,),
           _img_samples([(3, 4, 2), (2, 3, 4, 1)])),
    OpInfo("image.flip_up_down", tw.image.flip_up_down, lambda x: x[..., ::-1, :, :], F,
           _img_samples([(3, 4, 2), (2, 3, 4, 1)])),
    OpInfo("image.rot90", tw.image.rot90, lambda x, k=1: np.rot90(x, k, axes=(-3, -2)), F,
           lambda d, rng: _img_samples([(3, 4, 2)])(d, rng) + _img_samples([(2, 3, 4, 1)], k=3)(d, rng)),
    OpInfo("image.transpose", tw.image.transpose, lambda x: np.swapaxes(x, -3, -2), F, _img_samples([(3, 4, 2)])),
    OpInfo("image.crop_to_bounding_box", lambda x: tw.image.crop_to_bounding_box(x, 1, 2, 2, 3),
           lambda x: x[..., 1:3, 2:5, :], F, _img_samples([(4, 6, 2), (2, 3, 5, 1)])),
    OpInfo("image.pad_to_bounding_box", lambda x: tw.image.pad_to_bounding_box(x, 1, 2, 6, 7),
           lambda x: np.pad(x, [(0, 0)] * (x.ndim - 3) + [(1, 6 - 1 - x.shape[-3]), (2, 7 - 2 - x.shape[-2]), (0, 0)]),
           F, _img_samples([(4, 5, 2), (2, 3, 4, 1)])),
    OpInfo("image.central_crop", lambda x: tw.image.central_crop(x, 0.5), lambda x: x[..., 2:6, 1:4, :], F,
           _img_samples([(8, 5, 2)])),
    OpInfo("image.adjust_contrast", tw.image.adjust_contrast, _contrast_ref, F,
           lambda d, rng: _img_samples([(3, 4, 3), (2, 3, 2, 1)], contrast_factor=1.7)(d, rng), tol=TOL),
    OpInfo("image.adjust_brightness", tw.image.adjust_brightness, lambda x, delta: (x + delta).astype(x.dtype), F,
           _img_samples([(3, 4, 3)], delta=0.25)),
    OpInfo("image.rgb_to_hsv", tw.image.rgb_to_hsv, _hsv_ref, F, _img_samples([(3, 4, 3)]), tol=TOL),
    OpInfo("image.rgb_to_grayscale", tw.image.rgb_to_grayscale,
           lambda x: (x @ np.array([0.2989, 0.5870, 0.1140]))[..., None].astype(x.dtype), F,
           _img_samples([(3, 4, 3)]), tol=TOL),
    OpInfo("image.per_image_standardization", tw.image.per_image_standardization, _std_ref, F,
           _img_samples([(3, 4, 3), (2, 2, 3, 1)]), tol=TOL),
]


def _sobel_ref(x):
    p = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    ky = np.array([[-1, -2, -1], [0, 0, 0], [1, 2, 1]], np.float64)
    h, w = x.shape[1:3]
    outs = [sum(k[i, j] * p[:, i:i + h, j:j + w] for i in range(3) for j in range(3)) for k in (ky, ky.T)]
    return np.stack(outs, -1).astype(x.dtype)


def _ssim_ref(a, b, size=3, sigma=1.5):
    c = np.arange(size) - (size - 1) / 2
    g = np.exp(-0.5 * c * c / sigma ** 2)
    g /= g.sum()
    k = np.outer(g, g)

    def blur(z):
        h, w = z.shape[1] - size + 1, z.shape[2] - size + 1
        return sum(k[i, j] * z[:, i:i + h, j:j + w] for i in range(size) for j in range(size))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    ma, mb = blur(a64), blur(b64)
    lum = (2 * ma * mb + c1) / (ma ** 2 + mb ** 2 + c1)
    cs = (2 * blur(a64 * b64) - 2 * ma * mb + c2) / (blur(a64 ** 2 + b64 ** 2) - ma ** 2 - mb ** 2 + c2)
    return (lum * cs).mean(axis=(1, 2, 3)).astype(a.dtype)


OPS += [
    OpInfo("image.sobel_edges", tw.image.sobel_edges, _sobel_ref, F, _img_samples([(1, 4, 5, 2)]), tol=TOL),
    OpInfo("image.ssim", lambda a, b: tw.image.ssim(a, b, 1.0, filter_size=3), _ssim_ref, F,
           lambda d, rng: [Sample((arr(rng, (2, 4, 5, 2), d, 0, 1), arr(rng, (2, 4, 5, 2), d, 0, 1)))], tol=TOL),
]
