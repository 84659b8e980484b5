"""Numeric preprocessing layers: Rescaling, Normalization (with ``adapt``), Discretization (with
``adapt``), CategoryEncoding, IntegerLookup.

``adapt(data)`` takes a NumPy array, a tensor or a ``tw.data.Dataset`` (of arrays, or of
``(x, y)`` pairs, whose ``x`` is used) and sets the layer's state from it.

>>> import numpy as np
>>> from tensorweave import keras
>>> norm = keras.layers.Normalization()
>>> norm.adapt(np.array([[1.0], [3.0]], "float32"))
>>> norm(np.array([[3.0]], "float32")).numpy().tolist()
[[1.0]]
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.engine.layer import Layer


def _adapt_array(data):
    """All of ``data`` as one NumPy array (datasets are concatenated along their first axis)."""
    from tensorweave.data import Dataset
    if isinstance(data, Dataset):
        parts = []
        for el in data:
            if isinstance(el, (tuple, list)):
                el = el[0]
            parts.append(np.asarray(el.numpy() if hasattr(el, "numpy") else el))
        if not parts:
            raise ValueError("adapt: the dataset is empty")
        return np.concatenate([p if p.ndim else p[None] for p in parts], 0)
    if hasattr(data, "numpy"):
        return np.asarray(data.numpy())
    return np.asarray(data)


class Rescaling(Layer):
    """``inputs * scale + offset`` (integer images become floats)."""

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
        self.offset = offset
        self.supports_masking = True

    def call(self, inputs):
        x = tw.cast(inputs, self.compute_dtype)
        scale = tw.cast(self.scale, x.dtype)
        offset = tw.cast(self.offset, x.dtype)
        return x * scale + offset

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        as_json = (lambda v: v if isinstance(v, (int, float)) else np.asarray(v).tolist())
        return {**super().get_config(), "scale": as_json(self.scale), "offset": as_json(self.offset)}


class Normalization(Layer):
    """``(x - mean) / max(sqrt(variance), epsilon)`` per feature along ``axis`` (``invert=True``
    undoes it); the statistics come from ``mean``/``variance`` or from ``adapt``."""

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs):
        super().__init__(**kwargs)
        if axis is None:
            self.axis = ()
        elif isinstance(axis, int):
            self.axis = (axis,)
        else:
            self.axis = tuple(axis)
        if (mean is None) != (variance is None):
            raise ValueError(f"Normalization: give both mean and variance, or neither; got mean={mean}, "
                             f"variance={variance}")
        self.input_mean = mean
        self.input_variance = variance
        self.invert = bool(invert)
        self.supports_masking = True

    def _stat_shape(self, input_shape):
        rank = len(input_shape)
        keep = [a % rank for a in self.axis]
        for a in keep:
            if input_shape[a] is None:
                raise ValueError(f"Normalization layer '{self.name}': axis {a} must have a known size; got input "
                                 f"shape {tuple(input_shape)}")
        return [input_shape[i] if i in keep else 1 for i in range(rank)], keep

    def build(self, input_shape):
        self._broadcast, keep = self._stat_shape(input_shape)
        n = [input_shape[a] for a in keep]
        if self.input_mean is None:
            self.adapt_mean = self.add_weight(shape=n, name="mean", initializer="zeros", trainable=False)
            self.adapt_variance = self.add_weight(shape=n, name="variance", initializer="ones", trainable=False)
            self.count = self.add_weight(shape=(), name="count", initializer="zeros", dtype="int64", trainable=False)
        self.built = True

    def adapt(self, data, batch_size=None, steps=None):
        x = _adapt_array(data).astype(np.float64)
        if not self.built:
            self.build(x.shape)
        rank = x.ndim
        keep = [a % rank for a in self.axis]
        red = tuple(i for i in range(rank) if i not in keep)
        mean = x.mean(axis=red)
        var = x.var(axis=red)
        self.adapt_mean.assign(mean.reshape(self.adapt_mean.shape.as_list()))
        self.adapt_variance.assign(var.reshape(self.adapt_variance.shape.as_list()))
        self.count.assign(int(np.prod([x.shape[i] for i in red])))

    def _stats(self, dtype):
        if self.input_mean is not None:
            mean = np.broadcast_to(np.asarray(self.input_mean, np.float64), [self._broadcast[a % len(self._broadcast)]
                                   for a in self.axis] if self.axis else [])
            var = np.broadcast_to(np.asarray(self.input_variance, np.float64), mean.shape)
            mean, var = tw.constant(mean, dtype), tw.constant(var, dtype)
        else:
            mean, var = tw.cast(self.adapt_mean, dtype), tw.cast(self.adapt_variance, dtype)
        return tw.reshape(mean, self._broadcast), tw.reshape(var, self._broadcast)

    def call(self, inputs):
        from tensorweave.keras import backend
        x = tw.cast(inputs, self.compute_dtype)
        mean, var = self._stats(x.dtype)
        std = tw.maximum(tw.sqrt(var), backend.epsilon())
        return mean + x * std if self.invert else (x - mean) / std

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        as_json = (lambda v: v if v is None or isinstance(v, (int, float)) else np.asarray(v).tolist())
        return {**super().get_config(), "axis": list(self.axis), "invert": self.invert,
                "mean": as_json(self.input_mean), "variance": as_json(self.input_variance)}


def _encode(idx, depth, output_mode, dtype, count_weights=None):
    """int ids -> one_hot / multi_hot / count vectors, as Keras' CategoryEncoding (a rank-1 input is
    one sample for multi_hot/count, a batch of scalars for one_hot)."""
    if output_mode == "int":
        return idx
    rank = idx.shape.rank
    if output_mode == "one_hot":
        if rank >= 2 and idx.shape.as_list()[-1] == 1:
            idx = tw.squeeze(idx, -1)
        return tw.one_hot(idx, depth, dtype=dtype)
    oh = tw.one_hot(idx, depth, dtype=dtype)
    if count_weights is not None:
        oh = oh * tw.expand_dims(tw.cast(count_weights, dtype), -1)
    axis = 0 if rank == 1 else rank - 1
    if output_mode == "multi_hot":
        return tw.reduce_max(oh, axis=axis)
    if output_mode == "count":
        return tw.reduce_sum(oh, axis=axis)
    raise ValueError(f"output_mode must be one of 'int', 'one_hot', 'multi_hot', 'count'; got {output_mode!r}")


class CategoryEncoding(Layer):
    """Integer ids in ``[0, num_tokens)`` as one-hot, multi-hot or count vectors."""

    def __init__(self, num_tokens=None, output_mode="multi_hot", sparse=False, **kwargs):
        super().__init__(**kwargs)
        if num_tokens is None or num_tokens < 1:
            raise ValueError(f"CategoryEncoding: num_tokens must be a positive int, got {num_tokens}")
        if output_mode not in ("one_hot", "multi_hot", "count"):
            raise ValueError(f"CategoryEncoding: output_mode must be 'one_hot', 'multi_hot' or 'count', got "
                             f"{output_mode!r}")
        if sparse:
            raise ValueError("CategoryEncoding: sparse=True needs sparse tensors, which tensorweave does not have")
        self.num_tokens = int(num_tokens)
        self.output_mode = output_mode
        self.sparse = False

    def call(self, inputs, count_weights=None):
        idx = tw.cast(inputs, tw.int32)
        if isinstance(idx, tw.core.tensor.EagerTensor) and idx.shape.num_elements():
            lo, hi = int(tw.reduce_min(idx)), int(tw.reduce_max(idx))
            if lo < 0 or hi >= self.num_tokens:
                raise ValueError(f"CategoryEncoding layer '{self.name}': input values must be in the range "
                                 f"0 <= values < num_tokens with num_tokens={self.num_tokens}; got min {lo}, max {hi}")
        return _encode(idx, self.num_tokens, self.output_mode, self.compute_dtype, count_weights)

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens, "output_mode": self.output_mode,
                "sparse": self.sparse}


class Discretization(Layer):
    """Bucket index of each value: ``i`` with ``bin_boundaries[i-1] <= x < bin_boundaries[i]``; with
    ``num_bins``, ``adapt`` places the boundaries at the data's quantiles."""

    def __init__(self, bin_boundaries=None, num_bins=None, epsilon=0.01, output_mode="int", sparse=False, **kwargs):
        kwargs.setdefault("dtype", "int64" if output_mode == "int" else None)
        if kwargs["dtype"] is None:
            kwargs.pop("dtype")
        super().__init__(**kwargs)
        if bin_boundaries is not None and num_bins is not None:
            raise ValueError("Discretization: give bin_boundaries or num_bins, not both")
        if bin_boundaries is None and num_bins is None:
            raise ValueError("Discretization: give bin_boundaries, or num_bins and call adapt()")
        if output_mode not in ("int", "one_hot", "multi_hot", "count"):
            raise ValueError(f"Discretization: output_mode must be 'int', 'one_hot', 'multi_hot' or 'count', got "
                             f"{output_mode!r}")
        self.bin_boundaries = None if bin_boundaries is None else [float(b) for b in bin_boundaries]
        self.num_bins = num_bins
        self.epsilon = epsilon
        self.output_mode = output_mode
        self.sparse = bool(sparse)

    def adapt(self, data, batch_size=None, steps=None):
        if self.num_bins is None:
            raise ValueError("Discretization.adapt needs num_bins")
        x = np.sort(_adapt_array(data).astype(np.float64).ravel())
        qs = np.arange(1, self.num_bins) / self.num_bins
        self.bin_boundaries = np.quantile(x, qs, method="lower").tolist()

    def call(self, inputs):
        if self.bin_boundaries is None:
            raise ValueError(f"Discretization layer '{self.name}' has no bin boundaries: call adapt() first")
        x = tw.cast(inputs, tw.float64)
        bounds = tw.constant(np.asarray(self.bin_boundaries, np.float64))
        idx = tw.reduce_sum(tw.cast(tw.greater_equal(tw.expand_dims(x, -1), bounds), tw.int64), axis=-1)
        if self.output_mode == "int":
            return idx
        return _encode(tw.cast(idx, tw.int32), len(self.bin_boundaries) + 1, self.output_mode, tw.float32)

    def get_config(self):
        return {**super().get_config(), "bin_boundaries": self.bin_boundaries, "num_bins": self.num_bins,
                "epsilon": self.epsilon, "output_mode": self.output_mode, "sparse": self.sparse}
