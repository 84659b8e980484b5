"""tw.image beyond the op table: TF's dtype rules, resize methods, codecs through Pillow, errors."""
import base64

import numpy as np
import pytest

import tensorweave as tw

# Written by TensorFlow 2.21: tf.image.encode_png of arange(18).reshape(2, 3, 3) * 9 (uint8), and
# tf.image.encode_jpeg(quality=90) of an 8x8 RGB image filled with 100.
TF_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAF0lEQVQImWNk4BSSlpaWlpZmCQwMhLAAFH4CW"
                          "OY8tYIAAAAASUVORK5CYII=")


def test_resize_returns_float32_except_nearest():
    img = tw.ones([1, 4, 4, 1], tw.uint8)
    assert tw.image.resize(img, [2, 2]).dtype == tw.float32
    assert tw.image.resize(tw.ones([4, 4, 1], tw.float64), [2, 2], method="bicubic").dtype == tw.float32
    assert tw.image.resize(img, [8, 8], method=tw.image.ResizeMethod.NEAREST_NEIGHBOR).dtype == tw.uint8


@pytest.mark.parametrize("method", ["bilinear", "bicubic", "area", "lanczos3", "lanczos5", "gaussian",
                                    "mitchellcubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_preserves_constant_images(method, antialias):
    out = tw.image.resize(tw.fill([2, 5, 7, 3], 0.25), [3, 11], method=method, antialias=antialias)
    np.testing.assert_allclose(out.numpy(), 0.25, atol=1e-6)


def test_resize_preserve_aspect_ratio_and_gradient():
    img = tw.ones([10, 20, 1])
    assert tw.image.resize(img, [5, 5], preserve_aspect_ratio=True).shape == (2, 5, 1)  # 2.5 rounds to even, as in TF
    x = tw.constant(np.random.default_rng(0).uniform(size=(1, 4, 4, 1)).astype(np.float32))
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.image.resize(x, [8, 8]))
    # bilinear upsampling by 2 spreads each input over 4 outputs' worth of weight
    np.testing.assert_allclose(tape.gradient(y, x).numpy().sum(), 64.0, rtol=1e-5)


def test_resize_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"resize: 'images' must have rank 3 .* got shape \[4, 4\]"):
        tw.image.resize(tw.ones([4, 4]), [2, 2])
    with pytest.raises(ValueError, match="unknown method 'cubic'"):
        tw.image.resize(tw.ones([4, 4, 1]), [2, 2], method="cubic")
    with pytest.raises(ValueError, match=r"the box \[3:6, 0:2\] does not fit in an image of height 4"):
        tw.image.crop_to_bounding_box(tw.ones([4, 4, 1]), 3, 0, 3, 2)


def test_resize_with_pad_and_crop_or_pad_shapes():
    img = tw.ones([7, 9, 3])
    assert tw.image.resize_with_pad(img, 10, 6).shape == (10, 6, 3)
    out = tw.image.resize_with_crop_or_pad(img, 5, 12).numpy()
    assert out.shape == (5, 12, 3) and out[:, 0].sum() == 0 and out[:, 1].min() == 1


def test_integer_images_saturate_like_tf():
    img = tw.constant([[[250, 10, 0]]], tw.uint8)
    assert tw.image.adjust_brightness(img, 0.1).numpy().tolist() == [[[255, 35, 25]]]
    assert tw.image.convert_image_dtype(tw.constant([[[1.5]]]), tw.uint8, saturate=True).numpy().tolist() == [[[255]]]
    assert tw.image.convert_image_dtype(img, tw.int16).numpy().tolist() == [[[32000, 1280, 0]]]


def test_hsv_round_trip_and_hue_shift():
    rgb = tw.constant(np.random.default_rng(1).uniform(size=(4, 5, 3)))
    np.testing.assert_allclose(tw.image.hsv_to_rgb(tw.image.rgb_to_hsv(rgb)).numpy(), rgb.numpy(), atol=1e-12)
    red = tw.constant([[[1.0, 0.0, 0.0]]])
    np.testing.assert_allclose(tw.image.adjust_hue(red, 1 / 3).numpy(), [[[0.0, 1.0, 0.0]]], atol=1e-6)


def test_random_ops_are_seeded():
    img = tw.reshape(tw.range(2 * 4 * 4 * 1.0), [2, 4, 4, 1])
    tw.random.set_seed(3)
    a = tw.image.random_flip_left_right(img).numpy()
    tw.random.set_seed(3)
    b = tw.image.random_flip_left_right(img).numpy()
    np.testing.assert_array_equal(a, b)
    assert tw.image.random_crop(img, [1, 2, 2, 1], seed=1).shape == (1, 2, 2, 1)


class TestCodecs:
    pytest.importorskip("PIL")

    def test_decodes_tensorflows_png(self):
        want = (np.arange(18).reshape(2, 3, 3) * 9).astype(np.uint8)
        got = tw.image.decode_png(tw.constant(TF_PNG))
        assert got.dtype == tw.uint8
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(tw.image.decode_image(TF_PNG).numpy(), want)

    def test_png_round_trip_gray_rgba_and_16_bit(self):
        rng = np.random.default_rng(0)
        for c in (1, 3, 4):
            img = rng.integers(0, 256, size=(5, 4, c), dtype=np.uint8)
            np.testing.assert_array_equal(tw.image.decode_png(tw.image.encode_png(img)).numpy(), img)
        deep = rng.integers(0, 65536, size=(3, 2, 1), dtype=np.uint16)
        back = tw.image.decode_png(tw.image.encode_png(deep), dtype=tw.uint16)
        np.testing.assert_array_equal(back.numpy(), deep)

    def test_jpeg_round_trip_is_close_and_channels_convert(self):
        img = np.full((16, 16, 3), 120, np.uint8)
        data = tw.image.encode_jpeg(img, quality=95)
        assert bool(tw.image.is_jpeg(data)) and not bool(tw.image.is_jpeg(tw.image.encode_png(img)))
        assert np.abs(tw.image.decode_jpeg(data).numpy().astype(int) - 120).max() <= 2
        assert tw.image.decode_jpeg(data, channels=1).shape == (16, 16, 1)
        assert tw.image.extract_jpeg_shape(data).numpy().tolist() == [16, 16, 3]

    def test_decode_in_a_dataset_pipeline(self):
        ds = tw.data.Dataset.from_tensor_slices([TF_PNG, TF_PNG]).map(tw.image.decode_png)
        assert [x.shape for x in ds] == [(2, 3, 3), (2, 3, 3)]

    def test_errors(self):
        with pytest.raises(ValueError, match="decode_jpeg: the data is a PNG image, expected JPEG"):
            tw.image.decode_jpeg(TF_PNG)
        with pytest.raises(ValueError, match="decode_png: cannot decode the image"):
            tw.image.decode_png(b"not an image")
        with pytest.raises(TypeError, match="encode_png: image must be uint8 or uint16, got float32"):
            tw.image.encode_png(np.zeros((2, 2, 3), np.float32))
