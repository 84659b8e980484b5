"""``tw.image``: resizing, flips and crops, colour adjustments and PNG/JPEG codecs.

Images are ``[height, width, channels]`` or ``[batch, height, width, channels]``. Everything but
the codecs (Pillow, optional) is a composition of differentiable ops; see ``resize_ops``,
``crop_ops``, ``color_ops`` and ``codec_ops``.

>>> import tensorweave as tw
>>> img = tw.ones([4, 6, 3])
>>> tw.image.resize(tw.image.central_crop(img, 0.5), [4, 4]).shape
TensorShape([4, 4, 3])
"""
from tensorweave.image.codec_ops import (adjust_jpeg_quality, decode_and_crop_jpeg, decode_bmp,  # noqa: F401
                                         decode_gif, decode_image, decode_jpeg, decode_webp, decode_png, encode_jpeg, encode_png, extract_jpeg_shape,
                                         is_jpeg)
from tensorweave.image.color_ops import (adjust_brightness, adjust_contrast, adjust_gamma, adjust_hue,  # noqa: F401
                                         adjust_saturation, convert_image_dtype, grayscale_to_rgb, hsv_to_rgb,
                                         image_gradients, per_image_standardization, psnr, random_brightness,
                                         random_contrast, random_hue, random_saturation, rgb_to_grayscale,
                                         rgb_to_hsv, rgb_to_yiq, rgb_to_yuv, total_variation, yiq_to_rgb,
                                         yuv_to_rgb)
from tensorweave.image.crop_ops import (central_crop, crop_to_bounding_box, flip_left_right,  # noqa: F401
                                        flip_up_down, pad_to_bounding_box, random_crop, random_flip_left_right,
                                        random_flip_up_down, resize_with_crop_or_pad, rot90, transpose)
from tensorweave.image.extra_ops import (crop_and_resize, draw_bounding_boxes, extract_patches,  # noqa: F401
                                         non_max_suppression, non_max_suppression_overlaps,
                                         non_max_suppression_padded, non_max_suppression_with_scores,
                                         random_jpeg_quality, sample_distorted_bounding_box, sobel_edges, ssim,
                                         ssim_multiscale, stateless_random_brightness,
                                         stateless_sample_distorted_bounding_box,
                                         stateless_random_contrast, stateless_random_crop,
                                         stateless_random_flip_left_right, stateless_random_flip_up_down,
                                         stateless_random_hue, stateless_random_jpeg_quality,
                                         stateless_random_saturation)
from tensorweave.image.resize_ops import ResizeMethod, resize, resize_with_pad  # noqa: F401
