"""Array ops: constants, placeholders, shapes, reshaping, joining, slicing, gathering.

>>> import tensorweave as tw
>>> x = tw.reshape(tw.range(6), [2, 3])
>>> x[:, ::-1].numpy().tolist()
[[2, 1, 0], [5, 4, 3]]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules, upcalls
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor, to_numpy
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import constant_value
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, P, Partial, S, Signature
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import rules
from tensorweave.ops.arguments import argument_error, int_argument, shape_argument, shape_array

_ct = convert_to_tensor


# ---- constants and placeholders --------------------------------------------------------------
register_op("Const", infer=lambda inputs, a: (TensorShape(a["value"].shape), a["dtype"]))
register_op("Placeholder", infer=lambda inputs, a: (a["shape"], a["dtype"]),
            bind=lambda op: {"node_name": op.name})
register_op("PlaceholderWithDefault", infer=lambda inputs, a: (a["shape"], inputs[0].dtype),
            grad=lambda op, g: [g])
_CONST = get_op("Const")


def constant(value, dtype=None, shape=None, name="Const"):
    """A tensor holding ``value`` (TF's defaults: Python floats are float32, ints int32).

    >>> import tensorweave as tw
    >>> tw.constant(1.5, shape=[2]).numpy()
    array([1.5, 1.5], dtype=float32)
    """
    if isinstance(value, EagerTensor) and dtype is None and shape is None:
        arr = value.numpy()
    else:
        if isinstance(value, Tensor):
            value = value.numpy()
        arr = to_numpy(value, dtype)
    if shape is not None:
        shape = tuple(as_shape(shape).as_list())
        if arr.size == 1:
            arr = np.broadcast_to(arr.reshape(()), shape)
        elif arr.size == int(np.prod(shape)):
            arr = arr.reshape(shape)
        else:
            raise TypeError(f"constant: cannot give a value of {arr.size} elements the shape {list(shape)}")
    d = _dt.from_numpy(arr.dtype)
    if executing_eagerly():
        return EagerTensor(arr, d)
    return execute(_CONST, [], {"value": arr, "dtype": d}, name)


def placeholder(dtype, shape=None, name=None):
    """A graph input that a Session feeds (``feed_dict``); its feeds are shape-checked."""
    if executing_eagerly():
        raise RuntimeError("tw.placeholder() is not compatible with eager execution. "
                           "Hint: call tw.compat.v1.disable_eager_execution() first, or use tw.function.")
    return execute(get_op("Placeholder"), [], {"dtype": _dt.as_dtype(dtype), "shape": as_shape(shape)},
                   name or "Placeholder")


def placeholder_with_default(input, shape, name=None):
    x = _ct(input)
    return execute(get_op("PlaceholderWithDefault"), [x], {"shape": as_shape(shape)}, name)


# ---- identity and gradient control -----------------------------------------------------------
register_op("Identity", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=lambda op, g: [g])
register_op("StopGradient", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=NOT_DIFFERENTIABLE)
register_op("IdentityN", infer=lambda i, a: [(t.shape, t.dtype) for t in i],
            num_outputs=lambda a: a["n"], grad=lambda op, *g: list(g))
_IDENTITY = get_op("Identity")


def identity(input, name=None):
    return execute(_IDENTITY, [_ct(input)], {}, name)


def stop_gradient(input, name=None):
    return execute(get_op("StopGradient"), [_ct(input)], {}, name)


# ---- shapes --------------------------------------------------------------------------------
register_op("Shape", infer=lambda i, a: (TensorShape([i[0].shape.rank]), a["out_type"]),
            grad=NOT_DIFFERENTIABLE)
register_op("Size", infer=lambda i, a: (TensorShape([]), a["out_type"]), grad=NOT_DIFFERENTIABLE)
register_op("Rank", infer=lambda i, a: (TensorShape([]), _dt.int32), grad=NOT_DIFFERENTIABLE)


def shape(input, out_type=_dt.int32, name=None):
    """The dynamic shape of ``input`` as a 1-D integer tensor."""
    return execute(get_op("Shape"), [_ct(input)], {"out_type": _dt.as_dtype(out_type)}, name)


def size(input, out_type=_dt.int32, name=None):
    return execute(get_op("Size"), [_ct(input)], {"out_type": _dt.as_dtype(out_type)}, name)


def rank(input, name=None):
    return execute(get_op("Rank"), [_ct(input)], {}, name)


def _shape_input(shape_like, op="op", arg="shape", allow_unknown=False, dtype=None):
    """A 1-D int tensor for a shape argument (list, tuple, TensorShape or tensor); Python values
    are checked (see :func:`arguments.shape_argument`) and name ``op`` and ``arg`` when bad."""
    if isinstance(shape_like, TensorShape):
        shape_like = shape_like.as_list()
    if isinstance(shape_like, Tensor):
        return shape_like
    if isinstance(shape_like, (list, tuple)) and any(isinstance(d, Tensor) for d in shape_like):
        return stack([_ct(d, dtype=_dt.int32) if not isinstance(d, Tensor) else d for d in shape_like])
    dims = shape_argument(shape_like, op, arg, allow_unknown, dtype)
    return _ct(shape_array(dims))


def reshape_target(in_dims, target):
    """``target`` with its -1 resolved for an input of shape ``in_dims``. With zero elements, TF's
    rule: the -1 takes the product of the input's nonzero dimensions over the target's
    (``reshape(zeros([0, 3]), [0, -1])`` has shape [0, 3])."""
    n = int(np.prod(in_dims)) if in_dims else 1
    known = int(np.prod([d for d in target if d != -1])) if target else 1
    if known == 0 and n == 0:
        num = int(np.prod([d for d in in_dims if d != 0]))
        den = int(np.prod([d for d in target if d not in (0, -1)]))
        if num % den == 0:
            return [num // den if d == -1 else d for d in target]
    if known == 0 or n % known:
        raise ValueError(f"Cannot reshape a tensor with {n} elements to shape {list(target)}")
    return [n // known if d == -1 else d for d in target]


def _infer_reshape(inputs, attrs):
    x, s = inputs
    target = constant_value(s)
    if s.shape.rank not in (None, 1):
        raise ValueError(f"shape must be 1-D, got a tensor of shape {fmt(s.shape)}")
    if target is None:
        n = s.shape[0] if s.shape.rank == 1 else None
        return TensorShape(None if n is None else [None] * n), x.dtype
    target = [int(d) for d in target]
    if sum(d == -1 for d in target) > 1:
        raise ValueError(f"only one dimension of the new shape may be -1, got {target}")
    n = x.shape.num_elements()
    known = int(np.prod([d for d in target if d != -1])) if target else 1
    if -1 in target:
        if n is not None:
            target = reshape_target(x.shape.as_list(), target)
        else:
            target = [None if d == -1 else d for d in target]
    elif n is not None and n != known:
        raise ValueError(f"Cannot reshape a tensor with {n} elements to shape {target} ({known} elements)")
    return TensorShape(target), x.dtype


register_op("Reshape", infer=_infer_reshape,
            grad=lambda op, g: [reshape(g, shape(op.inputs[0])), None])
_RESHAPE = get_op("Reshape")


def reshape(tensor, shape, name=None):
    """Gives ``tensor`` a new shape with the same elements; one dimension may be -1."""
    x = _ct(tensor)
    if isinstance(shape, (list, tuple)) and executing_eagerly() and not any(isinstance(d, Tensor) for d in shape):
        s = EagerTensor(shape_array(shape_argument(shape, "reshape", allow_unknown=True)))
    else:
        s = _shape_input(shape, "reshape", allow_unknown=True)
    return execute(_RESHAPE, [x, s], {}, name)


def _infer_broadcast_to(inputs, attrs):
    x, s = inputs
    target = rules.shape_of(constant_value(s))
    if target is None:
        return TensorShape(None if s.shape.rank != 1 or s.shape[0] is None else [None] * s.shape[0]), x.dtype
    if x.shape.rank is not None:
        try:
            from tensorweave.core.shape import broadcast_static
            out = broadcast_static(x.shape, target)
        except ValueError:
            out = None
        if out is None or out != target and out.is_fully_defined() and target.is_fully_defined():
            raise ValueError(f"Cannot broadcast a tensor of shape {fmt(x.shape)} to shape {fmt(target)}")
    return target, x.dtype


register_op("BroadcastTo", infer=_infer_broadcast_to,
            grad=lambda op, g: [sum_to_like(g, op.inputs[0]), None])


def broadcast_to(input, shape, name=None):
    return execute(get_op("BroadcastTo"), [_ct(input), _shape_input(shape, "broadcast_to")], {}, name)


register_op("SumToLike", infer=lambda i, a: (i[1].shape, i[0].dtype),
            grad=lambda op, g: [broadcast_to(g, shape(op.inputs[0])), None])


def sum_to_like(grad, like, name=None):
    """Sums ``grad`` over broadcast dimensions so that it has ``like``'s shape (used by gradients)."""
    gs, ls = grad.shape, like.shape
    if gs.is_fully_defined() and gs == ls:
        return grad
    return execute(get_op("SumToLike"), [grad, like], {}, name)


# ---- filling ---------------------------------------------------------------------------------
def _infer_fill(inputs, attrs):
    s, v = inputs
    target = rules.shape_of(constant_value(s))
    if v.shape.rank not in (None, 0):
        raise ValueError(f"fill value must be a scalar, got shape {fmt(v.shape)}")
    if target is None:
        return TensorShape(None if s.shape.rank != 1 or s.shape[0] is None else [None] * s.shape[0]), v.dtype
    return target, v.dtype


register_op("Fill", infer=_infer_fill, grad=lambda op, g: [None, reduce_all_sum(g)])
register_op("ZerosLike", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=NOT_DIFFERENTIABLE)
register_op("OnesLike", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=NOT_DIFFERENTIABLE)


def reduce_all_sum(g):
    from tensorweave.ops.reduce_ops import reduce_sum
    return reduce_sum(g)


def fill(dims, value, name=None, _op="fill"):
    """A tensor of shape ``dims`` filled with the scalar ``value``.

    >>> import tensorweave as tw
    >>> tw.fill([2], 7).numpy()
    array([7, 7], dtype=int32)
    """
    v = _ct(value)
    if v.shape.rank not in (None, 0):  # checked here too: eager execution skips the shape rule
        raise argument_error(_op, "value", f"must be a scalar, got shape {fmt(v.shape)}")
    return execute(get_op("Fill"), [_shape_input(dims, _op, "dims" if _op == "fill" else "shape",
                                                 dtype=v.dtype.np_dtype), v], {}, name)


def _python_shape(shape):
    return not isinstance(shape, Tensor) and not (
        isinstance(shape, (list, tuple)) and any(isinstance(d, Tensor) for d in shape))


def zeros(shape, dtype=_dt.float32, name=None):
    """A tensor of zeros; ``shape`` is a list or a 1-D int tensor."""
    dtype = _dt.as_dtype(dtype)
    if executing_eagerly() and _python_shape(shape):
        return EagerTensor(np.zeros(shape_argument(shape, "zeros", dtype=dtype.np_dtype), dtype.np_dtype), dtype)
    return fill(shape, constant(np.zeros((), dtype.np_dtype)), name=name, _op="zeros")


def ones(shape, dtype=_dt.float32, name=None):
    """A tensor of ones; ``shape`` is a list or a 1-D int tensor."""
    dtype = _dt.as_dtype(dtype)
    if executing_eagerly() and _python_shape(shape):
        return EagerTensor(np.ones(shape_argument(shape, "ones", dtype=dtype.np_dtype), dtype.np_dtype), dtype)
    return fill(shape, constant(np.ones((), dtype.np_dtype)), name=name, _op="ones")


def zeros_like(input, dtype=None, name=None):
    x = _ct(input)
    if dtype is not None and _dt.as_dtype(dtype) is not x.dtype:
        return zeros(shape(x), dtype)
    return execute(get_op("ZerosLike"), [x], {}, name)


def ones_like(input, dtype=None, name=None):
    x = _ct(input)
    if dtype is not None and _dt.as_dtype(dtype) is not x.dtype:
        return ones(shape(x), dtype)
    return execute(get_op("OnesLike"), [x], {}, name)


# ---- joining and splitting -------------------------------------------------------------------
def _infer_pack(inputs, attrs):
    d = rules.same_dtype(inputs, "values")
    s = inputs[0].shape
    for t in inputs[1:]:
        if not s.is_compatible_with(t.shape):
            raise ValueError(f"Shapes of all inputs must match: {fmt(inputs[0].shape)} != {fmt(t.shape)}")
        s = s.merge_with(t.shape)
    if s.rank is None:
        return TensorShape(None), d
    axis = rules.normalize_axis(attrs["axis"], s.rank + 1)
    dims = s.as_list()
    dims.insert(axis, len(inputs))
    return TensorShape(dims), d


register_op("Pack", infer=_infer_pack, grad=lambda op, g: list(unstack(g, num=len(op.inputs), axis=op.attrs["axis"])))


def stack(values, axis=0, name="stack"):
    """Stacks rank-R tensors into one rank-(R+1) tensor along ``axis``; an empty list gives an
    empty float32 vector, as in TF."""
    axis = int_argument(axis, "stack", "axis")
    if isinstance(values, (list, tuple)) and not values and axis in (0, -1):
        return constant(np.zeros((0,), np.float32), name=name)
    values = _same_dtype_values(values, "stack")
    return execute(get_op("Pack"), values, {"axis": axis}, name)


def _same_dtype_values(values, op_name):
    """Tensors for a list input: Python values take the first tensor's dtype; mixed tensor
    dtypes raise here too (eager execution skips the shape rule that would catch them)."""
    values = list(values)
    if not values:
        raise ValueError(f"{op_name} expects a non-empty list of tensors")
    first = next((v for v in values if isinstance(v, Tensor)), None)
    if first is None:
        try:  # only Python values: their common dtype ([1, 2.5] is float32)
            dtype = _dt.as_dtype(to_numpy(values).dtype)
        except (TypeError, ValueError):
            dtype = _ct(values[0]).dtype
    else:
        dtype = first.dtype
    out = [v if isinstance(v, Tensor) else _ct(v, dtype=dtype) for v in values]
    if any(v.dtype is not out[0].dtype for v in out):
        rules.same_dtype(out, "values")
    return out


def _infer_unpack(inputs, attrs):
    s = inputs[0].shape
    axis = rules.normalize_axis(attrs["axis"], s.rank)
    dims = s.as_list()
    if dims[axis] is not None and dims[axis] != attrs["num"]:
        raise ValueError(f"unstack: dimension {axis} has size {dims[axis]}, not num={attrs['num']}")
    del dims[axis]
    return [(TensorShape(dims), inputs[0].dtype)] * attrs["num"]


register_op("Unpack", infer=_infer_unpack, num_outputs=lambda a: a["num"],
            grad=lambda op, *g: [stack(list(g), axis=op.attrs["axis"])])


def unstack(value, num=None, axis=0, name="unstack"):
    x = _ct(value)
    axis = int_argument(axis, "unstack", "axis")
    if num is None:
        if x.shape.rank is None or x.shape[axis] is None:
            raise ValueError(f"unstack: cannot infer num from shape {fmt(x.shape)}; pass num=")
        num = x.shape[axis]
    out = execute(get_op("Unpack"), [x], {"axis": axis, "num": num}, name)
    return list(out) if isinstance(out, tuple) else [out]


upcalls.install(constant=constant, placeholder=placeholder, stack=stack, unstack=unstack)   # what core makes


def _infer_concat(inputs, attrs):
    d = rules.same_dtype(inputs, "values")
    ranks = {t.shape.rank for t in inputs if t.shape.rank is not None}
    if len(ranks) > 1:
        raise ValueError(f"concat: all inputs must have the same rank, got shapes "
                         f"{', '.join(fmt(t.shape) for t in inputs)}")
    if not ranks:
        return TensorShape(None), d
    r = ranks.pop()
    if r == 0:
        raise ValueError("concat: cannot concatenate scalars (use stack)")
    axis = rules.normalize_axis(attrs["axis"], r)
    out = [None] * r
    total = 0
    for t in inputs:
        if t.shape.rank is None:
            total = None
            continue
        for i, dim in enumerate(t.shape.as_list()):
            if i == axis:
                total = None if total is None or dim is None else total + dim
            elif dim is not None:
                if out[i] is not None and out[i] != dim:
                    raise ValueError(f"concat along axis {axis}: dimension {i} differs "
                                     f"({', '.join(fmt(t.shape) for t in inputs)})")
                out[i] = dim
    out[axis] = total
    return TensorShape(out), d


def _concat_grad(op, g):
    axis = op.attrs["axis"]
    sizes = [t.shape[axis] if t.shape.rank is not None else None for t in op.inputs]
    if all(s is not None for s in sizes):
        return split(g, sizes, axis=axis)
    rank = next((t.shape.rank for t in op.inputs if t.shape.rank is not None), None)
    if rank is None:
        raise NotImplementedError(
            f"concat gradient needs the inputs' rank; got shapes {', '.join(fmt(t.shape) for t in op.inputs)}")
    # Sizes known only when it runs (a sequence grown in a while loop): slice at running offsets.
    from tensorweave.ops.indexing_ops import slice as _slice
    axis = axis % rank
    unit = constant([1 if i == axis else 0 for i in range(rank)], _dt.int32)
    offset, grads = constant(0, _dt.int32), []
    for t in op.inputs:
        size = shape(t, out_type=_dt.int32)
        grads.append(_slice(g, unit * offset, size))
        offset = offset + size[axis]
    return grads


register_op("ConcatV2", infer=_infer_concat, grad=_concat_grad)


def concat(values, axis, name="concat"):
    values = _same_dtype_values(values, "concat")
    if len(values) == 1:
        return identity(values[0], name=name)
    return execute(get_op("ConcatV2"), values, {"axis": int_argument(axis, "concat", "axis")}, name)


def _infer_split(inputs, attrs):
    x = inputs[0]
    sizes = attrs["sizes"]
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype)] * len(sizes)
    axis = rules.normalize_axis(attrs["axis"], x.shape.rank)
    dims = x.shape.as_list()
    if dims[axis] is not None and sum(sizes) != dims[axis]:
        raise ValueError(f"split: sizes {list(sizes)} do not add up to dimension {axis} of size {dims[axis]}")
    out = []
    for s in sizes:
        d = list(dims)
        d[axis] = s
        out.append((TensorShape(d), x.dtype))
    return out


