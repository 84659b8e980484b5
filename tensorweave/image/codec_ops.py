"""Image files: ``decode_png/jpeg/bmp/gif/image`` and ``encode_png/jpeg`` through Pillow.

Pillow is an optional dependency (``pip install tensorweave[image]``); without it these
functions raise an ImportError saying so. Decoding runs as a ``py_function`` so it works in
graphs and ``tw.data`` pipelines too; it never evaluates code from the file (Pillow parses
pixel formats only).

Decoded images are ``uint8`` (or ``uint16`` for 16-bit PNGs with ``dtype=tw.uint16``)
``[height, width, channels]``; ``channels=0`` keeps the file's own channel count (1, 3 or 4),
``1``/``3``/``4`` convert. Encoded bytes are a scalar string tensor holding ``bytes``.

>>> import numpy as np, tensorweave as tw
>>> img = tw.constant(np.arange(12, dtype=np.uint8).reshape(2, 2, 3))
>>> data = tw.image.encode_png(img)
>>> tw.image.decode_png(data).numpy().tolist() == img.numpy().tolist()
True
"""
import io

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import EagerTensor, Tensor

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("tw.image's codecs need Pillow: pip install 'tensorweave[image]' (or pip install "
                          "pillow)") from None
    return Image


def to_bytes(value, what):
    """The bytes of a scalar string tensor (or of bytes/str)."""
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise ValueError(f"{what}: 'contents' must be a scalar string, got shape {list(value.shape)}")
        value = value[()]
    if isinstance(value, str):
        return value.encode("utf-8")
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{what}: 'contents' must be a string tensor or bytes, got {type(value).__name__}")
    return bytes(value)


def _decode_np(data, channels, dtype, what, expect=None, animated=False):
    Image = _pil()
    try:
        im = Image.open(io.BytesIO(data))
        fmt = im.format
        if expect is not None and fmt not in expect:
            raise ValueError(f"{what}: the data is a {fmt or 'unknown'} image, expected {'/'.join(expect)}")
        frames = []
        for i in range(getattr(im, "n_frames", 1) if animated else 1):
            im.seek(i)
            frames.append(_frame(im, channels, dtype))
    except (OSError, SyntaxError) as e:  # Pillow's errors for corrupt or unknown data
        raise ValueError(f"{what}: cannot decode the image ({e})") from None
    return np.stack(frames) if animated else frames[0]


def _frame(im, channels, dtype):
    if dtype is _dt.uint16 and im.mode in ("I;16", "I;16B", "I"):
        a = np.asarray(im, dtype=np.uint16)
        return a[..., None] if a.ndim == 2 else a
    keep = {"L": 1, "LA": 4, "RGB": 3, "RGBA": 4, "P": 4 if "transparency" in im.info else 3}.get(im.mode, 3)
    c = channels or keep
    if c not in _MODES:
        raise ValueError(f"channels must be 0, 1, 3 or 4, got {channels}")
    a = np.asarray(im.convert(_MODES[c]), dtype=np.uint8)
    if a.ndim == 2:
        a = a[..., None]
    if dtype is _dt.uint16:
        a = a.astype(np.uint16) * 257
    elif dtype is not _dt.uint8:
        raise ValueError(f"dtype must be uint8 or uint16, got {dtype.name}")
    return a


def _run(contents, fn, dtype, rank):
    if isinstance(contents, Tensor) and not isinstance(contents, EagerTensor):
        from tensorweave.ops.script_ops import numpy_function
        out = numpy_function(lambda c: fn(to_bytes(c, "decode")), [contents], dtype)
        return out
    return convert_to_tensor(fn(to_bytes(contents, "decode")), dtype=dtype)


def decode_image(contents, channels=None, dtype=_dt.uint8, name=None, expand_animations=True):
    """Decodes PNG, JPEG, BMP or GIF (GIFs as ``[frames, h, w, 3]`` when ``expand_animations``)."""
    dtype = _dt.as_dtype(dtype)
    out_dtype = dtype if not dtype.is_floating else _dt.uint8

    def fn(data):
        is_gif = data[:6] in (b"GIF87a", b"GIF89a")
        a = _decode_np(data, 3 if is_gif else (channels or 0), out_dtype, "decode_image",
                       animated=is_gif and expand_animations)
        return a
    img = _run(contents, fn, out_dtype, 3)
    if dtype.is_floating:
        from tensorweave.image.color_ops import convert_image_dtype
        img = convert_image_dtype(img, dtype)
    return img


def decode_png(contents, channels=0, dtype=_dt.uint8, name=None):
    """Decodes a PNG to ``[h, w, channels]`` uint8 (or uint16)."""
    dtype = _dt.as_dtype(dtype)
    return _run(contents, lambda d: _decode_np(d, channels, dtype, "decode_png", expect=("PNG",)), dtype, 3)


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True, try_recover_truncated=False,
                acceptable_fraction=1, dct_method="", name=None):
    """Decodes a JPEG to ``[h, w, channels]`` uint8 (``ratio`` 2/4/8 downscales while decoding)."""
    def fn(d):
        a = _decode_np(d, channels, _dt.uint8, "decode_jpeg", expect=("JPEG",))
        return a[::int(ratio), ::int(ratio)] if int(ratio) > 1 else a
    return _run(contents, fn, _dt.uint8, 3)


