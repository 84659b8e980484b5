"""keras.applications: parameter counts (trainable and total) and layer counts equal Keras 3's
(recorded from Keras 3.15.1: weights=None, 224x224x3, 1000 classes), and a forward pass and a
training step at a small input size.

VGG16 is counted at 32x32 with its top (Keras: 37,694,248) rather than at 224x224 (138,357,544,
0.55 GB of weights), and runs no forward pass here: its 3x3 convolutions with 512 channels spend
seconds per call in the Winograd filter transform (kernels/cpu/winograd.py), as ResNet50's do."""
import numpy as np
import pytest

from tensorweave import keras

A = keras.applications

# name: (total params, trainable params, layers, headless params at 32x32 with pooling="avg", features)
KERAS = {
    "ResNet50": (25636712, 25583592, 177, 23587712, 2048),
    "MobileNetV2": (3538984, 3504872, 156, 2257984, 1280),
    "VGG16": (138357544, 138357544, 23, 14714688, 512),
    "EfficientNetB0": (5330571, 5288548, 240, 4049571, 1280),
    "DenseNet121": (8062504, 7978856, 429, 7037504, 1024),
}


def _trainable(model):
    return sum(int(np.prod(w.shape.as_list())) for w in model.trainable_weights)


@pytest.mark.parametrize("name", [n for n in KERAS if n != "VGG16"])
def test_parameter_counts_match_keras(name):
    total, trainable, n_layers, _, _ = KERAS[name]
    model = getattr(A, name)(weights=None)
    assert model.count_params() == total
    assert _trainable(model) == trainable
    assert len(model.layers) == n_layers
    assert model.output_shape == (None, 1000)


def test_vgg16_parameter_counts_match_keras():
    model = A.VGG16(weights=None, input_shape=(32, 32, 3))
    assert model.count_params() == 37694248 and len(model.layers) == KERAS["VGG16"][2]
    # at 224x224 only fc1 grows: 7 * 7 * 512 inputs instead of 512
    assert model.count_params() + (7 * 7 - 1) * 512 * 4096 == KERAS["VGG16"][0]
    headless = A.VGG16(weights=None, include_top=False, input_shape=(32, 32, 3), pooling="avg")
    assert headless.count_params() == KERAS["VGG16"][3] and headless.output_shape == (None, 512)


@pytest.mark.parametrize("name", [n for n in KERAS if n != "VGG16"])
def test_headless_forward_pass_at_32x32(name):
    _, _, _, params, features = KERAS[name]
    model = getattr(A, name)(weights=None, include_top=False, input_shape=(32, 32, 3), pooling="avg")
    assert model.count_params() == params
    x = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype("float32")
    out = model(x).numpy()
    assert out.shape == (1, features) and np.isfinite(out).all()


def test_weights_from_a_file(tmp_path):
    model = A.MobileNetV2(weights=None, input_shape=(32, 32, 3), classes=3, classifier_activation=None)
    x = np.random.default_rng(1).uniform(0, 1, (2, 32, 32, 3)).astype("float32")
    path = str(tmp_path / "mnv2.weights")
    model.save_weights(path)
    again = A.MobileNetV2(weights=path, input_shape=(32, 32, 3), classes=3, classifier_activation=None)
    np.testing.assert_allclose(again(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_pretrained_weights_are_refused_clearly():
    with pytest.raises(ValueError, match="pretrained ImageNet weights are not shipped.*weights=None"):
        A.ResNet50()
    with pytest.raises(ValueError, match="input size must be at least 32x32"):
        A.VGG16(weights=None, input_shape=(16, 16, 3))
