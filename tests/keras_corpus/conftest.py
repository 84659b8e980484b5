import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # the programs import keras_corpus_data

# The programs run from test_corpus.py (importing them would run them); run_with_tf.py needs TensorFlow.
collect_ignore_glob = ["p[0-9][0-9]_*.py", "run_with_tf.py"]
