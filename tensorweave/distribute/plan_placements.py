"""A ``tw.function`` whose global values live on several placements: pipeline stages in one
planned function (layers on disjoint rank sets, values moved between them by ``to_global``).

Each op of the traced graph gets a placement (:func:`op_placement`): a global argument's or
variable's, a ``to_global``'s target, else its inputs' (the local ops, none); an op reading
values of two placements is refused as in eager mode (a move is the user's ``to_global``). The graph is cut into *segments*: runs of
ops of one placement, in a topological order that stays on a placement as long as it can
(forward of stage 1 | forward and backward of stage 2 | backward of stage 1: three
segments). Each segment is planned on its placement by the one-placement planner
(``planner.plan_op_list``), fed the values of the segments before it; a value read on another
placement than its own crosses by a *transfer*, a boxing plan between the two placements
(``boxing.plan_boxing``: partial values reduced first, each destination rank sent only its
region) laid out as the ``to_global`` pins, else with the same SBP (``B`` on a mesh of
another rank) unless another layout moves fewer bytes with the boxing its reader segment then
needs (:func:`_choose_moves`: the reader segment planned once per candidate). Constants and
variable handles are recomputed in every segment that reads them. The gradient of a move (:func:`to_global_grad`) is the move back (``_ToPlacement``), so a
backward pass crosses the stages in reverse.

A call runs the segments in order (one hand-off per rank each) and the transfers between them
(:func:`run_segments`; on Ray workers a transfer goes worker to worker; a TF1 ``Session.run`` of
a graph on several placements is planned the same way, :class:`MultiPlacementSessionRun`; a
micro-batched pipeline runs them per micro-batch, ``plan_pipeline.py``);
``tw.distribute.explain`` lists each segment's ops under its placement and the transfers with
their bytes.

>>> import numpy as np, tensorweave as tw
>>> p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
>>> w1 = tw.Variable(np.ones((3, 4), np.float32), placement=p1, sbp=tw.sbp.broadcast)
>>> w2 = tw.Variable(np.ones((4, 2), np.float32), placement=p2, sbp=tw.sbp.split(1))
>>> @tw.function
... def f(x):
...     h = tw.matmul(x, w1).to_global(placement=p2, sbp=tw.sbp.split(0))
...     return tw.reduce_sum(tw.matmul(h, w2))
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p1, sbp=tw.sbp.split(0))
>>> y = f(x)
>>> float(y), y.placement.ranks
(96.0, (2, 3))
>>> [(t["kind"], t["from"]["ranks"], t["to"]["ranks"], t["bytes"]) for t in tw.distribute.explain(f, x).to_dict()["transfers"]]
[('transfer', [0, 1], [2, 3], 64)]
"""
import time

from tensorweave.core import errors
from tensorweave.core.context import ctx
from tensorweave.core.convert import to_numpy
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.sbp import B, Partial, S
from tensorweave.core.sbp_rules import identity_rule
from tensorweave.core.tensor import EagerTensor
from tensorweave.distribute import plan_search

_FREE = frozenset({"Const", "VarHandleOp"})       # recomputed in every segment that reads them
_MOVES = frozenset({"_ToGlobal", "_ToPlacement"})


def _to_placement_grad(op, g):
    return [to_global_grad(op, g)]


# ``_ToPlacement``: a value moved to another placement (attrs ``placement_type``, ``ranks``), its
# layout chosen by the planner: the gradient of a move between placements.
register_op("_ToPlacement", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=_to_placement_grad, sbp=identity_rule)


@register_kernel("_ToPlacement")
def _to_placement_kernel(x, placement_type=None, ranks=None):
    return x


def _attr_placement(op):
    from tensorweave.distribute.layout import Placement
    return Placement(op.attrs["placement_type"], op.attrs["ranks"])


