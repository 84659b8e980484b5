"""TF1-only names that are compositions of tensorweave functions: old spellings
(``initialize_all_variables``, ``floor_div``, ``lin_space``, ``matrix_inverse``...), collection
helpers, ``tf.Print``, ``tf.py_func`` and gradient clipping (``clip_by_global_norm``...).

>>> import tensorweave.compat.v1 as tf
>>> clipped, norm = tf.clip_by_global_norm([tf.constant([3.0, 4.0])], 1.0)
>>> round(float(norm), 3), [round(float(v), 3) for v in clipped[0].numpy()]
(5.0, [0.6, 0.8])
"""
from tensorweave.ops.indexed_slices import IndexedSlices
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops, control_flow_ops, indexing_ops, linalg_ops, math_ops, reduce_ops, variables

__all__ = ["initialize_all_variables", "initialize_local_variables", "initialize_variables", "all_variables",
           "model_variables", "moving_average_variables", "get_collection_ref", "add_to_collections", "floor_div",
           "lin_space", "where_v2", "reverse_v2", "py_func", "Print", "log_sigmoid", "is_tensor", "global_norm",
           "clip_by_norm", "clip_by_global_norm", "matrix_transpose", "matrix_determinant", "matrix_inverse",
           "matrix_diag", "matrix_diag_part", "matrix_set_diag", "diag", "diag_part", "trace", "cross"]


def initialize_all_variables():
    """TF1's old name of ``global_variables_initializer``."""
    return variables.global_variables_initializer()


def initialize_local_variables():
    """TF1's old name of ``local_variables_initializer``."""
    return variables.local_variables_initializer()


def initialize_variables(var_list, name="init"):
    """TF1's old name of ``variables_initializer``."""
    return variables.variables_initializer(var_list, name=name)


def all_variables():
    """TF1's old name of ``global_variables``."""
    return variables.global_variables()


def model_variables(scope=None):
    return get_default_graph().get_collection("model_variables", scope)


def moving_average_variables(scope=None):
    return get_default_graph().get_collection("moving_average_variables", scope)


def get_collection_ref(key):
    """The graph's list for collection ``key`` itself (appending to it adds to the collection)."""
    return get_default_graph().get_collection_ref(key)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def floor_div(x, y, name=None):
    return math_ops.floordiv(x, y, name=name)


def lin_space(start, stop, num, name=None):
    return indexing_ops.linspace(start, stop, num, name=name)


def where_v2(condition, x=None, y=None, name=None):
    return math_ops.where(condition, x, y, name=name)


def reverse_v2(tensor, axis, name=None):
    return indexing_ops.reverse(tensor, axis, name=name)


def py_func(func, inp, Tout, stateful=True, name=None):
    """TF1's ``py_func``: ``func`` on NumPy arrays as an op (``tw.numpy_function``)."""
    from tensorweave.ops.script_ops import numpy_function
    return numpy_function(func, inp, Tout, stateful=stateful, name=name)


def Print(input_, data, message=None, first_n=None, summarize=None, name=None):  # noqa: N802 - TF1's name
    """``input_``, printing ``message`` and ``data`` when it is evaluated (TF1's ``tf.Print``)."""
    from tensorweave.ops.logging_ops import print_
    parts = ([message] if message else []) + list(data)
    printed = print_(*parts, summarize=summarize if summarize is not None else 3)
    if printed is None:        # eagerly printed already
        return array_ops.identity(input_, name=name)
    with control_flow_ops.control_dependencies([printed]):
        return array_ops.identity(input_, name=name)


def log_sigmoid(x, name=None):
    """``log(sigmoid(x)) = -softplus(-x)``, without overflow."""
    return math_ops.negative(math_ops.softplus(math_ops.negative(x)), name=name)


def is_tensor(x):
    return isinstance(x, Tensor) or getattr(x, "_is_variable", False)


def _values(t):
    return t.values if isinstance(t, IndexedSlices) else t


def _scaled(t, scale):
    if t is None:
        return None
    if isinstance(t, IndexedSlices):
        return IndexedSlices(t.values * math_ops.cast(scale, t.values.dtype), t.indices, t.dense_shape)
    return t * math_ops.cast(scale, t.dtype)


def global_norm(t_list, name=None):
    """``sqrt(sum of squares)`` of every tensor in ``t_list`` (None entries are skipped)."""
    squares = [reduce_ops.reduce_sum(math_ops.square(math_ops.cast(_values(convert_to_tensor(t) if not isinstance(
        t, IndexedSlices) else t), "float32"))) for t in t_list if t is not None]
    if not squares:
        return convert_to_tensor(0.0)
    return math_ops.sqrt(math_ops.add_n(squares), name=name)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scales every tensor by ``clip_norm / max(global_norm, clip_norm)``; returns ``(list, global_norm)``."""
    if isinstance(t_list, Tensor) or not hasattr(t_list, "__iter__"):
        raise TypeError("t_list should be a sequence of tensors")
    t_list = list(t_list)
    norm = use_norm if use_norm is not None else global_norm(t_list)
    clip = math_ops.cast(convert_to_tensor(clip_norm), "float32")
    scale = clip / math_ops.maximum(norm, clip)
    return [_scaled(t, scale) for t in t_list], norm


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``t * clip_norm / max(l2norm(t), clip_norm)`` (the norm over ``axes``, default all)."""
    values = convert_to_tensor(_values(t))
    l2 = math_ops.sqrt(reduce_ops.reduce_sum(math_ops.square(values), axis=axes, keepdims=True))
    clip = math_ops.cast(convert_to_tensor(clip_norm), values.dtype)
    out = values * clip / math_ops.maximum(l2, clip)
    if isinstance(t, IndexedSlices):
        return IndexedSlices(out, t.indices, t.dense_shape)
    return array_ops.identity(out, name=name) if name else out


# ---- linear algebra under TF1's top-level names ----------------------------------------------------
def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    return linalg_ops.matrix_transpose(a, name=name, conjugate=conjugate)


def matrix_determinant(input, name=None):  # noqa: A002 - TF1's argument name
    return linalg_ops.det(input, name=name)


def matrix_inverse(input, adjoint=False, name=None):  # noqa: A002
    return linalg_ops.inv(input, adjoint=adjoint, name=name)


def matrix_diag(diagonal, name="diag"):
    return linalg_ops.diag(diagonal, name=name)


def matrix_diag_part(input, name="diag_part"):  # noqa: A002
    return linalg_ops.diag_part(input, name=name)


def matrix_set_diag(input, diagonal, name="set_diag"):  # noqa: A002
    return linalg_ops.set_diag(input, diagonal, name=name)


def diag(diagonal, name=None):
    return linalg_ops.diag(diagonal, name=name)


def diag_part(input, name=None):  # noqa: A002
    return linalg_ops.diag_part(input, name=name)


def trace(x, name=None):
    return linalg_ops.trace(x, name=name)


def cross(a, b, name=None):
    return linalg_ops.cross(a, b, name=name)
