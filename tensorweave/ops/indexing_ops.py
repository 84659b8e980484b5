"""Indexing and array construction: gather_nd/scatter_nd, one_hot, pad, tile, reverse, range,
slice, boolean_mask, sequence_mask, eye, linspace, meshgrid, repeat, roll, unravel_index.

Shape-like arguments (``paddings``, ``multiples``, ``begin``/``size``, ``shape``) are int32 or
int64 tensors; when they are constants the output's static shape is known at graph
construction. Index errors name the bad position: ``indices[1] = [5, 0] does not index into
param shape [3,4]``.

>>> import tensorweave as tw
>>> x = tw.reshape(tw.range(6), [2, 3])
>>> tw.gather_nd(x, [[0, 2], [1, 0]]).numpy().tolist()
[2, 3]
>>> tw.pad(x, [[0, 0], [1, 1]]).numpy().tolist()
[[0, 0, 1, 2, 0], [0, 3, 4, 5, 0]]
>>> tw.one_hot([0, 2], 3).numpy().tolist()
[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
"""
import builtins

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_like, convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import constant_value
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, P, S, Signature
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.arguments import argument_error, axis_argument, int_argument, shape_argument

__all__ = ["gather_nd", "scatter_nd", "tensor_scatter_nd_add", "tensor_scatter_nd_sub", "tensor_scatter_nd_max",
           "tensor_scatter_nd_min",
           "tensor_scatter_nd_update", "one_hot", "pad", "tile", "reverse", "range", "slice",
           "boolean_mask", "sequence_mask", "eye", "linspace", "meshgrid", "repeat", "roll",
           "unravel_index"]

_ct = convert_to_tensor
_INDEX = (_dt.int32, _dt.int64)
_py_range = builtins.range
_py_slice = builtins.slice


def _index_input(value, what, op_name, like=None):
    """An int32/int64 tensor for an index-like argument (Python lists become int32)."""
    hint = like.dtype if like is not None and like.dtype in _INDEX else _dt.int32
    t = _ct(value, dtype_hint=hint)
    if t.dtype not in _INDEX:
        raise argument_error(op_name, what, f"must be an int32 or int64 tensor (or a list of ints), got "
                             f"{t.dtype.name}" + ("" if isinstance(value, Tensor) else f" from {value!r}"[:80]))
    return t


def _const_ints(t):
    """The integer values of a tensor known at graph construction (or None)."""
    v = constant_value(t)
    return None if v is None else [int(d) for d in np.asarray(v).reshape(-1)]


def _static_list(value, op="op", arg="shape", axes=False):
    """A Python list of ints from a list/array/eager tensor; None for symbolic tensors. Python
    values must be ints, non-negative unless they are ``axes`` (``op`` and ``arg`` name the bad
    argument)."""
    if isinstance(value, Tensor):
        return _const_ints(value)
    if isinstance(value, TensorShape):
        return value.as_list() if value.is_fully_defined() else None
    return list(axis_argument(value, op, arg)) if axes else shape_argument(value, op, arg)


def _unknown_like(t):
    """An unknown TensorShape with the rank of 1-D shape tensor ``t`` when that is static."""
    n = t.shape[0] if t.shape.rank == 1 else None
    return TensorShape(None if n is None else [None] * n)


def _check_index_depth(op_name, idx_shape, m, rank, bd=0):
    if idx_shape.rank == 0:
        raise ValueError(f"{op_name}: indices must have rank >= 1 (the last axis holds index vectors), "
                         "got a scalar")
    if m is not None and rank is not None and bd + m > rank:
        raise ValueError(f"{op_name}: index vectors of length {m} cannot index a tensor of rank {rank}"
                         + (f" after {bd} batch dims" if bd else "")
                         + f" (indices.shape[-1] must be <= {rank - bd})")


# ---- gather_nd / scatter_nd ------------------------------------------------------------------
def _infer_gather_nd(inputs, attrs):
    p, i = inputs
    rules.check_dtype(i, _INDEX, "GatherNd", "indices")
    bd = attrs["batch_dims"]
    if p.shape.rank is None or i.shape.rank is None:
        return TensorShape(None), p.dtype
    m = i.shape[-1] if i.shape.rank else None
    _check_index_depth("gather_nd", i.shape, m, p.shape.rank, bd)
    if bd < 0 or bd >= i.shape.rank:
        raise ValueError(f"gather_nd: batch_dims={bd} must be in [0, {i.shape.rank}) (the rank of indices minus 1)")
    pd, idd = p.shape.as_list(), i.shape.as_list()
    for ax in _py_range(bd):
        if pd[ax] is not None and idd[ax] is not None and pd[ax] != idd[ax]:
            raise ValueError(f"gather_nd: batch dimension {ax} differs: params {fmt(p.shape)} vs. "
                             f"indices {fmt(i.shape)}")
    if m is None:
        return TensorShape(None), p.dtype
    return TensorShape(idd[:-1] + pd[bd + m:]), p.dtype


def _gather_nd_grad(op, g):
    params, indices = op.inputs
    dense_shape = A.shape(params, out_type=indices.dtype)
    return [execute(_SCATTER_ND, [indices, _ct(g), dense_shape], {"batch_dims": op.attrs["batch_dims"]}), None]


register_op("GatherNd", infer=_infer_gather_nd, grad=_gather_nd_grad)
_GATHER_ND = get_op("GatherNd")


def gather_nd(params, indices, batch_dims=0, name=None):
    """Gathers slices of ``params``: each vector along the last axis of ``indices`` indexes the
    leading dimensions of ``params`` (after ``batch_dims`` shared batch dimensions).

    The result has shape ``indices.shape[:-1] + params.shape[batch_dims + indices.shape[-1]:]``.

    >>> import tensorweave as tw
    >>> p = tw.constant([[1, 2], [3, 4]])
    >>> tw.gather_nd(p, [[1], [0]]).numpy().tolist()
    [[3, 4], [1, 2]]
    >>> tw.gather_nd(p, [[1], [0]], batch_dims=1).numpy().tolist()
    [2, 3]
    """
    p = _ct(params)
    i = _index_input(indices, "indices", "gather_nd")
    return execute(_GATHER_ND, [p, i], {"batch_dims": int(batch_dims)}, name)


