"""Pipelines with stages running at the same time (one controller thread per device, a lock per
rank in ``World.run``) and interleaved 1F1B (virtual stages): the schedule's dependencies and
bubble formula, and training equal to one device and bit-identical to running one stage at a
time."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.pipeline_schedule import (bubble_fraction, interleaved_orders, make_schedule,
                                                      peak_activations)
from tensorweave.distribute.ranks import World

RNG = np.random.default_rng(23)
X = RNG.standard_normal((12, 6)).astype(np.float32)
Y = RNG.standard_normal((12, 3)).astype(np.float32)
SIZES = [6, 10, 8, 5, 3]
WEIGHTS = [((RNG.standard_normal((a, b)) * 0.4).astype(np.float32), np.full(b, 0.05, np.float32))
           for a, b in zip(SIZES, SIZES[1:])]
P0 = tw.placement("cpu", ranks=[0, 1])
P1 = tw.placement("cpu", ranks=[2, 3])


class Dense(tw.Module):
    def __init__(self, w, b, activation=None, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w, self.b = tw.Variable(w, name="w"), tw.Variable(b, name="b")
        self.activation = activation

    def __call__(self, x):
        y = tw.matmul(x, self.w) + self.b
        return self.activation(y) if self.activation else y


def _layers():
    return [Dense(w, b, tw.nn.relu if i < 3 else None, name=f"d{i}") for i, (w, b) in enumerate(WEIGHTS)]


def _mse(y, pred):
    return tw.reduce_mean(tw.square(pred - y))


def _one_device(steps):
    layers = _layers()
    opt = tw.keras.optimizers.Adam(0.05)
    x, y = tw.constant(X), tw.constant(Y)
    losses = []
    variables = [v for layer in layers for v in layer.trainable_variables]
    for _ in range(steps):
        with tw.GradientTape() as tape:
            h = x
            for layer in layers:
                h = layer(h)
            loss = _mse(y, h)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


# ---- the lock per rank ----------------------------------------------------------------------------
def test_runs_on_disjoint_rank_sets_overlap_and_runs_sharing_a_rank_take_turns():
    world = World(timeout=30.0)
    met = threading.Barrier(2, timeout=30.0)       # passes only if both runs are inside at once
    results = {}

    def controller(ranks, key):
        results[key] = world.run(ranks, lambda i: (met.wait() if i == 0 else None, ranks[i])[1])
    threads = [threading.Thread(target=controller, args=(r, k)) for r, k in (([0, 1], "a"), ([2, 3], "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"a": [0, 1], "b": [2, 3]}
    # runs sharing rank 1 take turns (never both inside), so each group's members see one order of runs
    inside, most = [0], [0]
    lock = threading.Lock()

    def body_for(ranks):
        def fn(i):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            out = world.group(ranks).communicator(i).all_reduce(np.ones(2))
            with lock:
                inside[0] -= 1
            return out.tolist()
        return fn
    threads = [threading.Thread(target=lambda r=r: [world.run(r, body_for(r)) for _ in range(20)])
               for r in ([0, 1], [1, 2])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2                  # at most one run (of two ranks) inside at a time
    world.shutdown()


def test_a_failing_run_aborts_only_its_own_groups():
    world = World(timeout=30.0)
    started = threading.Barrier(2, timeout=30.0)
    out = {}
    for ranks in ([0, 1], [2, 3]):       # the groups exist before the failure
        world.run(ranks, lambda i, r=ranks: world.group(r).communicator(i).all_gather([i]).tolist())

    def failing():
        try:
            world.run([0, 1], lambda i: (started.wait() if i == 0 else None, 1 // i)[1])
        except ZeroDivisionError as e:
            out["error"] = e.rank

    def other():
        out["other"] = world.run([2, 3], lambda i: (started.wait() if i == 0 else None,
                                                    world.group([2, 3]).communicator(i).all_gather([i]).tolist())[1])
    threads = [threading.Thread(target=failing), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"error": 0, "other": [[0, 1], [0, 1]]}
    for ranks in ([0, 1], [2, 3]):       # the failed run's group was replaced, the other one kept working
        assert world.run(ranks, lambda i, r=ranks: world.group(r).communicator(i).all_gather([i]).tolist()) == [
            [0, 1]] * 2
    world.shutdown()


def test_a_group_asked_for_after_a_failure_starts_aborted():
    from tensorweave.distribute.collective import CollectiveAbortedError

    class Observed(World):        # tells rank 1 when the failure of rank 0 has been handled
        def _abort(self, ranks, reason):
            super()._abort(ranks, reason)
            aborted.set()
    aborted, outcome = threading.Event(), {}
    world = Observed(timeout=5.0)

    def fn(i):
        if i == 0:
            raise ValueError("rank 0 broke")
        aborted.wait(30)
        try:             # a fresh group with the failed rank: must not wait for it (nor time out)
            world.group([0, 1]).communicator(1).all_gather([1])
        except CollectiveAbortedError as e:
            outcome["rank 1"] = str(e)
    with pytest.raises(ValueError, match="rank 0 broke"):
        world.run([0, 1], fn)
    assert "rank 0 raised ValueError: rank 0 broke" in outcome["rank 1"]
    world.shutdown()


# ---- concurrent stages ----------------------------------------------------------------------------
def test_stages_run_at_the_same_time():
    # stage 0's forward of micro-batch 1 and stage 1's forward of micro-batch 0 share slot 1:
    # they meet at a barrier, which one controller running one action after another never passes
    met = threading.Barrier(2, timeout=60.0)
    calls = [0, 0]

    def stage(k, fn):
        def call(x):
            calls[k] += 1
            if calls[k] == (2 if k == 0 else 1):
                met.wait()
            return fn(x)
        return call
    pipe = tw.distribute.pipeline([(stage(0, tw.nn.relu), P0), (stage(1, tw.negative), P1)], micro_batches=4)
    out = pipe(X)
    np.testing.assert_array_equal(out.numpy(), -np.maximum(X, 0))
    assert out.placement == P1


def test_a_failing_stage_raises_its_own_error_and_the_pipeline_still_runs():
    calls = [0]

    def bad(x):
        calls[0] += 1
        if calls[0] == 2:
            raise ValueError("stage 1 broke on its second micro-batch")
        return tw.negative(x)
    pipe = tw.distribute.pipeline([(tw.nn.relu, P0), (bad, P1)], micro_batches=4, loss=_mse)
    with pytest.raises(ValueError, match="stage 1 broke on its second micro-batch"):
        pipe.forward_backward(X, Y[:, :1].repeat(6, axis=1))
    calls[0] = -100
    np.testing.assert_array_equal(pipe(X).numpy(), -np.maximum(X, 0))


@pytest.mark.parametrize("schedule,stages", [("1f1b", 2), ("gpipe", 2), ("interleaved_1f1b", 4)])
def test_concurrent_training_equals_one_device_and_one_stage_at_a_time(schedule, stages):
    steps = 4
    want_losses, want = _one_device(steps)
    got = {}
    for concurrent in (True, False):
        layers = _layers()
        if stages == 2:
            parts = [(layers[:2], P0), (layers[2:], P1)]
        else:           # 4 stages on 2 devices: stage c on device c % 2
            parts = [(layer, (P0, P1)[c % 2]) for c, layer in enumerate(layers)]
        pipe = tw.distribute.pipeline(parts, micro_batches=4, schedule=schedule, loss=_mse, concurrent=concurrent)
        opt = tw.keras.optimizers.Adam(0.05)
        losses = [float(pipe.train_step(X, Y, opt)) for _ in range(steps)]
        np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
        variables = [v for layer in layers for v in layer.trainable_variables]
        for v, w in zip(variables, want):
            np.testing.assert_allclose(v.numpy(), w, rtol=2e-5, atol=1e-6, err_msg=v.name)
        assert pipe.held_activations == pipe.peak_activations
        got[concurrent] = (losses, [v.numpy() for v in variables])
    assert got[True][0] == got[False][0]                 # the same bits whichever thread ran first
    for a, b in zip(got[True][1], got[False][1]):
        np.testing.assert_array_equal(a, b)


# ---- interleaved 1F1B -----------------------------------------------------------------------------
def test_interleaved_schedule_respects_dependencies_and_its_bubble_formula():
    for p in range(1, 5):
        for v in range(1, 4):
            for m in range(p, 3 * p + 1, p):
                sched = make_schedule(p, m, "interleaved_1f1b", virtual_stages=v)
                when = {(a.stage, a.micro_batch, a.kind): a.time for a in sched}
                assert len(when) == len(sched) == 2 * p * v * m
                assert all(a.device == a.stage % p for a in sched)
                assert len({(a.device, a.time) for a in sched}) == len(sched)     # one action per device per slot
                for (s, mb, kind), t in when.items():
                    if kind == "F" and s:
                        assert t > when[(s - 1, mb, "F")]
                    if kind == "B":
                        assert t > when[(s, mb, "F")]
                        if s + 1 < p * v:
                            assert t > when[(s + 1, mb, "B")]
                assert 1 + max(when.values()) == 2 * (v * m + p - 1)
                assert bubble_fraction(sched) == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)
    # v-fold smaller than 1F1B's (p - 1) / (m + p - 1) for the same work
    assert bubble_fraction(make_schedule(4, 8, "interleaved_1f1b", virtual_stages=2)) == pytest.approx(3 / 19)
    assert bubble_fraction(make_schedule(4, 8, "1f1b")) == pytest.approx(3 / 11)


def test_interleaved_orders_follow_megatron():
    orders = interleaved_orders(2, 4, 2)
    # device 0 warms up with 2 (p - 1) + (v - 1) p = 4 forwards: chunk 0 on micro-batches 0, 1, then chunk 1
    assert orders[0][:4] == [(0, 0, "F"), (0, 1, "F"), (2, 0, "F"), (2, 1, "F")]
    assert orders[0][4:6] == [(0, 2, "F"), (2, 0, "B")]          # steady state: backwards start at the last chunk
    assert orders[1][:2] == [(1, 0, "F"), (1, 1, "F")]
    assert [len(o) for o in orders] == [16, 16]
    assert peak_activations(make_schedule(2, 4, "interleaved_1f1b", virtual_stages=2)) == [4, 3, 2, 1]


def test_interleaved_bad_input_errors():
    for p, m, v in ((0, 4, 2), (2, 0, 2), (2, 4, 0)):
        with pytest.raises(ValueError, match=rf"at least one device, micro-batch and virtual stage, got {p}, {m} "
                                             rf"and {v}"):
            interleaved_orders(p, m, v)
    with pytest.raises(ValueError, match=r"micro_batches must be a multiple of 2, got 3"):
        make_schedule(2, 3, "interleaved_1f1b", virtual_stages=2)
    with pytest.raises(ValueError, match=r"virtual_stages=2 needs schedule='interleaved_1f1b', got '1f1b'"):
        make_schedule(2, 4, "1f1b", virtual_stages=2)
    with pytest.raises(ValueError, match=r"stage c on the placement of stage c % p \(p = 2 placements.*"
                                         r"got 3 stages on \[\[0, 1\], \[2, 3\], \[0, 1\]\]"):
        tw.distribute.pipeline([(tw.nn.relu, P0), (tw.nn.relu, P1), (tw.nn.relu, P0)], micro_batches=2,
                               schedule="interleaved_1f1b")
    with pytest.raises(ValueError, match=r"got 4 stages on \[\[0, 1\], \[2, 3\], \[2, 3\], \[0, 1\]\]"):
        tw.distribute.pipeline([(tw.nn.relu, P0), (tw.nn.relu, P1), (tw.nn.relu, P1), (tw.nn.relu, P0)],
                               micro_batches=2, schedule="interleaved_1f1b")
    pipe = tw.distribute.pipeline([(tw.nn.relu, P0), (tw.negative, P1), (tw.abs, P0), (lambda h: h * 2.0, P1)],
                                  micro_batches=2, schedule="interleaved_1f1b")
    assert pipe.virtual_stages == 2 and pipe.bubble_fraction == pytest.approx(1 / 5)
    assert pipe.format_schedule().splitlines()[0].startswith("device 0: F0.0 F1.0 F0.2 F1.2")
    np.testing.assert_array_equal(pipe(X).numpy(), 2 * np.maximum(X, 0))


# ---- the bubble as it happened (tp19) ------------------------------------------------------------------
def test_measured_idle_fraction_counts_each_device_s_busy_seconds_without_its_hand_off_waits(monkeypatch):
    import importlib
    import types
    pipeline_module = importlib.import_module("tensorweave.distribute.pipeline")
    clock = [100.0]
    monkeypatch.setattr(pipeline_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def costs(ticks, fn):
        def stage(h):
            clock[0] += ticks            # the stage's compute time on the fake clock
            return fn(h)
        return stage
    pipe = tw.distribute.pipeline([(costs(1.0, tw.nn.relu), P0), (costs(3.0, tw.negative), P1)], micro_batches=3,
                                  concurrent=False)
    assert pipe.measured_idle_fraction is None
    np.testing.assert_array_equal(pipe(X).numpy(), -np.maximum(X, 0))
    # one after the other: 12 ticks, stage 0 busy 3 and stage 1 busy 9 of them -> 1 - 12 / (2 x 12)
    assert pipe.last_step == {"seconds": 12.0, "busy_s": [3.0, 9.0], "measured_idle_fraction": 0.5}
    assert pipe.measured_idle_fraction == 0.5
    real_take = pipeline_module._Step.take

    def slow_take(self, key):        # each activation arrives 2 ticks late: waiting, not busy
        if key[2] == "F":
            clock[0] += 2.0
            self._local.waited = self.waited() + 2.0
        return real_take(self, key)
    monkeypatch.setattr(pipeline_module._Step, "take", slow_take)
    pipe(X)
    assert pipe.last_step == {"seconds": 18.0, "busy_s": [3.0, 9.0], "measured_idle_fraction": 1 - 12 / 36}
    monkeypatch.setattr(pipeline_module._Step, "take", real_take)
    step = pipeline_module._Step(1)
    step.put("k", 1)
    ticks = iter([5.0, 7.5])
    monkeypatch.setattr(pipeline_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    assert step.take("k") == 1 and step.waited() == 2.5          # a hand-off's wait: not busy
    assert pipeline_module.idle_fraction([1.0, 1.0], 0.0) == 0.0 and pipeline_module.idle_fraction([3.0], 2.0) == 0.0


def test_interleaved_training_reports_the_schedule_s_bubble_and_the_measured_one():
    layers = _layers()
    stages = [(layers[c], (P0, P1)[c % 2]) for c in range(4)]
    pipe = tw.distribute.pipeline(stages, micro_batches=4, schedule="interleaved_1f1b", loss="mse")
    pipe.forward_backward(X, Y)
    last = pipe.last_step
    assert pipe.bubble_fraction == pytest.approx(1 / 9) and len(last["busy_s"]) == 2
    # what is reported, not how long it took (no timing in tests; the scripted-clock test above pins the figures)
    assert set(last) == {"seconds", "busy_s", "measured_idle_fraction"}
    from tensorweave.distribute.pipeline import idle_fraction
    assert last["measured_idle_fraction"] == idle_fraction(last["busy_s"], last["seconds"])


# ---- draws in stages on in-process ranks (tp19) -----------------------------------------------------------
class DrawingDense(tw.Module):
    """A layer, then a seeded dropout and Gaussian noise under the global seed only (rule 2)."""

    def __init__(self, w, seed):
        super().__init__()
        self.w, self.seed = tw.Variable(w), seed

    def __call__(self, h):
        h = tw.nn.dropout(tw.matmul(h, self.w), 0.3, seed=self.seed)
        return h + tw.random.normal(tw.shape(h), stddev=0.1)


@pytest.mark.parametrize("schedule,chunks", [("1f1b", 2), ("gpipe", 2), ("interleaved_1f1b", 4)])
def test_draws_in_stages_equal_the_unpipelined_one_device_run(schedule, chunks):
    # each micro-batch gets its rows of one device's whole-batch draw (a tensor-parallel stage
    # among them), the streams and the rule-2 counter go on as one device's: a draw after agrees
    weights = [w for w, _ in WEIGHTS[:chunks]]
    targets = np.linspace(-1, 1, 12 * SIZES[chunks], dtype=np.float32).reshape(12, SIZES[chunks])

    def layers():
        return [DrawingDense(w, seed=3 + i) for i, w in enumerate(weights)]
    tw.random.set_seed(9)
    ref, want = layers(), []
    for _ in range(2):
        with tw.GradientTape() as tape:
            h = tw.constant(X)
            for layer in ref:
                h = layer(h)
            loss = tw.reduce_mean(tw.square(targets - h))
        want.append([float(loss)] + [g.numpy() for g in tape.gradient(loss, [layer.w for layer in ref])])
    after = tw.random.uniform([3]).numpy()
    tw.random.set_seed(9)
    chunk_layers = layers()
    chunk_layers[1].to_global(P1, lambda v: tw.sbp.split(1))        # stage 1 tensor-parallel
    pipe = tw.distribute.pipeline([(layer, (P0, P1)[i % 2]) for i, layer in enumerate(chunk_layers)],
                                  micro_batches=4 if chunks == 4 else 3, schedule=schedule,
                                  loss=lambda y, p: tw.reduce_mean(tw.square(y - p)))
    for step_want in want:
        loss, grads, _ = pipe.forward_backward(X, targets)
        np.testing.assert_allclose(float(loss), step_want[0], rtol=2e-5)
        for g, w in zip(grads, step_want[1:]):
            np.testing.assert_allclose(g.numpy(), w, rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(tw.random.uniform([3]).numpy(), after)
    tw.random.set_seed(None)
