"""``keras.ops`` core: conversion, casts, shapes, control flow (cond, while/fori loops, scan, map),
slices and scatters.

Loops run as ``tw.while_loop`` (one graph op inside ``tw.function``) where the carry keeps its
shape; ``scan``/``map``/``vectorized_map`` over a static length unroll in Python, which keeps them
differentiable and shape-polymorphic in the per-step outputs.

>>> from tensorweave import keras
>>> keras.ops.fori_loop(0, 4, lambda i, s: s + i, 0).numpy().item()
6
>>> carry, ys = keras.ops.scan(lambda c, x: (c + x, c * x), 0.0, keras.ops.arange(1.0, 4.0))
>>> float(carry), ys.numpy().tolist()
(6.0, [0.0, 2.0, 9.0])
"""
import numpy as np

import tensorweave as tw
from tensorweave.core import nest
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.keras.ops._dtypes import cast_to, standardize, to_tensor
from tensorweave.keras.ops._symbolic import export


def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
    if sparse or ragged:
        raise ValueError("convert_to_tensor: tensorweave has no sparse or ragged tensors here; pass dense values")
    return to_tensor(x, standardize(dtype))


def convert_to_numpy(x):
    if isinstance(x, tw.Variable):
        return x.numpy()
    if isinstance(x, EagerTensor):
        return x.numpy()
    if isinstance(x, Tensor):
        raise ValueError("convert_to_numpy: a symbolic tensor (inside tw.function) has no value yet")
    return np.asarray(x)


def is_tensor(x):
    return isinstance(x, (Tensor, tw.Variable))


def cast(x, dtype):
    return cast_to(to_tensor(x), standardize(dtype))


def saturate_cast(x, dtype):
    return tw.saturate_cast(to_tensor(x), standardize(dtype))


def dtype(x):
    return to_tensor(x).dtype.name if not hasattr(x, "dtype") else tw.as_dtype(x.dtype).name


def shape(x):
    """The shape as a tuple: ints where known statically, scalar tensors where not (Keras)."""
    x = x if isinstance(x, Tensor) else to_tensor(x)
    dims = x.shape.as_list()
    if None not in dims:
        return tuple(dims)
    dyn = tw.shape(x)
    return tuple(d if d is not None else dyn[i] for i, d in enumerate(dims))


def stop_gradient(variable):
    return tw.stop_gradient(to_tensor(variable))


def unstack(x, num=None, axis=0):
    return tw.unstack(to_tensor(x), num=num, axis=axis)


def cond(pred, true_fn, false_fn):
    return tw.cond(pred, true_fn, false_fn)


def switch(index, branches, *operands):
    return tw.switch_case(to_tensor(index), [lambda b=b: b(*operands) for b in branches])


def while_loop(cond, body, loop_vars, maximum_iterations=None):
    is_seq = isinstance(loop_vars, (list, tuple))
    state = tuple(loop_vars) if is_seq else (loop_vars,)
    state = nest.map_structure(to_tensor, state)

    def _cond(*s):
        return cond(*s) if is_seq else cond(s[0])

    def _body(*s):
        out = body(*s) if is_seq else body(s[0])
        out = tuple(out) if is_seq else (out,)
        return nest.map_structure(lambda o, ref: cast_to(o, ref.dtype), out, state)
    out = tw.while_loop(_cond, _body, list(state), maximum_iterations=maximum_iterations)
    out = tuple(out)
    if not is_seq:
        return out[0]
    return type(loop_vars)(out) if isinstance(loop_vars, list) else out


def fori_loop(lower, upper, body_fun, init_val):
    i0 = to_tensor(lower)
    out = while_loop(lambda i, v: tw.less(i, cast_to(upper, i.dtype)),
                     lambda i, v: (i + 1, body_fun(i, v)), (i0, init_val))
    return out[1]


def _length(xs, length):
    if xs is None:
        if length is None:
            raise ValueError("scan: give xs or length")
        return int(length)
    leaves = nest.flatten(xs)
    n = to_tensor(leaves[0]).shape.as_list()[0]
    if n is None:
        raise ValueError("scan: the leading dimension of xs must be known statically")
    return n


def _stack(outs):
    if not outs or outs[0] is None:
        return None
    return nest.map_structure(lambda *ys: tw.stack([to_tensor(y) for y in ys]), *outs)


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """``(carry, ys)`` where ``carry, y = f(carry, x)`` for each ``x`` of ``xs`` along axis 0."""
    n = _length(xs, length)
    xs_t = None if xs is None else nest.map_structure(to_tensor, xs)
    carry = nest.map_structure(to_tensor, init)
    ys = []
    order = range(n - 1, -1, -1) if reverse else range(n)
    for i in order:
        x = None if xs_t is None else nest.map_structure(lambda a: a[i], xs_t)
        new, y = f(carry, x)
        carry = nest.map_structure(lambda o, ref: cast_to(o, ref.dtype), new, carry)
        ys.append(y)
    if reverse:
        ys.reverse()
    return carry, _stack(ys)