def _check_updates(op_name, indices, updates, out_shape, bd=0):
    """Static check: updates.shape == indices.shape[:-1] + out_shape[bd + m:]."""
    if indices.shape.rank is None or updates.shape.rank is None or out_shape.rank is None:
        return
    m = indices.shape[-1] if indices.shape.rank else None
    _check_index_depth(op_name, indices.shape, m, out_shape.rank, bd)
    if m is None:
        return
    want = TensorShape(indices.shape.as_list()[:-1] + out_shape.as_list()[bd + m:])
    if not want.is_compatible_with(updates.shape):
        raise ValueError(f"{op_name}: updates must have shape indices.shape[:-1] + shape[{m}:] = {fmt(want)}, "
                         f"got {fmt(updates.shape)}")


def _infer_scatter_nd(inputs, attrs):
    indices, updates, shp = inputs
    rules.check_dtype(indices, _INDEX, "ScatterNd", "indices")
    dims = _const_ints(shp)
    out = _unknown_like(shp) if dims is None else TensorShape(dims)
    _check_updates("scatter_nd", indices, updates, out, attrs["batch_dims"])
    return out, updates.dtype


register_op("ScatterNd", infer=_infer_scatter_nd,
            grad=lambda op, g: [None, gather_nd(g, op.inputs[0], batch_dims=op.attrs["batch_dims"]), None])
_SCATTER_ND = get_op("ScatterNd")


def scatter_nd(indices, updates, shape, name=None):
    """A zero tensor of ``shape`` with ``updates`` added at ``indices`` (duplicates add up).

    >>> import tensorweave as tw
    >>> tw.scatter_nd([[1], [3], [1]], [1.0, 2.0, 3.0], [5]).numpy().tolist()
    [0.0, 4.0, 0.0, 2.0, 0.0]
    """
    i = _index_input(indices, "indices", "scatter_nd")
    u = _ct(updates)
    s = _index_input(A._shape_input(shape) if not isinstance(shape, Tensor) else shape, "shape", "scatter_nd", i)
    return execute(_SCATTER_ND, [i, u, s], {"batch_dims": 0}, name)


def _infer_tensor_scatter(op_name):
    def infer(inputs, attrs):
        t, indices, updates = inputs
        rules.check_dtype(indices, _INDEX, op_name, "indices")
        d = rules.same_dtype([t, updates], "tensor and updates")
        _check_updates(op_name, indices, updates, t.shape)
        return t.shape, d
    return infer


def _scatter_update_grad(op, g):
    _, indices, updates = op.inputs
    return [tensor_scatter_nd_update(g, indices, A.zeros_like(updates)), None, gather_nd(g, indices)]


register_op("TensorScatterAdd", infer=_infer_tensor_scatter("tensor_scatter_nd_add"),
            grad=lambda op, g: [g, None, gather_nd(g, op.inputs[1])])
register_op("TensorScatterSub", infer=_infer_tensor_scatter("tensor_scatter_nd_sub"),
            grad=lambda op, g: [g, None, M.negative(gather_nd(g, op.inputs[1]))])
register_op("TensorScatterUpdate", infer=_infer_tensor_scatter("tensor_scatter_nd_update"),
            grad=_scatter_update_grad)


def _tensor_scatter(op_name, tensor, indices, updates, name):
    t = _ct(tensor)
    i = _index_input(indices, "indices", op_name)
    u = convert_like(updates, t)
    if u.dtype is not t.dtype:
        rules.same_dtype([t, u], "tensor and updates")
    return execute(get_op(op_name), [t, i, u], {}, name)


def tensor_scatter_nd_add(tensor, indices, updates, name=None):
    """``tensor`` with ``updates`` added at ``indices`` (duplicates add up).

    >>> import tensorweave as tw
    >>> tw.tensor_scatter_nd_add(tw.ones([4]), [[0], [2]], [5.0, 6.0]).numpy().tolist()
    [6.0, 1.0, 7.0, 1.0]
    """
    return _tensor_scatter("TensorScatterAdd", tensor, indices, updates, name)


def tensor_scatter_nd_sub(tensor, indices, updates, name=None):
    """``tensor`` with ``updates`` subtracted at ``indices``.

    >>> import tensorweave as tw
    >>> tw.tensor_scatter_nd_sub(tw.ones([3]), [[2]], [4.0]).numpy().tolist()
    [1.0, 1.0, -3.0]
    """
    return _tensor_scatter("TensorScatterSub", tensor, indices, updates, name)


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """``tensor`` with the entries at ``indices`` replaced by ``updates`` (for duplicate
    indices the last update wins; the gradient then flows to every duplicate, as in TF).

    >>> import tensorweave as tw
    >>> tw.tensor_scatter_nd_update(tw.zeros([2, 2]), [[1, 0]], [9.0]).numpy().tolist()
    [[0.0, 0.0], [9.0, 0.0]]
    """
    return _tensor_scatter("TensorScatterUpdate", tensor, indices, updates, name)


def _scatter_extreme_grad(op, g):
    # The gradient goes where the result came from: to the tensor where it kept its value, else
    # to the updates that won (ties share it, as TF's gathered comparison does).
    t, indices, updates = op.inputs
    out = op.outputs[0]
    from_tensor = M.equal(t, out)
    chosen = M.equal(updates, gather_nd(out, indices))
    g_updates = gather_nd(g, indices)
    return [M.where(from_tensor, g, A.zeros_like(g)), None, M.where(chosen, g_updates, A.zeros_like(g_updates))]


register_op("TensorScatterMax", infer=_infer_tensor_scatter("tensor_scatter_nd_max"), grad=_scatter_extreme_grad)
register_op("TensorScatterMin", infer=_infer_tensor_scatter("tensor_scatter_nd_min"), grad=_scatter_extreme_grad)


def tensor_scatter_nd_max(tensor, indices, updates, name=None):
    """``tensor`` where each entry at ``indices`` becomes the maximum of itself and its updates.

    >>> import tensorweave as tw
    >>> tw.tensor_scatter_nd_max(tw.ones([3]), [[0], [2]], [5.0, -6.0]).numpy().tolist()
    [5.0, 1.0, 1.0]
    """
    return _tensor_scatter("TensorScatterMax", tensor, indices, updates, name)


