"""Images and arrays (Keras' ``array_to_img``, ``img_to_array``, ``load_img``, ``save_img``),
through Pillow: decoding is Pillow's, no code in a file runs.

>>> import numpy as np
>>> from tensorweave.keras import utils
>>> img = utils.array_to_img(np.zeros((4, 5, 3), np.float32))
>>> img.size, utils.img_to_array(img).shape
((5, 4), (4, 5, 3))
"""
import numpy as np

_MODES = {"grayscale": "L", "rgb": "RGB", "rgba": "RGBA"}
_RESAMPLE = {"nearest": 0, "bilinear": 2, "bicubic": 3, "lanczos": 1, "box": 4, "hamming": 5}


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("Image utilities need Pillow: pip install pillow") from None
    return Image


def array_to_img(x, data_format=None, scale=True, dtype=None):
    """A PIL image of a (height, width, channels) array; ``scale`` maps its range to 0-255."""
    Image = _pil()
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 3:
        raise ValueError(f"Expected image array to have rank 3 (single image). Got array with shape: {x.shape}")
    if data_format == "channels_first":
        x = x.transpose(1, 2, 0)
    if scale:
        x = x - x.min()
        top = x.max()
        if top != 0:
            x = x / top
        x = x * 255
    channels = x.shape[2]
    if channels not in (1, 3, 4):
        raise ValueError(f"Unsupported channel number: {channels}")
    x = x.astype(np.uint8)
    if channels == 1:
        return Image.fromarray(x[:, :, 0], "L")
    return Image.fromarray(x, "RGB" if channels == 3 else "RGBA")


def img_to_array(img, data_format=None, dtype="float32"):
    """A (height, width, channels) array of a PIL image."""
    x = np.asarray(img, dtype=dtype)
    if x.ndim == 2:
        x = x[:, :, None]
    if data_format == "channels_first":
        x = x.transpose(2, 0, 1)
    return x


def load_img(path, color_mode="rgb", target_size=None, interpolation="nearest", keep_aspect_ratio=False):
    """An image file as a PIL image in ``color_mode``, resized to ``target_size`` (height, width)."""
    Image = _pil()
    if color_mode not in _MODES:
        raise ValueError(f'color_mode must be "grayscale", "rgb", or "rgba". Received: {color_mode}')
    with Image.open(path) as img:
        img = img.convert(_MODES[color_mode])
        if target_size is not None:
            h, w = target_size
            if img.size != (w, h):
                img = img.resize((w, h), _RESAMPLE.get(interpolation, 0))
        img.load()
    return img


def save_img(path, x, data_format=None, file_format=None, scale=True, **kwargs):
    array_to_img(x, data_format=data_format, scale=scale).save(path, format=file_format, **kwargs)