def op_placement(op, info, placed):
    """The placement ``op`` runs on (None: a local op), given ``placed`` (id(tensor) -> its
    placement or None) for its inputs; see the module docstring."""
    t = op.type
    if t == "VarHandleOp":
        var = op.attrs["variable"]
        return var.placement if getattr(var, "is_global", False) else None
    if t in _MOVES:
        return _attr_placement(op)
    if t == "Placeholder":
        lay = info.inputs.get(id(op.outputs[0]))
        return lay[0] if lay is not None else None
    found = []
    for x in op.inputs:
        p = placed.get(id(x))
        if p is not None and p not in found:
            found.append(p)
    if len(found) > 1:              # as eager global ops: a move between placements is the user's to_global
        ins = "; ".join(f"'{x.name}' {x.shape} {x.dtype.name} on ranks {list(placed[id(x)].ranks)}"
                        for x in op.inputs if placed.get(id(x)) is not None)
        raise errors.InvalidArgumentError(
            f"inputs are on different placements for '{op.name}' ({t}) in a planned function: {ins}"
            + (f"\n  Created at: {op.traceback}" if op.traceback else "")
            + "\n  Hint: move one with x.to_global(placement=..., sbp=...) first")
    return found[0] if found else None


def placement_of(t):
    """The placement of symbolic tensor ``t`` in a graph holding global values (None: local);
    memoised on the graph (the gradient of a move asks it of the moved value)."""
    info = getattr(t.op.graph, "_tw_globals", None)
    if info is None:
        return None
    placed = info.placed
    if id(t) in placed:
        return placed[id(t)]
    stack = [t.op]
    while stack:
        op = stack[-1]
        todo = [x.op for x in op.inputs if id(x) not in placed]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        p = op_placement(op, info, placed)
        for o in op.outputs:
            placed[id(o)] = p
    return placed[id(t)]


def to_global_grad(op, g):
    """The gradient of a move (``_ToGlobal``, ``_ToPlacement``): ``g`` itself on one placement,
    else ``g`` moved back to the placement of the moved value (``_ToPlacement``)."""
    from tensorweave.core.dispatch import execute
    info = getattr(op.graph, "_tw_globals", None)
    if info is None or len(info.placements) < 2 or not hasattr(g, "op"):
        return g
    src = placement_of(op.inputs[0])
    if src is None or src == placement_of(g):
        return g
    return execute(get_op("_ToPlacement"), [g], {"placement_type": src.type, "ranks": src.mesh.tolist()})


# ---- segments ------------------------------------------------------------------------------------
def _segment_order(ops, placed_op):
    """``[(placement, [op, ...])]``: the non-free ops in a topological order (data and control
    edges) that stays on one placement while it can, cut where the placement changes."""
    rest = [op for op in ops if op.type not in _FREE]
    index = {id(op): i for i, op in enumerate(rest)}
    preds, succs = {}, {id(op): [] for op in rest}
    for op in rest:
        ps = {index[id(x.op)] for x in op.inputs if id(x.op) in index}
        ps |= {index[id(c)] for c in op.control_inputs if id(c) in index}
        preds[id(op)] = len(ps)
        for p in ps:
            succs[id(rest[p])].append(op)
    ready = [op for op in rest if preds[id(op)] == 0]
    segments, cur = [], None
    while ready:
        here = [op for op in ready if placed_op[id(op)] is None or cur is not None and placed_op[id(op)] == cur]
        if here:
            op = min(here, key=lambda o: index[id(o)])
        else:
            op = min(ready, key=lambda o: index[id(o)])
        p = placed_op[id(op)]
        if not segments or (p is not None and cur is not None and p != cur):
            segments.append([p, []])
        if p is not None and cur is None:
            segments[-1][0] = p
        cur = segments[-1][0]
        segments[-1][1].append(op)
        ready.remove(op)
        for s in succs[id(op)]:
            preds[id(s)] -= 1
            if preds[id(s)] == 0:
                ready.append(s)
    return segments


