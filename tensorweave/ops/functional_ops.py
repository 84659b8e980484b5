"""``tf.map_fn``, ``tf.scan``, ``tf.foldl``/``foldr`` and ``tf.vectorized_map`` over the first dimension
of (nests of) tensors, with nested ``elems`` and outputs, ``initializer`` and ``reverse``; TF1's
``tf.compat.v1`` names are these same functions (their signatures did not change).

A known number of elements unrolls into one sub-graph per element (exact gradients, as the op
table checks them); an unknown one (a placeholder's ``None`` batch) runs a ``tw.while_loop``
whose outputs are written row by row into tensors shaped from one probe call of ``fn``, so
``fn``'s outputs need static shapes there.

>>> import tensorweave as tw
>>> tw.map_fn(lambda x: x * x, tw.constant([1.0, 2.0, 3.0])).numpy()
array([1., 4., 9.], dtype=float32)
>>> tw.scan(lambda a, x: a + x, tw.constant([1, 2, 3])).numpy()
array([1, 3, 6], dtype=int32)
>>> int(tw.foldr(lambda acc, x: acc * 10 + x, tw.constant([1, 2, 3]), initializer=tw.constant(0)))
321
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops, control_flow, indexing_ops, math_ops

__all__ = ["map_fn", "scan", "foldl", "foldr", "vectorized_map"]


def _flat_elems(elems, what):
    flat = [convert_to_tensor(e) for e in nest.flatten(elems)]
    if not flat:
        raise ValueError(f"{what}: elems must be a tensor or a (possibly nested) sequence of tensors")
    for e in flat:
        if e.shape.rank == 0:
            raise ValueError(f"{what}: elements in elems must be 1+ dimensional, got a scalar {e}")
    return flat


def _length(flat):
    n = flat[0].shape.as_list()[0] if flat[0].shape.rank is not None else None
    return n if n is not None else array_ops.shape(flat[0])[0]


def _item(flat, elems, i):
    return nest.pack_sequence_as(elems, [e[i] for e in flat])


def _cast_like(values, structure):
    """Outputs converted to the dtypes ``structure`` declares (TF1's ``dtype=``), when it does."""
    if structure is None:
        return nest.map_structure(convert_to_tensor, values)
    dts = nest.flatten(structure)
    vals = nest.flatten(values)
    return nest.pack_sequence_as(values, [convert_to_tensor(v, dtype=_dt.as_dtype(d)) for v, d in zip(vals, dts)])


def _loop(n, step, carry):
    """Runs ``carry, out = step(i, carry)`` for i in 0..n-1; returns (carry, stacked outs).

    ``step`` returns flat lists. With a static ``n`` the loop unrolls; else it is a while loop
    writing each output row into a tensor preallocated from a probe call at ``i = 0``.
    """
    if isinstance(n, int):
        outs = []
        for i in range(n):
            carry, out = step(i, carry)
            outs.append(out)
        if not outs:
            return carry, None
        return carry, [array_ops.stack([o[k] for o in outs]) for k in range(len(outs[0]))]
    _, probe = step(0, carry)
    for p in probe:
        if not p.shape.is_fully_defined():
            raise ValueError(f"the function's outputs need a static shape when the number of elements is "
                             f"unknown; got {p.shape}. Hint: give elems a static first dimension")
    acc0 = [array_ops.zeros(array_ops.concat([array_ops.reshape(n, [1]), p.shape.as_list()], 0)
                            if p.shape.rank else array_ops.reshape(n, [1]), p.dtype) for p in probe]

    def body(i, c, accs):
        new_c, out = step(i, c)
        at = array_ops.reshape(i, [1, 1])
        accs = [indexing_ops.tensor_scatter_nd_update(a, at, array_ops.expand_dims(o, 0)) for a, o in zip(accs, out)]
        return i + 1, new_c, accs
    _, carry, accs = control_flow.while_loop(lambda i, c, a: math_ops.less(i, n), body,
                                                 [convert_to_tensor(0), carry, acc0])
    return carry, list(accs)


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False, infer_shape=True,
           name=None, fn_output_signature=None, _free_structure=False):
    """``fn`` applied to each slice ``elems[i]`` (nested elems are sliced together), the results
    stacked; ``dtype`` (TF1) or ``fn_output_signature`` gives the output structure when it differs
    from ``elems``."""
    flat = _flat_elems(elems, "map_fn")
    structure = fn_output_signature if fn_output_signature is not None else dtype
    holder = {}

    def step(i, carry):
        out = _cast_like(fn(_item(flat, elems, i)), structure)
        if structure is None and not _free_structure:
            try:
                nest.assert_same_structure(elems, out)
            except (TypeError, ValueError) as e:
                raise ValueError(f"map_fn: fn's output structure differs from elems' ({e}). Hint: give dtype= "
                                 "(TF1) or fn_output_signature= with the output structure") from None
        holder["structure"] = out
        return carry, nest.flatten(out)
    _, stacked = _loop(_length(flat), step, convert_to_tensor(0))
    if stacked is None:
        raise ValueError("map_fn: elems has no elements and no output structure to build an empty result from")
    return nest.pack_sequence_as(holder["structure"], stacked)


def _scan_core(fn, elems, initializer, reverse, what, keep_outputs):
    flat = _flat_elems(elems, what)
    n = _length(flat)
    start = 0
    if initializer is None:
        first = (n - 1) if reverse else 0
        if isinstance(first, int) and first < 0:
            raise ValueError(f"{what}: elems is empty and no initializer was given")
        initializer = _item(flat, elems, first)
        start = 1
    carry = nest.map_structure(convert_to_tensor, initializer)
    count = n - start
    rev = [indexing_ops.reverse(e, [0]) for e in flat] if reverse else flat
    if start:
        rev = [e[1:] for e in rev]
        count = count if isinstance(count, int) else array_ops.shape(rev[0])[0]

    def step(i, c):
        c = nest.pack_sequence_as(initializer, c) if isinstance(c, list) else c
        new = nest.map_structure(convert_to_tensor, fn(c, _item(rev, elems, i)))
        return nest.flatten(new), nest.flatten(new)
    carry_flat, stacked = _loop(count, step, nest.flatten(carry))
    final = nest.pack_sequence_as(initializer, carry_flat)
    if not keep_outputs:
        return final
    init_flat = nest.flatten(carry)
    if stacked is None:
        stacked = [array_ops.expand_dims(c, 0)[:0] for c in init_flat]
    if start:   # the first element is the first output, as in TF
        stacked = [array_ops.concat([array_ops.expand_dims(c, 0), s], 0) for c, s in zip(init_flat, stacked)]
    if reverse:
        stacked = [indexing_ops.reverse(s, [0]) for s in stacked]
    return nest.pack_sequence_as(initializer, stacked)


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, infer_shape=True,
         reverse=False, name=None):
    """The running values of ``acc = fn(acc, x)`` over ``elems`` (from the end with ``reverse``),
    starting at ``initializer`` (default: the first element, which is then the first output)."""
    return _scan_core(fn, elems, initializer, reverse, "scan", keep_outputs=True)


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """The final ``acc = fn(acc, x)`` over ``elems`` from the first element on."""
    return _scan_core(fn, elems, initializer, False, "foldl", keep_outputs=False)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """The final ``acc = fn(acc, x)`` over ``elems`` from the last element back."""
    return _scan_core(fn, elems, initializer, True, "foldr", keep_outputs=False)


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
    """``fn`` over the slices of ``elems`` with the results stacked, as :func:`map_fn` (the output
    structure is ``fn``'s own)."""
    return map_fn(fn, elems, _free_structure=True)
