"""The gradient all-reduce of a planned data-parallel step: bucketed, started as soon as the
gradients are computed and waited for before the optimizer; the same values as one blocking
all-reduce per tensor (bit for bit) and as one device; the collective underneath
(``all_reduce_start``) returns before the other ranks arrive."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import planner
from tensorweave.distribute.collective import Communicator, InProcessGroup

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])


def _model(placement, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((12, 20)).astype(np.float32)
    y = (np.arange(12) % 4).astype(np.int32)
    ws = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in ((20, 16), (16,), (16, 4), (4,))]
    if placement is None:
        return tw.constant(x), tw.constant(y), [tw.Variable(w) for w in ws]
    return (tw.constant(x).to_global(placement=placement, sbp=S(0)),
            tw.constant(y).to_global(placement=placement, sbp=S(0)),
            [tw.Variable(w, placement=placement, sbp=B) for w in ws])


def _train(placement, steps=5):
    x, y, params = _model(placement)
    opt = tw.keras.optimizers.SGD(0.1, momentum=0.9)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params[0]) + params[1])
            logits = tw.matmul(h, params[2]) + params[3]
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss
    losses = [float(step()) for _ in range(steps)]
    specs = [] if placement is None else [b.spec for b in list(step._cache.values())[-1]._global.bound]
    return losses, [p.numpy() for p in params], specs, opt


def _ops(spec):
    return [n.op for n in spec.nodes]


@pytest.fixture(scope="module")
def one_device():
    return _train(None)


@pytest.mark.parametrize("placement", [P2, P3], ids=["2ranks", "3ranks"])
def test_bucketed_gradient_all_reduce_trains_like_one_device(placement, one_device):
    losses, params, specs, opt = _train(placement)
    np.testing.assert_allclose(losses, one_device[0], rtol=2e-5)
    for got, want in zip(params, one_device[1]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 5          # the local step counter: once per step, not per rank
    for spec in specs:
        ops = _ops(spec)
        assert ops.count("_AllReduceStart") == 1 and ops.count("_AllReduceWait") == 1
        boxed = [n.attrs["plan"]["steps"][0]["kind"] for n in spec.nodes if n.op == "_Boxing"
                 and n.attrs["plan"]["steps"]]
        assert "all_reduce" not in boxed            # every P -> B all-reduce is in the bucket
        wait = spec.nodes[ops.index("_AllReduceWait")]
        assert wait.attrs["n"] == 4                  # the four weight gradients
        update = next(i for i, n in enumerate(spec.nodes) if n.op.startswith("ResourceGroupApply"))
        assert ops.index("_AllReduceStart") < ops.index("_AllReduceWait") < update


def test_bucketed_equals_one_blocking_all_reduce_per_tensor_bit_for_bit(monkeypatch):
    from tensorweave.distribute import rank_graph
    bucketed = _train(P2)
    monkeypatch.setattr(rank_graph.RankOps, "bucket_all_reduces", lambda self, n: None)   # the same plan, unbucketed
    blocking = _train(P2)
    for spec in blocking[2]:
        assert "_AllReduceStart" not in _ops(spec)
    assert bucketed[0] == blocking[0]
    for a, b in zip(bucketed[1], blocking[1]):
        np.testing.assert_array_equal(a, b)


def test_small_buckets_start_each_gradient_as_soon_as_it_is_computed(monkeypatch):
    monkeypatch.setattr(planner, "ALL_REDUCE_BUCKET_BYTES", 1)      # one tensor per bucket
    losses, params, specs, _ = _train(P2)
    want = _train(None)
    np.testing.assert_allclose(losses, want[0], rtol=2e-5)
    for spec in specs:
        ops = _ops(spec)
        assert ops.count("_AllReduceStart") == 4 and ops.count("_AllReduceWait") == 4
        for k, node in enumerate(spec.nodes):
            if node.op != "_AllReduceStart":
                continue
            (grad,) = node.ins                                     # right after the node computing it
            j = k - 1
            while spec.nodes[j].op == "_AllReduceStart":
                j -= 1
            assert grad in spec.nodes[j].out_slots()
        first_wait = ops.index("_AllReduceWait")
        assert ops.count("MatMul") + ops.count("FusedMatMul") > 0
        # the first gradient's reduction starts before the backward pass has computed the last one
        assert ops.index("_AllReduceStart") < max(i for i, op in enumerate(ops) if "MatMul" in op) < first_wait


def test_a_stateful_local_op_nobody_reads_is_not_broadcast(one_device):
    _, _, specs, _ = _train(P2, steps=1)
    for spec in specs:
        once = {n.attrs["op_type"]: n.attrs.get("broadcast", True) for n in spec.nodes if n.op == "_Once"}
        assert once.get("AssignAddVariableOp") is False     # the step counter's update: no collective
        assert once.get("ReadVariableOp", True) is True     # read by the optimizer: broadcast


def test_the_planner_all_reduces_weight_gradients_instead_of_gathering_activations():
    x, y, params = _model(P2)

    def step(x, y):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.matmul(tw.nn.relu(tw.matmul(x, params[0])), params[2]))
        for v, g in zip((params[0], params[2]), tape.gradient(loss, [params[0], params[2]])):
            v.assign_sub(0.1 * g)
        return loss
    e = tw.distribute.explain(step, x, y)
    kinds = {c["kind"] for c in e.to_dict()["collectives"]}
    assert kinds == {"all_reduce"}, e.text()


# ---- the collective ---------------------------------------------------------------------------------
def test_all_reduce_start_returns_before_the_others_arrive_and_gives_all_reduce_bits():
    group = InProcessGroup([0, 1, 2], timeout=20)
    values = [[np.arange(5, dtype=np.float32) * (r + 1) + 0.1, np.full((2, 3), r, np.float64)] for r in range(3)]
    started = threading.Event()
    out = [None] * 3

    def rank(i):
        comm = group.communicator(i)
        if i > 0:
            started.wait(10)            # ranks 1 and 2 start only after rank 0's start has returned
        h = comm.all_reduce_start(values[i])
        if i == 0:
            started.set()
        out[i] = h.wait()
    threads = [threading.Thread(target=rank, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert started.is_set() and all(o is not None for o in out)
    ref = InProcessGroup([0, 1, 2])
    want = [None] * 3

    def blocking(i):
        want[i] = [ref.communicator(i).all_reduce(v) for v in values[i]]
    threads = [threading.Thread(target=blocking, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for got, w in zip(out, want):
        for a, b in zip(got, w):
            np.testing.assert_array_equal(a, b)
            assert not a.flags.writeable                 # shared between ranks: read-only


def _run(group, fn, n):
    errs, res = [None] * n, [None] * n

    def body(i):
        try:
            res[i] = fn(group.communicator(i), i)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errs[i] = e
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    return res, errs


def test_all_reduce_start_with_different_shapes_names_the_ranks():
    group = InProcessGroup([0, 1], timeout=10)
    _, errs = _run(group, lambda c, i: c.all_reduce_start([np.zeros(3 + i, np.float32)]).wait(), 2)
    msgs = " ".join(str(e) for e in errs if e is not None)
    assert "all_reduce_start: rank 1 gave [([4], 'float32')] but rank 0 gave [([3], 'float32')]" in msgs


def test_all_reduce_start_against_another_collective_is_a_mismatch():
    group = InProcessGroup([0, 1], timeout=10)
    _, errs = _run(group, lambda c, i: c.all_reduce_start([np.ones(2)]).wait() if i == 0 else c.all_gather(np.ones(2)),
                   2)
    assert any("collective mismatch" in str(e) and "all_reduce_start(sum)" in str(e) for e in errs if e is not None)


class _SendRecvOnly(Communicator):
    """A transport with only send/recv: the base class's all_reduce_start (blocking) must do."""

    def __init__(self, group, index):
        self.group, self.index, self.ranks = group, index, group.ranks

    def send(self, x, dst, tag=0):
        self.group.post(self.index, dst, tag, np.array(x))

    def recv(self, src, tag=0):
        return self.group.take(src, self.index, tag, 10)


