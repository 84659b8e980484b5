"""Generic ops on RaggedTensor and SparseTensor values, where TensorFlow dispatches them.

``tw.math.exp(rt)`` maps the op over a RaggedTensor's flat values; the zero-preserving unary ops
(``abs``, ``negative``, ``square``, ``sqrt``, ``sign``, ``sin``, ``tanh``... TF's list) map over a
SparseTensor's values; binary elementwise ops take a RaggedTensor with a scalar or a RaggedTensor of the
same rows; ``tw.cast`` maps over both; reductions reduce a RaggedTensor (``axis=None``, 0, 1, ...).

The op wrappers call here only after converting the argument to a tensor failed, so dense calls pay
nothing. The classes announce themselves with ``_tw_composite_`` (this module sits below them).

>>> import tensorweave as tw
>>> tw.math.abs(tw.ragged.constant([[-1.0, 2.0], [-3.0]])).to_list()
[[1.0, 2.0], [3.0]]
>>> tw.reduce_sum(tw.ragged.constant([[1, 2], [3]]), axis=1).numpy()
array([3, 3], dtype=int32)
"""
RAGGED, SPARSE = "ragged", "sparse"

# TF's SparseTensor dispatch of unary ops: those with f(0) == 0.
# (checked against TF 2.21 by the tf2/sparse/* cases: floor, ceil, round, rint, expm1, log1p, sinh and
# relu keep zeros too but TF does not dispatch them)
SPARSE_UNARY = frozenset(["Abs", "Neg", "Square", "Sqrt", "Sign", "Sin", "Tanh", "Tan", "Atan", "Asin", "Asinh",
                          "Atanh", "Erf"])


def kind(x):
    return getattr(type(x), "_tw_composite_", None)


def unary(x, fn, op_type=None):
    """``fn`` mapped over ``x``'s values, or NotImplemented when ``x`` is no composite (or a sparse
    value that ``op_type`` does not keep sparse)."""
    k = kind(x)
    if k == RAGGED:
        return x.with_flat_values(fn(x.flat_values))
    if k == SPARSE and (op_type is None or op_type in SPARSE_UNARY):
        return x.with_values(fn(x.values))
    return NotImplemented


def binary(x, y, fn):
    """``fn(x, y)`` with a RaggedTensor on either side (the other a scalar or the same rows)."""
    if kind(x) == RAGGED:
        return x._binary(y, fn)
    if kind(y) == RAGGED:
        return y._binary(x, lambda a, b: fn(b, a))
    return NotImplemented


def reduce(x, op_type, axis, keepdims):
    """A reduction of a RaggedTensor (``op_type`` ``Sum``, ``Mean``, ``Max``, ``Min``, ``Prod``)."""
    if kind(x) == RAGGED and op_type in ("Sum", "Mean", "Max", "Min", "Prod"):
        return x._reduce(op_type.lower(), axis, keepdims)
    return NotImplemented
