"""Optimizer updates applied by the gradient bucket's reduction (distribute/fused_sgd.py,
fused_rules.py): the rank summing a chunk of a ZeRO-1 weight's gradient updates the weight the ranks
share and the owning rank's slots there at once. Same bits as the unfused step (the sums kept, then
the update) for plain SGD, momentum, Nesterov, Adam, RMSprop (plain; momentum and centered) and
Adagrad and AMSGrad, on 2 and 3 ranks (uneven rows, several chunks per rank's rows); per-rank copies
stay unfused; a step whose weights are not shared falls back; the collective's ``apply`` on its own."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import collective, fused_rules, fused_sgd, planner
from tensorweave.distribute.layout import balanced_bounds
from zero13_model import OPTIMIZERS, slots_of, train

FUSED = dict(OPTIMIZERS, nesterov=lambda: tw.keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
             amsgrad=lambda: tw.keras.optimizers.Adam(0.05, amsgrad=True),
             rmsprop_mc=lambda: tw.keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True))


@pytest.fixture
def zero_everywhere(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)      # every weight of the small model in shards


class _Calls(list):
    """The chunks applied, and (``rules``) the rule each was applied with."""
    rules = None


@pytest.fixture
def applied(monkeypatch):
    """Counts the chunks the buckets applied (BucketUpdate.apply_chunk calls)."""
    calls = _Calls()
    calls.rules = []
    real = fused_sgd.BucketUpdate.apply_chunk

    def counting(self, values, target, chunk, factors, scratch):
        calls.append(chunk)
        calls.rules.append(self.rule)
        return real(self, values, target, chunk, factors, scratch)
    monkeypatch.setattr(fused_sgd.BucketUpdate, "apply_chunk", counting)
    return calls


def _rank_fns(step, x):
    plan = step.get_concrete_function(x)._global.bound[0]
    return {st.node.op: getattr(st.fn, "__name__", "") for st in plan.steps}


def _trained(placement, optimizer, steps):
    """The weights and their slots (name order) after ``steps`` steps."""
    values, opt, vs, step, x = train(placement, FUSED[optimizer](), steps=steps)
    slots = [s.numpy() for v in vs for _, s in sorted(slots_of(opt, v).items())]
    return values, slots, step, x


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "nesterov", "adam", "amsgrad", "rmsprop", "rmsprop_mc",
                                       "adagrad"])
def test_an_update_applied_by_the_bucket_has_the_unfused_bits(zero_everywhere, applied, monkeypatch, ranks,
                                                              optimizer):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    fused, fused_slots, step, x = _trained(p, optimizer, 3)
    assert _rank_fns(step, x)["_AllReduceStart"] == "start_fn"
    # every weight (7x5, 5, 5x3) applied by the buckets each step: one chunk per rank's rows, each once
    assert len(applied) == 3 * 3 * ranks and len(set(applied)) == 3 * ranks
    applied.clear()
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    plain, plain_slots, step2, x2 = _trained(p, optimizer, 3)
    assert not applied and _rank_fns(step2, x2)["_AllReduceStart"] != "start_fn"
    assert len(fused_slots) == 3 * fused_rules.rule_for(*_update_of(optimizer)).slots
    for a, b in zip(fused + fused_slots, plain + plain_slots):
        np.testing.assert_array_equal(a, b)
    want, want_slots, _, _ = _trained(None, optimizer, 3)
    for a, w in zip(fused + fused_slots, want + want_slots):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=1e-6)


def _update_of(optimizer):
    if optimizer.startswith("rmsprop"):
        mc = optimizer == "rmsprop_mc"
        return "ResourceApplyKerasRMSprop", {"rho": 0.9, "momentum": 0.5 if mc else 0.0, "epsilon": 1e-7,
                                             "centered": mc}
    if optimizer == "adagrad":
        return "ResourceApplyAdagradV2", {"epsilon": 1e-7}
    if optimizer in ("adam", "amsgrad"):
        return "ResourceApplyAdam", {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": optimizer == "amsgrad"}
    return "ResourceApplyKerasMomentum", {"momentum": 0.0 if optimizer == "sgd" else 0.9,
                                          "nesterov": optimizer == "nesterov"}


def test_several_chunks_per_rank_take_each_owner_s_slot_rows(zero_everywhere, applied, monkeypatch):
    """Chunks of 4 elements: each rank's rows of a weight are cut in several, at offsets inside the
    owner's slot shards; the bits are still the unfused step's."""
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 4)
    p = tw.placement("cpu", ranks=[0, 1, 2])
    fused, fused_slots, _, _ = _trained(p, "adam", 2)
    assert len(set(applied)) > 3 * 3
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    plain, plain_slots, _, _ = _trained(p, "adam", 2)
    for a, b in zip(fused + fused_slots, plain + plain_slots):
        np.testing.assert_array_equal(a, b)


def test_per_rank_copies_stay_unfused(zero_everywhere, applied, monkeypatch):
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    p = tw.placement("cpu", ranks=[0, 1])
    train(p, "sgd", steps=2)
    assert not applied


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_weights_not_shared_at_a_step_fall_back_to_the_update(zero_everywhere, applied, monkeypatch, optimizer):
    """``targets`` None (a weight not in the shared buffer when the step runs): the sums are kept
    and the update op applies them, with the same result."""
    p = tw.placement("cpu", ranks=[0, 1])
    want, want_slots, _, _ = _trained(p, optimizer, 3)
    assert applied
    applied.clear()
    asked = []

    def none(self):
        asked.append(1)
        return [None] * (max(self.arrays) + 1)
    monkeypatch.setattr(fused_sgd.BucketUpdate, "targets", none)
    got, got_slots, _, _ = _trained(p, optimizer, 3)
    assert asked and not applied
    for a, b in zip(got + got_slots, want + want_slots):
        np.testing.assert_array_equal(a, b)


class _Apply:
    """A collective ``apply`` object: array 1 of the bucket updated in ``target`` at ``lr`` (plain SGD)."""

    rule = fused_rules.rule_for("ResourceApplyKerasMomentum", {"momentum": 0.0})

    def __init__(self, target, lr, k=1):
        self.target, self.lr, self.k = target, lr, k

    def targets(self):
        out = [None] * (self.k + 1)
        out[self.k] = self.target
        return out

    def scale(self, pending, dtype):
        return self.rule.factors([self.lr], dtype)

    def apply_chunk(self, values, target, chunk, factors, scratch):
        k, lo, hi = chunk[:3]
        self.rule.apply([v[k].reshape(-1)[lo:hi] for v in values], target[lo:hi], [], factors, scratch)


def _on_members(group, buckets, applies):
    out = [None] * len(buckets)

    def run(i):
        comm = group.communicator(i)
        out[i] = comm.all_reduce_start(buckets[i], apply=applies[i]).wait()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(buckets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("members", [2, 3])
def test_the_collective_applies_an_array_in_place_and_sums_the_others(monkeypatch, members):
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 7)       # several chunks per array
    rng = np.random.default_rng(members)
    buckets = [[rng.standard_normal(5).astype(np.float32), rng.standard_normal((9, 4)).astype(np.float32)]
               for _ in range(members)]
    w = rng.standard_normal((9, 4)).astype(np.float32)
    lr = np.float32(0.3)
    want_w = w - _ordered_sum([b[1] for b in buckets]) * lr
    spec = _Apply(w.reshape(-1), lr)
    got = _on_members(collective.InProcessGroup(range(members)), buckets, [spec] * members)
    for res in got:
        assert res[1] is None
        np.testing.assert_array_equal(res[0], _ordered_sum([b[0] for b in buckets]))
    np.testing.assert_array_equal(w, want_w)


def _ordered_sum(parts):
    out = parts[0].copy()
    for p in parts[1:]:
        out = out + p
    return out


def test_members_with_different_apply_objects_keep_every_sum():
    rng = np.random.default_rng(1)
    buckets = [[rng.standard_normal(3).astype(np.float32), rng.standard_normal(6).astype(np.float32)]
               for _ in range(2)]
    w = np.zeros(6, np.float32)
    got = _on_members(collective.InProcessGroup([0, 1]), buckets, [_Apply(w, 1.0), _Apply(w, 1.0)])
    for res in got:
        np.testing.assert_array_equal(res[1], buckets[0][1] + buckets[1][1])
    assert not w.any()


@pytest.mark.parametrize("bad", [np.zeros(5, np.float32), np.zeros(7, np.float32), np.zeros(6, np.float64)])
def test_a_target_of_another_size_or_dtype_is_not_applied(bad):
    rng = np.random.default_rng(2)
    buckets = [[rng.standard_normal(3).astype(np.float32), rng.standard_normal(6).astype(np.float32)]
               for _ in range(2)]
    spec = _Apply(bad, 1.0)
    got = _on_members(collective.InProcessGroup([0, 1]), buckets, [spec, spec])
    np.testing.assert_array_equal(got[0][1], buckets[0][1] + buckets[1][1])
    assert not bad.any()


@pytest.mark.parametrize("loop,factors", [
    ("sgd", (np.float32(0.01),)), ("momentum", (np.float32(0.01), np.float32(0.9), False)),
    ("momentum", (np.float32(0.01), np.float32(0.9), True)),
    ("adam", (np.float32(0.003), np.float32(0.1), np.float32(0.001), np.float32(1e-7)))])
def test_the_compiled_loops_have_their_twins_bits(loop, factors):
    from tensorweave.kernels.cpu.jit import compile_now
    rng = np.random.default_rng(3)
    slots = {"sgd": 0, "momentum": 1, "adam": 2}[loop]
    a, b, w, *s = (rng.standard_normal(1000).astype(np.float32) for _ in range(3 + slots))
    if loop == "adam":
        s[1] = np.abs(s[1])         # a second moment
    args = [w, *s, a, b, *factors]
    twin = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    fn = getattr(fused_rules, f"_sum2_{loop}")
    compile_now(fn, *args)(*args)
    getattr(fused_rules, f"_sum2_{loop}_numpy")(*twin)
    for x, y in zip(args[:1 + slots], twin[:1 + slots]):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "nesterov", "adam", "amsgrad", "rmsprop", "rmsprop_mc",
                                       "adagrad"])
def test_apply_chunk_equals_the_sum_then_the_update_kernel(members, optimizer):
    """Every chunk of a 9x4 weight (chunks of 5 elements: cut inside the members' rows) applied by
    BucketUpdate.apply_chunk, each member's slot shard at its own offsets, equals the unfused
    step: the members' gradients summed in rank order, then the update kernel on the whole arrays."""
    check_apply_chunk(members, *_update_of(optimizer))


def check_apply_chunk(members, op, attrs):
    """``test_apply_chunk_equals_the_sum_then_the_update_kernel`` for the update ``op`` with ``attrs``."""
    from tensorweave.kernels.cpu import training_kernels as tk
    rule = fused_rules.rule_for(op, attrs)
    rng = np.random.default_rng(members)
    grads = [[rng.standard_normal((9, 4)).astype(np.float32)] for _ in range(members)]
    w = rng.standard_normal((9, 4)).astype(np.float32)
    slots = [np.abs(rng.standard_normal((9, 4))).astype(np.float32) for _ in range(rule.slots)]
    scalars = [np.float32(0.05), np.int64(3)][:rule.scalars]
    want_w, want_slots = w.copy(), [s.copy() for s in slots]
    total = _ordered_sum([g[0] for g in grads])
    from tensorweave.kernels.cpu import adamax_kernels, lion_kernels
    kernels = {"adam": tk._apply_adam, "amsgrad": tk._apply_adam, "rmsprop": tk._apply_rmsprop,
               "adagrad": tk._apply_adagrad, "lion": lion_kernels._apply_lion, "adamax": adamax_kernels._apply_adamax}
    kernels.get(rule.name, tk._apply_momentum)(
        *[_Var(a) for a in [want_w] + want_slots], *scalars, total,
        **{k: v for k, v in attrs.items()})
    bounds = balanced_bounds(9, members)
    target = fused_sgd._Target(w.reshape(-1), [[s[lo:hi].copy().reshape(-1) for s in slots] for lo, hi in bounds],
                               [lo * 4 for lo, _ in bounds])
    spec = fused_sgd.BucketUpdate([0], [None], [None], rule, None, 0)
    factors = rule.factors(scalars, w.dtype)
    scratch = np.empty(5, np.float32)
    old = collective.REDUCE_CHUNK
    try:
        collective.REDUCE_CHUNK = 5
        chunks = collective._chunks(grads[0], members)
    finally:
        collective.REDUCE_CHUNK = old
    assert len(chunks) > members
    for chunk in reversed(chunks):            # any member may take any chunk, in any order
        spec.apply_chunk(grads, target, chunk, factors, scratch)
    np.testing.assert_array_equal(w, want_w)
    for j, (lo, hi) in enumerate(bounds):
        for mine, whole in zip(target.slots[j], want_slots):
            np.testing.assert_array_equal(mine, whole[lo:hi].reshape(-1))


class _Var:
    """A stand-in variable handle for the update kernels (its storage updated in place)."""

    def __init__(self, value):
        self.value, self.name = value, "v"

    def _storage_for_update(self):
        return self.value


def test_an_apply_naming_only_the_first_arrays_keeps_the_later_sums():
    """``targets()`` may stop before the bucket's last array (BucketSGD lists up to its last weight)."""
    rng = np.random.default_rng(4)
    buckets = [[rng.standard_normal(6).astype(np.float32), rng.standard_normal(4).astype(np.float32)]
               for _ in range(2)]
    w = rng.standard_normal(6).astype(np.float32)
    want = w - (buckets[0][0] + buckets[1][0]) * np.float32(0.5)
    spec = _Apply(w, np.float32(0.5), k=0)
    got = _on_members(collective.InProcessGroup([0, 1]), buckets, [spec, spec])
    for res in got:
        assert res[0] is None
        np.testing.assert_array_equal(res[1], buckets[0][1] + buckets[1][1])
    np.testing.assert_array_equal(w, want)


class _Node:
    def __init__(self, op, name, **attrs):
        self.op, self.name, self.attrs = op, name, attrs


class _Step:
    def __init__(self, op, ins, outs, fn=None, name=None, **attrs):
        self.node, self.ins, self.outs = _Node(op, name or op, **attrs), list(ins), outs
        self.single = not isinstance(outs, tuple)
        self.fn = fn if fn is not None else (lambda *a: None)


class _Plan:
    def __init__(self, steps, fetch_slots=(), initial=None, feed_slots=()):
        self.steps, self.fetch_slots, self.feed_slots = steps, list(fetch_slots), list(feed_slots)
        self.initial = [None] * 20
        for s, v in (initial or {}).items():
            self.initial[s] = v


def _plan(extra_reader=False, fetched=False, rows=(0, 2), lr_extra=True, group="group"):
    """Slots: 0 the variable, 1 its rows view, 2 the partial gradient, 3 the handle, 4 the gradient's
    rows, 5 the learning rate (the wait's folded extra, or a slot of its own)."""
    import functools
    rows_fn = lambda v: v                                            # noqa: E731
    rows_fn.shared = (group, 0)
    update = functools.partial(lambda *a, **k: (), momentum=0.0, nesterov=False)
    steps = [_Step("_VariableRows", [0], 1, rows_fn, rows=[0, 2]),
             _Step("_AllReduceStart", [2], 3, name="all_reduce_bucket0/start"),
             _Step("_AllReduceWait", [3], (4, 5) if lr_extra else (4, 6), n=1, extra=1 if lr_extra else 0,
                   rows=[list(rows) if rows else None]),
             _Step("ResourceApplyKerasMomentum", [1, 5, 4], (), update, momentum=0.0)]
    if extra_reader:
        steps.append(_Step("Square", [4], 7))
    return _Plan(steps, [4] if fetched else [])


def test_a_gradient_read_by_the_update_alone_qualifies():
    got = fused_sgd._candidates(_plan())
    sgd = fused_rules.rule_for("ResourceApplyKerasMomentum", {"momentum": 0.0})
    assert {k: v[:5] for k, v in got.items()} == {
        "all_reduce_bucket0/start": (1, 2, [3], [(0, "group", 3, 0, ())], (sgd, (("extra", 0),)))}
    assert got["all_reduce_bucket0/start"][5]([0.5]) == [0.5]


_M, _V = object(), object()       # Adam's slot variables in the stand-in plans


def _adam_plan(why=None):
    """``_plan``'s slots, and: 8, 9 the slots' handles, 10 the folded iterations (the wait's second
    extra), 11 the constant 1, 12 the step (``iterations + 1``), 13 another handle of the slot 8's
    variable; ``why`` one thing that stops the fusion."""
    import functools
    rows_fn = lambda v: v                                            # noqa: E731
    rows_fn.shared = ("group", 0)
    attrs = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
    update = functools.partial(lambda *a, **k: (), **attrs)
    steps = [_Step("_VariableRows", [0], 1, rows_fn, rows=[0, 2]),
             _Step("_AllReduceStart", [2], 3, name="all_reduce_bucket0/start"),
             _Step("_AllReduceWait", [3], (4, 5, 10), n=1, extra=2, rows=[[0, 2]]),
             _Step("Square", [5], 14),
             _Step("AddV2", [14 if why == "step_of_a_sum" else 10, 11], 12, lambda a, b: a + b),
             _Step("ResourceApplyAdam", [1, 8, 9, 5, 12, 4], (), update, **attrs)]
    if why == "slot_read_elsewhere":
        steps.append(_Step("ReadVariableOp", [13], 15))
    return _Plan(steps, initial={8: _M, 9: _V, 11: np.int64(1), 13: _M},
                 feed_slots=[11] if why == "fed_constant" else [])


def test_an_adam_update_qualifies_with_its_step_made_from_the_folded_iterations():
    got = fused_sgd._candidates(_adam_plan())
    entry = got["all_reduce_bucket0/start"]
    assert entry[3] == [(0, "group", 5, 0, (_M, _V))]
    assert entry[4][1] == (("extra", 0), ("step", "AddV2", (("extra", 1), ("const",))))
    assert entry[5]([0.5, np.int64(6)]) == [0.5, 7]


@pytest.mark.parametrize("why", ["step_of_a_sum", "fed_constant", "slot_read_elsewhere"])
def test_an_adam_update_with_other_scalars_or_a_slot_read_elsewhere_does_not(why):
    got = fused_sgd._candidates(_adam_plan(why))
    assert all(not entry[3] for entry in got.values())


@pytest.mark.parametrize("why", ["extra_reader", "fetched", "no_rows", "lr_not_folded"])
def test_a_gradient_read_elsewhere_fetched_all_reduced_or_without_a_folded_lr_does_not(why):
    plan = _plan(extra_reader=why == "extra_reader", fetched=why == "fetched", rows=None if why == "no_rows" else (0, 2),
                 lr_extra=why != "lr_not_folded")
    got = fused_sgd._candidates(plan)
    assert all(not entry[3] for entry in got.values())


def test_a_shard_with_a_buffer_of_its_own_is_updated_by_the_update_as_without_fusion(zero_everywhere, applied,
                                                                                      monkeypatch):
    """One rank's shard given unequal values between steps: not joined, so its weight is not applied by the
    bucket (the update and the gather run) — the same values as with the fusion off."""
    p = tw.placement("cpu", ranks=[0, 1])
    got = {}
    for on in (True, False):
        monkeypatch.setattr(fused_sgd, "ENABLED", on)
        _, _, vs, step, x = train(p, "sgd", steps=2)
        changed = vs[0]._locals[1]._value.copy()
        changed[0, 0] += 1.0
        vs[0]._locals[1]._value = changed
        applied.clear()
        step(x)
        got[on] = [np.array(s._value) for s in vs[0]._locals]
        if on:
            assert len(applied) == 2 * 2          # the other two weights still applied by the bucket
    for a, b in zip(got[True], got[False]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("other", ["no_bucket", "other_weights"])
def test_install_needs_the_same_buckets_and_weights_on_every_rank(other):
    rank1 = _Plan([]) if other == "no_bucket" else _plan(group="another group")
    assert fused_sgd.install([_plan(), rank1]) == 0


class _Group:
    """A stand-in SharedWeight: every rank's storage is ``buf``; ``bounds`` the ranks' rows."""

    def __init__(self, buf, bounds):
        self.buf, self.bounds, self.shards = buf, bounds, [object() for _ in bounds]
        self.flat = buf.reshape(-1)

    def storage(self, variable, index):
        return self.buf

    def buffer(self):               # every shard holds it (SharedWeight.buffer)
        return self.buf


def test_targets_need_the_slots_at_the_balanced_rows_the_chunks_are_cut_at():
    """The chunks' owners are the balanced bounds (collective._chunks); a weight whose ranks' rows
    are other bounds is not applied (its slot offsets would be another rank's)."""
    rule = fused_rules.rule_for("ResourceApplyKerasMomentum", {"momentum": 0.9})
    buf = np.zeros((5, 2), np.float32)
    for bounds, ok in (([(0, 3), (3, 5)], True), ([(0, 2), (2, 5)], False)):
        slots = [[_Var(np.zeros(((hi - lo) * 2,), np.float32))] for lo, hi in bounds]
        spec = fused_sgd.BucketUpdate([0], [_Group(buf, bounds)], [slots], rule, None, 0)
        assert (spec.targets()[0] is not None) == ok


def test_a_slot_value_someone_holds_keeps_its_value(zero_everywhere, applied):
    """Copy-on-write, as the update kernel: a rank's slot array read and held before a step is not
    changed by the bucket's update of that slot."""
    p = tw.placement("cpu", ranks=[0, 1])
    _, opt, vs, step, x = train(p, FUSED["adam"](), steps=1)
    slot = slots_of(opt, vs[0])["momentum"]
    held = [s._read() for s in slot._locals]
    before = [h.copy() for h in held]
    applied.clear()
    step(x)
    assert applied
    for h, b in zip(held, before):
        np.testing.assert_array_equal(h, b)
    assert not np.array_equal(slot.numpy(), np.concatenate(before))


def test_a_bucket_with_two_optimizers_fuses_the_first_one_s_updates_only(zero_everywhere, applied, monkeypatch):
    """Momentum for the first layer, Adam for the rest, one bucket: the momentum update is applied
    by the bucket, Adam's is not (its scalars are read after the bucket, not folded into it); the
    bits are the unfused step's."""
    rng = np.random.default_rng(7)
    values = [rng.standard_normal(s).astype(np.float32) for s in ((7, 5), (5,), (5, 3))]
    x0 = rng.standard_normal((12, 7)).astype(np.float32)
    p = tw.placement("cpu", ranks=[0, 1])

    def run():
        vs = [tw.Variable(v, placement=p, sbp=tw.sbp.broadcast) for v in values]
        x = tw.constant(x0).to_global(placement=p, sbp=tw.sbp.split(0))
        sgd, adam = FUSED["sgd_momentum"](), FUSED["adam"]()

        @tw.function
        def step(x):
            with tw.GradientTape() as tape:
                h = tw.nn.relu(tw.matmul(x, vs[0]) + vs[1])
                loss = tw.reduce_mean(tw.matmul(h, vs[2]) ** 2)
            g = tape.gradient(loss, vs)
            sgd.apply_gradients([(g[0], vs[0])])
            adam.apply_gradients(zip(g[1:], vs[1:]))
        for _ in range(3):
            step(x)
        return [v.numpy() for v in vs]
    fused = run()
    owners = {c[0] for c in applied}
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    plain = run()
    assert applied and len(owners) < 3
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_updates_of_another_rule_in_the_same_bucket_are_left_alone():
    """Two updates reading one wait's learning rate: plain SGD (array 0) and momentum 0.9 (array 1):
    the bucket applies the first one's rule only, so the second keeps its sum."""
    import functools
    rows_fn, rows_fn2 = (lambda v: v), (lambda v: v)
    rows_fn.shared, rows_fn2.shared = ("g0", 0), ("g1", 0)
    sgd = functools.partial(lambda *a, **k: (), momentum=0.0, nesterov=False)
    mom = functools.partial(lambda *a, **k: (), momentum=0.9, nesterov=False)
    steps = [_Step("_VariableRows", [0], 1, rows_fn, rows=[0, 2]),
             _Step("_VariableRows", [10], 11, rows_fn2, rows=[0, 2]),
             _Step("_AllReduceStart", [2, 12], 3, name="all_reduce_bucket0/start"),
             _Step("_AllReduceWait", [3], (4, 14, 5), n=2, extra=1, rows=[[0, 2], [0, 2]]),
             _Step("ResourceApplyKerasMomentum", [1, 5, 4], (), sgd, momentum=0.0),
             _Step("ResourceApplyKerasMomentum", [11, 16, 5, 14], (), mom, momentum=0.9)]
    got = fused_sgd._candidates(_Plan(steps, initial={16: object()}))
    assert [p[:2] for p in got["all_reduce_bucket0/start"][3]] == [(0, "g0")]
