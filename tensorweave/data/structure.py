"""Element structures of datasets: nested tuples/dicts of components, their specs, and the
flat form the pipeline moves internally.

Inside the pipeline an element travels *flat*: a tuple of NumPy arrays, one per component,
in ``nest.flatten`` order of the dataset's ``element_spec``. Tensors are built only where the
user sees elements (iteration, the argument of a ``map`` function), so chains of
transformations do not pay for wrapping and unwrapping.

As in ``tf.data``, tuples, namedtuples and dicts are structure while a Python **list is a
value** (``[1, 2]`` is one tensor of shape ``(2,)``); lists returned by a ``map`` function
become tuples.

>>> from tensorweave.data import structure
>>> spec, flat = structure.normalize(({"a": [1, 2]}, 3.0))
>>> spec
({'a': TensorSpec(shape=(2,), dtype=tw.int32, name=None)}, TensorSpec(shape=(), dtype=tw.float32, name=None))
>>> [a.dtype.name for a in flat]
['int32', 'float32']
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.convert import to_numpy
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.core.tensor_spec import TensorSpec


def is_structure(x):
    """Tuples (namedtuples too) and dicts nest; everything else, lists included, is a value."""
    return isinstance(x, (tuple, dict))


def lists_to_tuples(x):
    """A ``map`` function's result with lists turned into tuples (tf.data does the same)."""
    if isinstance(x, list):
        return tuple(lists_to_tuples(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, lists_to_tuples(v)) for k, v in x.items()) if type(x) is not dict \
            else {k: lists_to_tuples(v) for k, v in x.items()}
    if isinstance(x, tuple):
        items = [lists_to_tuples(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    return x


def as_array(value, dtype=None):
    """One component as a NumPy array with TF's default dtypes (float32, int32, string)."""
    if isinstance(value, EagerTensor):
        v = value._value
        if dtype is not None and value.dtype is not dtype:
            raise TypeError(f"expected a {dtype.name} tensor, got {value.dtype.name}")
        return v if isinstance(v, np.ndarray) else np.asarray(v)
    if isinstance(value, Tensor):
        raise TypeError(f"tw.data needs values, got the symbolic tensor {value!r}; build datasets "
                        "eagerly (outside tw.function and TF1 graphs)")
    if getattr(value, "_is_variable", False) or hasattr(value, "_tw_tensor_"):
        from tensorweave.core.context import eager_mode
        from tensorweave.core.convert import convert_to_tensor
        with eager_mode():
            return as_array(convert_to_tensor(value), dtype)
    if value is None:
        raise TypeError("None is not a valid dataset component")
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in nest.flatten(list(value))):
        # A list of tensors is one stacked value, like tw.convert_to_tensor makes it.
        value = [_plain(v) for v in value]
    arr = to_numpy(value, dtype)
    return arr if isinstance(arr, np.ndarray) else np.asarray(arr)


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return as_array(v) if isinstance(v, Tensor) else v


def flatten(value):
    """The leaves of a structure, treating lists as values (not as structure)."""
    if isinstance(value, dict):
        out = []
        for k in sorted(value, key=nest._key):
            out.extend(flatten(value[k]))
        return out
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def map_leaves(fn, value):
    """``fn`` applied to each leaf (lists are leaves); the structure is rebuilt."""
    if isinstance(value, dict):
        built = {k: map_leaves(fn, value[k]) for k in value}
        return built if type(value) is dict else type(value)((k, built[k]) for k in value)
    if isinstance(value, tuple):
        items = [map_leaves(fn, v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return fn(value)


def dtype_of(arr):
    return _dt.from_numpy(arr.dtype)


def spec_of(arr):
    return TensorSpec(TensorShape(arr.shape), dtype_of(arr))


def normalize(value):
    """``(element_spec, flat arrays)`` for a structure of values (one dataset element)."""
    arrays = map_leaves(as_array, value)
    return map_leaves(spec_of, arrays), tuple(flatten(arrays))


def flat_specs(spec):
    return nest.flatten(spec)


def pack(spec, flat):
    """Rebuilds an element from its flat components with ``spec``'s structure."""
    return nest.pack_sequence_as(spec, flat)


def to_tensor(arr):
    return EagerTensor(arr, _dt.from_numpy(arr.dtype))


def to_numpy_value(arr):
    """What ``as_numpy_iterator`` yields for a component: arrays, and NumPy scalars for 0-d."""
    return arr if arr.ndim else arr[()]


def flatten_output(value):
    """A user function's result (a structure of tensors/values) as flat arrays plus its structure."""
    value = lists_to_tuples(value)
    leaves = flatten(value)
    return tuple(as_array(v) for v in leaves), value


def relax_shape(a, b):
    """The most specific shape compatible with both (unknown where they differ)."""
    a, b = TensorShape(a), TensorShape(b)
    if a.rank is None or b.rank is None or a.rank != b.rank:
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.as_list(), b.as_list())])


def relax_spec(spec_a, spec_b, what):
    """Spec of a dataset holding elements of both specs (``concatenate``); checks structure and dtypes."""
    try:
        nest.assert_same_structure(spec_a, spec_b)
    except ValueError:
        raise TypeError(f"{what}: incompatible dataset elements: {spec_a} vs. {spec_b} "
                        "(the structures differ)") from None
    fa, fb = nest.flatten(spec_a), nest.flatten(spec_b)
    out = []
    for i, (x, y) in enumerate(zip(fa, fb)):
        if x.dtype is not y.dtype:
            raise TypeError(f"{what}: incompatible dataset elements: component {i} is {x.dtype.name} in "
                            f"one dataset and {y.dtype.name} in the other")
        out.append(TensorSpec(relax_shape(x.shape, y.shape), x.dtype))
    return nest.pack_sequence_as(spec_a, out)


def rank_only(spec):
    """``spec`` with every dimension unknown (kept: the rank and dtype)."""
    return nest.map_structure(
        lambda s: TensorSpec(TensorShape(None if s.shape.rank is None else [None] * s.shape.rank), s.dtype),
        spec)


def describe(spec):
    return ", ".join(f"{fmt(s.shape)} {s.dtype.name}" for s in nest.flatten(spec))
