"""Planning ops whose output rows depend on their values (data-dependent shapes).

A sparse optimizer step sums a gradient's repeated rows first (``UniqueSegmentSum``): how many
rows come out is known only when it runs. The eager interpreter runs such an op replicated:
its global inputs boxed to ``B``, every rank computes the whole (same) result, and the
row-split variable's update then keeps the rank's rows (``rows_only_hook``). The planner does
the same:

* the op's global inputs are boxed to ``B`` and every rank runs its kernel;
* each output whose shape is open gets a :class:`Bounded` layout: ``B``, with the static upper
  bound of its shape (``ROW_BOUNDS``: ``UniqueSegmentSum``'s rows <= its input's rows) for the
  cost model only; the rank graph keeps the graph's open shape;
* a reader may take a bounded tensor only as ``B`` (no boxing plan knows its rows): its other
  candidates are dropped, and where none is left the planner refuses, naming the op.

Where no bound is known the planner refuses as before, naming the op and its output.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> v = tw.Variable(np.ones((5, 2), np.float32), placement=p, sbp=[tw.sbp.split(0)])
>>> opt = tw.keras.optimizers.SGD(0.5)
>>> @tw.function
... def step():
...     with tw.GradientTape() as t:
...         loss = tw.reduce_sum(tw.gather(v, [4, 0, 4]))
...     opt.apply_gradients([(t.gradient(loss, v), v)])
>>> step()
>>> v.numpy()[:, 0].tolist()
[0.5, 1.0, 1.0, 1.0, 0.0]
"""
from tensorweave.core import errors
from tensorweave.core.sbp import B, Signature
from tensorweave.distribute.interpreter import Layout, _plan


class Bounded(Layout):
    """A ``B`` layout whose ``_shape`` is an upper bound of the tensor's (data-dependent) shape."""

    __slots__ = ()


def _unique_segment_sum_bounds(ins):
    idx, values = ins
    return [idx._shape, values._shape, idx._shape]    # at most one unique row per input row


#: op type -> (input layouts -> an upper bound of each output's shape)
ROW_BOUNDS = {"UniqueSegmentSum": _unique_segment_sum_bounds}


def plan_data_dependent(planner, op, ins, out_specs):
    """The plan of ``op`` run replicated (some output's shape open, or an input's rows data-dependent
    where the op reads only shapes), as the module docstring says."""
    from tensorweave.distribute.planner import OpPlan
    bound = ROW_BOUNDS.get(op.type, lambda ins: [None] * len(op.outputs))
    if any(shape is None for shape, _ in out_specs) and (op.type not in ROW_BOUNDS or op.opdef.stateful):
        o = next(o for o, (shape, _) in zip(op.outputs, out_specs) if shape is None)
        raise errors.UnimplementedError(
            f"the global graph planner needs static logical shapes: output '{o.name}' of '{op.name}' ({op.type}) "
            f"has shape {o.shape}, and the planner knows no upper bound of it (plan_bounded.ROW_BOUNDS)")
    nd_b, placement = planner.nd_b, planner.placement
    plans = [None if lay._sbp == nd_b else _plan(lay._shape, lay._dtype.np_dtype, placement, lay._sbp, nd_b)
             for lay in ins]
    for o, (shape, dtype), upper in zip(op.outputs, out_specs, bound(ins)):
        kind = Layout if shape is not None else Bounded
        planner.gp.layouts[id(o)] = kind(upper if shape is None else shape, dtype, nd_b, placement)
    sig = Signature([B] * len(ins), [B] * len(op.outputs))
    attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
    return OpPlan(op, "global", (sig,) * placement.ndim, [nd_b] * len(ins), [nd_b] * len(op.outputs), plans,
                  [(op.type, attrs)] * placement.size)


def keep_bounded_b(op, ins, combos, nd_b):
    """``combos`` that read every :class:`Bounded` input as it is (``B``); an error naming the op
    where none does."""
    bounded = [k for k, lay in enumerate(ins) if isinstance(lay, Bounded)]
    kept = [c for c in combos if all(c[1][k] == nd_b for k in bounded)]
    if not kept:
        refuse_bounded(op, bounded[0])
    return kept


def refuse_bounded(op, k):
    """The error for reading input ``k`` of ``op`` (data-dependent rows) other than as ``B``."""
    x = op.inputs[k]
    raise errors.UnimplementedError(
        f"'{op.name}' ({op.type}) needs input '{x.name}' in a layout other than broadcast (B), but its rows "
        f"depend on the data (shape {x.shape}, from '{x.op.name}' ({x.op.type})) and the global graph planner "
        f"boxes such a tensor to no other layout. Hint: run this step eagerly, or read the tensor replicated")
