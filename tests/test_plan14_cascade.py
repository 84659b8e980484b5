"""The joint search's improvement step (``plan_search.py``: cascades) on a graph where the DP
alone settles on a costlier plan: a value written whole (``B``, every rank doing all the work)
because one reader chain prefers rows (``S(0)``) and another columns (``S(1)``); nothing is
boxed in bytes (each reader slices its piece), so only a cascade started at the sliced producer
and followed as a whole down the chain finds the all-``S(1)`` plan. Then the cascade's rules on
a stand-in cost model (two layouts, tables of work and bytes): equal-cost cascades are refused,
ties go to the candidate agreeing with the moved nodes, cascades start only where a boxing or a
sliced output is."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import plan_search

P3 = tw.placement("cpu", ranks=[0, 1, 2])
RNG = np.random.default_rng(1414)
X = RNG.standard_normal((60, 70)).astype(np.float32)
W = RNG.standard_normal((60, 70)).astype(np.float32)


def fork(x):
    """``a`` is free to take any layout (its inputs are a broadcast seed and a constant); ``tanh(a) * x``
    wants it as x's columns, ``exp(sin(a))`` as rows (60 rows split 20/20/20 write fewer bytes
    per rank than 70 columns split 24/23/23)."""
    one = tw.reshape(tw.ones_like(tw.reduce_sum(x)), [1, 1])
    a = tw.broadcast_to(one, [60, 70]) * W
    return tw.tanh(a) * x, tw.exp(tw.sin(a))


def _costs(fn, *args):
    return tw.function(fn).get_concrete_function(*args)._global.plan.search


def test_only_the_cascade_finds_the_cheaper_plan(monkeypatch):
    x = tw.constant(X).to_global(placement=P3, sbp=S(1))
    want = [t.numpy() for t in fork(tw.constant(X))]
    costs = _costs(fork, x)
    assert costs.kept < costs.dp < costs.greedy, tuple(costs)
    for got, w in zip(tw.function(fork)(x), want):
        assert got.sbp == (S(1),)            # the whole chain follows x's columns
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-6)
    monkeypatch.setattr(plan_search._Model, "improve", lambda self, assign: assign)
    dp_only = _costs(fork, x)
    assert dp_only.kept == dp_only.dp == costs.dp
    got = tw.function(fork)(x)
    assert got[1].sbp == (S(0),)             # the DP alone: exp(sin(a)) on rows, a written whole
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)


# ---- the cascade's rules on a stand-in cost model ------------------------------------------------
class _Dtype:
    np_dtype = np.float32


class _Lay:
    def __init__(self, name):
        self._sbp, self._shape, self._dtype = (name,), (6,), _Dtype


class _Op:
    def __init__(self, name, n_in):
        self.name, self.inputs, self.outputs = name, [None] * n_in, [None]


class _Costs:
    """``work[node][layout]``; boxing between two layouts moves ``BYTES``."""
    placement = None
    BYTES = 100

    def __init__(self, work):
        self.works = work

    def cost(self, shape, dtype, placement, src, dst):
        return 0 if src == dst else self.BYTES

    def work(self, op, ins, out_specs, combo):
        return self.works[op.name][combo[2][0][0]]


def _model(work, edges, inputs, fixed=(), layouts=("a", "b")):
    """Nodes named by ``work``'s keys in order, one output each, each candidate reading and writing
    one layout; ``edges``: (producer, reader, input index); ``inputs``: {(node, input): fixed
    layout}; ``fixed``: (node, wanted layout) readers outside the search."""
    names = list(work)
    n_in = {n: 0 for n in names}
    for _, r, k in edges:
        n_in[r] = max(n_in[r], k + 1)
    for (n, k) in inputs:
        n_in[n] = max(n_in[n], k + 1)
    nodes = []
    for n in names:
        combos = [((), [(lay,)] * n_in[n], [(lay,)]) for lay in layouts]
        ins = [_Lay(inputs.get((n, k), layouts[0])) for k in range(n_in[n])]
        node = plan_search._Node(_Op(n, n_in[n]), ins, combos, [((6,), _Dtype)], {}, True, 0)
        node.srcs, node.readers = [None] * n_in[n], [[]]
        nodes.append(node)
    for p, r, k in edges:
        nodes[names.index(r)].srcs[k] = (names.index(p), 0)
        nodes[names.index(p)].readers[0].append((names.index(r), k))
    model = plan_search._Model(_Costs(work), nodes, [(names.index(n), 0, (lay,)) for n, lay in fixed])
    return model, {lay: i for i, lay in enumerate(layouts)}


def test_an_equal_cost_cascade_is_refused():
    """``n`` reads a fixed ``b`` value and is read by a reader outside the search wanting ``a``:
    moving ``n`` to ``b`` removes the boxing into it and adds one out of it, as costly."""
    model, c = _model({"n": {"a": 5, "b": 5, "c": 5}}, [], {("n", 0): "b"}, fixed=[("n", "a")], layouts=("a", "b", "c"))
    assert model.starts(0, [c["a"]]) == [c["b"]]        # not "c": as much is boxed into it
    assert model.cascade(0, c["b"], [c["a"]]) is None
    assert model.improve([c["a"]]) == [c["a"]]


def test_a_tie_goes_to_the_candidate_agreeing_with_the_moved_nodes():
    """``m``'s two candidates cost as much locally (its other reader ``r``, unmoved, wants ``a``;
    moved ``p`` writes ``b``); the one reading ``b`` agrees with ``p`` and ranks first."""
    model, c = _model({"p": {"a": 1, "b": 1}, "m": {"a": 1, "b": 1}, "r": {"a": 1, "b": 1}},
                      [("p", "m", 0), ("m", "r", 0)], {})
    trial, moved = [c["b"], c["a"], c["a"]], {0: c["b"]}
    ra, rb = model._ranked(1, c["a"], trial, moved), model._ranked(1, c["b"], trial, moved)
    assert ra[0] == rb[0] and rb < ra, (ra, rb)


def test_cascades_start_only_at_a_boxing_or_a_sliced_output():
    """A chain on one layout (nothing boxed, each output read as written) starts nothing and
    evaluates nothing; a producer writing ``b`` that its reader reads as ``a`` (a free slice in
    the stand-in's bytes too) starts with its cheaper candidates only."""
    model, c = _model({"p": {"a": 3, "b": 1}, "q": {"a": 3, "b": 1}}, [("p", "q", 0)], {})
    assign = [c["a"], c["a"]]
    assert model.starts(0, assign) == [] and model.starts(1, assign) == []
    assert model.improve(list(assign)) == assign and model.evals == 0
    model, c = _model({"p": {"a": 1, "b": 3, "c": 2, "d": 3}, "q": {"a": 1, "b": 1, "c": 1, "d": 1}},
                      [("p", "q", 0)], {}, layouts=("a", "b", "c", "d"))
    model.pl.BYTES = 0          # B -> S: a slice, no bytes
    assert model.starts(0, [c["b"], c["a"]]) == [c["a"], c["c"]]      # not "d": as much work
    assert model.starts(1, [c["b"], c["a"]]) == []


@pytest.mark.parametrize("follow", [False, True])
def test_a_chain_flips_as_a_whole_only_when_neighbours_may_follow(follow, monkeypatch):
    """``p`` moves to ``b``; ``m`` then ``r`` would each just move the boxing one node down (``a``
    cheaper to write), so the first, greedy round of the cascade stops at ``m`` and is refused; the
    second, where each neighbour counts only its edges to moved nodes, flips the chain."""
    model, c = _model({"p": {"a": 1, "b": 1}, "m": {"a": 1, "b": 2}, "r": {"a": 1, "b": 2}},
                      [("p", "m", 0), ("m", "r", 0)], {("p", 0): "b"})
    model.pl.BYTES = 100
    assign = [c["a"], c["a"], c["a"]]
    if not follow:
        orig = plan_search._Model._ranked
        monkeypatch.setattr(plan_search._Model, "_ranked",
                            lambda self, j, cj, trial, moved, follow=False: orig(self, j, cj, trial, moved, False))
        assert model.cascade(0, c["b"], assign) is None
    else:
        assert model.cascade(0, c["b"], assign) == {0: c["b"], 1: c["b"], 2: c["b"]}


def test_followed_counts_edges_to_moved_nodes_and_fixed_layouts_only():
    """``m`` reads a fixed ``b`` value (input 1), producer ``p`` (input 0) and is read by ``r`` and
    by a fixed reader wanting ``a``: as if its unmoved neighbours followed, only the fixed edges
    and those to moved nodes count."""
    model, c = _model({"p": {"a": 1, "b": 1}, "m": {"a": 10, "b": 20}, "r": {"a": 1, "b": 1}},
                      [("p", "m", 0), ("m", "r", 0)], {("m", 1): "b"}, fixed=[("m", "a")])
    box = _Costs.BYTES + plan_search.COLLECTIVE_FIXED_BYTES
    trial = [c["b"], c["a"], c["b"]]
    assert model._followed(1, c["a"], trial, {}) == 10 + box            # the fixed input b -> a
    assert model._followed(1, c["b"], trial, {}) == 20 + box            # the fixed reader's a
    assert model._followed(1, c["a"], trial, {0: c["b"], 2: c["b"]}) == 10 + 3 * box
    assert model._followed(1, c["b"], trial, {0: c["b"], 2: c["b"]}) == 20 + box


def test_a_neighbour_that_stays_is_not_a_move():
    """``p`` moves to ``b`` (cheaper, its fixed input unboxed); reader ``q`` follows, reader ``m``
    (its other input fixed at ``a``) stays and is not among the moves."""
    model, c = _model({"p": {"a": 2, "b": 1}, "m": {"a": 1, "b": 1}, "q": {"a": 2, "b": 1}},
                      [("p", "m", 0), ("p", "q", 0)], {("p", 0): "b", ("m", 1): "a"})
    assert model.cascade(0, c["b"], [c["a"]] * 3) == {0: c["b"], 2: c["b"]}


def test_the_dp_answers_each_input_on_its_own():
    """``m`` reads ``p`` (its input fixed at ``b``) and ``q`` (fixed at ``a``): wanting ``a`` costs a
    boxing on input 0 and none on input 1; the DP keeps the two apart and takes ``a`` for ``m``."""
    model, c = _model({"p": {"a": 1, "b": 1}, "q": {"a": 1, "b": 1}, "m": {"a": 1, "b": 2}},
                      [("p", "m", 0), ("q", "m", 1)], {("p", 0): "b", ("q", 0): "a"})
    assert model.dp()[2] == c["a"]


def test_a_priced_output_counts_in_the_dp_the_cascades_and_the_total():
    """An output moved on to another placement (a priced fetch, ``plan_placements._fetch_prices``):
    laid out ``a`` its transfer costs 1,000, ``b`` nothing; ``b`` is dearer to compute by 1."""
    model, c = _model({"n": {"a": 1, "b": 2}}, [], {})
    model.priced[(0, 0)] = lambda nd: 1000 if nd == ("a",) else 0
    assert model.dp() == [c["b"]]
    assert model.total([c["a"]]) == 1001 and model.total([c["b"]]) == 2
    assert model._followed(0, c["a"], [c["a"]], {}) == 1001
