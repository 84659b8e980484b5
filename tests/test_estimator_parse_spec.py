"""``feature_column.make_parse_example_spec`` and ``tf.estimator.classifier/regressor_parse_example_spec``.
TF_SPEC is TensorFlow 2.21's ``tf.compat.v1.feature_column.make_parse_example_spec`` of the same
columns (the estimator functions add the label's ``FixedLenFeature`` to it, as TF 2.15 did)."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf

fc = tf.feature_column
TF_SPEC = {"age": ((1,), "float32", None), "color": "string", "h": "string", "ident": "int64",
           "w": ((1,), "float32", None), "x": ((2,), "float32", (0.5, 0.5))}


def _columns():
    return [fc.numeric_column("x", shape=2, default_value=0.5), fc.bucketized_column(fc.numeric_column("age"), [30.0]),
            fc.indicator_column(fc.categorical_column_with_vocabulary_list("color", ["red", "green"])),
            fc.categorical_column_with_identity("ident", 4), fc.categorical_column_with_hash_bucket("h", 10)]


def _plain(spec):
    out = {}
    for k, f in spec.items():
        if isinstance(f, tw.io.VarLenFeature):
            out[k] = f.dtype.name
        else:
            d = f.default_value
            out[k] = (tuple(f.shape), f.dtype.name, None if d is None else tuple(np.ravel(d).tolist()))
    return out


def test_parse_example_spec_matches_tensorflow():
    assert _plain(fc.make_parse_example_spec(_columns() + [fc.numeric_column("w")])) == TF_SPEC
    spec = tf.estimator.classifier_parse_example_spec(_columns(), "label", weight_column="w")
    assert _plain(spec) == {**TF_SPEC, "label": ((1,), "int64", None)}
    reg = tf.estimator.regressor_parse_example_spec(_columns(), "price", label_dimension=2)
    assert reg["price"] == tw.io.FixedLenFeature((2,), tf.float32, None) and "w" not in reg
    with pytest.raises(ValueError, match="label should not be used as feature. label_key: x"):
        tf.estimator.classifier_parse_example_spec(_columns(), "x")
    with pytest.raises(ValueError, match="label_dtype should be tf.int64 or tf.string"):
        tf.estimator.classifier_parse_example_spec(_columns(), "label", label_dtype=tf.float32)


def test_spec_parses_examples():
    example = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 2.0])),
        "price": tf.train.Feature(float_list=tf.train.FloatList(value=[3.5]))}))
    spec = tf.estimator.regressor_parse_example_spec([fc.numeric_column("x", shape=2)], "price")
    parsed = tw.io.parse_example([example.SerializeToString()], spec)
    assert parsed["x"].numpy().tolist() == [[1.0, 2.0]] and parsed["price"].numpy().tolist() == [[3.5]]