def tensor_scatter_nd_min(tensor, indices, updates, name=None):
    """``tensor`` where each entry at ``indices`` becomes the minimum of itself and its updates.

    >>> import tensorweave as tw
    >>> tw.tensor_scatter_nd_min(tw.ones([3]), [[0], [2]], [5.0, -6.0]).numpy().tolist()
    [1.0, 1.0, -6.0]
    """
    return _tensor_scatter("TensorScatterMin", tensor, indices, updates, name)


# ---- one_hot -------------------------------------------------------------------------------
def _infer_one_hot(inputs, attrs):
    indices, depth, on, off = inputs
    rules.check_dtype(indices, _dt.INTEGER, "OneHot", "indices")
    d = rules.same_dtype([on, off], "on_value and off_value")
    for v, what in ((on, "on_value"), (off, "off_value")):
        if v.shape.rank not in (None, 0):
            raise ValueError(f"one_hot: {what} must be a scalar, got shape {fmt(v.shape)}")
    n = _const_ints(depth)
    if n is not None and n[0] < 0:
        raise ValueError(f"one_hot: depth must be non-negative, got {n[0]}")
    if indices.shape.rank is None:
        return TensorShape(None), d
    r = indices.shape.rank
    axis = attrs["axis"]
    if not -1 <= axis <= r:
        raise ValueError(f"one_hot: axis must be -1 or in [0, {r}] for indices of rank {r}, got {axis}")
    dims = indices.shape.as_list()
    dims.insert(r if axis == -1 else axis, None if n is None else n[0])
    return TensorShape(dims), d


def _one_hot_grad(op, g):
    indices, depth, on, _ = op.inputs
    if not on.dtype.is_floating:
        return [None, None, None, None]
    mask = execute(_ONE_HOT, [indices, depth, A.ones_like(on), A.zeros_like(on)], op.attrs)
    from tensorweave.ops.reduce_ops import reduce_sum
    g_on = reduce_sum(g * mask)
    return [None, None, g_on, reduce_sum(g) - g_on]


register_op("OneHot", infer=_infer_one_hot, grad=_one_hot_grad)
_ONE_HOT = get_op("OneHot")


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """One-hot vectors of length ``depth`` inserted at ``axis`` (default: last).

    Indices outside ``[0, depth)`` give all-``off_value`` vectors. The dtype is ``dtype``, else
    that of ``on_value``/``off_value``, else float32.

    >>> import tensorweave as tw
    >>> tw.one_hot([1, -1], 3, on_value=5, off_value=0).numpy().tolist()
    [[0, 5, 0], [0, 0, 0]]
    """
    i = _ct(indices, dtype_hint=_dt.int32)
    if not i.dtype.is_integer:
        raise TypeError(f"one_hot: indices must be an integer tensor, got {i.dtype.name}")
    if dtype is not None:
        d = _dt.as_dtype(dtype)
    else:
        given = [v for v in (on_value, off_value) if v is not None]
        d = next((v.dtype for v in given if isinstance(v, Tensor)), None)
        if d is None:
            d = _ct(given[0]).dtype if given else _dt.float32
    one, zero = (True, False) if d.is_bool else (1, 0)
    on = _ct(one if on_value is None else on_value, dtype=d if not isinstance(on_value, Tensor) else None)
    off = _ct(zero if off_value is None else off_value, dtype=d if not isinstance(off_value, Tensor) else None)
    if on.dtype is not d or off.dtype is not d:
        raise TypeError(f"one_hot: on_value ({on.dtype.name}) and off_value ({off.dtype.name}) must have "
                        f"the requested dtype {d.name}")
    dep = _ct(int_argument(depth, "one_hot", "depth"), dtype=_dt.int32) if not isinstance(depth, Tensor) else depth
    axis = -1 if axis is None else int_argument(axis, "one_hot", "axis")
    return execute(_ONE_HOT, [i, dep, on, off], {"axis": axis}, name)


# ---- pad -----------------------------------------------------------------------------------
def _infer_pad(op_name):
    def infer(inputs, attrs):
        x, p = inputs[0], inputs[1]
        rules.check_dtype(p, _INDEX, op_name, "paddings")
        if len(inputs) > 2:
            rules.same_dtype([x, inputs[2]], "tensor and constant_values")
            if inputs[2].shape.rank not in (None, 0):
                raise ValueError(f"constant_values must be a scalar, got shape {fmt(inputs[2].shape)}")
        r = x.shape.rank
        if p.shape.rank is not None and r is not None and not p.shape.is_compatible_with([r, 2]):
            raise ValueError(f"paddings must have shape [{r}, 2] for an input of rank {r}, got {fmt(p.shape)}")
        v = constant_value(p)
        if r is None:
            return TensorShape(None if p.shape.rank != 2 or p.shape[0] is None else [None] * p.shape[0]), x.dtype
        if v is None:
            return TensorShape([None] * r), x.dtype
        v = np.asarray(v).reshape(r, 2)
        mode = attrs.get("mode", "CONSTANT")
        off = 1 if mode == "REFLECT" else 0
        dims = []
        for ax, (d, (a, b)) in enumerate(zip(x.shape.as_list(), v.tolist())):
            if a < 0 or b < 0:
                raise ValueError(f"paddings must be non-negative, got {v.tolist()}")
            if mode != "CONSTANT" and d is not None and max(a, b) > d - off:
                raise ValueError(f"{mode} paddings of dimension {ax} must be at most {d - off}, got {[a, b]}")
            dims.append(None if d is None else d + a + b)
        return TensorShape(dims), x.dtype
    return infer


def _pad_grad(op, g):
    x, p, c = op.inputs
    before = _static_list(p)
    if before is not None:
        begin = before[0::2]
    else:
        begin = A.reshape(A.getitem(p, (_py_slice(None), 0)), [-1])
    gx = slice(g, begin, A.shape(x, out_type=p.dtype) if not x.shape.is_fully_defined() else x.shape.as_list())
    from tensorweave.ops.reduce_ops import reduce_sum
    gc = reduce_sum(g) - reduce_sum(gx) if c.dtype.is_floating else None
    return [gx, None, gc]