def associative_scan(f, elems, reverse=False, axis=0):
    """Inclusive scan of an associative ``f`` along ``axis`` (sequential; ``f`` sees slices)."""
    flat = [to_tensor(e) for e in nest.flatten(elems)]
    r = flat[0].shape.rank
    ax = axis % r
    perm = [ax] + [i for i in range(r) if i != ax]
    inv = list(np.argsort(perm))
    moved = [tw.transpose(e, perm) for e in flat]
    n = moved[0].shape.as_list()[0]
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc, outs = None, []
    for i in order:
        cur = nest.pack_sequence_as(elems, [e[i] for e in moved])
        acc = cur if acc is None else f(acc, cur)
        outs.append(nest.flatten(acc))
    if reverse:
        outs.reverse()
    stacked = [tw.transpose(tw.stack([o[k] for o in outs]), inv) for k in range(len(flat))]
    return nest.pack_sequence_as(elems, stacked)


def map(f, xs):
    n = _length(xs, None)
    xs_t = nest.map_structure(to_tensor, xs)
    return _stack([f(nest.map_structure(lambda a: a[i], xs_t)) for i in range(n)])


def vectorized_map(function, elements):
    return map(function, elements)


def slice(inputs, start_indices, shape):
    x = to_tensor(inputs)
    return tw.slice(x, cast_to(start_indices, "int32"), cast_to(shape, "int32"))


def slice_update(inputs, start_indices, updates):
    x = to_tensor(inputs)
    u = cast_to(updates, x.dtype)
    dims = u.shape.as_list()
    if None in dims:
        raise ValueError("slice_update: the shape of updates must be known statically")
    grid = np.stack(np.meshgrid(*[np.arange(d) for d in dims], indexing="ij"), -1).astype(np.int32)
    idx = tw.constant(grid) + cast_to(start_indices, "int32")
    return tw.tensor_scatter_nd_update(x, idx, u)


def scatter(indices, values, shape):
    v = to_tensor(values)
    return tw.scatter_nd(cast_to(indices, "int32"), v, [int(s) for s in shape])


def scatter_update(inputs, indices, updates, reduction=None):
    x = to_tensor(inputs)
    idx = cast_to(indices, "int32")
    u = cast_to(updates, x.dtype)
    if reduction is None:
        return tw.tensor_scatter_nd_update(x, idx, u)
    if reduction == "add":
        return tw.tensor_scatter_nd_add(x, idx, u)
    raise ValueError(f"scatter_update: reduction must be None or 'add', got {reduction!r}")


def _parse_side(side):
    groups, cur = [], None
    for tok in side.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            if cur is not None:
                raise ValueError(f"rearrange: nested parentheses in {side!r}")
            cur = []
        elif tok == ")":
            groups.append(cur)
            cur = None
        elif cur is not None:
            cur.append(tok)
        else:
            groups.append([tok])
    if cur is not None:
        raise ValueError(f"rearrange: unbalanced parentheses in {side!r}")
    return groups


def rearrange(tensor, pattern, **axes_lengths):
    """einops' ``rearrange``: transposes, splits and merges axes by name (``"b (h w) c -> b h w c"``)."""
    x = to_tensor(tensor)
    if "->" not in pattern:
        raise ValueError(f"rearrange: the pattern needs '->', got {pattern!r}")
    left, right = (_parse_side(p) for p in pattern.split("->"))
    dims = x.shape.as_list()
    if len(left) != len(dims):
        raise ValueError(f"rearrange: the left side of {pattern!r} names {len(left)} axes, the input has {len(dims)}")
    sizes = dict(axes_lengths)
    for group, d in zip(left, dims):
        unknown = [a for a in group if a not in sizes]
        known = int(np.prod([sizes[a] for a in group if a in sizes])) if group else 1
        if len(unknown) > 1:
            raise ValueError(f"rearrange: give the sizes of all but one of {group} (axes_lengths)")
        if unknown:
            sizes[unknown[0]] = d // known
        elif d is not None and known != d:
            raise ValueError(f"rearrange: {group} multiply to {known}, but the axis has size {d}")
    names = [a for g in left for a in g]
    split = tw.reshape(x, [sizes[a] for a in names]) if len(names) != len(dims) else x
    order = [names.index(a) for g in right for a in g]
    if sorted(order) != list(range(len(names))):
        raise ValueError(f"rearrange: both sides of {pattern!r} must name the same axes")
    moved = tw.transpose(split, order)
    return tw.reshape(moved, [int(np.prod([sizes[a] for a in g])) if g else 1 for g in right])


def custom_gradient(f):
    """Keras' ``custom_gradient``: ``f`` returns ``(output, grad_fn)``; ``grad_fn`` receives the
    upstream gradient (positionally, or as ``upstream=``)."""
    return tw.custom_gradient(f)


export(globals(), skip={"standardize", "cast_to", "to_tensor", "export"})
