"""The ops a planned graph adds: what a rank's plan spec holds besides the program's own ops.

* ``_ToGlobal`` — in a traced graph, ``x.to_global(placement=, sbp=)`` of a symbolic tensor: the
  identity on the logical value whose output layout the user pinned (attrs ``placement_type``,
  ``ranks`` (the mesh as nested lists) and ``sbp`` (printed forms)). The planner turns it into
  a ``_Boxing`` node or nothing; its gradient is the identity (the planner lays it out).
* ``_Boxing`` — one rank's part of a boxing plan: attrs ``plan`` (``BoxingPlan.to_dict()``),
  ``rank`` (this rank's id) and ``comm`` (a reference to the rank's communicator resource).
  Its kernel is made once per bound plan (the plan parsed once), then each run boxes a piece.
* ``_Once`` — op ``op_type`` with ``op_attrs`` run on the group's first rank only, its outputs
  broadcast to the others (attrs ``ranks``, ``rank``, ``comm``; ``broadcast`` False when no
  node reads them: no collective then): a stateful op whose outputs are ``B`` (a local
  variable's update, a print) runs once, as on one device.

* ``_VariableRows`` / ``_GatherRows`` — ZeRO-1 (``zero_update.py``): the rank's rows ``[lo, hi)``
  (attr ``rows``) of a replicated variable, which a fused update then writes in place; after the
  update, the other ranks' rows gathered into each variable's storage in place (attrs ``ranks``,
  ``comm``; ``Communicator.all_gather_rows``). ``_ZeroApply`` is both in one kernel, for the
  eager global interpreter (an eager update of a weight whose slots a plan made ``S(0)``).
* ``_AllReduceStart`` / ``_AllReduceWait`` — a bucket of partial-sum tensors all-reduced
  (``P -> B``) in two halves: the start (attrs ``ranks``, ``comm``, ``op``) hands the bucket to
  ``Communicator.all_reduce_start`` as soon as its inputs are computed and outputs a handle;
  the wait (attr ``n``) sits where the boxings were, before the first reader, and outputs the
  ``n`` sums (read-only arrays; attr ``rows``: per output None, or ``[lo, hi)`` for a
  reduce-scatter member, whose output is the rank's rows of the sum).
  ``rank_graph.bucket_all_reduces`` makes them from ``_Boxing`` nodes.
* ``_OnceInto`` — a ``_Once`` read folded into a bucket (``rank_graph.fold_once``): input 0 is
  the bucket's start handle; the first rank runs the op and attaches its outputs to the
  bucket's rendezvous (``handle.attach``), and the wait (attr ``extra``: their number) outputs
  them after the sums; a transport without that broadcasts them here (``handle.extra``).

A rank's communicator is a resource of kind ``"communicator"`` named ``"world"`` on its
runtime: an object ``comm_for(rank_ids) -> Communicator`` (the rank's end of the group of those
ranks). In-process ranks register one per rank (``ranks.Rank``); a Ray worker registers its
own, so the same spec runs on either.

>>> import numpy as np
>>> from tensorweave.core.sbp import S, B
>>> from tensorweave.distribute.boxing import plan_boxing
>>> from tensorweave.distribute.layout import Placement
>>> from tensorweave.distribute.ranks import default_world
>>> plan = plan_boxing((4,), "float32", Placement("cpu", [0, 1]), (S(0),), (B,)).to_dict()
>>> world = default_world()
>>> def on_rank(i):
...     comm = world.rank(i).runtime.resource("communicator", "world")
...     step = _boxing_kernel(plan=plan, rank=i, comm=comm)
...     return step(np.arange(2.0, dtype=np.float32) + 2 * i).tolist()
>>> world.run([0, 1], on_rank)
[[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]
"""
import numpy as np

from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_kernel, register_op
from tensorweave.core.sbp import BOXES_TO_B
from tensorweave.core.shape import TensorShape
from tensorweave.distribute.plan_placements import to_global_grad   # also registers _ToPlacement


def _boxing_infer(inputs, attrs):
    from tensorweave.core import dtypes as _dt
    return TensorShape(attrs["plan"]["shape"]), _dt.as_dtype(attrs["plan"]["dtype"])


# No SBP rules: the planner lays out _ToGlobal itself (its pin) and makes _Boxing and _Once on pieces.
def _to_global_grad(op, g):
    return [to_global_grad(op, g)]          # a move between placements: moved back (plan_placements.py)


register_op("_ToGlobal", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=_to_global_grad, sbp=BOXES_TO_B)
register_op("_Boxing", infer=_boxing_infer, grad=NOT_DIFFERENTIABLE, sbp=BOXES_TO_B)
register_op("_Once", infer=lambda i, a: get_op(a["op_type"]).infer(i, a["op_attrs"]), grad=NOT_DIFFERENTIABLE,
            stateful=True, num_outputs=lambda a: get_op(a["op_type"]).n_outputs(a["op_attrs"]), sbp=BOXES_TO_B)


register_op("_AllReduceStart", infer=lambda i, a: (TensorShape([]), _variant()), grad=NOT_DIFFERENTIABLE,
            stateful=True, sbp=BOXES_TO_B)
