"""Writes the HDF5 fixtures of tests/keras_tests/test_keras_h5.py with TensorFlow 2.21's Keras 3
(``k3_*``) and tf-keras 2.21 (``tk_*``), and ``expected.json``: each model's predictions on
``h5_fixture_models.inputs`` after one epoch of training (a BatchNormalization's moving
statistics and an optimizer step, so the weights are not the initial ones).

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/keras_tests/h5_fixtures/make_h5_fixtures.py

``check DIR`` goes the other way: it loads the files that ``write_tw_h5.py DIR`` wrote with
tensorweave into Keras 3 and tf-keras and compares their predictions with tensorweave's.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = {"k3": {"func_text": ".h5", "seq_cnn": ".weights.h5"},
         "tk": {"seq_cnn": ".h5", "func_text": "_legacy.h5"}}


def _keras(mode):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if mode == "k3":
        import keras
    else:
        import tf_keras as keras
    return keras


def write():
    import numpy as np
    from h5_fixture_models import build, inputs, targets
    expected = {}
    for mode, files in FILES.items():
        keras = _keras(mode)
        for kind, suffix in files.items():
            keras.utils.set_random_seed(5)
            m = build(keras, kind)
            m.compile("adam", "mse", metrics=["mae"])
            m.fit(inputs(kind), targets(kind), epochs=1, verbose=0)
            path = os.path.join(HERE, f"{mode}_{kind}{suffix}")
            (m.save_weights if "weights" in suffix or "legacy" in suffix else m.save)(path)
            expected[os.path.basename(path)] = np.asarray(m.predict(inputs(kind), verbose=0)).tolist()
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def check(directory):
    import numpy as np
    from h5_fixture_models import build, inputs
    with open(os.path.join(directory, "expected.json")) as f:
        expected = json.load(f)
    for mode in ("k3", "tk"):
        keras = _keras(mode)
        for name, want in expected.items():
            kind = "seq_cnn" if name.startswith("seq_cnn") else "func_text"
            path = os.path.join(directory, name)
            if name.endswith(".weights.h5") or name.endswith("_legacy.h5"):
                m = build(keras, kind)
                m.load_weights(path)
            else:   # Keras 3 cannot compile from its own HDF5 training_config (a 'keras.metrics.mse' error)
                m = keras.models.load_model(path, compile=mode == "tk")
            diff = float(np.abs(np.asarray(m.predict(inputs(kind), verbose=0)) - np.asarray(want)).max())
            print(mode, name, "max |difference|", diff)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    if sys.argv[1:2] == ["check"]:
        check(sys.argv[2])
    else:
        write()
