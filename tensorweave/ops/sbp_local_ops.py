"""Rank-local ops that SBP ``local`` hooks lower an op to (``core/sbp.py``: ``Signature.local``).

A signature's ``local(op_type, attrs, shard)`` hook returns an op type and attrs only, so a
per-rank plan stays data; these are the op types hooks return where the op itself cannot
run on a rank's piece with rewritten attrs:

* ``SbpLocalShape`` — reshape or broadcast the piece to the rank's local output shape
  (``Reshape``/``BroadcastTo`` take their target shape as an input, which a hook cannot
  rewrite); inputs after the first are ignored.
* ``SbpLocalConst`` — the op's logical result, known from shapes alone (``Shape``/``Size``
  of a split tensor), or zeros for a rank with an empty shard (``sbp_rules.zeros_if_empty``);
  inputs are ignored (but for the dtype: that of input ``like`` when ``dtype`` is None).
* ``SbpReplaceInput`` — op ``op_type`` with ``op_attrs``, input ``index`` replaced by the
  constant ``value``: a shape input (a convolution's ``input_sizes``, a pooling gradient's
  ``orig_input_shape``) made the rank's local shape.
* ``SbpSliceOf`` — op ``sbp_op`` (its attrs beside) computed whole, keeping the rank's
  ``sbp_slices`` (``(start, stop)`` per axis): random ops, whose ranks must draw the
  single-device stream (each rank's stream starts where the single-device one does, so the
  logical value is the single-device one; it costs a whole draw per rank — a counter offset
  per shard needs a sampler that consumes a fixed number of draws per value). Its ``bind``
  is the inner op's (the random stream).
* ``SbpRandomPiece`` — ``SbpSliceOf`` of a uniform float or full-range integer draw
  (``RandomUniform``, ``StatelessRandomUniform``, ``StatelessRandomUniformFullInt``; 32- and
  64-bit types), whose samplers use a fixed number of Philox words per value: the rank
  computes only the words from its slice's first value to its last (its own, for a slice of
  the leading axis) and leaves a stateful stream where the whole draw leaves it.
* ``SbpMaskedGather`` — a gather from a table split by rows: rows outside this rank's
  ``[offset, offset + rows)`` give zeros, so the ranks' outputs sum to the gather (``P``);
  ``limit`` is the logical row count (indices are checked against it).
* ``SbpMaskedGatherGrad`` — its gradient: only this rank's rows of the table's gradient.
* ``SbpMaskedResourceGather`` — ``SbpMaskedGather`` from a row-split variable (an embedding
  table read with ``sparse_read``).
* ``SbpRowsOnly`` — op ``op_type`` (a row update of a variable: a sparse optimizer step, a
  scatter) given only the rows in this rank's ``[offset, offset + rows)`` of a row-split
  variable, renumbered from 0: input ``index_input`` holds the row ids, ``rows_input`` the
  rows.
* ``SbpEmbedded`` — op ``op_type`` (linear in input ``index``) run on the rank's piece put at
  its place in zeros of the logical length along each embedded axis (``embeds``: ``(axis,
  start, logical length)``); inputs ``zeroed`` (a pad's constant) replaced by zeros on all
  but the first rank: the ranks' outputs sum to the op's (``sbp_rules.embed_hook``).

They are made only by hooks (never by user code) and checked by ``tests/test_sbp_checker.py``.

>>> import numpy as np, tensorweave as tw
>>> table, ids = np.arange(8.0).reshape(4, 2), np.array([0, 3, 2])
>>> parts = [tw.raw_op("SbpMaskedGather", [table[lo:hi], ids], {"axis": 0, "batch_dims": 0, "offset": lo, "limit": 4})
...          for lo, hi in ((0, 2), (2, 4))]
>>> bool((parts[0].numpy() + parts[1].numpy() == table[ids]).all())
True
"""
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.shape import TensorShape


def _infer_gather(inputs, attrs):
    p, i = inputs
    if p.shape.rank is None or i.shape.rank is None:
        return TensorShape(None), p.dtype
    axis = attrs["axis"] % p.shape.rank
    pd, idd = p.shape.as_list(), i.shape.as_list()
    return TensorShape(pd[:axis] + idd + pd[axis + 1:]), p.dtype


register_op("SbpLocalShape", infer=lambda i, a: (TensorShape(list(a["shape"])), i[0].dtype), grad=NOT_DIFFERENTIABLE)
register_op("SbpLocalConst", infer=lambda i, a: (TensorShape(list(a["value"].shape)),
                                                 a["dtype"] or i[a.get("like", 0)].dtype),
            grad=NOT_DIFFERENTIABLE)
register_op("SbpReplaceInput", infer=lambda i, a: get_op(a["op_type"]).infer(i, a["op_attrs"]), grad=NOT_DIFFERENTIABLE)
def _slice_of_infer(inputs, attrs):
    inner = {k: v for k, v in attrs.items() if k not in ("sbp_op", "sbp_slices")}
    out = get_op(attrs["sbp_op"]).infer(inputs, inner)
    dtype = out[1] if isinstance(out, tuple) else out[0][1]
    return TensorShape([stop - start for start, stop in attrs["sbp_slices"]]), dtype


def _slice_of_bind(op):
    bind = get_op(op.attrs["sbp_op"]).bind
    return bind(op) if bind is not None else {}


register_op("SbpSliceOf", infer=_slice_of_infer, grad=NOT_DIFFERENTIABLE, stateful=True, bind=_slice_of_bind)
register_op("SbpRandomPiece", infer=_slice_of_infer, grad=NOT_DIFFERENTIABLE, stateful=True, bind=_slice_of_bind)
register_op("SbpMaskedResourceGather", infer=lambda i, a: (TensorShape(i[1].shape.as_list() + a["shape"].as_list()[1:]),
                                                           a["dtype"]), grad=NOT_DIFFERENTIABLE, stateful=True)
register_op("SbpRowsOnly", infer=lambda i, a: get_op(a["op_type"]).infer(i, a["op_attrs"]), grad=NOT_DIFFERENTIABLE,
            stateful=True, num_outputs=lambda a: get_op(a["op_type"]).n_outputs(a["op_attrs"]))
register_op("SbpMaskedGather", infer=_infer_gather, grad=NOT_DIFFERENTIABLE)
register_op("SbpMaskedGatherGrad", infer=lambda i, a: (i[2].shape, i[0].dtype), grad=NOT_DIFFERENTIABLE)


class _Shaped:
    """A stand-in input with another static shape (what an embedded piece looks like to the
    inner op's shape rule); everything else is the real input's."""

    def __init__(self, like, shape):
        self._like, self.shape = like, shape

    def __getattr__(self, name):
        return getattr(self._like, name)


def _embedded_infer(inputs, attrs):
    inputs = list(inputs)
    x = inputs[attrs["index"]]
    dims = x.shape.as_list() if x.shape.rank is not None else None
    if dims is not None:
        for axis, _, full in attrs["embeds"]:
            dims[axis] = full
        inputs[attrs["index"]] = _Shaped(x, TensorShape(dims))
    return get_op(attrs["op_type"]).infer(inputs, attrs["op_attrs"])


register_op("SbpEmbedded", infer=_embedded_infer, grad=NOT_DIFFERENTIABLE)
