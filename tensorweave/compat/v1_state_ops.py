"""TF1's in-place variable updates by index (``tf.scatter_update``/``scatter_add``/``scatter_sub``/
``scatter_mul``/``scatter_div``/``scatter_min``/``scatter_max``, the ``scatter_nd_*`` forms,
``batch_scatter_update``), ``count_up_to`` and the initialisation queries
(``is_variable_initialized``, ``report_uninitialized_variables``, ``assert_variables_initialized``).

Each update writes into the variable's storage (``Variable._storage_for_update``: a value read
earlier keeps what it read) and returns the variable's new value, as TF1's ``ref`` output did.
Repeated indices accumulate for the arithmetic forms, as in TF.

>>> import tensorweave.compat.v1 as tf
>>> v = tf.Variable([1.0, 2.0, 3.0, 4.0])
>>> tf.scatter_add(v, [0, 0, 3], [10.0, 5.0, 1.0]).numpy().tolist()
[16.0, 2.0, 3.0, 5.0]
>>> tf.scatter_nd_update(v, [[1], [2]], [0.0, -1.0]).numpy().tolist()
[16.0, 0.0, -1.0, 5.0]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.shape import TensorShape
from tensorweave.ops import array_ops, indexing_ops, math_ops

__all__ = ["scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div", "scatter_min",
           "scatter_max", "scatter_nd_update", "scatter_nd_add", "scatter_nd_sub", "batch_scatter_update",
           "count_up_to", "is_variable_initialized", "report_uninitialized_variables",
           "assert_variables_initialized"]


def _value_infer(inputs, attrs):
    return attrs["shape"], attrs["dtype"]


# np.<ufunc>.at accumulates repeated indices; "update" assigns (the last write wins, as TF's CPU kernel)
_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": None, "Min": np.minimum,
           "Max": np.maximum, "Update": None}


def _check_indices(var, idx, limit, what):
    if idx.size and (idx.min() < 0 or idx.max() >= limit):
        bad = int(idx.max() if idx.max() >= limit else idx.min())
        raise errors.InvalidArgumentError(f"{what}: indices[...] = {bad} is not in [0, {limit}) "
                                          f"for variable '{var.name}'")


def _apply(value, where, updates, kind):
    if kind == "Update":
        value[where] = updates
    elif kind == "Div" and value.dtype.kind in "iu":
        # C++ integer division truncates toward zero; repeated indices divide one after another
        for j, u in zip(np.asarray(where).reshape(-1), updates.reshape((-1,) + value.shape[1:])):
            value[j] = np.trunc(value[j] / u).astype(value.dtype)
    elif kind == "Div":
        np.divide.at(value, where, updates)
    else:
        _UFUNCS[kind].at(value, where, updates)


def _make_kernels(kind):
    def scatter(var, indices, updates, dtype, shape):
        value = var._storage_for_update()
        idx = np.asarray(indices)
        _check_indices(var, idx, value.shape[0], f"scatter_{kind.lower()}")
        upd = np.broadcast_to(np.asarray(updates, dtype=value.dtype), idx.shape + value.shape[1:])
        _apply(value, idx, upd, kind)
        return value

    def scatter_nd(var, indices, updates, dtype, shape):
        value = var._storage_for_update()
        idx = np.asarray(indices)
        k = idx.shape[-1]
        flat = idx.reshape(-1, k)
        for d in range(k):
            _check_indices(var, flat[:, d], value.shape[d], f"scatter_nd_{kind.lower()}")
        upd = np.broadcast_to(np.asarray(updates, dtype=value.dtype), idx.shape[:-1] + value.shape[k:])
        _apply(value, tuple(flat.T), upd.reshape((flat.shape[0],) + value.shape[k:]), kind)
        return value
    return scatter, scatter_nd


for _kind in _UFUNCS:
    register_op(f"ResourceScatter{_kind}V1", infer=_value_infer, stateful=True)
    _k1, _k2 = _make_kernels(_kind)
    register_kernel(f"ResourceScatter{_kind}V1", "CPU")(_k1)
    if _kind in ("Add", "Sub", "Update"):
        register_op(f"ResourceScatterNd{_kind}V1", infer=_value_infer, stateful=True)
        register_kernel(f"ResourceScatterNd{_kind}V1", "CPU")(_k2)


def _variable(ref, what):
    if not getattr(ref, "_is_variable", False):
        raise TypeError(f"tf.{what}: ref must be a Variable, got {type(ref).__name__}")
    return ref


def _scatter(op_type, ref, indices, updates, name, what):
    var = _variable(ref, what)
    ind = convert_to_tensor(indices)
    if not ind.dtype.is_integer:
        raise TypeError(f"tf.{what}: indices must be int32 or int64, got {ind.dtype.name}")
    upd = convert_to_tensor(updates, dtype=var.dtype)
    return execute(get_op(op_type), [var.handle, ind, upd], var._attrs(), name or what)


def _public(kind, nd):
    what = f"scatter_nd_{kind.lower()}" if nd else f"scatter_{kind.lower()}"
    op_type = f"ResourceScatter{'Nd' if nd else ''}{kind}V1"

    def fn(ref, indices, updates, use_locking=kind == "Update", name=None):
        return _scatter(op_type, ref, indices, updates, name, what)
    fn.__name__ = fn.__qualname__ = what
    fn.__doc__ = (f"TF1's ``tf.{what}``: the rows of ``ref`` at ``indices`` {'set to' if kind == 'Update' else kind.lower() + ' with'} "
                  f"``updates`` {'(indices are [..., k] coordinates)' if nd else ''}; returns the new value.")
    return fn


scatter_update, scatter_add, scatter_sub = _public("Update", False), _public("Add", False), _public("Sub", False)
scatter_mul, scatter_div = _public("Mul", False), _public("Div", False)
scatter_min, scatter_max = _public("Min", False), _public("Max", False)
scatter_nd_update, scatter_nd_add, scatter_nd_sub = _public("Update", True), _public("Add", True), _public("Sub", True)


def batch_scatter_update(ref, indices, updates, use_locking=True, name=None):
    """``ref[b..., indices[b..., i]] = updates[b..., i]`` for each batch position ``b`` (the batch
    shape is ``indices``' leading dimensions, known statically)."""
    var = _variable(ref, "batch_scatter_update")
    ind = convert_to_tensor(indices)
    batch = ind.shape.as_list()[:-1]
    if ind.shape.rank is None or None in ind.shape.as_list():
        raise ValueError(f"tf.batch_scatter_update: indices need a static shape, got {ind.shape}")
    if not batch:
        return scatter_update(var, ind, updates, name=name)
    grid = np.stack(np.meshgrid(*[np.arange(b) for b in batch], np.zeros(ind.shape.as_list()[-1], np.int64),
                                indexing="ij")[:-1], axis=-1)
    coords = array_ops.concat([math_ops.cast(array_ops.constant(grid), ind.dtype), array_ops.expand_dims(ind, -1)], -1)
    return scatter_nd_update(var, coords, updates, name=name or "batch_scatter_update")


# ---- count_up_to and initialisation queries ---------------------------------------------------------
register_op("CountUpToV1", infer=lambda i, a: (TensorShape([]), a["dtype"]), stateful=True)


@register_kernel("CountUpToV1", "CPU")
def _count_up_to(var, limit, dtype, shape):
    old = var._read()
    if old >= limit:
        raise errors.OutOfRangeError(f"Reached limit of {limit}")
    var._write(np.asarray(old + 1, dtype=old.dtype))
    return np.array(old, copy=True)


def count_up_to(ref, limit, name=None):
    """Increments the int variable ``ref`` and returns its old value; ``OutOfRangeError`` once it
    has reached ``limit`` (TF1's epoch counters)."""
    var = _variable(ref, "count_up_to")
    if var.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"tf.count_up_to: ref must be an int32 or int64 variable, got {var.dtype.name}")
    return execute(get_op("CountUpToV1"), [var.handle], dict(var._attrs(), limit=int(limit)), name or "CountUpTo")