def decode_bmp(contents, channels=0, name=None):
    """Decodes a BMP to ``[h, w, channels]`` uint8."""
    return _run(contents, lambda d: _decode_np(d, channels, _dt.uint8, "decode_bmp", expect=("BMP",)), _dt.uint8, 3)


def decode_gif(contents, name=None):
    """Decodes a (possibly animated) GIF to ``[frames, h, w, 3]`` uint8."""
    return _run(contents, lambda d: _decode_np(d, 3, _dt.uint8, "decode_gif", expect=("GIF",), animated=True),
                _dt.uint8, 4)


def is_jpeg(contents, name=None):
    """Whether the bytes start with JPEG's magic number."""
    return convert_to_tensor(to_bytes(contents, "is_jpeg")[:3] == b"\xff\xd8\xff")


def extract_jpeg_shape(contents, output_type=_dt.int32, name=None):
    """``[height, width, channels]`` of a JPEG without decoding its pixels."""
    im = _pil().open(io.BytesIO(to_bytes(contents, "extract_jpeg_shape")))
    return convert_to_tensor([im.size[1], im.size[0], len(im.getbands())], dtype=output_type)


def _image_np(image, what):
    a = np.asarray(convert_to_tensor(image).numpy())
    if a.ndim != 3 or a.shape[-1] not in (1, 2, 3, 4):
        raise ValueError(f"{what}: 'image' must be [height, width, channels] with 1-4 channels, got shape "
                         f"{list(a.shape)}")
    return a


def encode_png(image, compression=-1, name=None):
    """PNG bytes of a uint8 or uint16 ``[h, w, channels]`` image."""
    a = _image_np(image, "encode_png")
    if a.dtype not in (np.uint8, np.uint16):
        raise TypeError(f"encode_png: image must be uint8 or uint16, got {a.dtype}")
    Image = _pil()
    if a.dtype == np.uint16:
        if a.shape[-1] != 1:
            raise ValueError("encode_png: uint16 images need one channel here (Pillow's 16-bit modes)")
        im = Image.fromarray(np.ascontiguousarray(a[..., 0]))        # mode I;16
    else:
        im = Image.fromarray(np.ascontiguousarray(a[..., 0] if a.shape[-1] == 1 else a))  # L, LA, RGB, RGBA
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=6 if compression < 0 else int(compression))
    return convert_to_tensor(np.array(buf.getvalue(), dtype=object), dtype=_dt.string)


def encode_jpeg(image, format="", quality=95, progressive=False, optimize_size=False, chroma_downsampling=True,
                density_unit="in", x_density=300, y_density=300, xmp_metadata="", name=None):  # noqa: A002
    """JPEG bytes of a uint8 ``[h, w, 1 or 3]`` image."""
    a = _image_np(image, "encode_jpeg")
    if a.dtype != np.uint8 or a.shape[-1] not in (1, 3):
        raise TypeError(f"encode_jpeg: image must be uint8 with 1 or 3 channels, got {a.dtype} {list(a.shape)}")
    im = _pil().fromarray(np.ascontiguousarray(a[..., 0] if a.shape[-1] == 1 else a))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=int(quality), progressive=progressive, optimize=optimize_size,
            subsampling=0 if not chroma_downsampling else 2, dpi=(x_density, y_density))
    return convert_to_tensor(np.array(buf.getvalue(), dtype=object), dtype=_dt.string)


def adjust_jpeg_quality(image, jpeg_quality, dct_method="", name=None):
    """Re-encodes as JPEG at ``jpeg_quality`` and decodes (float images come back as float32)."""
    x = convert_to_tensor(image)
    from tensorweave.image.color_ops import convert_image_dtype
    u8 = convert_image_dtype(x, _dt.uint8, saturate=True)
    out = decode_jpeg(encode_jpeg(u8, quality=int(jpeg_quality)), channels=u8.shape[-1])
    return out if x.dtype is _dt.uint8 else convert_image_dtype(out, x.dtype)


def decode_and_crop_jpeg(contents, crop_window, channels=0, ratio=1, fancy_upscaling=True,
                         try_recover_truncated=False, acceptable_fraction=1, dct_method="", name=None):
    """Decodes a JPEG and returns the window ``[y, x, height, width]`` of it."""
    y, x, h, w = (int(v) for v in np.ravel(np.asarray(crop_window.numpy() if isinstance(crop_window, Tensor)
                                                      else crop_window)))

    def fn(d):
        a = _decode_np(d, channels, _dt.uint8, "decode_and_crop_jpeg", expect=("JPEG",))
        if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > a.shape[0] or x + w > a.shape[1]:
            raise ValueError(f"decode_and_crop_jpeg: crop window [{y}, {x}, {h}, {w}] does not fit in an image of "
                             f"shape {list(a.shape)}")
        return np.ascontiguousarray(a[y:y + h, x:x + w])
    return _run(contents, fn, _dt.uint8, 3)


def decode_webp(contents, channels=0, name=None):
    """Decodes a WebP image (needs Pillow built with WebP) to ``[h, w, channels]`` uint8."""
    return _run(contents, lambda d: _decode_np(d, channels, _dt.uint8, "decode_webp", expect=("WEBP",)), _dt.uint8, 3)