register_op("_AllReduceWait", infer=lambda i, a: [(TensorShape(s), _dtype(d)) for s, d in a["outputs"]],
            grad=NOT_DIFFERENTIABLE, stateful=True, num_outputs=lambda a: a["n"], sbp=BOXES_TO_B)


register_op("_OnceInto", infer=lambda i, a: [], grad=NOT_DIFFERENTIABLE, stateful=True, num_outputs=0,
            sbp=BOXES_TO_B)
register_op("_ZeroApply", infer=lambda i, a: [], grad=NOT_DIFFERENTIABLE, stateful=True, num_outputs=0,
            sbp=BOXES_TO_B)
register_op("_VariableRows", infer=lambda i, a: (TensorShape([]), i[0].dtype), grad=NOT_DIFFERENTIABLE,
            stateful=True, sbp=BOXES_TO_B)
register_op("_GatherRows", infer=lambda i, a: [], grad=NOT_DIFFERENTIABLE, stateful=True, num_outputs=0,
            sbp=BOXES_TO_B)


def _variant():
    from tensorweave.core import dtypes as _dt
    return _dt.variant


def _dtype(d):
    from tensorweave.core import dtypes as _dt
    return _dt.as_dtype(d)


@register_kernel("_AllReduceStart")
def _all_reduce_start_kernel(ranks, comm, op="sum"):
    group = tuple(ranks)

    def step(*pieces):
        return comm(group).all_reduce_start(pieces, op)
    return step


_all_reduce_start_kernel._tw_factory = True


@register_kernel("_AllReduceWait")
def _all_reduce_wait_kernel(handle, n=1, outputs=(), rows=None, extra=0):
    values = handle.wait()
    if rows:                  # a reduce-scatter's member (ZeRO-1): this rank's rows of the sum
        values = [v if r is None else v[r[0]:r[1]] for v, r in zip(values, rows)]
    if extra:                 # the values of the _OnceInto nodes folded into this bucket
        values = list(values) + list(handle.extras(extra))
    return values[0] if n + extra == 1 else tuple(values)     # one output: a single-output node


def _once_parts(op_type, op_attrs, ranks, rank):
    """What a ``_Once``-style node needs: the wrapped op's CPU kernel, its output count, whether
    this rank is the one that runs it (the first), and the rank group."""
    opdef = get_op(op_type)
    return opdef.kernel("CPU"), opdef.n_outputs(op_attrs), rank == ranks[0], tuple(ranks)


@register_kernel("_OnceInto")
def _once_into_kernel(op_type, op_attrs, ranks, rank, comm, broadcast=True):
    kernel, n_out, root, group = _once_parts(op_type, op_attrs, ranks, rank)

    def step(handle, *args):
        out = kernel(*args, **op_attrs) if root else None
        outs = [out] if n_out == 1 else list(out) if root else [None] * n_out
        if root:
            outs = [_read_only_copy(o) for o in outs]
        attach = getattr(handle, "attach", None)
        if attach is not None:        # in-process: the first rank's values ride on the bucket's round
            if root:
                attach(outs)
        else:                         # a transport's bucket reduced at its start: a broadcast of its own
            c = comm(group)
            handle.extra = (handle.extra or []) + [_read_only_copy(c.broadcast(o, root=0)) for o in outs]
        return ()
    return step


_once_into_kernel._tw_factory = True


def _read_only_copy(x):
    a = np.array(x)
    a.flags.writeable = False
    return a


class _Rows:
    """Rows ``[lo, hi)`` of a variable, as the fused update kernels see a variable: they update
    the rank's rows of its storage in place (copy-on-write taken on the whole storage; ``shared``:
    the storage the in-process ranks share, ``zero_update.SharedWeight.rows``)."""

    __slots__ = ("variable", "lo", "hi", "shared")

    def __init__(self, variable, lo, hi, shared=None):
        self.variable, self.lo, self.hi, self.shared = variable, lo, hi, shared

    @property
    def name(self):
        return f"{self.variable.name}[{self.lo}:{self.hi}]"

    def _read(self):
        return self.variable._read()[self.lo:self.hi]

    def _storage_for_update(self):
        if self.shared is not None:
            rows = self.shared[0].rows(self.variable, self.shared[1])
            if rows is not None:
                return rows
        return self.variable._storage_for_update()[self.lo:self.hi]


def _full_storage(variable, shared):
    """``variable``'s storage for the gather of its rows: the buffer the ranks share where they do."""
    if shared is not None:
        whole = shared[0].storage(variable, shared[1])
        if whole is not None:
            return whole
    return variable._storage_for_update()


@register_kernel("_VariableRows")
def _variable_rows_kernel(rows):
    lo, hi = rows

    def step(variable):
        return _Rows(variable, lo, hi, step.shared)
    step.shared = None        # (SharedWeight, this rank's index): zero_update.share_storage
    return step


_variable_rows_kernel._tw_factory = True


