"""tw.signal beyond the op table: windows, stft round trip, errors; complex dtypes; TF dtype numbers."""
import numpy as np
import pytest

import tensorweave as tw


def test_windows_match_their_formulas():
    n = np.arange(6)
    np.testing.assert_allclose(tw.signal.hann_window(6).numpy(), 0.5 - 0.5 * np.cos(2 * np.pi * n / 6), atol=1e-7)
    np.testing.assert_allclose(tw.signal.hamming_window(6, periodic=False, dtype=tw.float64).numpy(),
                               0.54 - 0.46 * np.cos(2 * np.pi * n / 5))
    assert tw.signal.hann_window(1).numpy().tolist() == [1.0]
    with pytest.raises(ValueError, match="hann_window: dtype must be a floating type, got int32"):
        tw.signal.hann_window(4, dtype=tw.int32)


def test_inverse_stft_inverts_stft_away_from_the_ends():
    x = np.random.default_rng(0).standard_normal((2, 64))
    s = tw.signal.stft(tw.constant(x), frame_length=16, frame_step=4)
    assert s.dtype == tw.complex128 and s.shape == (2, 13, 9)
    y = tw.signal.inverse_stft(s, 16, 4, window_fn=tw.signal.inverse_stft_window_fn(4)).numpy()
    np.testing.assert_allclose(y[:, 12:-12], x[:, 12:y.shape[1] - 12], atol=1e-10)


def test_stft_default_fft_length_is_the_next_power_of_two():
    assert tw.signal.stft(tw.zeros([40]), frame_length=12, frame_step=6).shape == (5, 9)


def test_fft_rejects_real_input_with_a_hint():
    with pytest.raises(TypeError, match=r"FFT needs a complex64 or complex128 tensor, got float32.*rfft"):
        tw.signal.fft(tw.constant([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"innermost 2 dimension\(s\) and needs a tensor of rank >= 2"):
        tw.signal.fft2d(tw.complex(tw.ones([3]), tw.ones([3])))


def test_fft_in_graph_mode_has_static_shapes():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 10])
        y = tw.signal.rfft(x)
        z = tw.signal.irfft(y)
    assert y.shape.as_list() == [None, 6] and y.dtype == tw.complex64
    assert z.shape.as_list() == [None, 10] and z.dtype == tw.float32


def test_complex_dtypes_and_parts():
    z = tw.constant(np.array([1 + 2j, 3 - 1j], np.complex64))
    assert z.dtype == tw.complex64 and tw.complex64.real_dtype == tw.float32 and tw.complex128.is_complex
    assert tw.math.imag(z).numpy().tolist() == [2.0, -1.0]
    assert tw.math.conj(tw.constant([1.0])).numpy().tolist() == [1.0]   # identity on reals, as in TF
    with pytest.raises(TypeError, match="complex needs float32 or float64 parts, got int32"):
        tw.complex(tw.constant([1]), tw.constant([2]))


def test_tf_datatype_numbers_are_dtypes():
    # TF accepts its DataType enum numbers: tf.zeros(1, 1) is float32 zeros of shape [1].
    z = tw.zeros(1, 1)
    assert z.dtype == tw.float32 and z.shape == (1,)
    assert tw.as_dtype(9) is tw.int64 and tw.as_dtype(18) is tw.complex128
    with pytest.raises(TypeError, match="not a TensorFlow DataType number"):
        tw.as_dtype(11)


def test_spectral_helpers_match_tensorflow():
    mel = [[0.0, 0.0, 0.0, 0.0], [0.676228, 0.323772, 0.0, 0.0], [0.0, 0.539068, 0.460932, 0.0],
           [0.0, 0.0, 0.697302, 0.302698], [0.0, 0.0, 0.028684, 0.971316], [0.0, 0.0, 0.0, 0.473994]] + [[0.0] * 4] * 3
    np.testing.assert_allclose(tw.signal.linear_to_mel_weight_matrix(4, 9, 8000, 100.0, 3000.0).numpy(), mel, atol=2e-6)
    np.testing.assert_allclose(tw.signal.kaiser_bessel_derived_window(6, 4.0).numpy(),
                               [0.220479, 0.707107, 0.975392, 0.975392, 0.707107, 0.220479], atol=2e-6)
    np.testing.assert_allclose(tw.signal.vorbis_window(4).numpy(), [0.228014, 0.973658, 0.973658, 0.228014], atol=2e-6)
    np.testing.assert_allclose(tw.signal.kaiser_window(7, 3.0).numpy(), np.kaiser(7, 3.0), rtol=1e-6)


def test_mdct_round_trip_and_idct_scaling():
    x = np.random.default_rng(2).standard_normal((1, 64))
    y = tw.signal.inverse_mdct(tw.signal.mdct(tw.constant(x), 16)).numpy()
    np.testing.assert_allclose(y[:, 8:-8], x[:, 8:56], atol=1e-10)   # exact away from the first/last half frame
    z = tw.constant(x[0, :10])
    np.testing.assert_allclose(tw.signal.idct(tw.signal.dct(z)).numpy() * 0.5 / 10, x[0, :10], atol=1e-12)
    with pytest.raises(ValueError, match="normalization is not supported for the type-I DCT"):
        tw.signal.dct(z, type=1, norm="ortho")
