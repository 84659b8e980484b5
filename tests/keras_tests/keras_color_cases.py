"""Colour augmentation and SpectralNormalization with fixed factors, written against any ``keras``
module; run under TensorFlow 2.21 / Keras 3.15 it prints the reference table of
test_color_augmentation.py:

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/keras_tests/keras_color_cases.py \\
        > tests/keras_tests/keras_color_reference.py
"""
import numpy as np

IMAGES = np.random.default_rng(3).uniform(0, 255, (2, 4, 4, 3)).astype("float32")
CASES = [
    ("invert", "RandomInvert", {"factor": (1.0, 1.0)}, 1.0),
    ("invert_unit_range", "RandomInvert", {"factor": (1.0, 1.0), "value_range": (0, 1)}, 1 / 255),
    ("degenerate", "RandomColorDegeneration", {"factor": (0.4, 0.4)}, 1.0),
    ("saturation_low", "RandomSaturation", {"factor": (0.3, 0.3)}, 1.0),
    ("saturation_high", "RandomSaturation", {"factor": (0.8, 0.8), "value_range": (0, 1)}, 1 / 255),
    ("posterize", "RandomPosterization", {"factor": (3, 3)}, 1.0),
    ("posterize_unit_range", "RandomPosterization", {"factor": (5, 5), "value_range": (0, 1)}, 1 / 255),
    ("sharpen", "RandomSharpness", {"factor": (0.9, 0.9)}, 1.0),
    ("blur_unit_range", "RandomSharpness", {"factor": (0.1, 0.1), "value_range": (0, 1)}, 1 / 255),
    ("hue_half_turn", "RandomHue", {"factor": (1.0, 1.0)}, 1.0),      # ±0.5 of the circle: the same either way
    ("hue_unit_range", "RandomHue", {"factor": (1.0, 1.0), "value_range": (0, 1)}, 1 / 255),
    ("solarize", "Solarization", {"addition_factor": (0.0, 0.0), "threshold_factor": (0.0, 0.0)}, 1.0),
    ("solarize_unit_range", "Solarization", {"addition_factor": 0.0, "threshold_factor": 0.0, "value_range": (0, 1)},
     1 / 255),
]
KERNEL = np.random.default_rng(4).normal(size=(4, 3)).astype("float32")
VECTOR_U = np.random.default_rng(5).normal(size=(1, 3)).astype("float32")


def run(keras, case):
    _, cls, kwargs, scale = case
    return np.asarray(getattr(keras.layers, cls)(**kwargs)(IMAGES * scale, training=True))


def spectral(keras, power_iterations):
    """(kernel after one training call, that call's output, inference output)."""
    layer = keras.layers.SpectralNormalization(keras.layers.Dense(3, use_bias=False),
                                               power_iterations=power_iterations)
    x = np.ones((2, 4), "float32")
    layer(x)
    layer.layer.kernel.assign(KERNEL)
    layer.vector_u.assign(VECTOR_U)
    out = np.asarray(layer(x, training=True))
    return np.asarray(layer.layer.kernel), out, np.asarray(layer(x))


if __name__ == "__main__":
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    print('"""Outputs of keras_color_cases.py as Keras %s (TensorFlow backend) computes them."""' % keras.__version__)
    print("import numpy as np\n\nREFERENCE = {")
    for case in CASES:
        print(f"    {case[0]!r}: np.array({run(keras, case).round(6).tolist()!r}),")
    for n in (1, 5):
        kernel, out, inference = spectral(keras, n)
        print(f"    'spectral_{n}': (np.array({kernel.round(6).tolist()!r}), np.array({out.round(5).tolist()!r}), "
              f"np.array({inference.round(5).tolist()!r})),")
    print("}")
