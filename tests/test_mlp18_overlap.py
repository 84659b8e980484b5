"""Two products side by side in a sequential plan (runtime/overlap.py, the executor's generated
runner, ``gemm.blocks_here``): which products start early and where they are collected; a
started product runs on the helper thread and the calling thread's work stays on it meanwhile;
failures are reported by the failing node and leave the thread as it was; the Keras mlp step
overlaps its dX2/dW2 pair with the bits it has without overlap."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.core.context import current_runtime
from tensorweave.kernels.cpu import gemm, tiles
from tensorweave.runtime import executor, overlap
from tensorweave.runtime.plan_spec import NodeSpec

keras = tw.keras
MM = "MatMul"


# ---- the schedule ------------------------------------------------------------------------------
def test_an_independent_product_starts_at_the_earlier_ones_place_and_is_collected_at_its_reader():
    # dX = dz @ W^T (1) and dW = x^T @ dz (2) of one gradient (0); a ReLU gradient of dX (3), the update (4)
    steps = [("Mul", (), False), (MM, (0,), True), (MM, (0,), True), ("Relu", (1,), False), ("AddN", (2, 3), False)]
    assert overlap.schedule_of(steps) == [(2, 1, 4)]


def test_a_product_that_reads_the_other_one_is_not_started_early():
    assert overlap.schedule_of([(MM, (), True), (MM, (0,), True), ("AddN", (1,), False)]) == []


def test_nothing_without_an_earlier_heavy_product_to_overlap_with():
    assert overlap.schedule_of([("Relu", (), True), (MM, (), True), ("AddN", (1,), False)]) == []
    assert overlap.schedule_of([(MM, (), False), (MM, (), True), ("AddN", (0, 1), False)]) == []


def test_only_products_start_early_and_only_heavy_ones():
    assert overlap.schedule_of([(MM, (), True), ("Conv2D", (), True), ("AddN", (0, 1), False)]) == []
    assert overlap.schedule_of([(MM, (), True), (MM, (), False), ("AddN", (0, 1), False)]) == []


def test_collected_before_a_stateful_step_or_a_heavy_op_of_another_kind():
    base = [(MM, (), True), (MM, (), True), ("Relu", (0,), False)]
    assert overlap.schedule_of(base + [("Assign", (2,), False, True), ("AddN", (1,), False)]) == [(1, 0, 3)]
    assert overlap.schedule_of(base + [("Conv2D", (2,), True), ("AddN", (1,), False)]) == [(1, 0, 3)]
    # a ReLU gradient (heavy but light work, its tiles stay on the thread) does not collect it
    assert overlap.schedule_of(base + [("FusedReluGradBiasAddGrad", (2,), True), ("AddN", (1,), False)]) \
        == [(1, 0, 4)]


def test_not_started_across_a_stateful_step_and_never_two_at_once():
    assert overlap.schedule_of([(MM, (), True), ("Assign", (), False, True), (MM, (), True),
                                ("AddN", (0, 2), False)]) == []
    four = [(MM, (), True), (MM, (), True), (MM, (), True), (MM, (), True), ("AddN", (0, 1, 2, 3), False)]
    # the second pair's launch collects the first: one out at a time, the helper busy through both
    assert overlap.schedule_of(four) == [(1, 0, 2), (3, 2, 4)]
    pairs = [(MM, (), True), (MM, (), True), ("AddN", (0, 1), False), (MM, (2,), True), (MM, (2,), True),
             ("AddN", (3, 4), False)]
    assert overlap.schedule_of(pairs) == [(1, 0, 2), (4, 3, 5)]


def test_a_fetched_product_nobody_reads_is_collected_before_the_plan_returns():
    assert overlap.schedule_of([(MM, (), True), (MM, (), True)]) == [(1, 0, 2)]


# ---- the generated runner ----------------------------------------------------------------------
class _Seen:
    """Where each step ran; with ``wait``, the partner step ``p`` waits until ``q`` has started (so
    ``q`` is on the helper by its join, not taken back: no race on a fast machine)."""
    def __init__(self, wait=False):
        self.runs, self.wait, self.q_started = {}, wait, threading.Event()

    def step(self, name, fn):
        def run(*args):
            if name == "q":
                self.q_started.set()
            elif name == "p" and self.wait:
                assert self.q_started.wait(60)
            self.runs[name] = (threading.current_thread() is threading.main_thread(), gemm.inside_blocks_here(),
                               gemm.split_parts())
            return fn(*args)
        return run


def _plan(seen, fail=None):
    """x -> [p = x+1 (partner MatMul), q = 2x (started early), r = p*10 (light)] -> r + q."""
    def maybe(name, fn):
        def run(*args):
            if name == fail:
                raise ValueError(f"{name} failed")
            return fn(*args)
        return seen.step(name, run)
    specs = [("p", MM, (0,), 1, True, lambda x: x + 1), ("q", MM, (0,), 2, True, lambda x: 2 * x),
             ("r", "Mul", (1,), 3, False, lambda p: p * 10), ("s", "AddV2", (3, 2), 4, False, lambda r, q: r + q)]
    steps = [executor.Step(maybe(name, fn), ins, out, True, None, "/cpu:0",
                           NodeSpec(name, op, "/cpu:0", {}, ins, out, True, heavy=heavy))
             for name, op, ins, out, heavy, fn in specs]
    frees = [(), (0,), (1,), (2, 3)]
    plan = executor.Plan(steps, 5, [0], [4], frees, [(), (), (0,), (1, 2)], False, 0)
    plan.initial = [None] * 5
    plan.runtime = current_runtime()
    plan.label = "test"
    return plan


@pytest.fixture
def two_parts(monkeypatch):
    real = gemm.split_parts
    monkeypatch.setattr(gemm, "split_parts", lambda: real() if gemm.inside_blocks_here() else 2)


def test_the_early_product_runs_on_the_helper_while_the_callers_work_stays_on_its_thread(two_parts):
    seen = _Seen(wait=True)
    plan = _plan(seen)
    assert executor.run_plan(plan, [np.float64(3)]) == [46.0]
    assert plan.runner.overlap == [(1, (0, 3))]
    assert seen.runs["q"] == (False, True, 2)           # on a helper, its blocks there, cut in two
    assert seen.runs["p"] == (True, True, 2)            # the caller meanwhile: its blocks on it
    assert seen.runs["r"][:2] == (True, True)
    assert seen.runs["s"][:2] == (True, False)          # collected: the caller's setting back
    assert not gemm.inside_blocks_here()


def test_off_or_on_one_part_the_product_runs_at_once_on_the_calling_thread(monkeypatch, two_parts):
    monkeypatch.setitem(overlap.ENABLED, "on", False)
    seen = _Seen()
    assert executor.run_plan(_plan(seen), [np.float64(3)]) == [46.0]
    assert seen.runs["q"][:2] == (True, False) and seen.runs["p"][:2] == (True, False)
    monkeypatch.setitem(overlap.ENABLED, "on", True)
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    seen = _Seen()
    assert executor.run_plan(_plan(seen), [np.float64(3)]) == [46.0]
    assert seen.runs["q"][:2] == (True, False) and seen.runs["p"][:2] == (True, False)


def test_a_product_the_helper_has_not_started_is_taken_back_and_computed_here(two_parts):
    pool = current_runtime().intra_op_pool()
    release, busy = threading.Event(), []
    for _ in range(pool._max_workers):                  # every helper held by other work
        busy.append(pool.submit(release.wait))
    try:
        seen = _Seen()
        assert executor.run_plan(_plan(seen), [np.float64(3)]) == [46.0]
        assert seen.runs["q"][:2] == (True, False)      # here, after the caller's setting was put back
        assert not gemm.inside_blocks_here()
        seen = _Seen()
        with pytest.raises(errors.InvalidArgumentError, match="r failed"):
            executor.run_plan(_plan(seen, fail="r"), [np.float64(3)])
        assert "q" not in seen.runs and not gemm.inside_blocks_here()     # taken back, never run
    finally:
        release.set()
    for b in busy:
        b.result()


@pytest.mark.parametrize("fail", ["q", "r", "p"])
def test_a_failure_names_its_node_and_leaves_the_thread_as_it_was(two_parts, fail):
    seen = _Seen()
    with pytest.raises(errors.InvalidArgumentError, match=f"(?s){fail} failed.*node {fail} "):
        executor.run_plan(_plan(seen, fail=fail), [np.float64(3)])
    assert not gemm.inside_blocks_here()
    seen = _Seen()
    assert executor.run_plan(_plan(seen), [np.float64(3)]) == [46.0]      # the next run is whole


# ---- blocks_here -------------------------------------------------------------------------------
class _NoPool:
    """An intra-op pool that records what is handed to it (and runs it here)."""
    def __init__(self):
        self.submitted = []

    def submit(self, fn, *args):
        from concurrent.futures import Future
        self.submitted.append(fn)
        done = Future()
        done.set_result(fn(*args))
        return done


def test_blocks_here_cuts_as_asked_and_runs_every_task_and_tile_on_this_thread(monkeypatch):
    where = []
    pool = _NoPool()
    monkeypatch.setattr(current_runtime(), "intra_op_pool", lambda: pool)

    def task():
        where.append(threading.current_thread())
    with gemm.blocks_here(3):
        assert gemm.split_parts() == 3 and gemm.inside_blocks_here()
        with gemm.blocks_here(2):
            assert gemm.split_parts() == 2
        assert gemm.split_parts() == 3
        gemm.share_tasks([task] * 4, 2)
        tiles.over_tiles(8, 1, 1, lambda b0, b1, scratch: task())
    assert not gemm.inside_blocks_here()
    assert where == [threading.current_thread()] * 12 and pool.submitted == []      # nothing handed over


def test_a_new_class_is_not_timed_inside_blocks_here(monkeypatch, tmp_path):
    from tensorweave.kernels.cpu import gemm_tuning
    if not gemm._gemm:
        pytest.skip("needs MKL")
    monkeypatch.setattr(gemm, "_split_chosen", {})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(
        str(tmp_path / "t.json"), {"cpu": "x"}, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols")))
    timed = []
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda name, run: (timed.append(name), run(), 1.0)[2])
    a, b = np.ones((64, 40), np.float32), np.ones((40, 96), np.float32)
    out = np.empty((64, 96), np.float32)
    args = (a, b, out, (gemm._NO_TRANS, 40), (gemm._NO_TRANS, 96), (gemm._NO_TRANS, 96), 64, 96, 40,
            ("f", 0, 0, 7, 7, 6, 1), 2, lambda: None)
    with gemm.blocks_here(2):
        assert gemm._threaded_choice(*args) == "cols"        # the incumbent: the longer side
    assert timed == []


# ---- the Keras mlp step ------------------------------------------------------------------------
def _train(on, steps=3):
    rng = np.random.default_rng(18)
    x, y = rng.standard_normal((128, 64)).astype(np.float32), rng.integers(0, 10, (128,)).astype(np.int32)
    overlap.ENABLED["on"] = on
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(384, activation="relu"),
                                  keras.layers.Dense(384, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses = [float(model.train_on_batch(x, y)) for _ in range(steps)]
    finally:
        overlap.ENABLED["on"] = True
    plan = list(model.make_train_function()._cache.values())[-1]._plan
    return losses, [np.array(w) for w in model.get_weights()], plan


def test_the_mlp_steps_gradient_pair_overlaps_with_the_bits_it_has_without(monkeypatch, two_parts):
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)     # every product split
    started = []
    defer = overlap.defer

    def counted(fn, *args):
        got = defer(fn, *args)
        started.append(type(got) is overlap.Pending)
        return got
    monkeypatch.setattr(overlap, "defer", counted)
    off = _train(False)
    assert started and not any(started)
    started.clear()
    on = _train(True)
    assert started == [True] * 3
    (j, (launch, join)), = on[2].runner.overlap
    names = [st.node.name for st in on[2].steps]
    assert names[j] == "MatMul_3" and names[launch] == "MatMul_2"     # dW2 beside dX2
    assert on[2].steps[join].node.op == "FusedMatMulGroupApplyAdam"  # collected by the update
    assert on[0] == off[0]
    for a, b in zip(off[1], on[1]):
        np.testing.assert_array_equal(b, a)


def test_what_a_started_product_must_be_collected_before():
    def node(op, **kw):
        return NodeSpec("n", op, "/cpu:0", {}, (0,), 1, True, **kw)
    assert not overlap._barrier(node("MatMul")) and not overlap._barrier(node("ReadVariableOp"))
    assert overlap._barrier(node("AssignVariableOp"))            # may write what the product reads
    assert overlap._barrier(node("Relu", inplace=0))              # writes into an input's buffer
    assert overlap._barrier(node("PyFunc", opaque=True))          # may wait for anything