register_op("Split", infer=_infer_split, num_outputs=lambda a: len(a["sizes"]),
            grad=lambda op, *g: [concat(list(g), op.attrs["axis"])])


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Splits ``value`` along ``axis`` into equal parts (an int) or parts of given sizes (a list)."""
    x = _ct(value)
    axis = int_argument(axis, "split", "axis")
    if not isinstance(num_or_size_splits, (list, tuple, np.ndarray, Tensor)):
        n = int_argument(num_or_size_splits, "split", "num_or_size_splits", 1)
        d = x.shape[axis] if x.shape.rank is not None else None
        if d is None:
            raise ValueError("split: the split dimension must be known to split evenly")
        if n <= 0 or d % n:
            raise ValueError(f"split: dimension {axis} of size {d} cannot be split into {n} equal parts")
        sizes = (d // n,) * n
    else:
        sizes = [int_argument(s, "split", "num_or_size_splits")
                 for s in (num_or_size_splits.numpy().tolist() if isinstance(num_or_size_splits, EagerTensor)
                           else num_or_size_splits)]
        if -1 in sizes:
            d = x.shape[axis]
            sizes[sizes.index(-1)] = d - (sum(sizes) + 1)
        sizes = tuple(sizes)
    out = execute(get_op("Split"), [x], {"axis": axis, "sizes": sizes}, name)
    return list(out) if isinstance(out, tuple) else [out]


# ---- dims --------------------------------------------------------------------------------
def _infer_expand(inputs, attrs):
    s = inputs[0].shape
    if s.rank is None:
        return TensorShape(None), inputs[0].dtype
    axis = rules.normalize_axis(attrs["axis"], s.rank + 1)
    d = s.as_list()
    d.insert(axis, 1)
    return TensorShape(d), inputs[0].dtype


register_op("ExpandDims", infer=_infer_expand, grad=lambda op, g: [reshape(g, shape(op.inputs[0]))])


def expand_dims(input, axis, name=None):
    return execute(get_op("ExpandDims"), [_ct(input)], {"axis": int_argument(axis, "expand_dims", "axis")}, name)


def _infer_squeeze(inputs, attrs):
    s = inputs[0].shape
    if s.rank is None:
        return TensorShape(None), inputs[0].dtype
    axes = attrs["axis"]
    d = s.as_list()
    if axes:
        axes = [rules.normalize_axis(a, s.rank) for a in axes]
        for a in axes:
            if d[a] is not None and d[a] != 1:
                raise ValueError(f"Can not squeeze dim[{a}], expected a dimension of 1, got {d[a]}")
        return TensorShape([x for i, x in enumerate(d) if i not in axes]), inputs[0].dtype
    if None in d:
        return TensorShape(None), inputs[0].dtype
    return TensorShape([x for x in d if x != 1]), inputs[0].dtype


register_op("Squeeze", infer=_infer_squeeze, grad=lambda op, g: [reshape(g, shape(op.inputs[0]))])


def squeeze(input, axis=None, name=None):
    if axis is not None and not isinstance(axis, (list, tuple)):
        axis = [axis]
    axis = tuple(int_argument(a, "squeeze", "axis") for a in axis or ())
    return execute(get_op("Squeeze"), [_ct(input)], {"axis": axis}, name)


def _infer_transpose(inputs, attrs):
    s = inputs[0].shape
    perm = attrs["perm"]
    if s.rank is None:
        return TensorShape(None if perm is None else [None] * len(perm)), inputs[0].dtype
    if perm is None:
        return TensorShape(s.as_list()[::-1]), inputs[0].dtype
    if sorted(perm) != list(range(s.rank)):
        raise ValueError(f"perm {list(perm)} is not a permutation of the {s.rank} dimensions")
    d = s.as_list()
    return TensorShape([d[p] for p in perm]), inputs[0].dtype


def _transpose_grad(op, g):
    perm = op.attrs["perm"]
    if perm is None:
        return [transpose(g)]
    return [transpose(g, list(np.argsort(perm)))]


register_op("Transpose", infer=_infer_transpose, grad=_transpose_grad)


def transpose(a, perm=None, conjugate=False, name="transpose"):
    perm = None if perm is None else tuple(int_argument(p, "transpose", "perm") for p in perm)
    return execute(get_op("Transpose"), [_ct(a)], {"perm": perm}, name)


# ---- slicing (x[...]) ------------------------------------------------------------------------
def _static_index(shape, spec):
    """Result shape of basic NumPy indexing on a partially known shape."""
    if shape.rank is None:
        return TensorShape(None)
    dims = shape.as_list()
    probes = []
    for sentinel in (1000003, 1000033):
        probe = [d if d is not None else sentinel for d in dims]
        probes.append(np.empty(probe, dtype=np.bool_)[spec].shape if np.prod(probe) < 2**40
                      else _broadcast_probe(probe, spec))
    return TensorShape([a if a == b else None for a, b in zip(*probes)])


def _broadcast_probe(probe, spec):
    return np.broadcast_to(np.empty((), np.bool_), probe)[spec].shape


def _infer_slice(inputs, attrs):
    s = inputs[0].shape
    try:
        if s.rank is None:
            return TensorShape(None), inputs[0].dtype
        probe = [d if d is not None else 1000003 for d in s.as_list()]
        np.broadcast_to(np.empty((), np.bool_), probe)[attrs["spec"]]
    except IndexError as e:
        raise ValueError(f"Invalid slice {_spec_str(attrs['spec'])} for shape {fmt(s)}: {e}") from None
    dims = s.as_list()
    shapes = []
    for sentinel in (1000003, 1000033):
        probe = [d if d is not None else sentinel for d in dims]
        shapes.append(np.broadcast_to(np.empty((), np.bool_), probe)[attrs["spec"]].shape)
    return TensorShape([a if a == b else None for a, b in zip(*shapes)]), inputs[0].dtype


def _spec_str(spec):
    def one(s):
        if s is Ellipsis:
            return "..."
        if s is None:
            return "newaxis"
        if isinstance(s, slice):
            return ":".join("" if v is None else str(v) for v in (s.start, s.stop, s.step))
        return str(s)
    return "[" + ", ".join(one(s) for s in spec) + "]"


# Gradient rules that hand ``g`` to execute convert it first: when a gather consumes the op's
# output, ``g`` arrives as an IndexedSlices, which kernels cannot read.
register_op("StridedSlice", infer=_infer_slice,
            grad=lambda op, g: [execute(get_op("StridedSliceGrad"), [_ct(g), op.inputs[0]], op.attrs)])
register_op("StridedSliceGrad", infer=lambda i, a: (i[1].shape, i[0].dtype),
            grad=lambda op, g: [execute(get_op("StridedSlice"), [_ct(g)], op.attrs), None])


def _normalize_spec(key):
    if not isinstance(key, tuple):
        key = (key,)
    out = []
    for k in key:
        if isinstance(k, EagerTensor):
            k = int(k)
        if isinstance(k, slice):
            k = slice(*(int(v) if isinstance(v, EagerTensor) else v for v in (k.start, k.stop, k.step)))
        if isinstance(k, (np.integer,)):
            k = int(k)
        if not (k is None or k is Ellipsis or isinstance(k, (int, slice))):
            raise TypeError(f"Only integers, slices (`:`), ellipsis (`...`), tw.newaxis (`None`) and "
                            f"scalar integer tensors are valid indices, got {k!r}")
        out.append(k)
    return tuple(out)


def getitem(tensor, key):
    """``tensor[key]``: NumPy basic indexing (ints, slices with negative steps, ``...``, ``None``)."""
    x = _ct(tensor)
    keys = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Tensor) and not isinstance(k, EagerTensor) for k in keys):
        if len(keys) == 1:
            return gather(x, key)
        raise TypeError("Symbolic tensor indices are supported only as a single index (x[i]).")
    return execute(get_op("StridedSlice"), [x], {"spec": _normalize_spec(key)}, "strided_slice")


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0, var=None, name=None):
    """TF's ``strided_slice`` with constant ``begin``/``end``/``strides`` and bit masks: the same
    slice as ``input_[...]`` written with Python indexing (which is what it builds).

    >>> import tensorweave as tw
    >>> tw.strided_slice(tw.constant([1, 2, 3, 4]), [1], [4], [2]).numpy().tolist()
    [2, 4]
    """
    def ints(v, arg):
        v = v.numpy().tolist() if isinstance(v, EagerTensor) else v
        return [int_argument(e, "strided_slice", arg) for e in v]
    begin, end = ints(begin, "begin"), ints(end, "end")
    strides = [1] * len(begin) if strides is None else ints(strides, "strides")
    if not len(begin) == len(end) == len(strides):
        raise argument_error("strided_slice", "begin", f"end and strides must have equal lengths, got "
                             f"{len(begin)}, {len(end)} and {len(strides)}")
    key = []
    for i, (b, e, st) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if ellipsis_mask & bit:
            key.append(Ellipsis)
        elif new_axis_mask & bit:
            key.append(None)
        elif shrink_axis_mask & bit:
            key.append(b)
        else:
            key.append(slice(None if begin_mask & bit else b, None if end_mask & bit else e, st))
    return getitem(input_, tuple(key))


# ---- gather ---------------------------------------------------------------------------------
def _infer_gather(inputs, attrs):
    p, i = inputs
    rules.check_dtype(i, (_dt.int32, _dt.int64), "Gather", "indices")
    axis, bd = attrs["axis"], attrs["batch_dims"]
    if p.shape.rank is None or i.shape.rank is None:
        return TensorShape(None), p.dtype
    axis = rules.normalize_axis(axis, p.shape.rank)
    pd, idd = p.shape.as_list(), i.shape.as_list()
    return TensorShape(pd[:axis] + idd[bd:] + pd[axis + 1:]), p.dtype


def _gather_grad(op, g):
    from tensorweave.ops.indexed_slices import IndexedSlices
    params, indices = op.inputs
    axis, bd = op.attrs["axis"], op.attrs["batch_dims"]
    if axis == 0 and bd == 0:
        if params.shape.is_fully_defined() and indices.shape.is_fully_defined():
            # Static shapes where known: a graph (and the global planner) then sees the values' shape.
            inner = params.shape.as_list()
            values = reshape(g, [-1] + inner[1:])
            return [IndexedSlices(values, reshape(indices, [-1]), np.array(inner, dtype=np.int64)), None]
        pshape = shape(params, out_type=_dt.int64)
        values_shape = concat([reshape(size(indices, out_type=_dt.int64), [1]), pshape[1:]], 0)
        return [IndexedSlices(reshape(g, values_shape), reshape(indices, [-1]), pshape), None]
    return [execute(get_op("GatherGrad"), [_ct(g), indices, params], op.attrs), None]


register_op("GatherV2", infer=_infer_gather, grad=_gather_grad)
register_op("GatherGrad", infer=lambda i, a: (i[2].shape, i[0].dtype),
            grad=lambda op, g: [gather(g, op.inputs[1], axis=op.attrs["axis"], batch_dims=op.attrs["batch_dims"]),
                                None, None])


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """Gathers slices of ``params`` along ``axis`` at ``indices`` (gradient: IndexedSlices)."""
    p = _ct(params)
    i = _ct(indices, dtype_hint=_dt.int32)
    batch_dims = int_argument(batch_dims, "gather", "batch_dims")
    if batch_dims < 0 and i.shape.rank is not None:
        batch_dims += i.shape.rank  # counted from the end of indices, as in TF
    if axis is None:
        axis = batch_dims
    axis = int_argument(axis, "gather", "axis")
    return execute(get_op("GatherV2"), [p, i], {"axis": axis, "batch_dims": batch_dims}, name)


# ---- segment sums (densifying sparse gradients) ---------------------------------------------
def _infer_useg(inputs, attrs):
    data, ids, n = inputs
    num = constant_value(n)
    if data.shape.rank is None or ids.shape.rank is None:
        return TensorShape(None), data.dtype
    rest = data.shape.as_list()[ids.shape.rank:]
    return TensorShape([None if num is None else int(num)] + rest), data.dtype


def _useg_grad(op, g):
    ids = op.inputs[1]
    known = constant_value(ids)
    if known is not None and (not known.size or known.min() >= 0):
        return [gather(g, ids), None, None]
    # Entries with a negative segment id were dropped: they get a zero gradient.
    from tensorweave.ops.math_ops import maximum, where
    vals = gather(g, maximum(ids, 0))
    keep = ids >= 0
    for _ in range((g.shape.rank or 1) - 1):
        keep = expand_dims(keep, -1)
    return [where(keep, vals, zeros_like(vals)), None, None]


register_op("UnsortedSegmentSum", infer=_infer_useg, grad=_useg_grad)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """Sums the slices of ``data`` with equal ``segment_ids`` into row ``id`` of a
    ``num_segments``-row result; entries with a negative id are dropped (as in TF).

    >>> import tensorweave as tw
    >>> tw.unsorted_segment_sum(tw.constant([1.0, 2.0, 4.0]), [1, -1, 1], 3).numpy().tolist()
    [0.0, 5.0, 0.0]
    """
    return execute(get_op("UnsortedSegmentSum"),
                   [_ct(data), _ct(segment_ids, dtype_hint=_dt.int32), _ct(num_segments, dtype_hint=_dt.int32)],
                   {}, name)


newaxis = None


# ---- SBP rules (core/sbp.py; generators in core/sbp_rules.py) --------------------------------------
def _renumber(i, axis, insert):
    """Axis ``i`` after inserting (``insert``) or removing axis ``axis``."""
    return (i + 1 if i >= axis else i) if insert else (i - 1 if i > axis else i)


def _local_shape_hook(broadcast=False):
    def local(op_type, attrs, shard):
        return "SbpLocalShape", {"shape": shard.out_local_shape(0), "broadcast": broadcast}
    return local


def _shape_const_hook(op_type, attrs, shard):
    if op_type == "SbpLocalConst":      # lowered already by another mesh axis's hook
        return op_type, attrs
    shape = shard.in_shapes[0]
    value = np.array(shape if op_type == "Shape" else int(np.prod(shape, dtype=np.int64)))
    return "SbpLocalConst", {"value": value, "dtype": attrs["out_type"]}


def _shape_sbp(inputs, attrs):
    """Shape/Size of any layout is known from the logical shape: B, via a constant per rank."""
    x = inputs[0]
    yield from (Signature([S(i)], [B], _shape_const_hook) for i in range(x.rank))
    yield from (([Partial(k)], [B]) for k in Partial.KINDS)


def _reshape_sbp(inputs, attrs, broadcast=False):
    """A split axis ``i`` (size ``d``) maps to the output axis ``j`` (size ``e``) with the same
    element count before it: for each index of the axes before, the rank's rows ``[lo, hi)`` of
    ``i`` are the elements ``[lo * R, hi * R)`` (``R`` the count after ``i``), and the output
    rows of its slice of ``j`` must be the same block. With ``d == e`` they are, for any split.
    A merge (``[a, b] -> [a * b]``: ``S(0)`` stays ``S(0)``, the split axis the leading factor)
    or a split (``[a * b] -> [a, b]``) of the axis moves the block boundaries unless both ``d``
    and ``e`` divide by the mesh's size (attr ``_mesh_shape``, given by the planner; the product
    over all mesh axes, so nested splits of one axis stay exact too): the balanced splitter
    puts ``dim % n`` extra rows first, which do not scale. Declined then (and without the mesh,
    or a ``d`` that is not the leading factor: ``[6, 4] -> [4, 6]`` maps rows to no rows unless
    both divide); partial values stay partial."""
    x, out = inputs[0].shape, _out_shape(attrs)
    if out is None or None in x or None in out:
        return
    mesh = attrs.get("_mesh_shape")
    n = int(np.prod(mesh, dtype=np.int64)) if mesh else None
    for i, d in enumerate(x):
        for j, e in enumerate(out):
            if np.prod(x[:i], dtype=np.int64) != np.prod(out[:j], dtype=np.int64) or min(d, e) < 1:
                continue
            if (d == e and d > 1) or (d != e and n and d % n == 0 and e % n == 0):
                yield Signature([S(i)] + [B] * (len(inputs) - 1), [S(j)], _local_shape_hook(broadcast))
    yield Signature([P] + [B] * (len(inputs) - 1), [P], _local_shape_hook(broadcast))


def _broadcast_to_sbp(inputs, attrs):
    out = _out_shape(attrs)
    if out is None:
        return
    x, lead = inputs[0].shape, len(out) - inputs[0].rank
    for j in range(len(out)):
        i = j - lead
        if i >= 0 and x[i] != 1:
            yield Signature([S(i), B], [S(j)], _local_shape_hook(True))
        else:       # an axis made by broadcasting: each rank makes its own part of it
            yield Signature([B, B], [S(j)], _local_shape_hook(True))
    yield Signature([P, B], [P], _local_shape_hook(True))


def _sum_to_like_sbp(inputs, attrs):
    """The sum of g over like's broadcast axes: a split broadcast axis gives partial sums."""
    g, like = inputs
    lead = g.rank - like.rank
    for i in range(g.rank):
        j = i - lead
        if j >= 0 and like.shape[j] != 1:
            yield [S(i), S(j)], [S(j)]
        else:
            yield [S(i), B], [P]
    yield [P, B], [P]


