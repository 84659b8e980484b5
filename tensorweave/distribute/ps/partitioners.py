"""Variable partitioners (TF2's ``tf.distribute.experimental.partitioners``).

A partitioner says into how many shards a variable is cut along one axis: called with the
variable's ``shape`` and ``dtype`` (and ``axis``, default 0) it returns one count per
dimension, 1 everywhere but ``axis``. ``ParameterServerStrategy`` cuts along axis 0 (rows)
and puts the shards on its parameter servers, the first ``rows % n`` shards one row longer.
The numbers follow TF 2.21 (the tests compare against its answers).

>>> import tensorweave as tw
>>> P = tw.distribute.experimental.partitioners
>>> P.FixedShardsPartitioner(3)([10, 4], tw.float32)
[3, 1]
>>> P.MinSizePartitioner(min_shard_bytes=1024, max_shards=4)([1000000, 32], tw.float32)
[4, 1]
>>> P.MaxSizePartitioner(max_shard_bytes=1024)([100000, 8], tw.float16)
[1563, 1]
"""
import math

from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import TensorShape

__all__ = ["Partitioner", "FixedShardsPartitioner", "MinSizePartitioner", "MaxSizePartitioner"]


def _positive(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Argument `{what}` must be positive. Received: {value!r}")
    return value


def _dims(shape, axis, who):
    dims = TensorShape(shape).as_list()
    if not dims:
        raise ValueError(f"{who}: a scalar variable cannot be partitioned (shape {dims})")
    if not -len(dims) <= axis < len(dims):
        raise ValueError(f"{who}: axis {axis} is out of range for a variable of shape {dims}")
    if dims[axis] is None:
        raise ValueError(f"{who}: the partitioned axis {axis} of shape {dims} must be known")
    return dims, axis % len(dims)


def _element_bytes(dtype, bytes_per_string):
    dtype = _dt.as_dtype(dtype)
    return bytes_per_string if dtype is _dt.string else dtype.size


class Partitioner:
    """Base class: ``partitioner(shape, dtype, axis=0)`` -> the number of shards per dimension."""

    def __call__(self, shape, dtype, axis=0):
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(shape, dtype, axis=0)")


class FixedShardsPartitioner(Partitioner):
    """``num_shards`` shards (fewer when the axis is shorter). TF accepts ``num_shards=0`` and
    fails later; here it is an error at once."""

    def __init__(self, num_shards):
        self._num_shards = _positive(num_shards, "num_shards")

    def __call__(self, shape, dtype, axis=0):
        dims, axis = _dims(shape, axis, type(self).__name__)
        result = [1] * len(dims)
        result[axis] = min(self._num_shards, dims[axis])
        return result


class MinSizePartitioner(Partitioner):
    """As many shards as keep each one at least ``min_shard_bytes`` (one at least), at most
    ``max_shards`` and at most the axis' length."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
        self._min_shard_bytes = _positive(min_shard_bytes, "min_shard_bytes")
        self._max_shards = _positive(max_shards, "max_shards")
        self._bytes_per_string = _positive(bytes_per_string, "bytes_per_string")

    def __call__(self, shape, dtype, axis=0):
        dims, axis = _dims(shape, axis, type(self).__name__)
        total = math.prod(dims) * _element_bytes(dtype, self._bytes_per_string)
        result = [1] * len(dims)
        result[axis] = max(1, min(dims[axis], self._max_shards, math.ceil(total / self._min_shard_bytes)))
        return result


class MaxSizePartitioner(Partitioner):
    """As few shards as keep each one at most ``max_shard_bytes`` (a shard holds at least one
    slice along the axis), capped at ``max_shards`` when given (0 or None: no cap, as TF)."""

    def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
        if isinstance(max_shard_bytes, bool) or not isinstance(max_shard_bytes, int) or max_shard_bytes < 1:
            raise ValueError(f"Argument `max_shard_bytes` must be positive. Received {max_shard_bytes!r}")
        if max_shards is not None and (isinstance(max_shards, bool) or not isinstance(max_shards, int)
                                       or max_shards < 0):
            raise ValueError(f"Argument `max_shards` must be a non-negative integer or None. Received {max_shards!r}")
        self._max_shard_bytes = max_shard_bytes
        self._max_shards = max_shards
        self._bytes_per_string = _positive(bytes_per_string, "bytes_per_string")

    def __call__(self, shape, dtype, axis=0):
        dims, axis = _dims(shape, axis, type(self).__name__)
        slice_bytes = math.prod(dims) // max(dims[axis], 1) * _element_bytes(dtype, self._bytes_per_string)
        per_shard = max(1, self._max_shard_bytes // max(slice_bytes, 1))
        shards = math.ceil(dims[axis] / per_shard)
        if self._max_shards:
            shards = min(self._max_shards, shards)
        result = [1] * len(dims)
        result[axis] = max(1, shards)
        return result
