"""Issue 14 (ray14): ``distribute/ray/spec_buckets.merge_buckets`` — the consecutive gradient
buckets of a rank's plan spec as one (what the driver ships to Ray workers). No Ray here: the
specs of in-process plans; the bits on Ray workers: tests/test_ray14_steps.py."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute.ray.spec_buckets import merge_buckets

P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(14)
X, Y = RNG.standard_normal((8, 5)).astype(np.float32), RNG.standard_normal((8, 3)).astype(np.float32)


def _spec(body):
    x, y = (tw.constant(v).to_global(placement=P2, sbp=S(0)) for v in (X, Y))
    params = [tw.Variable(RNG.standard_normal(s).astype(np.float32), placement=P2, sbp=B)
              for s in ((5, 4), (4,), (4, 3))]
    step = tw.function(lambda x, y: body(params, x, y))
    step(x, y)
    return step.get_concrete_function(x, y)._global.plan.rank_spec(0)[0]


def _loss(params, x, y):
    h = tw.nn.relu(tw.matmul(x, params[0]) + params[1])
    return tw.reduce_mean(tw.square(tw.matmul(h, params[2]) - y))


def _sgd(params, x, y):
    with tw.GradientTape() as tape:
        loss = _loss(params, x, y)
    for p, g in zip(params, tape.gradient(loss, params)):
        p.assign_sub(0.1 * g)
    return loss


def _check_order(spec):
    """Every slot a node reads is written by an earlier node (or fed / preset); deps point back."""
    have = set(spec.feed_slots) | {s for s, _ in spec.presets}
    for i, n in enumerate(spec.nodes):
        assert set(n.ins) <= have, (i, n)
        assert all(d < i for d in spec.deps[i])
        have.update(n.out_slots())


def _ops(spec):
    return [n.op for n in spec.nodes]


def test_interleaved_sgd_buckets_become_one_start_and_one_wait_after_every_gradient():
    spec = _spec(_sgd)
    assert _ops(spec).count("_AllReduceStart") == 3
    assert merge_buckets(spec) == 2
    ops = _ops(spec)
    assert ops.count("_AllReduceStart") == ops.count("_AllReduceWait") == 1
    start, wait = ops.index("_AllReduceStart"), ops.index("_AllReduceWait")
    assert wait == start + 1
    assert len(spec.nodes[start].ins) == 3 and len(spec.nodes[wait].outs) == 3
    assert spec.nodes[wait].attrs["n"] == 3 and len(spec.nodes[wait].attrs["outputs"]) == 3
    assert [i for i, op in enumerate(ops) if op == "AssignSubVariableOp"] == [wait + 1, wait + 2, wait + 3]
    _check_order(spec)
    assert spec.frees is not None and len(spec.frees) == len(spec.nodes)      # re-scheduled


def test_a_bucket_whose_gradient_needs_an_earlier_update_is_not_merged():
    def two_phases(params, x, y):
        with tw.GradientTape() as tape:
            loss = _loss(params, x, y)
        params[0].assign_sub(0.1 * tape.gradient(loss, params[0]))
        with tw.GradientTape() as tape:        # reads the updated first weight
            loss = _loss(params, x, y)
        params[2].assign_sub(0.1 * tape.gradient(loss, params[2]))
        return loss
    spec = _spec(two_phases)
    starts = _ops(spec).count("_AllReduceStart")
    assert starts == 2
    assert merge_buckets(spec) == 0
    assert _ops(spec).count("_AllReduceStart") == 2


def test_a_merged_spec_runs_and_gives_the_plans_bits_in_process():
    # the rank plans of in-process ranks bind their own specs; here the merged spec is bound on
    # each rank's runtime with the same resources and run on the rank threads
    from tensorweave.distribute.ranks import default_world
    from tensorweave.runtime import executor
    x, y = (tw.constant(v).to_global(placement=P2, sbp=S(0)) for v in (X, Y))
    start = [RNG.standard_normal(s).astype(np.float32) for s in ((5, 4), (4,), (4, 3))]

    def run(merge):
        params = [tw.Variable(v, placement=P2, sbp=B) for v in start]
        step = tw.function(lambda x, y: _sgd(params, x, y))
        step(x, y)
        gp = step.get_concrete_function(x, y)._global.plan
        world = default_world()

        def on_rank(i):
            spec, live = gp.rank_spec(i, world.rank(i).runtime.resource("communicator", "world"))
            if merge:
                merge_buckets(spec)
            plan = executor.bind(spec, world.rank(i).runtime, resources=live)
            feeds = [x.to_local()[i].numpy(), y.to_local()[i].numpy()]
            return [np.asarray(o) for o in executor.run_plan(plan, feeds)]
        world.run([0, 1], on_rank)
        return [p.numpy() for p in params]
    for a, b in zip(run(False), run(True)):
        np.testing.assert_array_equal(a, b)