def _homes(ops, placed_op):
    """Per op the placement whose segment runs it: its own, or for a local op (a constant's
    arithmetic, a draw, whose layout its readers decide) the first of its readers' homes, so it
    is computed beside them (a draw planned on the stage that reads it, not moved there)."""
    home = dict(placed_op)
    readers = {}
    for op in ops:
        for x in op.inputs:
            readers.setdefault(id(x.op), []).append(op)
    for op in reversed(ops):
        if home[id(op)] is None:
            home[id(op)] = next((home[id(r)] for r in readers.get(id(op), ()) if home[id(r)] is not None), None)
    return home


def _moved_sbp(shape, dtype, src, dst_placement, pins):
    """The SBP a value laid out ``src = (placement, sbp)`` gets on ``dst_placement``: a
    ``to_global`` pin, else the same SBP with partial axes reduced (to ``B`` or a split, the
    fewer bytes moved; ``B`` on a mesh of another rank)."""
    from tensorweave.distribute.boxing import boxing_cost
    if pins:
        return pins[0]
    nd = tuple(src[1])
    if len(nd) != dst_placement.ndim:
        return (B,) * dst_placement.ndim
    options = [tuple(B if isinstance(s, Partial) else s for s in nd)]
    if any(isinstance(s, Partial) for s in nd):
        options += [tuple(S(a) if isinstance(s, Partial) else s for s in nd) for a in range(len(shape))]
    return min(options, key=lambda o: boxing_cost(shape, dtype, src[0], nd, o, dst_placement))


# A value moved between placements without a to_global pin (a gradient going back to its stage)
# gets the layout that moves the fewest bytes in all: its transfer plus the boxing its reader
# segment then needs, found by planning that segment once per candidate layout (B, S(i)); a
# segment with more such feeds than this keeps the default (_moved_sbp) for them.
MAX_CHOSEN_MOVES = 4


def _choose_moves(gp, free_moves, transfers, seg_list, fetches, feeds, seg_layouts, placement, label, prices=None):
    """Layout choice across segments: per unpinned moved feed (in order, the others as chosen so
    far) the destination layout with the fewest bytes moved — its transfer plus the reader
    segment's boxings (the segment planned with it) —; the default first, so ties keep it. Returns
    the segment planned with the choices (``seg_layouts`` and ``transfers`` updated)."""
    from tensorweave.distribute.boxing import plan_boxing
    from tensorweave.distribute.planner import plan_op_list
    if placement.ndim != 1:
        return gp
    best_gp, changed = gp, False
    for j in free_moves:
        x = feeds[j]
        old_plan, src, reader = transfers[id(x)]
        shape, dtype = tuple(x.shape.as_list()), x.dtype.np_dtype
        best = (old_plan.bytes + plan_search.plan_cost(best_gp), old_plan, seg_layouts[j][1], best_gp)
        for nd in [(B,)] + [(S(a),) for a in range(len(shape))]:
            if nd == seg_layouts[j][1]:
                continue
            plan = plan_boxing(shape, dtype, src[0], src[1], nd, placement)
            trial = list(seg_layouts)
            trial[j] = (placement, nd)
            cand = plan_op_list(seg_list, fetches, feeds, trial, placement, label, fetch_prices=prices)
            cost = plan.bytes + plan_search.plan_cost(cand)
            if cost < best[0]:
                best = (cost, plan, nd, cand)
        if best[2] != seg_layouts[j][1]:
            changed = True
            seg_layouts[j] = (placement, best[2])
            transfers[id(x)] = (best[1], src, reader)
        best_gp = best[3]
    if changed:         # planned last with the choices (a loop's layouts are kept on its op when planned)
        best_gp = plan_op_list(seg_list, fetches, feeds, seg_layouts, placement, label, fetch_prices=prices)
    return best_gp


# A segment's value read only by to_global pins onto other placements (a stage's output sent to
# the next stage) is laid out by the segment's joint search with the pins' transfers priced
# (plan_search: a priced fetch), not kept at the greedy pass's layout: a contraction's partial
# sum reduce-scattered on its stage before it moves rather than sent partial (each rank's whole
# partial crossing). False: the greedy layout, as before session 14.
PRICE_FETCHES = True