@register_kernel("_ZeroApply")
def _zero_apply_kernel(*inputs, op_type, op_attrs, rows, ranks, rank):
    from tensorweave.distribute.ranks import default_world
    ins = list(inputs)
    for w, lo, hi in rows:
        ins[w] = _Rows(inputs[w], lo, hi)
    get_op(op_type).kernel("CPU")(*ins, **op_attrs)
    comm = default_world().rank(rank).runtime.resource("communicator", "world")
    comm(tuple(ranks)).all_gather_rows([inputs[w]._storage_for_update() for w, _, _ in rows])
    return ()


@register_kernel("_GatherRows")
def _gather_rows_kernel(ranks, comm):
    group = tuple(ranks)

    def step(*variables):
        shared = step.shared
        if shared and all(sh is not None and sh[0].holds(v, sh[1]) for v, sh in zip(variables, shared)):
            # every rank updated its rows of the one buffer the ranks share (the same on every rank:
            # SharedWeight.active is set before any rank's update), and nothing in the step reads
            # the weights after their updates (share_storage): no rows to gather, no rendezvous
            return ()
        comm(group).all_gather_rows([_full_storage(v, shared[k] if shared else None) for k, v in enumerate(variables)])
        return ()
    step.shared = ()          # per input None or (SharedWeight, this rank's index): zero_update.share_storage
    return step


_gather_rows_kernel._tw_factory = True


@register_kernel("_ToGlobal")
def _to_global_kernel(x, placement_type=None, ranks=None, sbp=None):
    return x


@register_kernel("_Boxing")
def _boxing_kernel(plan, rank, comm):
    from tensorweave.distribute.boxing import BoxingPlan, run_boxing_on_rank
    parsed = BoxingPlan.from_dict(plan)
    local = _local_boxing(parsed, rank)
    if local is not None:
        return local

    def step(piece):
        return run_boxing_on_rank(parsed, rank, piece, comm)
    return step


def _local_boxing(parsed, rank):
    """A rank's step for a boxing plan of ``pad`` steps only on one placement (``S(i) -> P``, e.g. a
    data-parallel loss's mean), its bounds worked out once here: ``run_boxing_on_rank`` derives
    them from the placement on every call (~90 µs a step in a rank plan, for copying a few
    hundred bytes). The same values as :func:`~tensorweave.distribute.boxing.run_boxing_on_rank`
    (``test_dp13_local_boxing.py``); None for any other plan."""
    from tensorweave.core.sbp import B
    from tensorweave.distribute.boxing import axis_group
    from tensorweave.distribute.layout import balanced_bounds, partial_identity, shard_slices
    placement = parsed.src_placement
    if (not parsed.steps or placement != parsed.dst_placement or rank not in placement.ranks
            or any(st.kind != "pad" for st in parsed.steps)):
        return None
    index = placement.ranks.index(rank)
    pads = []
    for st in parsed.steps:
        k = st.mesh_axis
        old, new = st.before[k], st.after[k]
        ranks, pos = axis_group(placement, index, k)
        level = st.before[:k] + (B,) * (len(st.before) - k)
        region = shard_slices(parsed.shape, placement, level)[index][old.axis]
        total = region.stop - region.start
        lo, hi = balanced_bounds(total, len(ranks))[pos]
        pads.append((old.axis, total, (slice(None),) * old.axis + (slice(lo, hi),), new.kind))

    made = {}       # (piece shape, dtype) -> per pad (padded shape, fill): a steady step's piece is the same

    def ways(piece):
        key = (piece.shape, piece.dtype)
        got = made.get(key)
        if got is None:
            got, shape = [], list(piece.shape)
            for axis, total, _, kind in pads:
                shape[axis] = total
                got.append((tuple(shape), partial_identity(kind, piece.dtype)))
            if len(made) < 8:
                made[key] = got
        return got

    def step(piece):
        dtype = piece.dtype
        for (_, _, where, _), (shape, fill) in zip(pads, ways(piece)):
            # np.zeros for a sum's identity (calloc'ed: no fill pass; np.full's Python was most of this step)
            out = np.zeros(shape, dtype) if not fill else np.full(shape, fill, dtype)
            out[where] = piece
            piece = out
        return piece
    if len(pads) == 1 and pads[0][0] == 0 and pads[0][3] == "sum":    # zeros around rows: the nogil
        _, total, where, _ = pads[0]                                    # segments' row (nogil_ops.PAD)
        step.rows_padded = (total, where[0].start, where[0].stop)
    return step


_boxing_kernel._tw_factory = True


@register_kernel("_Once")
def _once_kernel(op_type, op_attrs, ranks, rank, comm, broadcast=True):
    kernel, n_out, root, group = _once_parts(op_type, op_attrs, ranks, rank)

    def step(*args):
        out = kernel(*args, **op_attrs) if root else None
        if n_out == 0:
            return ()
        if not broadcast:       # nobody reads the outputs: the other ranks need not wait for them
            return out if root else (None if n_out == 1 else (None,) * n_out)
        c = comm(group)
        if n_out == 1:
            return c.broadcast(np.asarray(out) if root else None, root=0)
        outs = list(out) if root else [None] * n_out
        return tuple(c.broadcast(None if o is None else np.asarray(o), root=0) for o in outs)
    return step


_once_kernel._tw_factory = True