def _axis_sbp(in_rank, axis_in, axis_out, n_in, n_out, insert=None):
    """Every axis but ``axis_in`` of ``n_in`` inputs maps to the outputs (renumbered around an
    inserted or removed axis), and partial sums pass through."""
    for i in range(in_rank):
        if i == axis_in:
            continue
        o = i if insert is None else _renumber(i, axis_out if insert else axis_in, insert)
        yield [S(i)] * n_in, [S(o)] * n_out
    yield [P] * n_in, [P] * n_out


def _pack_sbp(inputs, attrs):
    rank = inputs[0].rank
    return _axis_sbp(rank, None, attrs["axis"] % (rank + 1), len(inputs), 1, insert=True)


def _unpack_sbp(inputs, attrs):
    rank = inputs[0].rank
    return _axis_sbp(rank, attrs["axis"] % rank, None, 1, attrs["num"], insert=False)


def _concat_sbp(inputs, attrs):
    rank = inputs[0].rank
    return _axis_sbp(rank, attrs["axis"] % rank, None, len(inputs), 1)


def _split_sbp(inputs, attrs):
    rank = inputs[0].rank
    return _axis_sbp(rank, attrs["axis"] % rank, None, 1, len(attrs["sizes"]))


def _expand_sbp(inputs, attrs):
    rank = inputs[0].rank
    return _axis_sbp(rank, None, attrs["axis"] % (rank + 1), 1, 1, insert=True)


