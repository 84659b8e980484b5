"""The planner's ZeRO-1 choice (distribute/zero_update.py) by cost, and what explain shows of it."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import planner
from tensorweave.distribute.zero_update import zero_costs
from zero13_model import model, slots_of

WIDE = ((64, 96), (96,), (96, 24))     # weights of 24 KiB and 9 KiB, a 384-byte bias


def _layouts(optimizer, ranks, shapes=WIDE):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    step, vs, opt, x = model(p, optimizer, shapes=shapes, batch=24)
    step(x)
    return {tuple(v.shape.as_list()): sorted({s.sbp for s in slots_of(opt, v).values()}) for v in vs}


def test_shared_storage_prices_the_gather_at_nothing():
    # in-process ranks share one buffer per ZeRO-1 weight (zero_update.share_storage): the gather
    # copies nothing, so SGD with momentum (and plain SGD) updates its weights in shards too
    assert planner.SHARED_ZERO_STORAGE
    assert _layouts("sgd_momentum", 2) == {(64, 96): [(S(0),)], (96,): [(B,)], (96, 24): [(S(0),)]}
    assert _layouts("adam", 2) == {(64, 96): [(S(0),)], (96,): [(B,)], (96, 24): [(S(0),)]}


def test_the_choice_flips_with_the_update_s_cost(monkeypatch):
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)     # each rank's own copy: the gather copies
    # plain SGD, SGD with momentum: the gather costs more than the smaller update saves -> all-reduce
    assert _layouts("sgd", 2) == {(64, 96): [], (96,): [], (96, 24): []}
    assert _layouts("sgd_momentum", 2) == {(64, 96): [(B,)], (96,): [(B,)], (96, 24): [(B,)]}
    # Adam reads and writes three arrays: ZeRO-1 for both weights, the bias stays replicated
    assert _layouts("adam", 2) == {(64, 96): [(S(0),)], (96,): [(B,)], (96, 24): [(S(0),)]}
    assert _layouts("adam", 3) == {(64, 96): [(S(0),)], (96,): [(B,)], (96, 24): [(S(0),)]}
    # a gather priced at its bytes only flips momentum too (the bias still pays the fixed cost)
    monkeypatch.setattr(planner, "ZERO_GATHER_WEIGHT", 1)
    assert _layouts("sgd_momentum", 2) == {(64, 96): [(S(0),)], (96,): [(B,)], (96, 24): [(S(0),)]}


def test_costs_are_the_planner_s_bytes(monkeypatch):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    step, vs, opt, x = model(p, "adam", shapes=WIDE, batch=24)
    gp = step.get_concrete_function(x)._global.plan
    pl = planner._Planner(gp, True)
    n_bytes = 64 * 96 * 4
    plain, zero = zero_costs(pl, (64, 96), np.float32, 3)
    # bucketed all-reduce: (n - 1) x bytes (an all-gather's); reduce-scatter and all-gather the same each;
    # Adam's update touches 7 x bytes (reads weight, m, v, gradient; writes weight, m, v) on every rank;
    # the gather into the ranks' shared buffer copies nothing
    assert plain == 2 * n_bytes + 3 * 7 * n_bytes
    assert zero == 2 * n_bytes + 7 * n_bytes + planner.ZERO_FIXED_BYTES
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    plain, zero = zero_costs(pl, (64, 96), np.float32, 3)
    assert zero == 2 * n_bytes + planner.ZERO_GATHER_WEIGHT * 2 * n_bytes + 7 * n_bytes + planner.ZERO_FIXED_BYTES
    step2, _, _, x2 = model(tw.placement("cpu", ranks=[0, 1]), "adam", shapes=WIDE, batch=24)
    pl2 = planner._Planner(step2.get_concrete_function(x2)._global.plan, True)
    plain, zero = zero_costs(pl2, (64, 96), np.float32, 3)
    tie = planner.ZERO_FIXED_BYTES + plain - zero
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", tie)           # as dear as the all-reduce: not chosen
    assert _layouts("adam", 2)[(64, 96)] == [(B,)]
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", tie - 1)       # a byte cheaper: chosen
    assert _layouts("adam", 2)[(64, 96)] == [(S(0),)]
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 10 ** 9)        # too dear: nothing chosen
    assert _layouts("adam", 2) == {(64, 96): [(B,)], (96,): [(B,)], (96, 24): [(B,)]}
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 16 << 10)
    monkeypatch.setattr(planner, "ZERO_UPDATES", False)              # switched off
    assert _layouts("adam", 2) == {(64, 96): [(B,)], (96,): [(B,)], (96, 24): [(B,)]}


def test_a_weight_with_fewer_rows_than_ranks_or_read_elsewhere_stays_all_reduced(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    assert _layouts("adam", 3, shapes=((2, 64), (64,), (64, 2)))[(2, 64)] == [(B,)]
    assert _layouts("adam", 3, shapes=((3, 64), (64,), (64, 3)))[(3, 64)] == [(S(0),)]   # a row each
    p = tw.placement("cpu", ranks=[0, 1])
    rng = np.random.default_rng(1)
    w = tw.Variable(rng.standard_normal((8, 4)).astype(np.float32), placement=p, sbp=tw.sbp.broadcast)
    x = tw.constant(rng.standard_normal((6, 8)).astype(np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
    opt = tw.keras.optimizers.Adam(0.1)

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.matmul(x, w) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        w.assign_add(tw.ones_like(w) * 0.5)        # a second writer: the rows would race with the gather
        return loss
    step(x)
    assert {s.sbp for s in slots_of(opt, w).values()} == {(B,)}


def test_explain_shows_the_zero_update_its_collectives_and_the_smaller_state(monkeypatch):
    p = tw.placement("cpu", ranks=[0, 1])
    step, vs, opt, x = model(p, "adam", shapes=WIDE, batch=24)
    e = tw.distribute.explain(step, x)
    d = e.to_dict()
    (update,) = [o for o in d["ops"] if o["type"].startswith("ResourceGroupApply")]
    assert len(update["zero"]) == 2 and update["signature"].startswith("ZeRO-1 ")
    scatters = [c for c in d["collectives"] if c["kind"] == "reduce_scatter"]
    gathers = [c for c in d["collectives"] if c.get("zero")]
    assert sorted(c["shape"] for c in scatters) == [[64, 96], [96, 24]]
    # in-process ranks share the weight's buffer (zero_update.share_storage): a view, nothing moved
    assert [(c["kind"], c["before"], c["after"], c["shape"], c["bytes"], c["gather_bytes"]) for c in gathers] == [
        ("shared_view", "(S(0),)", "(B,)", [64, 96], 0, 64 * 96 * 4),
        ("shared_view", "(S(0),)", "(B,)", [96, 24], 0, 96 * 24 * 4)]
    assert "(ZeRO-1)" in e.text() and "ZeRO-1 " in e.text()
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)     # per-rank copies: the gather copies rows
    step3, _, _, x3 = model(p, "adam", shapes=WIDE, batch=24)
    copied = [c for c in tw.distribute.explain(step3, x3).to_dict()["collectives"] if c.get("zero")]
    assert [(c["kind"], c["before"], c["after"], c["shape"], c["bytes"]) for c in copied] == [
        ("all_gather", "(S(0),)", "(B,)", [64, 96], 64 * 96 * 4), ("all_gather", "(S(0),)", "(B,)", [96, 24],
                                                                   96 * 24 * 4)]
    assert not any("note" in c for c in copied)
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", True)
    zero_bytes = [m["variable_bytes"] for m in d["memory"]]
    monkeypatch.setattr(planner, "ZERO_UPDATES", False)
    step2, vs2, opt2, x2 = model(p, "adam", shapes=WIDE, batch=24)
    plain = tw.distribute.explain(step2, x2).to_dict()
    assert not any(c.get("zero") for c in plain["collectives"])
    # the slots of the two weights: half their rows on each rank
    saved = 2 * (64 * 96 + 96 * 24) * 4 // 2
    assert [m["variable_bytes"] for m in plain["memory"]] == [b + saved for b in zero_bytes]


def test_only_reader_needs_one_use_by_the_update_and_allowed_readers_elsewhere():
    from tensorweave.distribute.zero_update import _only_reader

    class Op:
        def __init__(self, type_):
            self.type = type_
    update, read, assign, t = Op("ResourceApplyAdam"), Op("ReadVariableOp"), Op("AssignAddVariableOp"), object()

    class Planner:
        consumers = {}
    for uses, allowed, want in (([read, update], ("ReadVariableOp",), True), ([read, update], (), False),
                                ([update, update], ("ReadVariableOp",), False),     # read twice by the update
                                ([update, assign], ("ReadVariableOp",), False), ([read], ("ReadVariableOp",), False)):
        Planner.consumers = {id(t): [(c, 0) for c in uses]}
        assert _only_reader(Planner, t, update, allowed) == want, (uses, allowed)


def test_eager_zero_only_for_a_replicated_weight_with_sharded_slots():
    from tensorweave.distribute.interpreter import Layout
    from tensorweave.distribute.zero_update import eager_zero
    p = tw.placement("cpu", ranks=[0, 1])
    f32, res = tw.float32, tw.resource

    def lay(sbp, dtype=res):
        return Layout((6, 4), dtype, sbp, p)
    # ResourceApplyAdam(var, m, v, lr, step, grad) / ResourceApplyKerasMomentum(var, lr, grad) (plain SGD)
    cases = [([lay((B,)), lay((S(0),)), lay((S(0),)), lay((B,), f32), lay((B,), f32), lay((B,), f32)], [0, 1, 2], True),
             ([lay((B,)), lay((B,)), lay((B,)), lay((B,), f32), lay((B,), f32), lay((B,), f32)], [0, 1, 2], False),
             ([lay((S(0),)), lay((S(0),)), lay((S(0),)), lay((B,), f32), lay((B,), f32), lay((B,), f32)], [0, 1, 2],
              False),
             ([lay((B,)), lay((B,), f32), lay((B,), f32)], [0], False)]       # no slots: nothing to shard
    for inputs, handles, zero in cases:
        want = [x._sbp for x in inputs]
        got = eager_zero(inputs, handles, len(inputs), 1, p, want)
        assert got == ([(0, len(inputs) - 1)] if zero else [])
        assert want[-1] == ((S(0),) if zero else inputs[-1]._sbp)