def _infer_mirror_pad_grad(inputs, attrs):
    g, p = inputs
    v = constant_value(p)
    if g.shape.rank is None:
        return TensorShape(None), g.dtype
    if v is None:
        return TensorShape([None] * g.shape.rank), g.dtype
    v = np.asarray(v).reshape(-1, 2)
    return TensorShape([None if d is None else d - a - b for d, (a, b) in zip(g.shape.as_list(), v.tolist())]), g.dtype


register_op("PadV2", infer=_infer_pad("PadV2"), grad=_pad_grad)
# Gradient rules convert ``g`` with _ct before handing it to execute: a gather downstream
# makes it an IndexedSlices, which kernels cannot read.
register_op("MirrorPad", infer=_infer_pad("MirrorPad"),
            grad=lambda op, g: [execute(get_op("MirrorPadGrad"), [_ct(g), op.inputs[1]], op.attrs), None])
register_op("MirrorPadGrad", infer=_infer_mirror_pad_grad,
            grad=lambda op, g: [execute(get_op("MirrorPad"), [_ct(g), op.inputs[1]], op.attrs), None])


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pads ``tensor``: ``paddings[d] = [before, after]`` entries around dimension ``d``.

    ``mode`` is ``"CONSTANT"`` (``constant_values``), ``"REFLECT"`` (mirror without the edge;
    padding at most ``size - 1``) or ``"SYMMETRIC"`` (mirror with the edge; at most ``size``).

    >>> import tensorweave as tw
    >>> tw.pad(tw.constant([1, 2, 3]), [[2, 1]], "REFLECT").numpy().tolist()
    [3, 2, 1, 2, 3, 2]
    """
    x = _ct(tensor)
    p = _index_input(paddings, "paddings", "pad")
    m = str(mode).upper()
    if m == "CONSTANT":
        if x.dtype.is_bool and isinstance(constant_values, int) and constant_values == 0:
            constant_values = False  # the default pads bools with False (TF's Pad has no value)
        c = convert_like(constant_values, x)
        if c.dtype is not x.dtype:
            rules.same_dtype([x, c], "tensor and constant_values")
        return execute(get_op("PadV2"), [x, p, c], {}, name)
    if m in ("REFLECT", "SYMMETRIC"):
        return execute(get_op("MirrorPad"), [x, p], {"mode": m}, name)
    raise ValueError(f"pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")


# ---- tile ----------------------------------------------------------------------------------
def _infer_tile(inputs, attrs):
    x, mul = inputs
    rules.check_dtype(mul, _INDEX, "Tile", "multiples")
    r = x.shape.rank
    if mul.shape.rank is not None and r is not None and not mul.shape.is_compatible_with([r]):
        raise ValueError(f"multiples must have shape [{r}] (one entry per input dimension), got {fmt(mul.shape)}")
    v = _const_ints(mul)
    if r is None:
        return _unknown_like(mul), x.dtype
    if v is None:
        return TensorShape([None] * r), x.dtype
    if any(m < 0 for m in v):
        raise ValueError(f"multiples must be non-negative, got {v}")
    return TensorShape([None if d is None else d * m for d, m in zip(x.shape.as_list(), v)]), x.dtype


def _tile_grad(op, g):
    x, mul = op.inputs
    from tensorweave.ops.reduce_ops import reduce_sum
    r = x.shape.rank
    mv = _const_ints(mul)
    if x.shape.is_fully_defined() and mv is not None:
        split = [v for pair in zip(mv, x.shape.as_list()) for v in pair]
    else:
        split = A.reshape(A.stack([mul, A.shape(x, out_type=mul.dtype)], axis=1), [-1])
    # g viewed as [m0, d0, m1, d1, ...]: summing the m axes folds the copies back.
    return [reduce_sum(A.reshape(g, split), axis=list(_py_range(0, 2 * r, 2))), None]


register_op("Tile", infer=_infer_tile, grad=_tile_grad)


def tile(input, multiples, name=None):
    """Repeats ``input`` ``multiples[d]`` times along each dimension ``d``.

    >>> import tensorweave as tw
    >>> tw.tile(tw.constant([[1, 2]]), [2, 2]).numpy().tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    x = _ct(input)
    return execute(get_op("Tile"), [x, _index_input(multiples, "multiples", "tile")], {}, name)