def _squeeze_sbp(inputs, attrs):
    x = inputs[0]
    gone = {a % x.rank for a in attrs["axis"]} if attrs["axis"] else {i for i, d in enumerate(x.shape) if d == 1}
    kept = [i for i in range(x.rank) if i not in gone]

    def local(op_type, attrs, shard):       # a piece's split axis may have size 1 too: name the axes
        return (op_type, {**attrs, "axis": tuple(sorted(gone))}) if gone else ("Identity", {})
    yield from (Signature([S(i)], [S(kept.index(i))], local) for i in kept)
    yield [P], [P]


def _transpose_sbp(inputs, attrs):
    perm = list(range(inputs[0].rank))[::-1] if attrs["perm"] is None else list(attrs["perm"])
    yield from (([S(i)], [S(perm.index(i))]) for i in range(inputs[0].rank))
    yield [P], [P]


def _spec_axes(spec, rank):
    """(input axis, output axis) of the axes a basic-indexing ``spec`` takes whole."""
    spec = list(spec)
    if Ellipsis in spec:
        k = spec.index(Ellipsis)
        used = sum(1 for e in spec if e is not None and e is not Ellipsis)
        spec[k:k + 1] = [slice(None)] * (rank - used)
    spec += [slice(None)] * (rank - sum(1 for e in spec if e is not None))
    i = j = 0
    for e in spec:
        if e is None:
            j += 1
            continue
        if isinstance(e, slice):
            if e == slice(None) or e == slice(None, None, 1):
                yield i, j
            j += 1
        i += 1


