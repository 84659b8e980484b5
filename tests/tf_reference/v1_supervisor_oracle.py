"""TensorFlow 2.21's results of ``v1_supervisor_program.py``, written to ``v1_supervisor.json``.
Run with the benchmark venv (never tensorweave's)::

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tf_reference/v1_supervisor_oracle.py \
        tests/tf_reference/v1_supervisor.json
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(path):
    import tensorflow.compat.v1 as tf
    import v1_supervisor_program
    tf.disable_v2_behavior()
    with tempfile.TemporaryDirectory() as d:
        result = v1_supervisor_program.run(tf, d)
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
