"""Differential testing against TensorFlow (issue 19): ``cases.py`` generates the cases,
``generate.py`` runs them in TensorFlow and records ``tf_results.json``, ``compare.py`` runs
them in tensorweave and compares (``tests/test_tf_differential.py``)."""