def _strided_slice_sbp(inputs, attrs):
    """Axes taken whole split through; a sliced (or indexed) axis gives partial sums: each rank
    slices its piece embedded in zeros (``sbp_rules.embed_hook``)."""
    whole = dict(_spec_axes(attrs["spec"], inputs[0].rank))
    for i, j in whole.items():
        yield [S(i)], [S(j)]
    yield from sbp_rules.linear_cut_rule(lambda x, a: [i for i in range(inputs[0].rank) if i not in whole])(
        inputs, attrs)
    yield [P], [P]


def _strided_slice_grad_sbp(inputs, attrs):
    """The gradient scatters dy into zeros: linear in dy, so a dy axis of a sliced input axis
    gives partial sums of embedded pieces."""
    whole = dict(_spec_axes(attrs["spec"], inputs[1].rank))
    for i, j in whole.items():
        yield [S(j), S(i)], [S(i)]
    yield from sbp_rules.linear_cut_rule(lambda x, a: [j for j in range(inputs[0].rank)
                                                       if j not in whole.values()])(inputs, attrs)
    yield [P, B], [P]


def _masked_gather_hook(op_type, attrs, shard):
    axis = attrs["axis"] % len(shard.in_shapes[0])
    return "SbpMaskedGather", {"axis": attrs["axis"], "batch_dims": attrs["batch_dims"],
                               "offset": shard.in_offsets(0)[axis], "limit": shard.in_shapes[0][axis]}


