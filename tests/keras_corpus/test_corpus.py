"""The Keras compatibility corpus (issue 16's evidence): public Keras guides and examples, changed
only in imports, data source and step counts (listed at the top of each program), run unchanged
otherwise. Each program leaves ``RESULT`` (its losses and metrics); each states ``TF_REFERENCE``,
what the same file gives with TensorFlow 2.21 / Keras 3.15 (``run_with_tf.py``). A program passes
when its loss falls and every metric of the reference is reached (within ``TOLERANCE`` of TF's).
"""
import glob
import os
import runpy

import pytest

from tensorweave import keras

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = sorted(glob.glob(os.path.join(HERE, "p[0-9][0-9]_*.py")))


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_program(path):
    keras.backend.clear_session()
    scope = runpy.run_path(path, run_name="__main__")
    result, reference = scope["RESULT"], scope["TF_REFERENCE"]
    tolerance = scope.get("TOLERANCE", 0.05)
    losses = result["losses"]
    assert losses[-1] < losses[0], f"loss did not fall: {losses}"
    for name, tf_value in reference.items():
        if name == "losses":
            continue
        if name.endswith("loss") or name.endswith("error"):
            assert result[name] <= tf_value * (1 + tolerance) + tolerance, (name, result[name], tf_value)
        else:
            assert result[name] >= tf_value - tolerance, (name, result[name], tf_value)