def test_the_default_all_reduce_start_of_a_transport_blocks_and_agrees():
    group = InProcessGroup([0, 1], timeout=10)
    res, errs = _run(group, lambda c, i: _SendRecvOnly(group, i).all_reduce_start(
        [np.arange(4.0) + i, np.ones((2, 2)) * i]).wait(), 2)
    assert errs == [None, None]
    for got in res:
        np.testing.assert_array_equal(got[0], np.arange(4.0) * 2 + 1)
        np.testing.assert_array_equal(got[1], np.ones((2, 2)))
        assert not got[0].flags.writeable


def test_a_single_rank_group_copies():
    group = InProcessGroup([0])
    a = np.arange(3.0)
    (got,) = group.communicator(0).all_reduce_start([a]).wait()
    np.testing.assert_array_equal(got, a)
    assert got is not a and not got.flags.writeable


def test_buckets_in_flight_together_and_later_collectives_stay_matched():
    group = InProcessGroup([0, 1], timeout=20)

    def body(c, i):
        a = c.all_reduce_start([np.full(3, i + 1.0)])           # two buckets in flight at once
        b = c.all_reduce_start([np.full(2, 10.0 * (i + 1)), np.arange(2.0)])
        g = c.all_gather(np.array([i]))
        return b.wait(), a.wait(), g
    res, errs = _run(group, body, 2)
    assert errs == [None, None]
    for b, a, g in res:
        np.testing.assert_array_equal(a[0], np.full(3, 3.0))
        np.testing.assert_array_equal(b[0], np.full(2, 30.0))
        np.testing.assert_array_equal(b[1], np.arange(2.0) * 2)
        np.testing.assert_array_equal(g, [0, 1])