def _gather_sbp(inputs, attrs):
    """Indices split: the output splits there. A table axis other than the gathered one: the
    output's matching axis. The gathered axis (an embedding table split by rows): each rank
    gathers its rows and zeros elsewhere (SbpMaskedGather), the sum is the gather (P)."""
    p, i = inputs
    axis, bd = attrs["axis"] % max(p.rank, 1), attrs["batch_dims"]
    for k in range(i.rank):
        if k < bd:
            yield [S(k), S(k)], [S(k)]
        else:
            yield [B, S(k)], [S(axis + k - bd)]
    for a in range(p.rank):
        if a == axis:
            if bd == 0:
                yield Signature([S(a), B], [P], _masked_gather_hook)
        elif a >= bd:
            yield [S(a), B], [S(a if a < axis else a + i.rank - bd - 1)]
    yield [P, B], [P]


def _masked_gather_grad_hook(op_type, attrs, shard):
    axis = attrs["axis"] % len(shard.in_shapes[2])
    return "SbpMaskedGatherGrad", {"axis": attrs["axis"], "batch_dims": attrs["batch_dims"],
                                   "offset": shard.in_offsets(2)[axis]}


def _gather_grad_sbp(inputs, attrs):
    """The table's gradient: split by rows like the table (each rank adds its rows), partial
    when the gradient and indices are split along the indices (each rank adds its part)."""
    g, i, p = inputs
    axis, bd = attrs["axis"] % max(p.rank, 1), attrs["batch_dims"]
    if bd == 0:
        yield Signature([B, B, S(axis)], [S(axis)], _masked_gather_grad_hook)
        for k in range(i.rank):
            yield [S(axis + k), S(k), B], [P]
    for a in range(bd, p.rank):
        if a != axis:
            yield [S(a if a < axis else a + i.rank - bd - 1), B, S(a)], [S(a)]
    yield [P, B, B], [P]