def _fetch_prices(seg_fetches, wanted, readers_of, seg_of, k, placement):
    """id(fetch) -> a function of its N-D SBP here: the bytes of its transfers to the to_global
    pins that read it on other placements, plus, for a function result (``wanted``), its read as
    the logical value (``planner.output_prices``: ``B``); for the fetches read elsewhere by such
    pins only (not read unpinned elsewhere: those readers' layouts are chosen later)."""
    from tensorweave.distribute.boxing import plan_boxing
    from tensorweave.distribute.planner import PRICE_OUTPUTS, output_prices, pinned_layout
    prices = {}
    for t in seg_fetches:
        outside = [op for op in readers_of.get(id(t), ()) if seg_of.get(id(op), k) != k]
        pins = [pinned_layout(op) for op in outside if op.type == "_ToGlobal"]
        if len(pins) != len(outside) or any(q == placement for q, _ in pins):
            continue
        read = (output_prices([t], placement) or {}).get(id(t)) if id(t) in wanted and PRICE_OUTPUTS else None
        if not outside and read is None:
            continue
        shape, dtype = tuple(t.shape.as_list()), t.dtype.np_dtype

        def price(nd, shape=shape, dtype=dtype, pins=tuple(pins), read=read):
            moved = sum(plan_boxing(shape, dtype, placement, nd, want, q).bytes for q, want in set(pins))
            return moved + (read(nd) if read is not None else 0)
        prices[id(t)] = price
    return prices or None


class Segment:
    """One placement's run of ops: its :class:`~planner.GraphPlan` (``plan``), bound on the
    ranks (``runner``), its feeds with their layouts there and the transfers that bring them."""

    def __init__(self, placement, ops, feeds, layouts, transfers, plan):
        from tensorweave.distribute.plan_function import RankPlans
        self.placement, self.ops, self.feeds, self.layouts = placement, ops, feeds, layouts
        self.transfers = transfers       # id(feed) -> (BoxingPlan, source layout, reader op)
        self.plan, self.runner = plan, RankPlans(plan)


