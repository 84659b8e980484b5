"""Plain SGD applied by the gradient bucket's reduction (distribute/fused_sgd.py): the rank summing a
chunk of a ZeRO-1 weight's gradient updates the weight the ranks share there at once. Same bits as
the unfused step (the sums kept, then the update), on 2 and 3 ranks (uneven rows); SGD with
momentum, Adam and per-rank copies stay unfused; a step whose weights are not shared falls back;
the collective's ``apply`` on its own."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import collective, fused_sgd, planner
from zero13_model import train


@pytest.fixture
def zero_everywhere(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)      # every weight of the small model in shards


@pytest.fixture
def applied(monkeypatch):
    """Counts the chunks the buckets applied (BucketSGD.apply_chunk calls)."""
    calls = []
    real = fused_sgd.BucketSGD.apply_chunk

    def counting(values, target, chunk, lr, scratch):
        calls.append(chunk)
        return real(values, target, chunk, lr, scratch)
    monkeypatch.setattr(fused_sgd.BucketSGD, "apply_chunk", staticmethod(counting))
    return calls


def _rank_fns(step, x):
    plan = step.get_concrete_function(x)._global.bound[0]
    return {st.node.op: getattr(st.fn, "__name__", "") for st in plan.steps}


@pytest.mark.parametrize("ranks", [2, 3])
def test_sgd_applied_by_the_bucket_has_the_unfused_bits(zero_everywhere, applied, monkeypatch, ranks):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    fused, _, _, step, x = train(p, "sgd", steps=4)
    assert _rank_fns(step, x)["_AllReduceStart"] == "start_fn"
    # every weight (7x5, 5, 5x3) applied by the buckets each step: one chunk per rank's rows, each once
    assert len(applied) == 4 * 3 * ranks and len(set(applied)) == 3 * ranks
    applied.clear()
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    plain, _, _, step2, x2 = train(p, "sgd", steps=4)
    assert not applied and _rank_fns(step2, x2)["_AllReduceStart"] != "start_fn"
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)
    want = train(None, "sgd", steps=4)[0]
    for a, w in zip(fused, want):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_other_updates_stay_unfused(zero_everywhere, applied, optimizer):
    p = tw.placement("cpu", ranks=[0, 1])
    train(p, optimizer, steps=2)
    assert not applied


def test_per_rank_copies_stay_unfused(zero_everywhere, applied, monkeypatch):
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    p = tw.placement("cpu", ranks=[0, 1])
    train(p, "sgd", steps=2)
    assert not applied


def test_weights_not_shared_at_a_step_fall_back_to_the_update(zero_everywhere, applied, monkeypatch):
    """``targets`` None (a weight not in the shared buffer when the step runs): the sums are kept
    and the update op applies them, with the same result."""
    p = tw.placement("cpu", ranks=[0, 1])
    want = train(p, "sgd", steps=3)[0]
    applied.clear()
    asked = []

    def none(self):
        asked.append(1)
        return [None] * (max(self.arrays) + 1)
    monkeypatch.setattr(fused_sgd.BucketSGD, "targets", none)
    got = train(p, "sgd", steps=3)[0]
    assert asked and not applied
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


class _Apply:
    """A collective ``apply`` object: array 1 of the bucket updated in ``target`` at ``lr``."""

    def __init__(self, target, lr, k=1):
        self.target, self.lr, self.k = target, lr, k

    def targets(self):
        out = [None] * (self.k + 1)
        out[self.k] = self.target
        return out

    def scale(self, pending):
        return self.lr

    apply_chunk = staticmethod(fused_sgd.BucketSGD.apply_chunk)


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


def test_the_compiled_loop_has_its_twins_bits():
    from tensorweave.kernels.cpu.jit import compile_now
    rng = np.random.default_rng(3)
    a, b, w = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    w2 = w.copy()
    lr = np.float32(0.01)
    compile_now(fused_sgd._sum2_sgd, w, a, b, lr)(w, a, b, lr)
    fused_sgd._sum2_sgd_numpy(w2, a, b, lr)
    np.testing.assert_array_equal(w, w2)


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
    def __init__(self, steps, fetch_slots=()):
        self.steps, self.fetch_slots = steps, list(fetch_slots)


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
    assert got == {"all_reduce_bucket0/start": (1, 2, [3], [(0, "group", 3, 0)], 0)}


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