register_op("VarIsInitializedOp", infer=lambda i, a: (TensorShape([]), _dt.bool_), stateful=True)


@register_kernel("VarIsInitializedOp", "CPU")
def _is_initialized(var):
    return np.array(var._value is not None)


def is_variable_initialized(variable):
    """A bool scalar: whether ``variable`` holds a value yet."""
    var = _variable(variable, "is_variable_initialized")
    return execute(get_op("VarIsInitializedOp"), [var.handle], {}, "IsVariableInitialized")


def _all_variables(var_list):
    from tensorweave.ops import variables
    if var_list is None:
        var_list = variables.global_variables() + variables.local_variables()
    return list(var_list)


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    """A 1-D string tensor of the names of the variables (default: global and local) that are not
    initialized yet."""
    var_list = _all_variables(var_list)
    names = array_ops.constant(np.array([v.name[:-2] if v.name.endswith(":0") else v.name for v in var_list],
                                        dtype=object) if var_list else np.zeros([0], dtype=object), dtype=_dt.string)
    if not var_list:
        return array_ops.identity(names, name=name)
    initialized = array_ops.stack([is_variable_initialized(v) for v in var_list])
    return indexing_ops.boolean_mask(names, math_ops.logical_not(initialized), name=name)


def assert_variables_initialized(var_list=None):
    """An op that raises ``FailedPreconditionError`` when it runs while a variable of ``var_list``
    (default: all) is uninitialized (it reads each one, as TF1's did); None when there are no
    variables or eagerly (eager variables are initialized when created)."""
    from tensorweave.ops import control_flow_ops
    var_list = _all_variables(var_list)
    if not var_list or executing_eagerly():
        return None
    return control_flow_ops.group(*[v.read_value() for v in var_list], name="assert_variables_initialized")
