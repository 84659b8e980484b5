"""``tw.function`` on global tensors: the traced graph planned once per input signature, run as
one plan per rank.

Tracing sees logical shapes: a global argument becomes a placeholder carrying its placement
and SBP (:func:`mark_global_input`), a global tensor the function closes over is captured the
same way, a global variable is captured by handle (``GlobalVariable.handle_in``), and
``x.to_global(...)`` of a symbolic tensor adds a ``_ToGlobal`` op (the user's pin). A
:class:`PlannedFunction` plans the graph (``planner.plan_graph``), builds each rank's plan
spec and binds it on that rank's thread (once), and runs a call as ONE hand-off per rank:
each rank runs its whole plan with its own communicator. Outputs come back as global tensors
laid out as planned (local ones as local tensors).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> v = tw.Variable(np.ones((3, 2), np.float32), placement=p, sbp=tw.sbp.broadcast)
>>> @tw.function
... def step(x):
...     with tw.GradientTape() as tape:
...         loss = tw.reduce_sum(tw.matmul(x, v))
...     v.assign_sub(0.5 * tape.gradient(loss, v))
...     return loss
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> float(step(x)), v.numpy()[0].tolist()
(24.0, [-1.0, -1.0])
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.dtypes import variant as _variant
from tensorweave.core.context import ctx
from tensorweave.core.convert import to_numpy
from tensorweave.core.tensor import EagerTensor
from tensorweave.distribute import rank_threads, zero_update
from tensorweave.distribute.plan_bounded import Bounded
from tensorweave.distribute.ray.pieces import cluster_for
from tensorweave.runtime import executor


# The calling (controller) thread runs the first rank's plan itself while the other ranks run
# theirs (World.run(..., inline=True)): one thread hand-off less per call, and two threads busy on
# two cores instead of three threads (the controller preempted, holding the GIL, by a rank it woke).
INLINE_FIRST_RANK = True


class GraphGlobals:
    """What a traced graph knows about its global values: the placement and, per placeholder
    of a global argument or capture, its (placement, N-D SBP). The runtime reaches the planner
    through it (``graph._tw_globals``), so the runtime layer imports nothing from here."""

    __slots__ = ("graph", "placement", "inputs", "placements", "placed")

    def __init__(self, graph, placement):
        self.graph, self.placement, self.inputs = graph, placement, {}
        self.placements = [placement]   # several: pipeline stages in one function (plan_placements.py)
        self.placed = {}                # id(tensor) -> its placement, as the gradients of moves ask

    def plan_function(self, cf):
        """The :class:`PlannedFunction` of concrete function ``cf`` (traced into this graph)."""
        if len(self.placements) > 1:
            from tensorweave.distribute.plan_placements import MultiPlacementFunction
            return MultiPlacementFunction(cf)
        return PlannedFunction(cf)

    def plan_session_run(self, fetches, targets, feeds, feed_shapes=None):
        """The :class:`PlannedSessionRun` of one ``Session.run`` signature of this graph
        (``feed_shapes``: ``{placeholder: fed shape}`` for placeholders of open shape)."""
        if len(self.placements) > 1:
            from tensorweave.distribute.plan_placements import MultiPlacementSessionRun
            return MultiPlacementSessionRun(fetches, targets, feeds, self.graph, feed_shapes)
        return PlannedSessionRun(fetches, targets, feeds, self.graph, feed_shapes)


def mark_global(graph, placement):
    """Records that ``graph`` holds global values on ``placement`` (several: each one's part of
    the graph is planned on it, values moved between them; ``plan_placements.py``)."""
    g = getattr(graph, "_tw_globals", None)
    if g is None:
        g = graph._tw_globals = GraphGlobals(graph, placement)
    elif placement not in g.placements:
        g.placements.append(placement)
    return g


def mark_global_input(graph, placeholder, placement, sbp):
    """``placeholder`` stands for a global value laid out as ``sbp`` on ``placement``."""
    mark_global(graph, placement).inputs[id(placeholder)] = (placement, tuple(sbp))


def capture_global(graph, t):
    """A placeholder of ``graph`` for the global tensor ``t`` the function closes over."""
    hit = graph._capture_map.get(id(t))
    if hit is not None:
        return hit[1]
    from tensorweave.ops.array_ops import placeholder
    with graph.as_default(), graph.control_dependencies(None):
        ph = placeholder(t.dtype, shape=t.shape, name="capture")
    graph._capture_map[id(t)] = (t, ph)
    graph.captures.append((t, ph))
    mark_global_input(graph, ph, t.placement, t.sbp)
    return ph


class RankPlans:
    """A :class:`~planner.GraphPlan` bound on the in-process ranks: each rank's spec bound on its
    own thread at the first run, then each run is one hand-off per rank (:meth:`run`)."""

    def __init__(self, plan):
        from tensorweave.distribute.ranks import default_world
        self.plan, self.placement = plan, plan.placement
        from tensorweave.distribute import planner
        self.world = default_world()
        self.bound = None
        self.remote = None
        self.share = planner.SHARED_ZERO_STORAGE   # ZeRO-1 weights in one buffer per process (zero_update)
        self.shared = []
        self._fetch_info = None     # per fetch (layout, kept as is): _fetch_layouts

    def _bind(self):
        from tensorweave.runtime import executor
        world, ranks = self.world, self.placement.ranks
        specs = []
        for i, r in enumerate(ranks):
            rt = world.rank(r).runtime
            specs.append((rt,) + self.plan.rank_spec(i, rt.resource("communicator", "world")))
        self.bound = world.run(ranks, lambda i: executor.bind(specs[i][1], specs[i][0], specs[i][2]))
        if self.share:
            from tensorweave.distribute.zero_update import share_storage
            self.shared = share_storage(self.bound)

    def run(self, feeds):
        """``feeds[i]``: rank ``i``'s feed values; returns per fetch its layout and the ranks' pieces."""
        cluster = cluster_for(self.placement)
        if cluster is not None:       # the ranks are Ray workers: specs shipped once per cluster, then one call each
            if self.remote is None or self.remote.cluster is not cluster:
                from tensorweave.distribute.ray.plans import RayRankPlans
                self.remote = RayRankPlans(self.plan, cluster)
            return self.remote.run(feeds)
        if self.bound is None:
            self._bind()
        bound = self.bound
        # the ranks share the controller's cores; its per-thread counts read once for held()
        n, counts = rank_threads.controller_counts(self.placement.size)
        shared = self.shared
        if not INLINE_FIRST_RANK:
            def posted(i):
                if shared and i == 0:       # before this rank's bucket: no rank updates the weights yet
                    zero_update.reshare(shared)
                rank_threads.use(n)
                return executor.run_plan(bound[i], feeds[i])
            results = self.world.run(self.placement.ranks, posted)
        else:
            def on_rank(i):
                if i:
                    rank_threads.use(n)
                elif shared:                # inside the run (the ranks' locks held: a concurrent run waits)
                    zero_update.reshare(shared)
                return executor.run_plan(bound[i], feeds[i])
            # The controller runs the first rank's plan itself: its thread's settings are made before
            # the other ranks are posted and restored after they all finished. Made inside the run,
            # after the posting, these calls (ctypes calls that dropped the GIL then; numba's and the
            # getters keep it since session 23) handed the GIL to the rank just woken, the controller
            # waiting for it to reach its first product, and delayed the first rank's bucket.
            taken = rank_threads.take(n, counts)
            try:
                results = self.world.run(self.placement.ranks, on_rank, inline=True)
            finally:
                rank_threads.restore(taken)
        return [(lay, [r[j] for r in results] if keep else [_array(r[j]) for r in results])
                for j, (lay, keep) in enumerate(self._fetch_layouts())]

    def _fetch_layouts(self):
        """Per fetch its layout (None: a local value) and whether its pieces are kept as they are (a
        loop's history, a list): worked out once, not per step on the controller."""
        got = self._fetch_info
        if got is None:
            gp = self.plan
            got = self._fetch_info = [(None if id(t) in gp.local else gp.layouts[id(t)], t.dtype is _variant)
                                      for t in gp.fetches]
        return got



def _shape(lay, pieces):
    """A fetch's logical shape: its layout's, or its B pieces' where the layout holds only a bound."""
    return tuple(np.shape(pieces[0])) if isinstance(lay, Bounded) else lay._shape


def _array(x):
    return x if type(x) is np.ndarray else np.asarray(x)


def check_input_layouts(flat_inputs, layouts, feeds):
    """Raises where a planned function's input is not of the layout it was traced for (``layouts``:
    per input ``(placement, sbp)``, None for a local tensor; ``feeds``: its placeholders)."""
    for x, lay, p in zip(flat_inputs, layouts, feeds):
        if (lay is None) == bool(getattr(x, "is_global", False)) or (
                lay is not None and (x.placement, x.sbp) != lay):
            raise errors.InvalidArgumentError(
                f"planned function input '{p.op.name}' was traced for {lay or 'a local tensor'}, got "
                f"{(x.placement, x.sbp) if getattr(x, 'is_global', False) else 'a local tensor'}")

class PlannedFunction(RankPlans):
    """A concrete function's graph planned for global tensors (see the module docstring)."""

    def __init__(self, cf):
        from tensorweave.distribute.planner import plan_graph
        self.cf = cf
        graph = cf.graph
        info = graph._tw_globals
        self.captures = [c for c, _ in graph.captures]
        feeds = list(cf.inputs) + [p for _, p in graph.captures]
        layouts = [info.inputs.get(id(p)) for p in feeds]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        self.outputs = list(cf.outputs)
        super().__init__(plan_graph(self.outputs, targets, feeds, layouts, info.placement, f"function:{graph.name}"))
        self.input_layouts = layouts[:len(cf.inputs)]

    def _feeds(self, flat_inputs, i):
        out = []
        for x, lay in zip(flat_inputs, self.input_layouts):
            out.append(x._pieces[i] if lay is not None else
                       x._value if isinstance(x, EagerTensor) else to_numpy(x, None))
        for c in self.captures:
            out.append(c._pieces[i] if getattr(c, "is_global", False) else c._value)
        return out

    def __call__(self, flat_inputs):
        from tensorweave.distribute.global_tensor import GlobalTensor
        check_input_layouts(flat_inputs, self.input_layouts, self.plan.feeds)
        if ctx.tapes and self.cf._watched_by_tape(flat_inputs):   # an outer tape: both halves planned
            from tensorweave.distribute.plan_tape import call_recorded
            return call_recorded(self, flat_inputs)
        fetched = self.run([self._feeds(flat_inputs, i) for i in range(self.placement.size)])
        return [EagerTensor(pieces[0], t.dtype) if lay is None else
                GlobalTensor(pieces, self.placement, lay._sbp, _shape(lay, pieces), t.dtype)
                for t, (lay, pieces) in zip(self.outputs, fetched)]


class PlannedSessionRun(RankPlans):
    """A TF1 ``Session.run`` signature (fetches, targets, feeds) of a graph holding global values
    (global variables, ``to_global`` of its tensors): planned like a function; feeds are local
    values (every rank gets the whole), fetches come back as logical values (as a session
    returns NumPy values)."""

    def __init__(self, fetches, targets, feeds, graph, feed_shapes=None):
        from tensorweave.core.graph import refined_shapes
        from tensorweave.distribute.planner import plan_graph
        from tensorweave.runtime.executor import prune
        info = graph._tw_globals
        # the planner lays out static shapes: a placeholder's open batch dimension is planned as fed
        ops = prune(list(fetches), list(targets), {id(t): i for i, t in enumerate(feeds)}) if feed_shapes else []
        with refined_shapes(ops, feed_shapes or {}):
            super().__init__(plan_graph(list(fetches), list(targets), list(feeds), [None] * len(feeds),
                                        info.placement, "Session.run"))

    def __call__(self, feed_values):
        from tensorweave.distribute.layout import assemble
        fetched = self.run([list(feed_values)] * self.placement.size)
        from tensorweave.distribute.ray.pieces import local_pieces
        return [pieces[0] if lay is None else
                assemble(local_pieces(pieces), _shape(lay, pieces), self.placement, lay._sbp)
                for lay, pieces in fetched]