# ---- reverse -------------------------------------------------------------------------------
def _normalize_axes(axes, rank, op_name):
    if rank is None:
        return tuple(axes)
    out = [rules.normalize_axis(a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{op_name}: axis {list(axes)} names a dimension more than once")
    return tuple(out)


def _infer_reverse(inputs, attrs):
    x = inputs[0]
    _normalize_axes(attrs["axis"], x.shape.rank, "reverse")
    return x.shape, x.dtype


register_op("ReverseV2", infer=_infer_reverse, grad=lambda op, g: [reverse(g, op.attrs["axis"])])


def reverse(tensor, axis, name=None):
    """Reverses ``tensor`` along each dimension in the list ``axis``.

    >>> import tensorweave as tw
    >>> tw.reverse(tw.constant([[1, 2], [3, 4]]), [-1]).numpy().tolist()
    [[2, 1], [4, 3]]
    """
    x = _ct(tensor)
    axes = _static_list(axis, "reverse", "axis", axes=True)
    if axes is None:
        raise TypeError("reverse: axis must be known when the op is created (a list of ints)")
    return execute(get_op("ReverseV2"), [x], {"axis": _normalize_axes(axes, x.shape.rank, "reverse")}, name)


# ---- range ---------------------------------------------------------------------------------
def _infer_range(inputs, attrs):
    vals = [constant_value(t) for t in inputs]
    for t, what in zip(inputs, ("start", "limit", "delta")):
        if t.shape.rank not in (None, 0):
            raise ValueError(f"range: {what} must be a scalar, got shape {fmt(t.shape)}")
    if any(v is None for v in vals):
        return TensorShape([None]), attrs["dtype"]
    s, l, d = (np.asarray(v).item() for v in vals)
    if d == 0:
        raise ValueError("range: delta must not be 0")
    if (d > 0 and s > l) or (d < 0 and s < l):
        raise ValueError(f"range: requires start {'<=' if d > 0 else '>='} limit when delta "
                         f"{'>' if d > 0 else '<'} 0, got start={s}, limit={l}")
    n = (abs(l - s) + abs(d) - 1) // abs(d) if attrs["dtype"].is_integer else int(np.ceil(abs((l - s) / d)))
    return TensorShape([int(n)]), attrs["dtype"]


register_op("Range", infer=_infer_range, grad=NOT_DIFFERENTIABLE)
_RANGE_ORDER = (_dt.int32, _dt.int64, _dt.bfloat16, _dt.float16, _dt.float32, _dt.float64)


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001 - TF's name
    """``[start, start + delta, ...]`` up to but excluding ``limit``; ``range(n)`` is ``[0, n)``.

    Without ``dtype`` the result takes the widest argument dtype (Python ints are int32,
    floats float32); arguments are cast to it.

    >>> import tensorweave as tw
    >>> tw.range(5).numpy().tolist(), tw.range(1, 2, 0.25).numpy().tolist()
    ([0, 1, 2, 3, 4], [1.0, 1.25, 1.5, 1.75])
    """
    if limit is None:
        start, limit = 0, start
    args = [a if isinstance(a, Tensor) else _ct(a) for a in (start, limit, delta)]
    for a in args:
        if a.dtype not in _RANGE_ORDER:
            raise TypeError(f"range: arguments must be int32, int64 or float tensors, got {a.dtype.name}")
    d = _dt.as_dtype(dtype) if dtype is not None else max((a.dtype for a in args), key=_RANGE_ORDER.index)
    args = [a if a.dtype is d else M.cast(a, d) for a in args]
    return execute(get_op("Range"), args, {"dtype": d}, name)


# ---- slice ---------------------------------------------------------------------------------
def _infer_slice_op(inputs, attrs):
    x, b, s = inputs
    rules.check_dtype(b, _INDEX, "Slice", "begin")
    rules.check_dtype(s, _INDEX, "Slice", "size")
    r = x.shape.rank
    for t, what in ((b, "begin"), (s, "size")):
        if r is not None and t.shape.rank is not None and not t.shape.is_compatible_with([r]):
            raise ValueError(f"slice: {what} must have shape [{r}] (one entry per input dimension), "
                             f"got {fmt(t.shape)}")
    if r is None:
        return _unknown_like(s), x.dtype
    bv, sv = _const_ints(b), _const_ints(s)
    dims = x.shape.as_list()
    out = []
    for ax in _py_range(r):
        d = dims[ax]
        bb = None if bv is None else bv[ax]
        ss = None if sv is None else sv[ax]
        if bb is not None and (bb < 0 or (d is not None and bb > d)):
            raise ValueError(f"slice: begin[{ax}] = {bb} is out of range for dimension {ax} of size {d}")
        if ss is not None and ss < -1:
            raise ValueError(f"slice: size[{ax}] = {ss} must be -1 (to the end) or non-negative")
        if ss is not None and ss != -1 and bb is not None and d is not None and bb + ss > d:
            raise ValueError(f"slice: begin[{ax}] + size[{ax}] = {bb} + {ss} exceeds dimension {ax} of size {d}")
        if ss == -1:
            out.append(None if d is None or bb is None else d - bb)
        else:
            out.append(ss)
    return TensorShape(out), x.dtype


def _slice_grad(op, g):
    x, b, _ = op.inputs
    y = op.outputs[0]
    bv = _const_ints(b)
    if bv is not None and x.shape.is_fully_defined() and y.shape.is_fully_defined():
        paddings = np.array([[bb, d - bb - s] for bb, d, s in zip(bv, x.shape.as_list(), y.shape.as_list())],
                            dtype=b.dtype.np_dtype).reshape(-1, 2)
    else:
        after = A.shape(x, out_type=b.dtype) - b - A.shape(y, out_type=b.dtype)
        paddings = A.stack([b, after], axis=1)
    return [pad(g, paddings), None, None]


register_op("Slice", infer=_infer_slice_op, grad=_slice_grad)


def slice(input_, begin, size, name=None):  # noqa: A001 - TF's name
    """The block of ``input_`` starting at ``begin`` with extent ``size`` (-1: to the end).

    >>> import tensorweave as tw
    >>> x = tw.reshape(tw.range(12), [3, 4])
    >>> tw.slice(x, [1, 1], [-1, 2]).numpy().tolist()
    [[5, 6], [9, 10]]
    """
    x = _ct(input_)
    b = _index_input(begin, "begin", "slice")
    s = _index_input(size, "size", "slice", b)
    if s.dtype is not b.dtype:
        s = M.cast(s, b.dtype)
    return execute(get_op("Slice"), [x, b, s], {}, name)


# ---- boolean_mask / sequence_mask --------------------------------------------------------------
def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """The entries (slices) of ``tensor`` where the bool ``mask`` is true; ``mask`` covers
    dimensions ``axis .. axis + mask.ndim`` of ``tensor``, which become one dimension.

    >>> import tensorweave as tw
    >>> tw.boolean_mask(tw.constant([[1, 2], [3, 4], [5, 6]]), [True, False, True]).numpy().tolist()
    [[1, 2], [5, 6]]
    """
    x = _ct(tensor)
    mk = _ct(mask)
    if mk.dtype is not _dt.bool_:
        raise TypeError(f"boolean_mask: mask must be a bool tensor, got {mk.dtype.name}")
    nm = mk.shape.rank
    if nm is None:
        raise ValueError("boolean_mask: the rank of mask must be known statically")
    if nm == 0:
        raise ValueError("boolean_mask: mask cannot be a scalar")
    axis = 0 if axis is None else int(axis)
    r = x.shape.rank
    if r is not None:
        axis = rules.normalize_axis(axis, r)
        if axis + nm > r:
            raise ValueError(f"boolean_mask: a mask of rank {nm} at axis {axis} does not fit a tensor of "
                             f"shape {fmt(x.shape)}")
        covered = TensorShape(x.shape.as_list()[axis:axis + nm])
        if not covered.is_compatible_with(mk.shape):
            raise ValueError(f"boolean_mask: mask of shape {fmt(mk.shape)} does not match dimensions "
                             f"{axis}..{axis + nm - 1} {fmt(covered)} of the tensor of shape {fmt(x.shape)}")
    if nm > 1 or r is None:
        if r is not None and sum(d is None for d in x.shape.as_list()) <= 1:
            dims = x.shape.as_list()
            new = [-1 if d is None else d for d in dims[:axis]] + [-1] + \
                  [-1 if d is None else d for d in dims[axis + nm:]]
            if new.count(-1) > 1:
                new = None
        else:
            new = None
        if new is None:
            s = A.shape(x)
            new = A.concat([s[:axis], A.reshape(_prod(s[axis:axis + nm]), [1]), s[axis + nm:]], 0)
        x = A.reshape(x, new)
        mk = A.reshape(mk, [-1])
    idx = A.squeeze(M.where(mk), axis=[1])
    return A.gather(x, idx, axis=axis, name=name)


def _prod(t):
    from tensorweave.ops.reduce_ops import reduce_prod
    return reduce_prod(t)


def sequence_mask(lengths, maxlen=None, dtype=_dt.bool_, name=None):
    """``mask[..., j] = j < lengths[...]`` with ``maxlen`` columns (default: ``max(lengths)``).

    >>> import tensorweave as tw
    >>> tw.sequence_mask([1, 3], 4).numpy().astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 1, 0]]
    """
    lens = _ct(lengths, dtype_hint=_dt.int32)
    if not lens.dtype.is_integer:
        raise TypeError(f"sequence_mask: lengths must be an integer tensor, got {lens.dtype.name}")
    if maxlen is None:
        from tensorweave.ops.reduce_ops import reduce_max
        maxlen = M.maximum(reduce_max(lens), 0)
    else:
        maxlen = (_ct(int_argument(maxlen, "sequence_mask", "maxlen"), dtype=lens.dtype)
                  if not isinstance(maxlen, Tensor) else M.cast(maxlen, lens.dtype))
        if maxlen.shape.rank not in (None, 0):
            raise ValueError(f"sequence_mask: maxlen must be a scalar, got shape {fmt(maxlen.shape)}")
    cols = range(0, maxlen, 1, dtype=lens.dtype)
    mask = M.less(cols, A.expand_dims(lens, -1))
    d = _dt.as_dtype(dtype)
    return A.identity(mask, name=name) if d is _dt.bool_ else M.cast(mask, d, name=name)


# ---- eye / linspace / meshgrid -------------------------------------------------------------
def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dt.float32, name=None):
    """Identity matrices of shape ``batch_shape + [num_rows, num_columns]``.

    >>> import tensorweave as tw
    >>> tw.eye(2, 3, dtype=tw.int32).numpy().tolist()
    [[1, 0, 0], [0, 1, 0]]
    """
    d = _dt.as_dtype(dtype)
    rows = _static_list(num_rows, "eye", "num_rows")
    cols = rows if num_columns is None else _static_list(num_columns, "eye", "num_columns")
    batch = [] if batch_shape is None else _static_list(batch_shape, "eye", "batch_shape")
    if rows is not None and cols is not None and batch is not None:
        m = np.eye(rows[0], cols[0], dtype=d.np_dtype)
        return A.constant(np.broadcast_to(m, tuple(batch) + m.shape).copy(), dtype=d, name=name or "eye")
    # Sizes known only at run time: compare row and column numbers.
    nr = _ct(num_rows, dtype_hint=_dt.int32)
    nc = nr if num_columns is None else _ct(num_columns, dtype_hint=_dt.int32)
    m = M.cast(M.equal(A.expand_dims(range(nr), 1), A.expand_dims(range(M.cast(nc, nr.dtype)), 0)), d)
    if batch_shape is None:
        return A.identity(m, name=name)
    target = A.concat([M.cast(A._shape_input(batch_shape), _dt.int32), A.shape(m)], 0)
    return A.broadcast_to(m, target, name=name)


def linspace(start, stop, num, name=None, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included) along ``axis``;
    ``start`` and ``stop`` may be tensors (broadcast together). Differentiable in both.

    >>> import tensorweave as tw
    >>> tw.linspace(0.0, 1.0, 5).numpy().tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if isinstance(start, Tensor):
        a, b = start, convert_like(stop, start)
    elif isinstance(stop, Tensor):
        a, b = convert_like(start, stop), stop
    else:  # Python numbers: float32, as TF's linspace of Python ints
        a = _ct(start, dtype_hint=_dt.float32)
        b = convert_like(stop, a)
    if a.dtype is not b.dtype:
        rules.same_dtype([a, b], "start and stop")
    if not a.dtype.is_floating:
        raise TypeError(f"linspace: start and stop must be float tensors, got {a.dtype.name}")
    shape = rules.binary()([a, b], {})[0]
    if shape.rank is None:
        raise ValueError("linspace: the ranks of start and stop must be known statically")
    r = shape.rank
    axis = int_argument(axis, "linspace", "axis")
    if not -(r + 1) <= axis <= r:
        raise ValueError(f"linspace: axis {axis} is out of range for a result of rank {r + 1}")
    axis %= r + 1
    n = _static_list(num, "linspace", "num")
    if n is not None:
        n = n[0]
        if n < 0:
            raise ValueError(f"linspace: num must be non-negative, got {n}")
        frac = np.arange(n, dtype=np.float64) / builtins.max(n - 1, 1)
        steps = A.constant(frac.astype(a.dtype.np_dtype))
    else:
        cnt = _ct(num)
        denom = M.cast(M.maximum(cnt - 1, 1), a.dtype)
        steps = M.divide(M.cast(range(cnt), a.dtype), denom)
    steps = A.reshape(steps, [1] * axis + [-1] + [1] * (r - axis))
    if a.shape != b.shape or not a.shape.is_fully_defined():
        a, b = a + M.zeros_like(b), b + M.zeros_like(a)  # broadcast both to the result's shape
    if r:
        a, b = A.expand_dims(a, axis), A.expand_dims(b, axis)
    return M.add(a, (b - a) * steps, name=name)


def meshgrid(*args, **kwargs):
    """Coordinate grids from 1-D tensors; ``indexing="xy"`` (default, Cartesian: the first two
    outputs have shape ``[len(y), len(x), ...]``) or ``"ij"`` (matrix indexing).

    >>> import tensorweave as tw
    >>> X, Y = tw.meshgrid(tw.constant([1, 2, 3]), tw.constant([4, 5]))
    >>> X.numpy().tolist(), Y.numpy().tolist()
    ([[1, 2, 3], [1, 2, 3]], [[4, 4, 4], [5, 5, 5]])
    """
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"meshgrid: unexpected keyword arguments {sorted(kwargs)}")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [A.reshape(_ct(x), [-1]) for x in args]
    n = len(xs)
    if n == 0:
        return []
    sizes = [x.shape[0] for x in xs]
    shapes = [[1] * n for _ in xs]
    for i in _py_range(n):
        shapes[i][i] = -1
    if indexing == "xy" and n > 1:
        shapes[0][0], shapes[0][1] = 1, -1
        shapes[1][0], shapes[1][1] = -1, 1
        sizes[0], sizes[1] = sizes[1], sizes[0]
        order = [1, 0] + list(_py_range(2, n))
    else:
        order = list(_py_range(n))
    if all(s is not None for s in sizes):
        target = sizes
    else:
        target = A.stack([A.size(xs[i]) for i in order])
    return [A.broadcast_to(A.reshape(x, s), target) for x, s in zip(xs, shapes)]