def plan_placements(ops, fetches, feeds, feed_layouts, info, label):
    """The :class:`Segment` list computing ``fetches`` from ``feeds`` (see the module docstring)."""
    from tensorweave.distribute.boxing import plan_boxing
    from tensorweave.distribute.planner import pinned_layout, plan_op_list
    placed = {}
    for t, lay in zip(feeds, feed_layouts):
        placed[id(t)] = None if lay is None else lay[0]
    placed_op = {}
    for op in ops:
        p = placed_op[id(op)] = op_placement(op, info, placed)
        for o in op.outputs:
            placed.setdefault(id(o), p)
    order = _segment_order(ops, _homes(ops, placed_op))
    if not order:
        raise errors.InvalidArgumentError(f"{label}: nothing to plan on several placements")
    seg_of = {}
    for k, (_, seg_ops) in enumerate(order):
        for op in seg_ops:
            seg_of[id(op)] = k
    wanted = {id(t) for t in fetches}
    readers_of = {}
    for op in ops:
        for x in op.inputs:
            readers_of.setdefault(id(x), []).append(op)
    layouts = {id(t): lay for t, lay in zip(feeds, feed_layouts)}      # id(tensor) -> (placement, sbp) | None
    segments = []
    for k, (placement, seg_ops) in enumerate(order):
        placement = placement if placement is not None else info.placement
        mine = {id(op) for op in seg_ops}
        seg_feeds, seen, free = [], set(), []
        for op in seg_ops:
            for x in op.inputs:
                if x.op.type in _FREE and id(x.op) not in mine:
                    mine.add(id(x.op))
                    free.append(x.op)
                elif id(x.op) not in mine and id(x) not in seen:
                    seen.add(id(x))
                    seg_feeds.append(x)
        seg_fetches = [o for op in seg_ops for o in op.outputs
                       if id(o) in wanted or any(seg_of.get(id(c), k) != k for c in readers_of.get(id(o), ()))]
        for t in fetches:        # a fetched constant: computed by the last segment
            if k == len(order) - 1 and t.op.type in _FREE and t not in seg_fetches:
                if id(t.op) not in mine:
                    mine.add(id(t.op))
                    free.append(t.op)
                seg_fetches.append(t)
        seg_layouts, transfers, free_moves = [], {}, []
        for j, x in enumerate(seg_feeds):
            src = layouts[id(x)]
            if src is None or src[0] == placement:
                seg_layouts.append(src)
                continue
            readers = [op for op in seg_ops if any(i is x for i in op.inputs)]
            pins = [pinned_layout(op)[1] for op in readers
                    if op.type == "_ToGlobal" and pinned_layout(op)[0] == placement]
            shape = tuple(x.shape.as_list())
            nd = _moved_sbp(shape, x.dtype.np_dtype, src, placement, pins)
            plan = plan_boxing(shape, x.dtype.np_dtype, src[0], src[1], nd, placement)
            transfers[id(x)] = (plan, src, readers[0])
            seg_layouts.append((placement, nd))
            if not pins:
                free_moves.append(j)
        seg_list = [op for op in ops if id(op) in mine]
        prices = _fetch_prices(seg_fetches, wanted, readers_of, seg_of, k, placement) if PRICE_FETCHES else None
        gp = plan_op_list(seg_list, seg_fetches, seg_feeds, seg_layouts, placement, f"{label}/segment{k}",
                          fetch_prices=prices)
        if free_moves and len(free_moves) <= MAX_CHOSEN_MOVES:
            gp = _choose_moves(gp, free_moves, transfers, seg_list, seg_fetches, seg_feeds, seg_layouts, placement,
                               f"{label}/segment{k}", prices)
        for t in seg_fetches:
            layouts[id(t)] = None if id(t) in gp.local else (placement, gp.layouts[id(t)]._sbp)
        segments.append(Segment(placement, seg_list, seg_feeds, seg_layouts, transfers, gp))
    return segments


class MultiPlacementFunction:
    """A concrete function's graph on several placements, planned and run as segments (see the
    module docstring); ``tw.function`` calls it as it calls a one-placement ``PlannedFunction``."""

    def __init__(self, cf):
        from tensorweave.runtime import executor
        t0 = time.perf_counter()
        self.cf = cf
        graph = cf.graph
        info = graph._tw_globals
        self.placement = info.placement
        self.captures = [c for c, _ in graph.captures]
        feeds = list(cf.inputs) + [p for _, p in graph.captures]
        layouts = [info.inputs.get(id(p)) for p in feeds]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        self.outputs, self.feeds = list(cf.outputs), feeds
        self.input_layouts = layouts[:len(cf.inputs)]
        ops = executor.prune(self.outputs, targets, {id(t): i for i, t in enumerate(feeds)})
        self.segments = plan_placements(ops, self.outputs, feeds, layouts, info, f"function:{graph.name}")
        self.seconds = time.perf_counter() - t0

    def feed_values(self, flat_inputs):
        """id(feed) -> ``(layout, per-rank pieces)`` or ``(None, a local value)`` of a call's inputs
        and the captures (the values :func:`run_segments` starts from)."""
        values = {}
        for t, x in zip(self.feeds, list(flat_inputs) + self.captures):
            if getattr(x, "is_global", False):
                values[id(t)] = ((x.placement, x.sbp), list(x._pieces))
            else:
                values[id(t)] = (None, x._value if isinstance(x, EagerTensor) else to_numpy(x, None))
        return values

    def __call__(self, flat_inputs):
        from tensorweave.distribute.global_tensor import GlobalTensor
        from tensorweave.distribute.plan_function import check_input_layouts
        check_input_layouts(flat_inputs, self.input_layouts, self.feeds)
        if ctx.tapes and self.cf._watched_by_tape(flat_inputs):   # an outer tape: both halves planned
            from tensorweave.distribute.plan_tape import call_recorded_multi
            return call_recorded_multi(self, flat_inputs)
        values = run_segments(self.segments, self.feed_values(flat_inputs))
        out = []
        for t in self.outputs:
            lay, v = values[id(t)]
            out.append(EagerTensor(v, t.dtype) if lay is None else
                       GlobalTensor(v, lay[0], lay[1], tuple(t.shape.as_list()), t.dtype))
        return out


