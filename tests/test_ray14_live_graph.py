"""Issue 14 (ray14, session 13): one compiled Ray graph is live at a time. The workers of a live
graph spin in Ray's channel read between steps, so a graph of other ranks (or actor calls on the
same workers) ran beside spinning threads; a set of ranks takes the graph over after
``SWITCH_AFTER`` steady calls in a row, and steps that alternate between sets do not recompile at
every call. No Ray here: the graphs are stand-ins that count compiles and teardowns."""
import pytest

from tensorweave.distribute.ray import cluster as ray_cluster


class _FakeGraph:
    made, torn = [], []

    def __init__(self, workers, ranks, gate=None):
        if ranks == ("broken",):
            raise RuntimeError("no compiled graphs here")
        self.ranks = ranks
        _FakeGraph.made.append(ranks)

    def teardown(self):
        _FakeGraph.torn.append(self.ranks)


@pytest.fixture
def cluster(monkeypatch):
    monkeypatch.setattr(ray_cluster, "_StepGraph", _FakeGraph)
    _FakeGraph.made, _FakeGraph.torn = [], []
    c = ray_cluster.Cluster([None] * 3, "test", False, None)
    c.step_gate = False
    c.step_loop = "graph"          # the compiled graph's rule (a step channel only on a real cluster)
    c.compiled_steps = True
    return c


def test_the_first_set_compiles_at_once_and_keeps_its_graph(cluster):
    g = cluster._step_graph((0, 1))
    assert g is not None and cluster._step_graph((0, 1)) is g
    assert _FakeGraph.made == [(0, 1)] and _FakeGraph.torn == []


def test_one_call_of_another_set_goes_by_actor_calls_and_leaves_the_live_graph(cluster):
    g = cluster._step_graph((0, 1))
    assert cluster._step_graph((2,)) is None
    assert cluster._step_graph((0, 1)) is g
    assert cluster._step_graph((2,)) is None          # the live graph's step in between: counted afresh
    assert cluster._step_graph((0, 1)) is g
    assert _FakeGraph.made == [(0, 1)] and _FakeGraph.torn == []


def test_a_set_called_twice_in_a_row_takes_the_graph_over(cluster):
    cluster._step_graph((0, 1))
    assert cluster._step_graph((2,)) is None
    g2 = cluster._step_graph((2,))
    assert g2 is not None and g2.ranks == (2,)
    assert _FakeGraph.torn == [(0, 1)] and list(cluster._graphs) == [(2,)]
    # and back: the workers of the one-worker graph are free again after two calls of (0, 1)
    assert cluster._step_graph((0, 1)) is None
    assert cluster._step_graph((0, 1)).ranks == (0, 1)
    assert _FakeGraph.torn == [(0, 1), (2,)]


def test_overlapping_sets_switch_the_same_way(cluster):
    cluster._step_graph((0, 1))
    assert cluster._step_graph((0, 1, 2)) is None
    assert cluster._step_graph((0, 1, 2)).ranks == (0, 1, 2)
    assert list(cluster._graphs) == [(0, 1, 2)]


def test_calls_of_two_other_sets_in_turn_never_switch(cluster):
    cluster._step_graph((0, 1))
    for ranks in [(2,), (1,), (2,), (1,)]:
        assert cluster._step_graph(ranks) is None
    assert _FakeGraph.made == [(0, 1)]


def test_no_compiled_steps_no_graph(cluster):
    cluster.compiled_steps = False
    assert cluster._step_graph((0, 1)) is None and _FakeGraph.made == []


def test_a_set_that_cannot_compile_keeps_actor_calls(cluster):
    assert cluster._step_graph(("broken",)) is None
    assert cluster._step_graph(("broken",)) is None
    assert cluster._graphs == {("broken",): None}
    g = cluster._step_graph((0, 1))                   # no live graph: compiles at once
    assert g is not None and g.ranks == (0, 1)


@pytest.mark.parametrize("switch_after", [1, 2, 3])
def test_next_live_counts_calls_in_a_row(switch_after):
    contender, answers = (None, 0), []
    for _ in range(switch_after):
        switch, contender = ray_cluster.next_live(True, contender, (2,), switch_after)
        answers.append(switch)
    assert answers == [False] * (switch_after - 1) + [True] and contender == (None, 0)


class _FakeChannel(_FakeGraph):
    def __init__(self, workers, ranks, path, timeout=None):
        if ranks == ("elsewhere",):
            raise RuntimeError("StepChannel: every rank must run on the driver's node")
        assert path.startswith("/dev/shm/tw-test-")           # under the cluster's prefix: swept at shutdown
        super().__init__(workers, ranks)


def test_fifo_steps_use_a_step_channel_and_fall_back_to_the_graph(cluster, monkeypatch):
    from tensorweave.distribute.ray import step_channel
    monkeypatch.setattr(step_channel, "StepChannel", _FakeChannel)
    cluster.step_loop = "fifo"
    assert type(cluster._step_graph((0, 1))) is _FakeChannel
    cluster._drop_graphs()
    assert type(cluster._step_graph(("elsewhere",))) is _FakeGraph        # a rank on another node
    cluster._drop_graphs()
    cluster.step_loop = "graph"
    assert type(cluster._step_graph((0, 1))) is _FakeGraph
