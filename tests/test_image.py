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


def _xy():
    x = (np.arange(2 * 8 * 8) % 7 / 7.0).astype(np.float32).reshape(2, 8, 8, 1)
    y = (np.arange(2 * 8 * 8) % 5 / 5.0).astype(np.float32).reshape(2, 8, 8, 1)
    return x, y


def test_metrics_boxes_and_edges_match_tensorflow():
    # expected values: TensorFlow 2.21 on the same inputs
    x, y = _xy()
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a, np.float64), b, atol=2e-5)  # noqa: E731
    close(tw.image.ssim(x, y, 1.0, filter_size=3), [0.00755, -0.00884])
    close(tw.image.crop_and_resize(x, [[0.1, 0.2, 0.8, 0.9], [-0.2, 0.0, 0.5, 1.3]], [0, 1], [2, 2])[..., 0],
          [[[0.3, 0.21], [0.24, 0.7]], [[0.0, 0.0], [0.64286, 0.0]]])
    b = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                  [0, 100, 1, 101]], np.float32)
    s = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)
    assert tw.image.non_max_suppression(b, s, 3, 0.5).numpy().tolist() == [3, 0, 5]
    k = 1.14286
    close(tw.image.sobel_edges(tw.constant(x[:1, :3, :3]))[0, ..., 0, :],
          [[[0, 0], [0, k], [0, 0]], [[k, 0], [k, k], [k, 0]], [[0, 0], [0, k], [0, 0]]])
    close(tw.image.total_variation(tw.constant(x)), [27.42857, 27.42857])
    close(tw.image.psnr(x, y, 1.0), [7.74368, 8.0728])


def test_colour_conversions_match_tensorflow():
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a, np.float64), b, atol=2e-5)  # noqa: E731
    close(tw.image.rgb_to_yiq(tw.constant([[0.2, 0.5, 0.9]])), [[0.4559, -0.30731, 0.06101]])
    close(tw.image.yuv_to_rgb(tw.constant([[0.2, 0.5, 0.9]])), [[1.22589, -0.51988, 1.21603]])
    rgb = tw.constant([[0.2, 0.5, 0.9]])
    close(tw.image.yiq_to_rgb(tw.image.rgb_to_yiq(rgb)), [[0.2, 0.5, 0.9]])
    close(tw.image.yuv_to_rgb(tw.image.rgb_to_yuv(rgb)), [[0.2, 0.5, 0.9]])
    close(tw.image.adjust_gamma(tw.constant([[0.25, 0.5]]), 2.0, 3.0), [[0.1875, 0.75]])
    close(tw.image.adjust_saturation(tw.constant([[[0.2, 0.5, 0.9]]]), 0.5), [[[0.55, 0.7, 0.9]]])
    assert tw.image.grayscale_to_rgb(tw.ones([2, 2, 1])).shape == (2, 2, 3)
    dy, dx = tw.image.image_gradients(tw.reshape(tw.range(4.0), [1, 2, 2, 1]))
    assert dy.numpy().ravel().tolist() == [2.0, 2.0, 0.0, 0.0] and dx.numpy().ravel().tolist() == [1.0, 0.0, 1.0, 0.0]