def _useg_sbp(inputs, attrs):
    """Segments of rows split with their ids: partial sums; a split trailing axis stays split."""
    data, ids = inputs[0], inputs[1]
    others = [B] * (len(inputs) - 2)
    for k in range(ids.rank):
        yield [S(k), S(k)] + others, [P]
    for a in range(ids.rank, data.rank):
        yield [S(a), B] + others, [S(a - ids.rank + 1)]
    yield [P, B] + others, [P]


def _out_shape(attrs):
    """The logical output shape, which Reshape and BroadcastTo take from an input's value: the
    planner passes the inferred output shapes to rules as attr ``_out_shapes``."""
    shapes = attrs.get("_out_shapes")
    return tuple(shapes[0]) if shapes else None


_sig = sbp_rules.signatures
get_op("Identity").sbp = get_op("StopGradient").sbp = sbp_rules.identity_rule
get_op("IdentityN").sbp = sbp_rules.identity_rule
get_op("ZerosLike").sbp = sbp_rules.shape_only_rule("all")
get_op("OnesLike").sbp = sbp_rules.shape_only_rule()
get_op("Shape").sbp = get_op("Size").sbp = _sig(_shape_sbp)
get_op("Rank").sbp = _sig(lambda inputs, attrs: [([s], [B]) for s in [S(i) for i in range(inputs[0].rank)]
                                                 + [Partial(k) for k in Partial.KINDS]])
