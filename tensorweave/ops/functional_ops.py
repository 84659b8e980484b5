"""``tf.map_fn``, ``tf.foldl``/``foldr``, ``tf.scan`` and ``tf.vectorized_map`` over the first
dimension of (nests of) tensors. The first dimension must be known when the graph is built: the loop
is unrolled into the graph (an ``unstack``, ``n`` calls of ``fn``, a ``stack``), so gradients, graphs and
``tw.function`` work with no loop op.

>>> import tensorweave as tw
>>> tw.map_fn(lambda x: x * x, tw.constant([1.0, 2.0, 3.0])).numpy()
array([1., 4., 9.], dtype=float32)
>>> tw.scan(lambda a, x: a + x, tw.constant([1, 2, 3])).numpy()
array([1, 3, 6], dtype=int32)
"""
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.core import nest

__all__ = ["map_fn", "foldl", "foldr", "scan", "vectorized_map"]


def _length(flat, op):
    n = flat[0].shape[0] if flat[0].shape.rank else None
    if flat[0].shape.rank == 0:
        raise ValueError(f"{op}: elems must have at least one dimension (the one to loop over), got a scalar")
    if n is None:
        raise ValueError(f"{op}: the first dimension of elems must be known when the graph is built (the loop is "
                         "unrolled). Hint: give the input a static shape, or use tw.while_loop")
    for t in flat[1:]:
        if t.shape[0] is not None and t.shape[0] != n:
            raise ValueError(f"{op}: all elems must have the same first dimension, got {n} and {t.shape[0]}")
    return n


def _slices(elems, op):
    flat = [convert_to_tensor(e) for e in nest.flatten(elems)]
    n = _length(flat, op)
    per = [A.unstack(t, num=n) if n else [] for t in flat]
    return n, [nest.pack_sequence_as(elems, [p[i] for p in per]) for i in range(n)]


def _stack(results, like=None):
    flat = [nest.flatten(r) for r in results]
    stacked = [A.stack([f[j] for f in flat]) for j in range(len(flat[0]))]
    return nest.pack_sequence_as(results[0], stacked)


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False, infer_shape=True,
           name=None, fn_output_signature=None):
    """``stack([fn(e) for e in unstack(elems)])`` (``elems`` and the results may be nests)."""
    n, slices = _slices(elems, "map_fn")
    if n == 0:
        raise ValueError("map_fn: elems has an empty first dimension; the output structure cannot be inferred")
    return _stack([fn(s) for s in slices])


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
    """``tf.vectorized_map``: the same results as :func:`map_fn` (computed by the unrolled loop)."""
    return map_fn(fn, elems)


def _fold(fn, elems, initializer, reverse, op):
    n, slices = _slices(elems, op)
    if reverse:
        slices = slices[::-1]
    if initializer is None:
        if n == 0:
            raise ValueError(f"{op}: elems must not be empty when there is no initializer")
        acc, slices = slices[0], slices[1:]
    else:
        acc = nest.map_structure(convert_to_tensor, initializer)
    for s in slices:
        acc = fn(acc, s)
    return acc


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """``fn(...fn(fn(initializer, e0), e1)..., e_{n-1})`` (the first element when no initializer)."""
    return _fold(fn, elems, initializer, False, "foldl")


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """:func:`foldl` from the last element to the first."""
    return _fold(fn, elems, initializer, True, "foldr")


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
         infer_shape=True, reverse=False, name=None):
    """The stacked running values of :func:`foldl` (with ``reverse``, from the end, stacked in input order)."""
    n, slices = _slices(elems, "scan")
    if reverse:
        slices = slices[::-1]
    if initializer is None:
        if n == 0:
            raise ValueError("scan: elems must not be empty when there is no initializer")
        acc, rest, outs = slices[0], slices[1:], [slices[0]]
    else:
        acc, rest, outs = nest.map_structure(convert_to_tensor, initializer), slices, []
    for s in rest:
        acc = fn(acc, s)
        outs.append(acc)
    if reverse:
        outs = outs[::-1]
    return _stack(outs)
