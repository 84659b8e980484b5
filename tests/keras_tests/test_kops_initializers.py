"""keras.initializers beyond the TF-differential cases (``tests/tfdiff/kops_cases.py``): the STFT
kernels against NumPy's real FFT, and seeded initializers' repeatability."""
import numpy as np
import pytest
import scipy.signal

import tensorweave as tw
from tensorweave.keras import initializers


@pytest.mark.parametrize("window,scaling,periodic", [("hann", "density", False), ("hamming", "spectrum", True),
                                                     (None, None, False)])
def test_stft_kernels_compute_the_windowed_rfft(window, scaling, periodic):
    frame, bins = 16, 9                      # fft length 2 * (bins - 1) = frame
    x = np.random.default_rng(0).normal(size=frame)
    re = initializers.STFT("real", window, scaling, periodic)((frame, 1, bins), dtype="float64").numpy()[:, 0, :]
    im = initializers.STFTInitializer("imag", window, scaling, periodic)((frame, 1, bins), "float64").numpy()[:, 0, :]
    w = np.ones(frame) if window is None else scipy.signal.get_window(window, frame, periodic)
    norm = {"density": np.sqrt(np.sum(w ** 2)), "spectrum": np.sum(np.abs(w)), None: 1.0}[scaling]
    spec = np.fft.rfft(x * w) / norm
    np.testing.assert_allclose(x @ re, spec.real, atol=1e-12)
    np.testing.assert_allclose(x @ im, spec.imag, atol=1e-12)


def test_stft_arguments_are_checked():
    with pytest.raises(ValueError, match="'real' or 'imag'"):
        initializers.stft(side="both")
    with pytest.raises(ValueError, match="Scaling is invalid"):
        initializers.STFT(scaling="l3")
    with pytest.raises(ValueError, match="frame_length"):
        initializers.STFT(window=[1.0, 2.0])((4, 1, 3))
    init = initializers.deserialize(initializers.serialize(initializers.STFT("imag", "hamming", None, True)))
    assert isinstance(init, initializers.STFT) and init.get_config() == {
        "side": "imag", "window": "hamming", "periodic": True, "scaling": None}
    assert initializers.get("STFTInitializer").side == "real"


@pytest.mark.parametrize("cls", [initializers.GlorotNormal, initializers.HeNormal, initializers.HeUniform,
                                 initializers.LecunNormal, initializers.LecunUniform, initializers.TruncatedNormal,
                                 initializers.Orthogonal])
def test_seeded_initializers_repeat_unseeded_follow_the_global_seed(cls):
    a, b = cls(seed=7)((6, 5)), cls(seed=7)((6, 5))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), cls(seed=8)((6, 5)).numpy())
    tw.random.set_seed(3)
    c = cls()((6, 5)).numpy()
    tw.random.set_seed(3)
    np.testing.assert_array_equal(c, cls()((6, 5)).numpy())


def test_orthogonal_and_identity_in_a_graph_and_configs():
    g = tw.Graph()
    with g.as_default():
        w = initializers.OrthogonalInitializer(gain=2.0, seed=1)((4, 3))
    with tw.compat.v1.Session(graph=g) as s:
        q = s.run(w)
    np.testing.assert_allclose(q.T @ q, 4.0 * np.eye(3), atol=1e-5)
    for cls, cfg in [(initializers.IdentityInitializer, {"gain": 2.0}),
                     (initializers.VarianceScaling, {"scale": 2.0, "mode": "fan_avg", "distribution": "uniform",
                                                     "seed": 1, "input_axes": [0], "output_axes": [1]})]:
        again = initializers.deserialize(initializers.serialize(cls(**cfg)))
        assert type(again) is cls and again.get_config() == cfg
