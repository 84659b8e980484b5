"""``tf.estimator.classifier_parse_example_spec`` / ``regressor_parse_example_spec``: the
``tf.io.parse_example`` spec of a canned estimator's features, weight and label.

>>> import tensorweave.compat.v1 as tf
>>> spec = tf.estimator.regressor_parse_example_spec([tf.feature_column.numeric_column("x", shape=2)], "price")
>>> sorted(spec), spec["price"].shape
(['price', 'x'], (1,))
"""
from tensorweave.core import dtypes as _dt
from tensorweave.estimator import feature_column as fc
from tensorweave.io.parsing import FixedLenFeature

__all__ = ["classifier_parse_example_spec", "regressor_parse_example_spec"]


def _spec(feature_columns, label_key, label_feature, weight_column, what):
    columns = list(feature_columns)
    if weight_column is not None:
        columns.append(fc.numeric_column(weight_column) if isinstance(weight_column, str) else weight_column)
    spec = fc.make_parse_example_spec(columns)
    if label_key in spec:
        raise ValueError(f"{what}: label should not be used as feature. label_key: {label_key}, features: "
                         f"{sorted(spec)}")
    spec[label_key] = label_feature
    return spec


def classifier_parse_example_spec(feature_columns, label_key, label_dtype=_dt.int64, label_default=None,
                                  weight_column=None):
    """The features' spec plus ``label_key``: one ``label_dtype`` (int64 or string) value per example."""
    dtype = _dt.as_dtype(label_dtype)
    if dtype not in (_dt.int64, _dt.string):
        raise ValueError(f"classifier_parse_example_spec: label_dtype should be tf.int64 or tf.string, got "
                         f"{dtype.name}")
    return _spec(feature_columns, label_key, FixedLenFeature((1,), dtype, label_default), weight_column,
                 "classifier_parse_example_spec")


def regressor_parse_example_spec(feature_columns, label_key, label_dtype=_dt.float32, label_default=None,
                                 label_dimension=1, weight_column=None):
    """The features' spec plus ``label_key``: ``label_dimension`` ``label_dtype`` values per example."""
    return _spec(feature_columns, label_key,
                 FixedLenFeature((int(label_dimension),), _dt.as_dtype(label_dtype), label_default), weight_column,
                 "regressor_parse_example_spec")