# ---- repeat / roll / unravel_index -----------------------------------------------------------
def _infer_repeat(inputs, attrs):
    x, rep = inputs
    rules.check_dtype(rep, _INDEX, "Repeat", "repeats")
    if rep.shape.rank not in (None, 0, 1):
        raise ValueError(f"repeat: repeats must be a scalar or 1-D, got shape {fmt(rep.shape)}")
    if x.shape.rank is None:
        return TensorShape(None), x.dtype
    axis = attrs["axis"]
    dims = x.shape.as_list()
    d = dims[axis]
    rv = _const_ints(rep)
    if rv is not None and d is not None and len(rv) not in (1, d):
        raise ValueError(f"repeat: repeats has {len(rv)} entries but dimension {axis} has size {d}")
    if rv is not None and any(v < 0 for v in rv):
        raise ValueError(f"repeat: repeats must be non-negative, got {rv}")
    if rv is None or d is None:
        dims[axis] = None
    else:
        dims[axis] = d * rv[0] if len(rv) == 1 else builtins.sum(rv)
    return TensorShape(dims), x.dtype


register_op("Repeat", infer=_infer_repeat,
            grad=lambda op, g: [execute(get_op("RepeatGrad"), [_ct(g), op.inputs[1], op.inputs[0]], op.attrs), None])
