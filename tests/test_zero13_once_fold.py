"""The optimizer's step-counter read (a ``_Once`` of a local variable) rides on the gradient
bucket's rendezvous (``rank_graph.fold_once``, ``plan_ops._OnceInto``) instead of a broadcast of
its own; and ZeRO-1's row gather (``Communicator.all_gather_rows``) on in-process ranks and on a
send/recv-only transport."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.shape import TensorShape
from tensorweave.distribute import planner
from tensorweave.distribute.collective import Communicator, InProcessGroup
from tensorweave.distribute.plan_ops import _all_reduce_start_kernel, _all_reduce_wait_kernel, _once_into_kernel
from zero13_model import train


def _threads(n, fn):
    errs, res = [None] * n, [None] * n

    def body(i):
        try:
            res[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errs[i] = e
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errs == [None] * n, errs
    return res


class _SendRecvOnly(Communicator):
    """A transport with only send/recv (the base class's collectives)."""

    def __init__(self, group, index):
        self.group, self.index, self.ranks = group, index, group.ranks

    def send(self, x, dst, tag=0):
        self.group.post(self.index, dst, tag, np.array(x))

    def recv(self, src, tag=0):
        return self.group.take(src, self.index, tag, 10)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_step_counter_rides_on_the_bucket_and_training_equals_one_device(optimizer):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    want, *_ = train(None, optimizer, steps=6)
    got, opt, vs, step, x = train(p, optimizer, steps=6)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 6
    for b in step.get_concrete_function(x)._global.bound:
        nodes = b.spec.nodes
        ops = [n.op for n in nodes]
        assert ops.count("_OnceInto") >= 1
        # no _Once broadcasts its outputs any more: the only rendezvous left is the bucket's
        assert all(not n.attrs.get("broadcast", True) for n in nodes if n.op == "_Once")
        wait = ops.index("_AllReduceWait")
        assert all(i < wait for i, op in enumerate(ops) if op == "_OnceInto")


def test_without_buckets_the_counter_is_broadcast_as_before(monkeypatch):
    monkeypatch.setattr(planner, "ALL_REDUCE_BUCKET_BYTES", 0)
    p = tw.placement("cpu", ranks=[0, 1])
    want, *_ = train(None, "adam", steps=3)
    got, opt, vs, step, x = train(p, "adam", steps=3)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    ops = [n.op for b in step.get_concrete_function(x)._global.bound for n in b.spec.nodes]
    assert "_OnceInto" not in ops and "_Once" in ops


@pytest.mark.parametrize("transport", ["in_process", "send_recv"])
def test_once_into_hands_the_first_rank_s_values_to_every_wait(transport):
    group = InProcessGroup([0, 1, 2], timeout=10)
    comms = [group.communicator(i) if transport == "in_process" else _SendRecvOnly(group, i) for i in range(3)]
    calls = []
    counter = tw.Variable(np.int64(41))

    class Counter:            # the variable as a ReadVariableOp kernel sees it; only the first rank reads it
        def __getattr__(self, name):
            if name == "_read":
                calls.append(threading.get_ident())
            return getattr(counter, name)

    def on_rank(i):
        start = _all_reduce_start_kernel(ranks=[0, 1, 2], comm=lambda g: comms[i])
        attrs = {"dtype": tw.int64, "shape": TensorShape([])}
        read = _once_into_kernel("ReadVariableOp", attrs, ranks=[0, 1, 2], rank=i, comm=lambda g: comms[i])
        read2 = _once_into_kernel("ReadVariableOp", attrs, ranks=[0, 1, 2], rank=i, comm=lambda g: comms[i])
        h = start(np.full(5, i + 1.0, np.float32))
        read(h, Counter())
        read2(h, Counter())
        return _all_reduce_wait_kernel(h, n=1, extra=2, rows=[[0, 2]])
    res = _threads(3, on_rank)
    assert len(calls) == 2                                    # run once per node, on the first rank
    for sums, counter, counter2 in res:
        np.testing.assert_array_equal(sums, [6.0, 6.0])       # rows [0, 2) of the sum
        assert int(counter) == 41 and int(counter2) == 41 and not counter.flags.writeable


@pytest.mark.parametrize("transport", ["in_process", "send_recv"])
@pytest.mark.parametrize("rows", [5, 2, 3])
def test_all_gather_rows_fills_the_other_ranks_rows_in_place(transport, rows):
    group = InProcessGroup([0, 1, 2], timeout=10)
    from tensorweave.distribute.layout import balanced_bounds

    def on_rank(i):
        comm = group.communicator(i) if transport == "in_process" else _SendRecvOnly(group, i)
        a = np.full((rows, 2), -1.0, np.float32)
        b = np.full(rows, -1, np.int64)
        lo, hi = balanced_bounds(rows, 3)[i]
        a[lo:hi] = np.arange(lo, hi)[:, None] * 10.0
        b[lo:hi] = np.arange(lo, hi)
        before = a
        comm.all_gather_rows([a, b])
        assert a is before                                     # in place
        return a, b
    for a, b in _threads(3, on_rank):
        np.testing.assert_array_equal(a, np.repeat(np.arange(rows)[:, None] * 10.0, 2, axis=1))
        np.testing.assert_array_equal(b, np.arange(rows))


def test_all_gather_rows_with_different_shapes_names_the_ranks():
    group = InProcessGroup([0, 1], timeout=10)
    errs = [None, None]

    def body(i):
        try:
            group.communicator(i).all_gather_rows([np.zeros((3 + i, 2), np.float32)])
        except Exception as e:  # noqa: BLE001
            errs[i] = e
    ts = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert any("all_gather_rows: rank 1 gave [([4, 2], 'float32')] but rank 0 gave [([3, 2], 'float32')]" in str(e)
               or "all_gather_rows: rank 0 gave [([3, 2], 'float32')] but rank 1 gave [([4, 2], 'float32')]" in str(e)
               for e in errs)


def test_a_read_with_a_stateful_reader_before_the_wait_keeps_its_broadcast():
    """Folding moves a read's readers after the wait; a stateful one (a print, a collective) must
    not move, so that read keeps its own broadcast."""
    p = tw.placement("cpu", ranks=[0, 1])
    rng = np.random.default_rng(2)
    w = tw.Variable(rng.standard_normal((6, 4)).astype(np.float32), placement=p, sbp=tw.sbp.broadcast)
    x = tw.constant(rng.standard_normal((8, 6)).astype(np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
    opt = tw.keras.optimizers.SGD(0.1)
    opt.build([w])

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.matmul(x, w) ** 2)
        g = tape.gradient(loss, w)
        tw.print("step", opt.iterations)           # reads the counter between the bucket's start and wait
        opt.apply_gradients([(g, w)])
        return loss
    step(x)
    step(x)
    for b in step.get_concrete_function(x)._global.bound:
        nodes = b.spec.nodes
        ops = [n.op for n in nodes]
        wait = ops.index("_AllReduceWait")
        reads = [i for i, n in enumerate(nodes) if n.op == "_Once" and n.attrs["op_type"] == "ReadVariableOp"]
        assert reads and all(i < wait and nodes[i].attrs.get("broadcast", True) for i in reads)
        prints = [i for i, n in enumerate(nodes) if n.op == "_Once" and n.attrs["op_type"] == "PrintV2"]
        assert prints and all(i < wait for i in prints)
    assert int(opt.iterations.numpy()) == 2
