"""``tf.estimator.inputs``: input functions over NumPy arrays and pandas frames.

They return an ``input_fn`` that builds a ``tw.data`` pipeline: the examples (shuffled with
``queue_capacity`` as the buffer when ``shuffle``), repeated ``num_epochs`` times (None: forever),
in batches of ``batch_size`` (the last one smaller unless the epochs are endless).

>>> import numpy as np
>>> from tensorweave.estimator import inputs
>>> fn = inputs.numpy_input_fn({"x": np.arange(5.0)}, np.arange(5), batch_size=2, shuffle=False)
>>> [(f["x"].numpy().tolist(), y.numpy().tolist()) for f, y in fn()]
[([0.0, 1.0], [0, 1]), ([2.0, 3.0], [2, 3]), ([4.0], [4])]
"""
import collections

import numpy as np

__all__ = ["numpy_input_fn", "pandas_input_fn"]


def _check_common(name, shuffle, batch_size, num_epochs):
    if not isinstance(shuffle, bool):
        raise ValueError(f"{name}: shuffle must be provided explicitly as a bool (True or False), got {shuffle!r}")
    if batch_size <= 0:
        raise ValueError(f"{name}: batch_size must be positive, got {batch_size}")
    if num_epochs is not None and num_epochs <= 0:
        raise ValueError(f"{name}: num_epochs must be None or positive, got {num_epochs}")


def _pipeline(elements, batch_size, num_epochs, shuffle, queue_capacity, seed):
    from tensorweave.data.dataset import Dataset
    ds = Dataset.from_tensor_slices(elements)
    if shuffle:
        ds = ds.shuffle(queue_capacity, seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat(num_epochs)
    return ds.batch(batch_size)


def numpy_input_fn(x, y=None, batch_size=128, num_epochs=1, shuffle=None, queue_capacity=1000, num_threads=1):
    """An ``input_fn`` over ``x`` (an array or a dict of arrays of one length) and optional ``y``."""
    _check_common("numpy_input_fn", shuffle, batch_size, num_epochs)
    single = not isinstance(x, dict)
    features = collections.OrderedDict([("__x__", x)] if single else sorted(x.items()))
    features = {k: np.asarray(v) for k, v in features.items()}
    lengths = {k: len(v) for k, v in features.items()}
    if y is not None:
        labels = {k: np.asarray(v) for k, v in y.items()} if isinstance(y, dict) else np.asarray(y)
        for k, v in (labels.items() if isinstance(labels, dict) else [("y", labels)]):
            lengths[f"label {k}"] = len(v)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"numpy_input_fn: the arrays must have one length; got {lengths}")

    def input_fn():
        feats = features["__x__"] if single else dict(features)
        elements = feats if y is None else (feats, labels)
        return _pipeline(elements, batch_size, num_epochs, shuffle, queue_capacity, seed=None)
    return input_fn


def pandas_input_fn(x, y=None, batch_size=128, num_epochs=1, shuffle=None, queue_capacity=1000, num_threads=1,
                    target_column="target"):
    """An ``input_fn`` over a pandas ``DataFrame`` (its columns become the features) and optional ``Series``."""
    _check_common("pandas_input_fn", shuffle, batch_size, num_epochs)
    features = {str(c): x[c].to_numpy() for c in x.columns}
    labels = None if y is None else np.asarray(y)
    return numpy_input_fn(features, labels, batch_size, num_epochs, shuffle, queue_capacity, num_threads)