register_op("RepeatGrad", infer=lambda i, a: (i[2].shape, i[0].dtype),
            grad=lambda op, g: [execute(get_op("Repeat"), [_ct(g), op.inputs[1]], op.attrs), None, None])


def repeat(input, repeats, axis=None, name=None):
    """Repeats each element (slice) along ``axis`` ``repeats`` times (a scalar, or one count per
    element); with ``axis=None`` the input is flattened first.

    >>> import tensorweave as tw
    >>> tw.repeat(tw.constant([[1, 2], [3, 4]]), [2, 1], axis=0).numpy().tolist()
    [[1, 2], [1, 2], [3, 4]]
    """
    x = _ct(input)
    if axis is None:
        x = A.reshape(x, [-1])
        axis = 0
    if x.shape.rank is None:
        raise ValueError("repeat: the rank of input must be known statically")
    if x.shape.rank == 0:
        raise ValueError("repeat: input must have rank >= 1 when axis is given")
    axis = rules.normalize_axis(int_argument(axis, "repeat", "axis"), x.shape.rank)
    rep = _index_input(repeats, "repeats", "repeat")
    return execute(get_op("Repeat"), [x, rep], {"axis": axis}, name)


def _infer_roll(inputs, attrs):
    x, s = inputs
    rules.check_dtype(s, _INDEX, "Roll", "shift")
    if x.shape.rank is not None:
        for a in attrs["axis"]:
            rules.normalize_axis(a, x.shape.rank)
    n = len(attrs["axis"])
    if s.shape.rank is not None and not (s.shape.rank == 0 or (s.shape.rank == 1 and s.shape[0] in (None, 1, n))):
        raise ValueError(f"roll: shift must be a scalar or have one entry per axis ({n}), got shape {fmt(s.shape)}")
    return x.shape, x.dtype


register_op("Roll", infer=_infer_roll,
            grad=lambda op, g: [execute(get_op("Roll"), [_ct(g), M.negative(op.inputs[1])], op.attrs), None])


def roll(input, shift, axis, name=None):
    """Rotates elements by ``shift`` positions along ``axis`` (ints or lists of equal length;
    shifts along the same axis add up).

    >>> import tensorweave as tw
    >>> tw.roll(tw.constant([1, 2, 3, 4]), 1, 0).numpy().tolist()
    [4, 1, 2, 3]
    """
    x = _ct(input)
    axes = _static_list(axis, "roll", "axis", axes=True)
    if axes is None:
        raise TypeError("roll: axis must be known when the op is created (an int or list of ints)")
    r = x.shape.rank
    if r is not None:
        axes = [rules.normalize_axis(a, r) for a in axes]
    s = _index_input(shift, "shift", "roll")
    return execute(get_op("Roll"), [x, s], {"axis": tuple(axes)}, name)


def _infer_unravel(inputs, attrs):
    i, dims = inputs
    rules.check_dtype(i, _INDEX, "UnravelIndex", "indices")
    rules.same_dtype([i, dims], "indices and dims")
    if dims.shape.rank not in (None, 1):
        raise ValueError(f"unravel_index: dims must be 1-D, got shape {fmt(dims.shape)}")
    if i.shape.rank is None:
        return TensorShape(None), i.dtype
    return TensorShape([dims.shape[0] if dims.shape.rank == 1 else None] + i.shape.as_list()), i.dtype


register_op("UnravelIndex", infer=_infer_unravel, grad=NOT_DIFFERENTIABLE)


def unravel_index(indices, dims, name=None):
    """Converts flat indices into coordinate vectors for an array of shape ``dims``; the result
    has shape ``[len(dims)] + indices.shape``.

    >>> import tensorweave as tw
    >>> tw.unravel_index([1, 5], [2, 3]).numpy().tolist()
    [[0, 1], [1, 2]]
    """
    i = _index_input(indices, "indices", "unravel_index")
    d = _index_input(dims, "dims", "unravel_index", i)
    if d.dtype is not i.dtype:
        d = M.cast(d, i.dtype)
    return execute(get_op("UnravelIndex"), [i, d], {}, name)


