"""A joint search over a planned graph's signatures, after the greedy pass (``planner.py``).

The greedy planner decides op by op with a one-step look-ahead; a chain of ops can then settle on
a layout that costs a boxing further down (a gradient's ``ones`` broadcast to ``S(0)`` because
rows are cheaper to write, then a softmax's ``S(1)`` output all-to-all'd to meet it). Like
OneFlow's SBP collector and cost model, this module searches the signatures jointly:

1. **dynamic programming** over the *movable* ops in topological order: ``f[op][c]`` is the cost
   of the op under candidate ``c`` (a rank's work, ``_Planner.work``) plus, per input, the
   cheapest producer candidate and the boxing from its layout to the one ``c`` reads (exact on
   trees; a shared producer is counted once per reader). Choices are then taken from the sinks
   up: each op's candidate minimising ``f`` plus the boxing its (already chosen) readers need;
2. **iterative improvement** from the cheaper of the DP's result and the greedy one: from each
   op an input is boxed into, each candidate boxing less into it is tried as a *cascade* (the op
   moves, then each neighbour reached moves to its cheapest candidate given the moves so far),
   kept when the total falls; until a pass changes nothing (at most :data:`PASSES`) or the
   budget of :data:`EVALS_PER_NODE` local evaluations per op is spent;
3. the assignment with the least total cost (work + bytes boxed, each tensor boxed once per
   layout, the planner's cost model, plus :data:`COLLECTIVE_FIXED_BYTES` per collective) is
   kept; the greedy plan wins ties, so the search never returns a costlier plan than greedy.

An op is *movable* when it is an ordinary global op (no variable handle, no state, no control
flow, no random stream, not a ZeRO-1 update) with its candidates recorded by the greedy pass. A
tensor read by an op that is neither movable nor a ``to_global`` pin keeps its greedy layout
(that reader's plan depends on it: a ZeRO-1 update, a control-flow body, a decomposition's alias).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> x = tw.constant(np.ones((4, 6), np.float32)).to_global(placement=p, sbp=tw.sbp.split(1))
>>> f = tw.function(lambda x: tw.nn.softmax(x) * tw.ones([4, 6]))
>>> round(float(tw.reduce_sum(f(x))), 4)
4.0
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.distribute.interpreter import Layout, _plan, decision

SEARCH = True          # False: the greedy plan as it is (the planner before session 13)
PASSES = 4             # iterative-improvement sweeps at most
CASCADE = 24           # nodes one improvement move may change at most
SHARED_WORK = True     # nodes with one candidate list share their work figures (False: per node; tests compare)
EVALS_PER_NODE = 2     # the improvement's budget of local evaluations per movable op
# A collective's fixed cost in byte-equivalents (its rendezvous: ~20 us on the AMD EPYC, the time to
# move ~16 KiB; planner.ZERO_FIXED_BYTES), so the search never trades a tiny saving in work for one
# more collective. Greedy's choices do not see it; the search compares both plans with it.
COLLECTIVE_FIXED_BYTES = 16 << 10
_INF = float("inf")


class _Node:
    """A movable op: its candidates, the greedy-time input layouts and its choice."""

    __slots__ = ("op", "ins", "combos", "out_specs", "kernel_attrs", "has_rule", "choice", "srcs", "frozen",
                 "readers")

    def __init__(self, op, ins, combos, out_specs, kernel_attrs, has_rule, choice):
        self.op, self.ins, self.combos, self.out_specs = op, ins, combos, out_specs
        self.kernel_attrs, self.has_rule, self.choice = kernel_attrs, has_rule, choice
        self.srcs = []          # per input: (producer node index, output index) or None (fixed layout)
        self.frozen = {}        # output index -> the layout it must keep
        self.readers = []       # per output: [(reader node index, input index)]


def search(planner):
    """Improves ``planner.gp`` in place (see the module docstring); returns (greedy cost, kept cost)."""
    records = getattr(planner, "records", None)
    if not SEARCH or not records or not planner.lookahead:     # lookahead=False: plain greedy
        return None
    gp = planner.gp
    nodes, index = [], {}
    for op in gp.ops:
        rec = records.get(id(op))
        p = gp.op_plans.get(id(op))
        if rec is None or p is None or p.kind != "global" or p.zero or len(rec[1]) < 2:
            continue
        ins, combos, out_specs, kernel_attrs, has_rule = rec
        choice = next((k for k, c in enumerate(combos) if list(c[1]) == list(p.in_nd) and list(c[2]) == list(p.out_nd)),
                      None)
        if choice is None:
            continue
        index[id(op)] = len(nodes)
        nodes.append(_Node(op, ins, combos, out_specs, kernel_attrs, has_rule, choice))
    if not nodes:
        return None
    fixed = _link(planner, nodes, index)
    model = _Model(planner, nodes, fixed)
    greedy = [n.choice for n in nodes]
    best, best_cost = greedy, model.total(greedy)
    if not any(model.tensor_cost(key, greedy) for i in range(len(nodes)) for key in model.keys_of[i]):
        return Costs(best_cost, best_cost, best_cost, 0)    # nothing is boxed between movable ops: nothing to gain
    greedy_cost = best_cost
    planned = model.dp()
    dp_cost = model.total(planned)
    start = planned if dp_cost < greedy_cost else greedy       # improved from the better start only
    got = model.improve(list(start))
    cost = model.total(got)
    if cost < best_cost:
        best, best_cost = got, cost
    if best is not greedy:
        _apply(planner, nodes, best)
    return Costs(greedy_cost, best_cost, dp_cost, model.evals)


class Costs(tuple):
    """``(greedy cost, kept cost)`` of a search, with ``dp`` (the DP's plan alone, before the
    improvement) and ``evals`` (the improvement's local evaluations) beside: what the tests and
    the planning benchmark read.

    >>> c = Costs(10, 7, 8, 3)
    >>> tuple(c), c.dp, c.evals
    ((10, 7), 8, 3)
    """

    def __new__(cls, greedy, kept, dp, evals):
        self = super().__new__(cls, (greedy, kept))
        self.greedy, self.kept, self.dp, self.evals = greedy, kept, dp, evals
        return self


def _link(planner, nodes, index):
    """Fills each node's sources, readers and frozen outputs; returns the fixed readers' needs:
    ``[(node index, output index, wanted layout)]`` (a pin's layout, a fixed global op's input)."""
    gp = planner.gp
    out_of = {}
    for i, n in enumerate(nodes):
        n.readers = [[] for _ in n.op.outputs]
        for j, o in enumerate(n.op.outputs):
            out_of[id(o)] = (i, j)
    for i, n in enumerate(nodes):
        n.srcs = [out_of.get(id(x)) for x in n.op.inputs]
        for k, src in enumerate(n.srcs):
            if src is not None:
                nodes[src[0]].readers[src[1]].append((i, k))
    fixed = []
    prices = getattr(planner, "fetch_prices", None) or {}
    if not planner.free_fetches:        # read elsewhere (another segment, a loop's next iteration)
        for t in gp.fetches:
            src = out_of.get(id(t))
            if src is not None and id(t) not in prices:      # priced: moved on, its layout's cost known
                nodes[src[0]].frozen[src[1]] = gp.layouts[id(t)]._sbp
    for op in gp.ops:
        if id(op) in index:
            continue
        p = gp.op_plans.get(id(op))
        if p is not None and p.kind == "metadata":        # reads logical shapes only
            continue
        if p is not None and p.kind == "alias":           # a decomposed op's outputs are its ops' (same layout)
            for t in p.value:
                src = out_of.get(id(t))
                if src is not None:
                    nodes[src[0]].frozen[src[1]] = gp.layouts[id(t)]._sbp
        for k, x in enumerate(op.inputs):
            src = out_of.get(id(x))
            if src is None:
                continue
            if p is not None and p.kind == "pin":
                fixed.append((src[0], src[1], p.in_nd[0]))
            elif p is not None and p.kind == "global" and not p.zero and op.type not in _KEEPS_INPUTS and all(
                    lay._dtype is not _dt.resource for lay in (gp.layouts.get(id(y)) for y in op.inputs) if lay):
                fixed.append((src[0], src[1], p.in_nd[k]))
            else:
                n = nodes[src[0]]
                n.frozen[src[1]] = gp.layouts[id(x)]._sbp
    return fixed


_KEEPS_INPUTS = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})


class _Model:
    """The total cost of an assignment (one candidate index per node) and the two searches.
    Layouts are interned as small ints (``cin``/``cout``: per node and candidate, the input and
    output layout ids; ``fin``: fixed inputs' ids) and every cost is memoised on them: the
    search asks the same few questions many times."""

    def __init__(self, planner, nodes, fixed):
        self.pl, self.nodes = planner, nodes
        self.lid, self.lays = {}, []
        self.cin, self.cout, seen = [], [], {}
        for n in nodes:      # candidates() hands ops of one shape and layout the same list: interned once
            ids = seen.get(id(n.combos))
            if ids is None:
                ids = seen[id(n.combos)] = ([tuple(self._id(x) for x in c[1]) for c in n.combos],
                                            [tuple(self._id(x) for x in c[2]) for c in n.combos])
            self.cin.append(ids[0])
            self.cout.append(ids[1])
        self.wkey = [id(n.combos) if SHARED_WORK else i for i, n in enumerate(nodes)]
        self.fin = [[self._id(lay._sbp) for lay in n.ins] for n in nodes]
        # (node, output) -> a function of the output's N-D SBP: the bytes its later readers on
        # another placement pay for it (a segment's value moved on by a to_global pin)
        self.priced, self._prices = {}, {}
        prices = getattr(planner, "fetch_prices", None) or {}
        if prices:
            for i, n in enumerate(nodes):
                for j, o in enumerate(n.op.outputs):
                    if id(o) in prices and j not in n.frozen:
                        self.priced[(i, j)] = prices[id(o)]
        self.fixed_by = {}
        for i, j, want in fixed:
            self.fixed_by.setdefault((i, j), set()).add(self._id(want))
        self.allowed = []
        for i, n in enumerate(nodes):
            frozen = {j: self._id(nd) for j, nd in n.frozen.items()}
            self.allowed.append([c for c in range(len(n.combos)) if all(self.cout[i][c][j] == f
                                                                         for j, f in frozen.items())] or [n.choice])
        self.keys_of = [[src if src is not None else (i, k, None) for k, src in enumerate(n.srcs)]
                        + [(i, j) for j in range(len(n.op.outputs))] for i, n in enumerate(nodes)]
        self._work, self._in, self._out, self._shared = {}, {}, {}, {}
        # improvement moves start only where a boxing is (see improve) and stop after this many
        # local evaluations in all: a deterministic bound on the search's time
        self.evals, self.budget = 0, EVALS_PER_NODE * len(nodes) + 500

    def _id(self, nd):
        nd = tuple(nd)
        k = self.lid.get(nd)
        if k is None:
            k = self.lid[nd] = len(self.lays)
            self.lays.append(nd)
        return k

    def _boxing(self, shape, dtype, src, dst):
        key = (shape, dtype, src, dst)
        c = self._shared.get(key)
        if c is None:
            try:
                moved = self.pl.cost(shape, dtype.np_dtype, self.pl.placement, self.lays[src], self.lays[dst])
            except Exception:  # noqa: BLE001 - a pair boxing cannot make: never chosen
                moved = _INF
            c = self._shared[key] = moved + COLLECTIVE_FIXED_BYTES if moved else 0
        return c

    def box(self, i, k, src, dst):
        """Cost of boxing input ``k`` of node ``i`` from layout id ``src`` to ``dst``."""
        if src == dst:
            return 0
        key = (i, k, src, dst)
        c = self._in.get(key)
        if c is None:
            lay = self.nodes[i].ins[k]
            c = self._in[key] = self._boxing(lay._shape, lay._dtype, src, dst)
        return c

    def out_box(self, i, j, src, dst):
        """Cost of boxing output ``j`` of node ``i`` from layout id ``src`` to ``dst``."""
        if src == dst:
            return 0
        key = (i, j, src, dst)
        c = self._out.get(key)
        if c is None:
            shape, dtype = self.nodes[i].out_specs[j]
            c = self._out[key] = self._boxing(shape, dtype, src, dst)
        return c

    def work(self, i, c):
        # nodes handed one candidate list (same op, attrs, input layouts and outputs: the
        # candidates' cache key) do the same work per candidate: asked once
        key = (self.wkey[i], c)
        w = self._work.get(key)
        if w is None:
            n = self.nodes[i]
            w = self._work[key] = self.pl.work(n.op, n.ins, n.out_specs, n.combos[c])
        return w

    def src_layout(self, i, k, assign):
        src = self.nodes[i].srcs[k]
        if src is None:
            return self.fin[i][k]
        return self.cout[src[0]][assign[src[0]]][src[1]]

    def tensor_cost(self, key, assign):
        """Cost of boxing one tensor to every layout its readers want (once per layout, as the
        rank plans share a boxing): ``key`` is ``(producer node, output)`` or ``(reader node,
        input, None)`` for a tensor of fixed layout read by node ``reader``."""
        if len(key) == 3:
            i, k, _ = key
            return self.box(i, k, self.fin[i][k], self.cin[i][assign[i]][k])
        p, j = key
        have = self.cout[p][assign[p]][j]
        cin = self.cin
        wants = {cin[r][assign[r]][k] for r, k in self.nodes[p].readers[j]}
        fixed = self.fixed_by.get(key)
        if fixed:
            wants |= fixed
        wants.discard(have)
        cost = self.price(p, j, have) if self.priced else 0
        return cost + sum(self.out_box(p, j, have, w) for w in wants) if wants else cost

    def price(self, i, j, lay):
        """What output ``j`` of node ``i`` laid out ``lay`` costs its readers on another placement."""
        fn = self.priced.get((i, j))
        if fn is None:
            return 0
        c = self._prices.get((i, j, lay))
        if c is None:
            c = self._prices[(i, j, lay)] = fn(self.lays[lay])
        return c

    def keys(self, i):
        """The tensors node ``i`` reads or writes (see :meth:`tensor_cost`)."""
        return self.keys_of[i]

    def part(self, members, assign):
        """The cost terms that depend on the choices of ``members``: their work and the tensors
        they touch."""
        keys = set()
        cost = 0
        for i in members:
            cost += self.work(i, assign[i])
            keys.update(self.keys_of[i])
        return cost + sum(self.tensor_cost(key, assign) for key in keys)

    def total(self, assign):
        """Work of every node plus the cost of boxing every tensor a node touches."""
        return self.part(range(len(self.nodes)), assign)

    def dp(self):
        """The sinks-up choice after a forward DP (see the module docstring)."""
        nodes = self.nodes
        f = []
        best_out = []          # per node, per output: {layout: least f}
        box, work = self.box, self.work
        for i, n in enumerate(nodes):
            fi = {}
            srcs, cin_i, fin_i = n.srcs, self.cin[i], self.fin[i]
            froms = [best_out[src[0]][src[1]] if src is not None else None for src in srcs]
            seen = {}       # (input, wanted layout) -> its least cost: candidates share most wants
            for c in self.allowed[i]:
                cost = work(i, c)
                for k, want in enumerate(cin_i[c]):
                    least = seen.get((k, want))
                    if least is None:
                        options = froms[k]
                        if options is None:
                            least = box(i, k, fin_i[k], want)
                        else:
                            least = _INF
                            for lay, v in options.items():
                                v += box(i, k, lay, want)
                                if v < least:
                                    least = v
                        seen[(k, want)] = least
                    cost += least
                fi[c] = cost
            f.append(fi)
            outs = [{} for _ in n.op.outputs]
            for c, v in fi.items():
                for j, lay in enumerate(self.cout[i][c]):
                    if v < outs[j].get(lay, _INF):
                        outs[j][lay] = v
            best_out.append(outs)
        assign = [n.choice for n in nodes]
        for i in range(len(nodes) - 1, -1, -1):
            n = nodes[i]
            best, best_c = _INF, n.choice
            wanted = self._wanted(i, assign)
            for c in self.allowed[i]:
                cost = f[i][c] + self._below(i, c, wanted)
                if cost < best:
                    best, best_c = cost, c
            assign[i] = best_c
        return assign

    def _wanted(self, i, assign):
        """Per output of node ``i``: the layouts its (chosen) readers and fixed readers want."""
        out = []
        for j, readers in enumerate(self.nodes[i].readers):
            wanted = {self.cin[r][assign[r]][k] for r, k in readers}
            wanted.update(self.fixed_by.get((i, j), ()))
            out.append(wanted)
        return out

    def _below(self, i, c, wanted):
        """Boxing node ``i``'s outputs under candidate ``c`` into the layouts ``wanted`` (:meth:`_wanted`)."""
        cost = 0
        outs = self.cout[i][c]
        for j, wants in enumerate(wanted):
            for want in wants:
                cost += self.out_box(i, j, outs[j], want)
            if self.priced:
                cost += self.price(i, j, outs[j])
        return cost

    def improve(self, assign):
        """Iterative improvement: from each node that an input is boxed into, each candidate
        boxing less into it is tried as a *cascade*
        (the node moves, then each neighbour reached moves to its cheapest candidate given the
        moves so far, ties going to the one agreeing with the moved nodes, at most
        :data:`CASCADE` nodes); kept when the total cost falls. A chain that only pays off when
        it flips as a whole (a gradient's S(0) rows to the logits' S(1)) flips so."""
        for _ in range(PASSES):
            changed = False
            for i in range(len(self.nodes)):
                for c in self.starts(i, assign):
                    if self.evals > self.budget:
                        break
                    moves = self.cascade(i, c, assign)
                    if moves is not None:
                        for j, cj in moves.items():
                            assign[j] = cj
                        changed = True
            if not changed:
                break
        return assign

    def starts(self, i, assign):
        """The candidates a cascade from node ``i`` starts with: where an input is boxed, those
        boxing less into it; where none is but an output is only sliced by its readers (a whole
        ``B`` value each reader cuts its piece from: free in bytes, every rank doing all the
        work), those writing less; and where a priced output costs its readers elsewhere (a
        function's result left ``P``, a stage's value sent on), those whose outputs cost less
        there. Elsewhere none: nothing for a move from here to remove."""
        here = self.in_cost(i, assign[i], assign)
        if here:
            out = [c for c in self.allowed[i] if c != assign[i] and self.in_cost(i, c, assign) < here]
        elif self.sliced(i, assign):
            w = self.work(i, assign[i])
            out = [c for c in self.allowed[i] if c != assign[i] and self.work(i, c) < w]
        else:
            out = []
        priced = self.out_price(i, assign[i])
        if priced:
            out += [c for c in self.allowed[i] if c != assign[i] and c not in out and self.out_price(i, c) < priced]
        return out

    def out_price(self, i, c):
        """What node ``i``'s priced outputs cost their readers elsewhere under candidate ``c`` (0: none priced)."""
        if not self.priced:
            return 0
        outs = self.cout[i][c]
        return sum(self.price(i, j, lay) for j, lay in enumerate(outs) if (i, j) in self.priced)

    def sliced(self, i, assign):
        """Whether some output of node ``i`` is read, and read by no reader at the layout written."""
        outs = self.cout[i][assign[i]]
        for j, readers in enumerate(self.nodes[i].readers):
            wants = {self.cin[r][assign[r]][k] for r, k in readers}
            wants.update(self.fixed_by.get((i, j), ()))
            if wants and outs[j] not in wants:
                return True
        return False

    def in_cost(self, i, c, assign):
        """Bytes boxed into node ``i``'s inputs under candidate ``c`` (producers as assigned)."""
        return sum(self.box(i, k, self.src_layout(i, k, assign), want) for k, want in enumerate(self.cin[i][c]))

    def neighbours(self, i):
        n = self.nodes[i]
        out = [src[0] for src in n.srcs if src is not None]
        out += [r for readers in n.readers for r, _ in readers]
        return out

    def cascade(self, i, c, assign):
        """The moves (node -> candidate) of a cascade started by node ``i`` taking ``c`` when they
        lower the total cost, else None. Tried first with each neighbour reached taking its
        cheapest candidate given the moves so far; when that is no cheaper, again with each
        neighbour ranked as if its own unmoved neighbours would follow (its work and the boxing
        on its edges to moved nodes or fixed layouts only): a chain whose every link alone just
        moves a boxing one op down (``sin`` then ``exp`` of a value whose producer moved) flips
        as a whole."""
        for follow in (False, True):
            trial = list(assign)
            trial[i] = c
            moved = {i: c}
            queue = self.neighbours(i)
            while queue and len(moved) < CASCADE:
                j = queue.pop(0)
                if j in moved:
                    continue
                best = cur = self._ranked(j, trial[j], trial, moved, follow)
                pick = trial[j]
                for cj in self.allowed[j]:
                    if cj != trial[j]:
                        r = self._ranked(j, cj, trial, moved, follow)
                        if r < best:
                            best, pick = r, cj
                if best < cur:
                    trial[j] = moved[j] = pick
                    queue.extend(self.neighbours(j))
            if self.part(moved, trial) < self.part(moved, assign):
                return moved
            if len(moved) == 1 and len(self.neighbours(i)) == 0:
                break
        return None

    def _ranked(self, j, c, trial, moved, follow=False):
        """(node ``j``'s local cost under ``c``, its boxing cost on edges to moved nodes); with
        ``follow``: (:meth:`_followed`, its local cost)."""
        self.evals += 1
        saved = trial[j]
        trial[j] = c
        local = self.work(j, c)
        agree = 0
        for key in self.keys_of[j]:
            cost = self.tensor_cost(key, trial)
            local += cost
            if key[0] in moved or (len(key) == 2 and any(r in moved for r, _ in self.nodes[key[0]].readers[key[1]])):
                agree += cost
        if follow:
            agree = self._followed(j, c, trial, moved)
        trial[j] = saved
        return (agree, local) if follow else (local, agree)

    def _followed(self, j, c, trial, moved):
        """Node ``j``'s work under ``c`` plus the boxing on its edges to moved nodes and from or
        to fixed layouts: as if its other neighbours would follow it."""
        cost = self.work(j, c)
        n = self.nodes[j]
        for k, want in enumerate(self.cin[j][c]):
            src = n.srcs[k]
            if src is None:
                cost += self.box(j, k, self.fin[j][k], want)
            elif src[0] in moved:
                cost += self.out_box(src[0], src[1], self.cout[src[0]][trial[src[0]]][src[1]], want)
        for o, readers in enumerate(n.readers):
            have = self.cout[j][c][o]
            wants = {self.cin[r][trial[r]][k] for r, k in readers if r in moved}
            wants.update(self.fixed_by.get((j, o), ()))
            wants.discard(have)
            cost += sum(self.out_box(j, o, have, w) for w in wants) + self.price(j, o, have)
        return cost


def _apply(planner, nodes, assign):
    """Rewrites the plans of the nodes whose candidate changed, and the boxings of their readers."""
    gp, placement = planner.gp, planner.placement
    changed = set()
    for i, n in enumerate(nodes):
        if assign[i] == n.choice:
            continue
        changed.add(id(n.op))
        combo = n.combos[assign[i]]
        for o, (shape, dtype), nd in zip(n.op.outputs, n.out_specs, combo[2]):
            gp.layouts[id(o)] = Layout(shape, dtype, nd, placement)
    moved = {id(o) for n in nodes if id(n.op) in changed for o in n.op.outputs}
    for op in gp.ops:          # topological: every input's final layout is known here
        p = gp.op_plans.get(id(op))
        if p is None or p.kind not in ("global", "pin") or not (
                id(op) in changed or any(id(x) in moved for x in op.inputs)):
            continue
        ins = [gp.layouts[id(x)] for x in op.inputs]
        if id(op) in changed:
            i = next(k for k, n in enumerate(nodes) if n.op is op)
            n = nodes[i]
            combo = n.combos[assign[i]]
            cost = sum(0 if lay._sbp == want else
                       planner.cost(lay._shape, lay._dtype.np_dtype, placement, lay._sbp, want)
                       for lay, want in zip(ins, combo[1]))
            d = decision(op.opdef, ins, n.kernel_attrs, n.out_specs, placement, combo, cost, n.has_rule)
            p.sigs, p.in_nd, p.out_nd, _, _, p.plans, p.local_ops = d
            continue
        p.plans = [None if lay._sbp == want else _plan(lay._shape, lay._dtype.np_dtype, placement, lay._sbp, want)
                   for lay, want in zip(ins, p.in_nd)]


def plan_cost(gp):
    """Bytes a planned graph's boxings move (each tensor boxed once per layout, as the rank plans
    and ``explain`` count them)."""
    total, seen = 0, set()
    for op in gp.ops:
        p = gp.op_plans.get(id(op))
        for t, plan in zip(op.inputs, p.plans if p is not None else ()):
            if plan is not None and (id(t), plan.dst_sbp) not in seen:
                seen.add((id(t), plan.dst_sbp))
                total += int(np.int64(plan.bytes))
    return total


__all__ = ["search", "plan_cost", "SEARCH"]
