"""TF1's SavedModel (``tf.saved_model.builder``/``loader``/``simple_save`` and the signature helpers).

``tf_reference/v1_saved_model_program.py`` runs here with ``tensorweave.compat.v1`` and must give
TensorFlow 2.21's results (``tf_reference/v1_saved_model.json``, from ``v1_saved_model_oracle.py``)."""
import json
import os
import sys

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.saving.validation import LoadError

HERE = os.path.dirname(os.path.abspath(__file__))


def test_export_and_serve_matches_tensorflow(tmp_path):
    sys.path.insert(0, os.path.join(HERE, "tf_reference"))
    try:
        import v1_saved_model_program
    finally:
        sys.path.pop(0)
    with open(os.path.join(HERE, "tf_reference", "v1_saved_model.json")) as f:
        ref = json.load(f)
    got = v1_saved_model_program.run(tf, str(tmp_path))
    for key in ("trained", "served", "doubled", "via_tensor_info", "training_w", "simple"):
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for key in ("valid", "method", "counter_after_main_op", "names", "simple_method", "missing_tag", "contains"):
        assert got[key] == ref[key], key


def test_builder_and_loader_errors(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(AssertionError, match="Export directory already exists, and isn't empty"):
        tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "full"))
    builder = tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "m"))
    with pytest.raises(AssertionError, match="call add_meta_graph_and_variables before add_meta_graph"):
        builder.add_meta_graph(["serve"])
    with tf.Graph().as_default(), tf.Session() as sess:
        x = tf.placeholder(tf.float32, [None], name="x")
        with pytest.raises(TypeError, match="must be a SignatureDef"):
            builder.add_meta_graph_and_variables(sess, ["serve"], {"s": {"x": x}})
    with pytest.raises(OSError, match="SavedModel file does not exist"):
        with tf.Graph().as_default(), tf.Session() as sess:
            tf.saved_model.loader.load(sess, ["serve"], str(tmp_path))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "saved_model_v1.json").write_text('{"format": "tensorweave.saved_model_v1", "version": 1, '
                                                           '"meta_graphs": [{"tags": ["serve"], "file": "../x", '
                                                           '"signature_def": {}, "main_op": null}]}')
    with pytest.raises(LoadError):
        with tf.Graph().as_default(), tf.Session() as sess:
            tf.saved_model.loader.load(sess, ["serve"], str(tmp_path / "bad"))