# ---- SBP rules (core/sbp.py) ------------------------------------------------------------------------
# Slice, PadV2, MirrorPad and Tile take begin/size, paddings, multiples as input values: an axis
# whose output size equals its input size (attr _out_shapes, from shape inference) is untouched
# (begin 0 and full size, no padding, multiple 1) and splits through; all are linear.
def _untouched(inputs, attrs):
    shapes = attrs.get("_out_shapes")
    x = inputs[0]
    if not shapes or len(shapes[0]) != x.rank:
        return []
    return [i for i in builtins.range(x.rank) if x.shape[i] is not None and x.shape[i] == shapes[0][i]]


def _untouched_sbp(partial, local=None, constants=()):
    """Untouched axes split through; a cut axis (sliced, padded, tiled) gives partial sums: each
    rank runs the op on its piece embedded in zeros (``sbp_rules.embed_hook``), ``constants``
    (a pad's value) kept by the first rank only."""
    cut = sbp_rules.linear_cut_rule(
        lambda inputs, attrs: [a for a in builtins.range(inputs[0].rank) if a not in _untouched(inputs, attrs)],
        constants)

    def fn(inputs, attrs):
        for i in _untouched(inputs, attrs):
            yield Signature([S(i)] + [B] * (len(inputs) - 1), [S(i)], local)
        yield from cut(inputs, attrs)
        yield partial, [P]
    return sbp_rules.signatures(fn)


def _trailing(q, idx_rank, a):
    """The updates/output axis of params axis ``a`` (>= q) in gather_nd/scatter_nd."""
    return idx_rank - 1 + a - q


def _gather_nd_sbp(inputs, attrs):
    params, idx = inputs
    q = idx.shape[-1] if idx.rank and idx.shape[-1] is not None else None
    for k in builtins.range(idx.rank - 1):
        yield [B, S(k)], [S(k)]
    if q is not None:
        for a in builtins.range(q, params.rank):
            yield [S(a), B], [S(_trailing(q, idx.rank, a))]
    yield [P, B], [P]


def _tensor_scatter_sbp(linear):
    def fn(inputs, attrs):
        t, idx, upd = inputs
        q = idx.shape[-1] if idx.rank and idx.shape[-1] is not None else None
        if q is not None:
            for a in builtins.range(q, t.rank):
                yield [S(a), B, S(_trailing(q, idx.rank, a))], [S(a)]
        if linear:
            yield [P, B, P], [P]
        if linear == "add":         # each rank adds its rows of updates to its share of the tensor
            for k in builtins.range(idx.rank - 1):
                yield [P, S(k), S(k)], [P]
    return sbp_rules.signatures(fn)


def _scatter_nd_sbp(inputs, attrs):
    idx, upd, _ = inputs
    for k in builtins.range(idx.rank - 1):
        yield [S(k), S(k), B], [P]
    yield [B, P, B], [P]


def _one_hot_sbp(inputs, attrs):
    """Indices split -> the output splits there; on/off values are combined linearly."""
    idx = inputs[0]
    a = attrs["axis"] % (idx.rank + 1)
    for i in builtins.range(idx.rank):
        yield [S(i), B, B, B], [S(i if i < a else i + 1)]
    yield [B, B, P, P], [P]


def _attr_axes(x, axes):
    if axes is None:
        return set(builtins.range(x.rank))
    return {a % x.rank for a in ((axes,) if isinstance(axes, int) else axes)} if x.rank else set()


def _axes_not(attr, n_in=1, linear=True):
    """Every axis not in attr ``attr`` splits through; partial sums pass (the op is linear), and
    a split axis in ``attr`` (reversed, rolled, repeated) gives partial sums of embedded pieces."""
    cut = sbp_rules.linear_cut_rule(lambda inputs, attrs: sorted(_attr_axes(inputs[0], attrs[attr])))

    def fn(inputs, attrs):
        x = inputs[0]
        axes = _attr_axes(x, attrs[attr])
        for i in builtins.range(x.rank):
            if i not in axes:
                yield [S(i)] * n_in + [B] * (len(inputs) - n_in), [S(i)]
        if linear:
            yield [P] + [B] * (len(inputs) - 1), [P]
            if n_in == 1:
                yield from cut(inputs, attrs)
    return sbp_rules.signatures(fn)


def _repeat_grad_sbp(inputs, attrs):
    g, _, x = inputs
    axis = attrs["axis"] % x.rank if attrs["axis"] is not None else None
    if axis is not None:
        for i in builtins.range(x.rank):
            if i != axis:
                yield [S(i), B, S(i)], [S(i)]
    yield [P, B, B], [P]


def _unravel_sbp(inputs, attrs):
    yield from (([S(i), B], [S(i + 1)]) for i in builtins.range(inputs[0].rank))


_sig = sbp_rules.signatures
get_op("GatherNd").sbp = _sig(_gather_nd_sbp)
get_op("ScatterNd").sbp = _sig(_scatter_nd_sbp)
get_op("TensorScatterAdd").sbp = get_op("TensorScatterSub").sbp = _tensor_scatter_sbp("add")
get_op("TensorScatterUpdate").sbp = _tensor_scatter_sbp("update")
get_op("TensorScatterMax").sbp = get_op("TensorScatterMin").sbp = _tensor_scatter_sbp(None)
get_op("OneHot").sbp = _sig(_one_hot_sbp)
get_op("PadV2").sbp = _untouched_sbp([P, B, P], constants=(2,))
# (REFLECT/SYMMETRIC reject an empty axis, even unpadded: a rank with an empty piece makes zeros)
get_op("MirrorPad").sbp = get_op("MirrorPadGrad").sbp = _untouched_sbp([P, B], sbp_rules.zeros_if_empty(0))
get_op("Tile").sbp = _untouched_sbp([P, B])
get_op("Slice").sbp = _untouched_sbp([P, B, B], sbp_rules.shape_input_hook(2))   # size: local; begin: 0
get_op("ReverseV2").sbp = _axes_not("axis")
get_op("Roll").sbp = _axes_not("axis")
get_op("Repeat").sbp = _axes_not("axis")
get_op("RepeatGrad").sbp = _sig(_repeat_grad_sbp)
get_op("UnravelIndex").sbp = _sig(_unravel_sbp)
get_op("Range").sbp = sbp_rules.BOXES_TO_B     # made from scalar B inputs
