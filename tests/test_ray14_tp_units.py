"""The pieces of tensor-parallel pipeline stages on Ray that need no Ray: which stages are
planned, the hand-off geometry (a tensor-parallel stage is one wide slice: every worker receives
the whole micro-batch, the first sends), and the update's modes (no all-reduce for a
tensor-parallel stage; the global norm adds split shards on every worker, replicated ones once)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute.ray import pipeline_worker as pw
from tensorweave.distribute.ray.pipeline_tp import _kind, tp_stages


class _V:
    def __init__(self, *sbp):
        self.sbp = sbp


class _Stage:
    def __init__(self, *variables):
        self.variables = list(variables)


class _Placement:
    def __init__(self, ranks, ndim=1):
        self.ranks, self.ndim = tuple(ranks), ndim


class _Pipe:
    def __init__(self, stages, placements, virtual=1):
        self.stages, self.placements, self.virtual_stages = stages, placements, virtual


def test_which_stages_are_planned():
    assert _kind([(B,), (B,)]) == "rows" and _kind([]) == "rows"
    assert _kind([(B,), (S(1),)]) == "tp" and _kind([(S(0),)]) == "tp"
    assert _kind([(S(0),), (P,)]) is None
    two = [_Placement([0]), _Placement([1, 2])]
    assert tp_stages(_Pipe([_Stage(_V(B)), _Stage(_V(S(1)), _V(B))], two)) == {1}
    assert tp_stages(_Pipe([_Stage(_V(B)), _Stage(_V(B))], two)) == frozenset()
    assert tp_stages(_Pipe([_Stage(_V(B)), _Stage(_V(P))], two)) is None                 # partial: walked
    assert tp_stages(_Pipe([_Stage(), _Stage(_V(B, B))], [two[0], _Placement([1, 2], 2)])) is None   # N-D mesh
    assert tp_stages(_Pipe([_Stage(_V(S(0))), _Stage()], two, virtual=2)) == {0}         # interleaved with TP
    assert tp_stages(_Pipe([_Stage(_V(B)), _Stage()], two, virtual=2)) == frozenset()


class _Comm:
    """Records sends; answers receives from ``inbox[(src index, tag)]``."""

    def __init__(self, inbox=None):
        self.sent, self.inbox, self.asked = [], dict(inbox or {}), []

    def send(self, value, dst, tag):
        self.sent.append((dst, tag, np.asarray(value).tolist()))

    def recv(self, src, tag):
        self.asked.append((src, tag))
        return self.inbox[(src, tag)]


def _stages(placements, tp):
    wp = object.__new__(pw.WorkerStages)
    wp.placements = [tuple(p) for p in placements]
    wp.ranks = tuple(sorted({r for p in wp.placements for r in p}))
    wp.tp = frozenset(tp)
    return wp


class _Run:
    wait = 0.0


def test_a_hand_off_into_a_tensor_parallel_stage_gives_each_of_its_workers_the_whole_micro_batch():
    wp = _stages([(0, 1), (2, 3), (4,)], tp={1})
    rows = np.arange(5.0)[:, None]
    for me, mine in ((0, rows[:3]), (1, rows[3:])):        # a data-parallel stage's two slices (3 + 2 rows)
        comm = _Comm()
        pw._send(wp, comm, 5, mine, 0, 1, me, ("F", 0, 0))
        assert comm.sent == [(2, ("F", 0, 0), mine.tolist()), (3, ("F", 0, 0), mine.tolist())]
    tag = ("F", 0, 0)
    for me in (2, 3):
        comm = _Comm({(0, tag): rows[:3], (1, tag): rows[3:]})
        got = pw._receive(wp, comm, _Run(), 5, 0, 1, me, tag)
        assert got.tolist() == rows.tolist() and comm.asked == [(0, tag), (1, tag)]
    out = _Comm()                                          # out of the stage: its first worker sends all
    pw._send(wp, out, 5, rows, 1, 2, 2, ("F", 1, 0))
    assert out.sent == [(4, ("F", 1, 0), rows.tolist())]
    quiet = _Comm()
    pw._send(wp, quiet, 5, rows, 1, 2, 3, ("F", 1, 0))
    assert quiet.sent == []
    back = _Comm()                                         # the gradient back into stage 0: from the first
    pw._send(wp, back, 5, rows, 1, 0, 2, ("B", 1, 0))
    assert back.sent == [(0, ("B", 1, 0), rows[:3].tolist()), (1, ("B", 1, 0), rows[3:].tolist())]
    got = _Comm({(2, ("B", 1, 0)): rows[3:]})
    assert pw._receive(wp, got, _Run(), 5, 1, 0, 1, ("B", 1, 0)).tolist() == rows[3:].tolist()
    assert got.asked == [(2, ("B", 1, 0))]


def test_the_random_message_goes_to_every_worker_of_a_tensor_parallel_stage_from_the_first_sender():
    wp = _stages([(0, 1), (2, 3)], tp={1})
    rows = np.zeros((4, 1))
    comm = _Comm()
    pw._send(wp, comm, 4, rows[:2], 0, 1, 0, ("F", 0, 1), info={"n": 0, "ends": {}})
    assert [(d, t) for d, t, _ in comm.sent] == [(2, ("F", 0, 1)), (2, ("R", 0, 1)), (3, ("F", 0, 1)), (3, ("R", 0, 1))]
    second = _Comm()
    pw._send(wp, second, 4, rows[2:], 0, 1, 1, ("F", 0, 1), info={"n": 0, "ends": {}})
    assert [t[0] for _, t, _ in second.sent] == ["F", "F"]          # only the first sender's message
    got = _Comm({(0, ("R", 0, 1)): pw.encode({"n": 2, "ends": {}})})
    assert pw._receive_info(wp, got, _Run(), 4, 0, 1, 3, ("F", 0, 1))["n"] == 2


class _Group:
    def __init__(self, log, total=None):
        self.log, self.total = log, total

    def all_reduce(self, x):
        self.log.append(np.asarray(x).tolist())
        return np.asarray(x) if self.total is None else np.asarray([self.total])


class _Worker:
    def __init__(self, rank, total=None):
        self.rank, self.log, self.total = rank, [], total

    def comm(self, ranks):
        return _Group(self.log, self.total)


class _Opt:
    loss_scale_factor = None


@pytest.mark.parametrize("rank, squares", [(1, 4.0 + 9.0 + 1.0), (2, 16.0)])
def test_the_global_norm_adds_split_shards_on_every_worker_and_replicated_variables_once(rank, squares):
    wp = _stages([(0,), (1, 2)], tp={1})
    wp.ranks = (0, 1, 2)
    held = [(0, None, (1, 2), "split"), (1, None, (1, 2), "replicated")]
    grads = {0: tw.constant(np.array([2.0, 3.0] if rank == 1 else [4.0], np.float32)),
             1: tw.constant(np.array([1.0], np.float32))}
    worker = _Worker(rank, total=100.0)                     # the pipeline's sum of squares: norm 10
    pw._clip_globally(worker, wp, _Opt(), 5.0, grads, held)
    assert worker.log == [[squares]]
    assert grads[1].numpy().tolist() == [0.5]               # scaled by clip / norm


class _Assignable:
    dtype = tw.float32

    def assign(self, value):
        self.value = value


class _ApplyOpt(_Opt):
    def __init__(self):
        self.iterations, self._learning_rate, self.applied = _Assignable(), _Assignable(), []

    def apply_gradients(self, pairs):
        self.applied = [(np.asarray(g.numpy()).tolist(), v) for g, v in pairs]


def test_the_update_all_reduces_a_data_parallel_stage_only():
    wp = _stages([(0, 1), (2, 3)], tp={1})
    opt = _ApplyOpt()
    wp.optimizers = {"t": (opt, [(0, "w0", (0, 1), "rows"), (1, "w1", (2, 3), "split"),
                                 (2, "b1", (2, 3), "replicated")], None)}
    run = _Run()
    run.acc = {0: np.array([1.0], np.float32), 1: np.array([2.0], np.float32), 2: np.array([3.0], np.float32)}
    worker = _Worker(0)
    pw._update(worker, wp, run, "t", 4, 0.1)
    assert worker.log == [[1.0]]                            # one all-reduce: the data-parallel stage's buffer
    assert opt.applied == [([1.0], "w0"), ([2.0], "w1"), ([3.0], "b1")] and opt.iterations.value == 4


def test_each_variable_s_mode_on_a_worker_holding_some_of_the_stages():
    wp = _stages([(0,), (1, 2)], tp={0, 1})
    wp.stages = {1: (None, [(2, "w"), (3, "b")])}          # this worker holds stage 1 only
    assert pw._modes(wp, {2: "w", 3: "b"}, [0, 2]) == {2: "split", 3: "replicated"}
    wp.tp = frozenset()
    assert pw._modes(wp, {2: "w", 3: "b"}, [2]) == {2: "rows", 3: "rows"}


def test_a_stage_that_draws_or_updates_a_variable_is_not_planned():
    from tensorweave.distribute.global_tensor import GlobalTensor
    from tensorweave.distribute.ray.pipeline_tp import StagePlan, Unplannable
    p = tw.placement("cpu", ranks=[0, 1])
    v = tw.Variable(np.ones((3, 2), np.float32), placement=p, sbp=tw.sbp.split(1))
    spec = GlobalTensor([None, None], p, (B,), (4, 3), tw.float32)

    def plain(x):
        return tw.matmul(x, v).to_global(placement=p, sbp=tw.sbp.broadcast)

    def draws(x):
        return tw.nn.dropout(plain(x), 0.5)

    def updates(x):
        v.assign_add(tw.ones((3, 2)).to_global(placement=p, sbp=tw.sbp.split(1)))
        return plain(x)
    assert StagePlan(tw.function(plain).get_concrete_function(spec)).plan.placement == p
    with pytest.raises(Unplannable, match="draws random numbers"):
        StagePlan(tw.function(draws).get_concrete_function(spec))
    with pytest.raises(Unplannable, match="updates a variable"):
        StagePlan(tw.function(updates).get_concrete_function(spec))


def test_tracing_keeps_the_driver_random_state_as_it_was():
    from tensorweave.distribute.ray.pipeline_tp import _random_state_kept, output_shape
    from tensorweave.ops.random_ops import current_state
    tw.random.set_seed(3)
    tw.random.uniform([2])
    st = current_state()
    before = (st.counter, dict(st.pending_graph), list(st.graph_states))
    p = tw.placement("cpu", ranks=[0])
    pipe = _Pipe([lambda x: tw.nn.dropout(tw.matmul(x, tw.ones((3, 5))), 0.5)], [p])
    assert output_shape(pipe, 0, (4, 3), tw.float32) == ((4, 5), tw.float32)   # a throw-away graph, never run
    with _random_state_kept():             # whatever a trace would move (a restored stream's pending position)
        st.counter += 5
        st.pending_graph["stream"] = [1]
        st.graph_states.append(None)
    assert (st.counter, st.pending_graph, st.graph_states) == before
    want = tw.random.uniform([3]).numpy()
    tw.random.set_seed(3)
    tw.random.uniform([2])
    np.testing.assert_array_equal(tw.random.uniform([3]).numpy(), want)


def test_a_stage_s_draws_become_arguments_its_workers_feed():
    # traced twice: the first trace records each draw (op, shape, dtype, op seed), the second
    # takes it as an argument after the function's own, so the plan holds no random op
    from tensorweave.distribute.ray.pipeline_tp import Unplannable, trace
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1, 2])
    w = tw.Variable(np.ones((3, 4), np.float32), placement=p1, sbp=tw.sbp.split(1))

    def stage(x):
        h = tw.nn.dropout(tw.matmul(x, w), 0.5, seed=7)
        return h + tw.random.normal(tw.shape(h), stddev=0.1) + tw.cast(tw.random.uniform([4], 0, 3, tw.int32, seed=2),
                                                                        tw.float32)
    stage.trainable_variables = [w]
    tw.random.set_seed(3)
    pipe = tw.distribute.pipeline([(tw.nn.relu, p0), (stage, p1)], micro_batches=2, loss="mse")
    want = [("RandomUniform", [2, 4], {"dtype": "float32"}, "float32", 7),
            ("RandomStandardNormal", [2, 4], {"dtype": "float32"}, "float32", None),
            ("RandomUniformInt", [4], {}, "int32", 2)]
    for kind, other, fed in (("forward", None, 1), ("backward", ((2, 4), tw.float32), 2),
                             ("loss", ((2, 4), tw.float32), 3)):
        plan = trace(pipe, 1, kind, (2, 3), tw.float32, other)
        assert [(op, values[0].tolist(), attrs, dtype, seed) for op, values, attrs, dtype, seed, _ in plan.draws] == want
        assert not any(unseeded for *_, unseeded in plan.draws)
        assert [v.tolist() for v in plan.draws[2][1][1:]] == [0, 3]            # the int draw's bounds
        assert len(plan.cf.inputs) == fed + 3
        assert not [op.type for op in plan.cf.graph.get_operations() if "Random" in op.type]
    tw.random.set_seed(None)              # the rule-2 normal has no seed at all now: recorded as such, fed
    plan = trace(pipe, 1, "forward", (2, 3), tw.float32)
    assert [(op, seed, unseeded) for op, _, _, _, seed, unseeded in plan.draws] == [
        ("RandomUniform", 7, False), ("RandomStandardNormal", None, True), ("RandomUniformInt", 2, False)]
    assert not [op.type for op in plan.cf.graph.get_operations() if "Random" in op.type]

    def picks(x):          # a draw reading the stage's values: left in the graph, refused
        return tw.cast(tw.random.categorical(tw.matmul(x, w), 2, seed=1), tw.float32)
    picks.trainable_variables = [w]
    pipe.stages[1] = picks
    with pytest.raises(Unplannable, match=r"draws random numbers .*Multinomial"):
        trace(pipe, 1, "forward", (2, 3), tw.float32)
