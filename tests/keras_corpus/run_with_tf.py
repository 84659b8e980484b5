"""Runs a corpus program under TensorFlow/Keras (the reference numbers): the program's
``import tensorweave as tf`` / ``from tensorweave import keras`` get TensorFlow and Keras.

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/keras_corpus/run_with_tf.py tests/keras_corpus/p01_*.py
"""
import json
import os
import runpy
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402
import tensorflow  # noqa: E402

sys.modules["tensorweave"] = tensorflow
sys.modules["tensorweave.keras"] = keras
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
for path in sys.argv[1:]:
    keras.backend.clear_session()
    result = runpy.run_path(path, run_name="__main__")["RESULT"]
    print(os.path.basename(path), json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                              for k, v in result.items()}))