def test_extract_patches_and_boxes_drawing():
    img = tw.reshape(tw.range(16.0), [1, 4, 4, 1])
    p = tw.image.extract_patches(img, [1, 2, 2, 1], [1, 1, 1, 1], [1, 2, 2, 1], "VALID")
    assert p.shape == (1, 2, 2, 4) and p[0, 0, 0].numpy().tolist() == [0.0, 2.0, 8.0, 10.0]
    assert tw.image.extract_patches(img, [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "SAME").shape == (1, 2, 2, 9)
    drawn = tw.image.draw_bounding_boxes(tw.zeros([1, 5, 5, 1]), [[[0.0, 0.0, 1.0, 1.0]]], [[1.0]]).numpy()[0, ..., 0]
    assert drawn.sum() == 16 and drawn[2, 2] == 0


def test_stateless_random_ops_repeat_with_the_seed_and_random_ones_run():
    img = tw.constant(np.random.default_rng(0).uniform(size=(3, 6, 6, 3)).astype(np.float32))
    for fn, args in [(tw.image.stateless_random_flip_left_right, ()), (tw.image.stateless_random_flip_up_down, ()),
                     (tw.image.stateless_random_brightness, (0.2,)), (tw.image.stateless_random_contrast, (0.5, 1.5)),
                     (tw.image.stateless_random_saturation, (0.5, 1.5)), (tw.image.stateless_random_hue, (0.2,))]:
        a = fn(img, *args, seed=(1, 2)).numpy()
        np.testing.assert_array_equal(a, fn(img, *args, seed=(1, 2)).numpy())
    assert tw.image.stateless_random_crop(img, [2, 3, 3, 3], seed=(4, 5)).shape == (2, 3, 3, 3)
    tw.random.set_seed(0)
    for fn, args in [(tw.image.random_brightness, (0.1,)), (tw.image.random_contrast, (0.5, 1.5)),
                     (tw.image.random_saturation, (0.5, 1.5)), (tw.image.random_hue, (0.1,)),
                     (tw.image.random_flip_up_down, ())]:
        assert fn(img, *args).shape == img.shape
    tw.random.set_seed(None)


def test_jpeg_quality_ops():
    pytest.importorskip("PIL")
    img = tw.fill([8, 8, 3], 0.5)
    assert tw.image.adjust_jpeg_quality(img, 90).dtype == tw.float32
    assert tw.image.random_jpeg_quality(img, 50, 90, seed=1).shape == (8, 8, 3)
    assert tw.image.stateless_random_jpeg_quality(img, 50, 90, seed=(1, 1)).shape == (8, 8, 3)
    gif = tw.image.decode_gif(_gif_bytes())
    assert gif.shape == (2, 3, 4, 3)
    bmp = tw.image.decode_bmp(_bmp_bytes())
    assert bmp.shape == (3, 4, 3)


def _gif_bytes():
    import io
    from PIL import Image
    frames = [Image.new("RGB", (4, 3), c) for c in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


def _bmp_bytes():
    import io
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (1, 2, 3)).save(buf, format="BMP")
    return buf.getvalue()


def test_non_max_suppression_variants():
    b = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11]], np.float32)
    s = np.array([0.9, 0.95, 0.3], np.float32)
    idx, sc = tw.image.non_max_suppression_with_scores(b, s, 5, 0.5)
    assert idx.numpy().tolist() == [1, 2] and sc.numpy().tolist() == pytest.approx([0.95, 0.3])
    idx, n = tw.image.non_max_suppression_padded(b, s, 4, 0.5, pad_to_max_output_size=True)
    assert idx.numpy().tolist() == [1, 2, 0, 0] and int(n) == 2
    ov = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    assert tw.image.non_max_suppression_overlaps(ov, s, 3, 0.5).numpy().tolist() == [1, 2]


def test_ssim_multiscale_matches_tensorflow_and_distorted_boxes():
    x = (np.arange(2 * 12 * 12) % 7 / 7.0).astype(np.float32).reshape(2, 12, 12, 1)
    got = tw.image.ssim_multiscale(x, x * 0.9 + 0.05, 1.0, power_factors=(0.3, 0.7), filter_size=3).numpy()
    np.testing.assert_allclose(got, [0.9944912791252136, 0.9944946765899658], rtol=1e-5)
    begin, size, bbox = tw.image.stateless_sample_distorted_bounding_box(
        [40, 60, 3], [[[0.1, 0.1, 0.5, 0.5]]], seed=(1, 2), min_object_covered=0.5, area_range=(0.2, 0.8))
    b, s = begin.numpy(), size.numpy()
    assert s[2] == -1 and 0.2 * 2400 * 0.7 <= s[0] * s[1] <= 0.8 * 2400 * 1.3 and b[0] + s[0] <= 40 and b[1] + s[1] <= 60
    again = tw.image.stateless_sample_distorted_bounding_box(
        [40, 60, 3], [[[0.1, 0.1, 0.5, 0.5]]], seed=(1, 2), min_object_covered=0.5, area_range=(0.2, 0.8))
    assert again[0].numpy().tolist() == b.tolist() and bbox.shape == (1, 1, 4)
    assert tw.image.sample_distorted_bounding_box([40, 60, 3], np.zeros((1, 0, 4), np.float32), seed=3,
                                                  use_image_if_no_bounding_boxes=True)[1].shape == (3,)


def test_decode_and_crop_jpeg_and_webp():
    pytest.importorskip("PIL")
    img = np.zeros((16, 16, 3), np.uint8)
    img[4:8, 2:10] = 200
    data = tw.image.encode_jpeg(img, quality=100)
    crop = tw.image.decode_and_crop_jpeg(data, [4, 2, 4, 8]).numpy()
    assert crop.shape == (4, 8, 3) and abs(int(crop.mean()) - 200) <= 3
    with pytest.raises(ValueError, match=r"crop window \[10, 0, 10, 4\] does not fit"):
        tw.image.decode_and_crop_jpeg(data, [10, 0, 10, 4])
    from PIL import features
    if features.check("webp"):
        import io
        from PIL import Image
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="WEBP", lossless=True)
        np.testing.assert_array_equal(tw.io.decode_webp(buf.getvalue()).numpy(), img)
