"""Writes tensorweave's HDF5 files of the fixture models into DIR (with ``expected.json``), for
``make_h5_fixtures.py check DIR`` to load in Keras 3 and tf-keras.

    PYTHONPATH=. .venv/bin/python tests/keras_tests/h5_fixtures/write_tw_h5.py /tmp/tw_h5
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(directory):
    import numpy as np
    from h5_fixture_models import build, inputs, targets
    from tensorweave import keras
    os.makedirs(directory, exist_ok=True)
    expected = {}
    for kind in ("seq_cnn", "func_text"):
        keras.utils.set_random_seed(5)
        m = build(keras, kind)
        m.compile("adam", "mse", metrics=["mae"])
        m.fit(inputs(kind), targets(kind), epochs=1, verbose=0)
        want = np.asarray(m.predict(inputs(kind), verbose=0)).tolist()
        for suffix in (".h5", ".weights.h5", "_legacy.h5"):
            name = f"{kind}{suffix}"
            (m.save if suffix == ".h5" else m.save_weights)(os.path.join(directory, name))
            expected[name] = want
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    write(sys.argv[1])