class MultiPlacementSessionRun:
    """A TF1 ``Session.run`` signature of a graph holding global values on several placements:
    planned as segments like a function (feeds are local values; fetches come back as logical
    NumPy values, as a session returns them)."""

    def __init__(self, fetches, targets, feeds, graph, feed_shapes=None):
        from tensorweave.core.graph import refined_shapes
        from tensorweave.runtime import executor
        t0 = time.perf_counter()
        self.feeds, self.fetches = list(feeds), list(fetches)
        ops = executor.prune(self.fetches, list(targets), {id(t): i for i, t in enumerate(self.feeds)})
        with refined_shapes(ops if feed_shapes else [], feed_shapes or {}):
            self.segments = plan_placements(ops, self.fetches, self.feeds, [None] * len(self.feeds),
                                            graph._tw_globals, "Session.run")
            self.shapes = {id(t): seg.plan.layouts[id(t)]._shape for seg in self.segments for t in seg.plan.fetches
                           if id(t) not in seg.plan.local}
        self.seconds = time.perf_counter() - t0

    def __call__(self, feed_values):
        from tensorweave.distribute.layout import assemble
        from tensorweave.distribute.ray.pieces import local_pieces
        values = {id(t): (None, v) for t, v in zip(self.feeds, feed_values)}
        run_segments(self.segments, values)
        out = []
        for t in self.fetches:
            lay, v = values[id(t)]
            out.append(v if lay is None else assemble(local_pieces(v), self.shapes[id(t)], lay[0], lay[1]))
        return out


def run_segments(segments, values):
    """Runs ``segments`` in order on ``values`` (id(tensor) -> ``(layout, per-rank pieces)`` or
    ``(None, a local value)``; the feeds in, every segment's fetches added): each segment is one
    hand-off per rank, fed its values moved to its placement where they live on another."""
    for seg in segments:
        run_segment(seg, values)
    return values


def run_segment(seg, values):
    """Runs one segment on ``values`` (see :func:`run_segments`); a pipeline's stage runs its
    segments this way, one micro-batch's ``values`` at a time (``plan_pipeline.py``)."""
    from tensorweave.distribute.ray.pieces import local_pieces
    per_rank = [[] for _ in range(seg.placement.size)]
    for t, lay in zip(seg.feeds, seg.layouts):
        src, v = values[id(t)]
        if lay is None:
            pieces = [v] * seg.placement.size
        elif id(t) in seg.transfers:
            pieces = _move(seg.transfers[id(t)][0], v)
        else:
            pieces = v
        for i, piece in enumerate(pieces):
            per_rank[i].append(piece)
    for t, (lay, pieces) in zip(seg.plan.fetches, seg.runner.run(per_rank)):
        values[id(t)] = (None, local_pieces(pieces)[0]) if lay is None else ((seg.placement, lay._sbp), pieces)
    return values


def _move(plan, pieces):
    """The destination pieces of a transfer between placements: on the in-process ranks, or on
    the Ray workers holding them, worker to worker (never through the driver)."""
    from tensorweave.distribute.boxing import box
    from tensorweave.distribute.ray import pieces as ray_pieces
    cluster = ray_pieces.cluster_for(plan.dst_placement)
    if cluster is not None:
        return ray_pieces.box(cluster, pieces, plan)
    return box(ray_pieces.local_pieces(pieces), plan)


__all__ = ["MultiPlacementFunction", "MultiPlacementSessionRun", "run_segments", "run_segment", "plan_placements", "placement_of", "to_global_grad", "op_placement"]