get_op("Reshape").sbp = _sig(_reshape_sbp)
get_op("BroadcastTo").sbp = _sig(_broadcast_to_sbp)
get_op("SumToLike").sbp = _sig(_sum_to_like_sbp)
get_op("Pack").sbp = _sig(_pack_sbp)
get_op("Unpack").sbp = _sig(_unpack_sbp, n_outputs=lambda a: a["num"])
get_op("ConcatV2").sbp = _sig(_concat_sbp)
get_op("Split").sbp = _sig(_split_sbp, n_outputs=lambda a: len(a["sizes"]))
get_op("ExpandDims").sbp = _sig(_expand_sbp)
get_op("Squeeze").sbp = _sig(_squeeze_sbp)
get_op("Transpose").sbp = _sig(_transpose_sbp)
get_op("StridedSlice").sbp = _sig(_strided_slice_sbp)
get_op("StridedSliceGrad").sbp = _sig(_strided_slice_grad_sbp)
get_op("GatherV2").sbp = _sig(_gather_sbp)
get_op("GatherGrad").sbp = _sig(_gather_grad_sbp)
get_op("UnsortedSegmentSum").sbp = _sig(_useg_sbp)
get_op("Fill").sbp = _sig(lambda inputs, attrs: [Signature([B, B], [S(j)], sbp_rules.shape_input_hook(0))
                                                  for j in range(len((attrs.get("_out_shapes") or [()])[0]))]
                         + [([B, P], [P])])         # each rank fills its piece only
for _name in ("Const", "Placeholder", "PlaceholderWithDefault"):    # reasons: tests/test_sbp_coverage.py
    get_op(_name).sbp = sbp_rules.BOXES_TO_B