def test_a_wait_whose_peers_never_start_names_them():
    from tensorweave.distribute.collective import CollectiveTimeoutError
    group = InProcessGroup([0, 1, 2], timeout=0.2)
    with pytest.raises(CollectiveTimeoutError, match=r"ranks \[1, 2\] did not arrive") as e:
        group.communicator(0).all_reduce_start([np.ones(2)]).wait()
    assert e.value.missing == (1, 2)


def test_a_collective_called_after_a_started_bucket_is_a_mismatch_whatever_its_name():
    group = InProcessGroup([0, 1], timeout=10)
    started = threading.Event()

    def body(c, i):
        if i == 0:
            h = c.all_reduce_start([np.ones(2)])
            started.set()
            return h.wait()
        started.wait(10)
        return c.all_to_all([np.ones(1), np.ones(1)])
    _, errs = _run(group, body, 2)
    assert "collective mismatch" in str(errs[1]) and "called all_to_all while rank 0 called all_reduce_start(sum)" \
        in str(errs[1])


def test_a_bucket_is_reduced_in_chunks_shared_by_the_waiting_ranks(monkeypatch):
    from tensorweave.distribute import collective
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 3)          # many chunks: both ranks take some
    group = InProcessGroup([0, 1, 2], timeout=20)
    rng = np.random.default_rng(0)
    values = [[rng.standard_normal((4, 5)).astype(np.float32).T,     # not C-contiguous
               np.float64(r + 0.5), np.zeros((0, 3), np.float32), np.arange(7, dtype=np.int64) * r]
              for r in range(3)]
    res, errs = _run(group, lambda c, i: c.all_reduce_start(values[i]).wait(), 3)
    assert errs == [None] * 3
    for got in res:
        assert [g.shape for g in got] == [(5, 4), (), (0, 3), (7,)]
        np.testing.assert_array_equal(got[0], (values[0][0] + values[1][0]) + values[2][0])
        assert float(got[1]) == 4.5 and got[3].tolist() == (np.arange(7) * 3).tolist()
        assert all(not g.flags.writeable for g in got)


class _PrimitivesOnly:
    """A group giving only the rendezvous primitives InProcessCommunicator is written against (as the
    shared-memory and Ray groups do): no reduce_start."""

    def __init__(self, ranks):
        self._g = InProcessGroup(ranks, timeout=10)
        self.ranks = self._g.ranks

    def communicator(self, index):
        from tensorweave.distribute.collective import InProcessCommunicator
        return InProcessCommunicator(self, index)

    def exchange(self, *args, **kwargs):
        return self._g.exchange(*args, **kwargs)

    def post(self, *args):
        return self._g.post(*args)

    def take(self, *args, **kwargs):
        return self._g.take(*args, **kwargs)


def test_a_group_without_reduce_start_reduces_at_the_start():
    group = _PrimitivesOnly([0, 1])
    res, errs = _run(group, lambda c, i: c.all_reduce_start([np.full(70000, i + 1.0, np.float32), np.ones(2) * i])
                     .wait(), 2)
    assert errs == [None, None]
    for big, small in res:
        np.testing.assert_array_equal(big, np.full(70000, 3.0, np.float32))
        np.testing.assert_array_equal(small, [1.0, 1.0])
        assert not big.flags.writeable


@pytest.mark.parametrize("cap, buckets", [(1616, 1), (1615, 2)])
def test_a_bucket_holds_exactly_its_cap(monkeypatch, cap, buckets):
    # the four gradients are (20*16 + 16 + 16*4 + 4) * 4 = 1616 bytes
    monkeypatch.setattr(planner, "ALL_REDUCE_BUCKET_BYTES", cap)
    _, _, specs, _ = _train(P2, steps=1)
    for spec in specs:
        assert _ops(spec).count("_AllReduceStart") == buckets


def test_a_partial_argument_boxed_to_broadcast_starts_before_anything_else():
    x = tw.distribute.from_local([tw.constant(np.full((3, 4), r + 1.0, np.float32)) for r in range(2)],
                                 placement=P2, sbp=tw.sbp.partial_sum)
    f = tw.function(lambda x: tw.nn.relu(x.to_global(sbp=tw.sbp.broadcast)) * 2.0)
    got = f(x)
    np.testing.assert_array_equal(got.numpy(), np.full((3, 4), 6.0, np.float32))
    for b in f.get_concrete_function(x)._global.bound:
        assert _ops(b.spec)[:2] == ["_AllReduceStart", "_AllReduceWait"]
    g = tw.function(lambda x: x.to_global(sbp=S(0)) * 2.0)           # P -> S(0): a reduce-scatter, not bucketed
    np.testing.assert_array_equal(g(x).numpy(), np.full((3, 4), 6.0, np.float32))
    for b in g.get_concrete_function(x)._global.bound:
        assert "_AllReduceStart" not in _ops(b.spec) and "_Boxing" in _ops(b.spec)
