"""Keras 3's results for tests/test_opt21_keras3_optimizers.py (Adamax, Nadam, Lion, Lamb,
Adafactor), written to ``keras3_optimizers.json``. Run with the benchmark venv (never
tensorweave's)::

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tf_reference/keras3_optimizers_oracle.py \
        tests/tf_reference/keras3_optimizers.json

A tiny model (a dense layer ``W``, ``b`` and a rank-3 weight ``K``: every factoring case of
Adafactor) is trained 5 steps from fixed weights on fixed data; the weights after each step and
the optimizer's variables (names, shapes, dtypes, in order) are recorded. The test checks its
NumPy references and tensorweave against these numbers, without TensorFlow.
"""
import json
import os
import sys

import numpy as np

STEPS = 5
CASES = {   # name: (class, constructor arguments)
    "adamax": ("Adamax", {"learning_rate": 0.05}),
    "nadam": ("Nadam", {"learning_rate": 0.05}),
    "lion": ("Lion", {"learning_rate": 0.01}),
    "lion_decay": ("Lion", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.95, "weight_decay": 0.5}),
    "lamb": ("Lamb", {"learning_rate": 0.05}),
    "lamb_eps": ("Lamb", {"learning_rate": 0.02, "beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-3}),
    "adafactor": ("Adafactor", {"learning_rate": 0.1}),
    "adafactor_args": ("Adafactor", {"learning_rate": 0.3, "beta_2_decay": -0.5, "epsilon_2": 0.01,
                                     "clip_threshold": 0.5, "relative_step": False}),
}


def data():
    """Fixed inputs (float32), no random generator: the same on every machine."""
    def wave(shape, k, scale):
        n = int(np.prod(shape))
        return (np.sin(np.arange(1, n + 1) * k) * scale + 0.05 * np.cos(np.arange(n) * 3.1)).reshape(shape)
    return {"x": wave((6, 5), 0.7, 1.0), "y": wave((6, 3), 1.3, 0.5), "W": wave((5, 3), 2.1, 0.4),
            "b": wave((3,), 0.9, 0.1), "K": wave((2, 3, 4), 1.7, 0.8), "C": 1.0 + np.abs(wave((2, 3, 4), 0.3, 1.0))}


def main(path):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf
    d = {k: v.astype(np.float32) for k, v in data().items()}
    c = {k: tf.constant(v) for k, v in d.items()}
    out = {"keras": keras.__version__, "steps": STEPS, "data": {k: v.tolist() for k, v in d.items()}, "cases": {}}
    for name, (cls, kwargs) in CASES.items():
        ws = [keras.Variable(d[n], name=n) for n in ("W", "b", "K")]
        opt = getattr(keras.optimizers, cls)(**kwargs)
        history = []
        for _ in range(STEPS):
            with tf.GradientTape() as tape:
                r = tf.matmul(c["x"], ws[0]) + ws[1] - c["y"]
                loss = tf.reduce_mean(r * r) + 0.5 * tf.reduce_sum(c["C"] * ws[2] * ws[2])
            opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
            history.append([np.asarray(w).tolist() for w in ws])
        out["cases"][name] = {"class": cls, "kwargs": kwargs, "weights": history,
                              "variables": [[v.name, list(v.shape), str(v.dtype)] for v in opt.variables],
                              "config": {k: v for k, v in opt.get_config().items() if k != "name"}}
    with open(path, "w") as f:
        json.dump(out, f, default=lambda o: o.item())   # NumPy scalars (the float32 learning rate)


if __name__ == "__main__":
    main(sys.argv[1])
