"""The transformer step on both cores (issue 18 session 16, tx20): a split stack's blocks taken
from a shared counter (``einsum_matmul._split`` through ``gemm.share_tasks``: a helper that has
not started is not waited for, nothing handed over inside ``gemm.blocks_here``); the size from
which a stack is split measured per machine, repeated until two measurements agree
(``einsum_matmul.min_split_work``); Einsum products started early beside another
(``runtime/overlap.py``), a run of pairs each collected at the next one's launch; a small Keras
encoder's step overlaps its Einsum pairs with the bits it has without overlap."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.context import current_runtime
from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning
from tensorweave.runtime import executor, overlap

keras = tw.keras
RNG = np.random.default_rng(20)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _split(eq, a, b, parts=2):
    lhs, so = eq.split("->")
    sa, sb = lhs.split(",")
    return einsum_matmul._split(a, b, sa, sb, so, *einsum_matmul._plan(sa, sb, so, a.shape, b.shape)[:5], parts)


class _Pool:
    """An intra-op pool that records what it is handed and runs nothing (a helper never started)."""
    def __init__(self):
        self.submitted = []

    def submit(self, fn, *args):
        self.submitted.append(fn)


# ---- the split's blocks ------------------------------------------------------------------------
@pytest.mark.parametrize("parts", [2, 3])
def test_a_split_whose_helper_never_starts_is_computed_by_the_caller(monkeypatch, parts):
    pool = _Pool()
    monkeypatch.setattr(current_runtime(), "intra_op_pool", lambda: pool)
    k, q = RNG.standard_normal((5, 6, 2, 4)), RNG.standard_normal((5, 7, 2, 4))
    got = _split("aecd,abcd->acbe", k, q, parts)      # returns: the caller took every block
    np.testing.assert_allclose(got, np.einsum("aecd,abcd->acbe", k, q), rtol=1e-12, atol=1e-12)
    assert len(pool.submitted) == parts - 1            # offered to the helpers all the same


def test_inside_blocks_here_every_block_stays_on_this_thread(monkeypatch):
    pool = _Pool()
    monkeypatch.setattr(current_runtime(), "intra_op_pool", lambda: pool)
    w, v = RNG.standard_normal((4, 2, 6, 5)), RNG.standard_normal((4, 5, 2, 3))
    with gemm.blocks_here(2):
        got = _split("acbe,aecd->abcd", w, v)
    np.testing.assert_allclose(got, np.einsum("acbe,aecd->abcd", w, v), rtol=1e-12, atol=1e-12)
    assert pool.submitted == []


def test_blocks_run_on_the_helper_have_the_bits_of_blocks_run_here(monkeypatch):
    k, q = (RNG.standard_normal((6, 9, 2, 5)).astype(np.float32) for _ in range(2))
    shared = _split("aecd,abcd->acbe", k, q)
    monkeypatch.setattr(current_runtime(), "intra_op_pool", lambda: _Pool())
    np.testing.assert_array_equal(_split("aecd,abcd->acbe", k, q), shared)


# ---- the threshold -----------------------------------------------------------------------------
def _measurements(monkeypatch, results):
    calls = []

    def fake(runners_for, ladder, work_of):
        calls.append((ladder, work_of(2)))
        return results[len(calls) - 1]
    monkeypatch.setattr(gemm_tuning, "serial_threshold", fake)
    return calls


@pytest.mark.parametrize("results,want,count", [
    ([(1 << 20, True), (1 << 20, True)], (1 << 20, True), 2),
    ([(1 << 20, True), (1 << 22, True), (1 << 22, False)], (1 << 22, False), 3),    # agree, not settled
    ([(1 << 20, True), (1 << 22, True), (1 << 20, True)], (1 << 20, False), 3),     # never twice in a row
    ([(1 << 22, True), (1 << 20, True), (1 << 20, True)], (1 << 20, True), 3)])
def test_the_threshold_is_measured_until_two_measurements_in_a_row_agree(monkeypatch, results, want, count):
    calls = _measurements(monkeypatch, results)
    assert einsum_matmul._measure_threshold(F32) == want
    assert len(calls) == count
    assert calls[0] == (einsum_matmul.SPLIT_LADDER, einsum_matmul.LADDER_COUNT * 8)   # 8 products of side^3


def test_the_threshold_is_the_tuners_named_one_and_kept_per_dtype(monkeypatch):
    asked = []

    class Tuner:
        def threshold(self, name, measure_it, default):
            asked.append((name, default))
            return measure_it()[0]
    monkeypatch.setattr(gemm, "tuner", lambda: Tuner())
    monkeypatch.setattr(einsum_matmul, "_min_split", {})
    _measurements(monkeypatch, [(1 << 21, True)] * 4)
    assert einsum_matmul.min_split_work(np.float32) == 1 << 21
    assert einsum_matmul.min_split_work(np.float32) == 1 << 21
    assert einsum_matmul.min_split_work(np.float64) == 1 << 21
    assert asked == [("einsum-split:float32", einsum_matmul.DEFAULT_SPLIT_WORK),
                     ("einsum-split:float64", einsum_matmul.DEFAULT_SPLIT_WORK)]


def test_stacks_split_from_the_threshold_and_small_ones_measure_nothing(monkeypatch):
    monkeypatch.setattr(einsum_matmul, "_min_split", {})
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    measured, split = [], []
    monkeypatch.setattr(einsum_matmul, "min_split_work", lambda dtype: measured.append(dtype) or 9 * 64 ** 3)
    monkeypatch.setattr(einsum_matmul, "_stack", lambda *args: split.append(args[-1]))
    floor = einsum_matmul.LADDER_COUNT * einsum_matmul.SPLIT_LADDER[0] ** 3
    small = np.ones((4, 8, 8), np.float32)
    einsum_matmul.contract(small, small, "bij", "bjk", "bik")          # under the smallest rung
    assert measured == [] and split == []
    assert einsum_matmul._worth_splitting(floor - 1, F32) is False and measured == []
    assert einsum_matmul._worth_splitting(floor, F32) is False and measured == [F32]
    assert einsum_matmul._worth_splitting(9 * 64 ** 3, F32) is True
    a = np.ones((9, 64, 64), np.float32)
    einsum_matmul.contract(a, a, "bij", "bjk", "bik")                  # at the threshold: split
    assert split == [2]
    einsum_matmul.contract(a[:8], a[:8], "bij", "bjk", "bik")          # under it: one call
    assert split == [2]


def test_the_ladders_two_ways_compute_the_same_stack():
    runners = einsum_matmul._ladder_runners(F64, 2, 32)
    out_serial = runners["serial"]()
    out_split = runners["threaded"]()
    assert out_split is out_serial                      # one output, written by either way
    a, b = np.random.default_rng(32).standard_normal((2, einsum_matmul.LADDER_COUNT, 32, 32))
    np.testing.assert_allclose(out_split, a @ b, rtol=1e-12, atol=1e-12)


# ---- the schedule: a run of pairs --------------------------------------------------------------
EIN = "Einsum"


def test_a_run_of_einsum_pairs_each_collected_at_the_next_ones_launch():
    # three projections' dX (1, 3, 5) and dW (2, 4, 6) from three gradients; the updates read every dW
    steps = [("Mul", (), False), (EIN, (0,), True), (EIN, (0,), True), (EIN, (0,), True), (EIN, (0,), True),
             (EIN, (0,), True), (EIN, (0,), True), ("AddN", (1, 3, 5), False), ("Assign", (2, 4, 6), False, True)]
    assert overlap.schedule_of(steps) == [(2, 1, 3), (4, 3, 5), (6, 5, 8)]


def test_the_next_pair_never_launches_at_the_place_of_the_one_out():
    # 1 goes out at 0; 2 may only start beside 3 (1's place has nothing running), collecting 1 there
    steps = [(EIN, (), True), (EIN, (), True), (EIN, (), True), (EIN, (), True), ("AddN", (0, 1, 2, 3), False)]
    assert overlap.schedule_of(steps) == [(1, 0, 2), (3, 2, 4)]
    # a pair whose partner comes after the one out's reader: the first window is not cut
    steps = [(EIN, (), True), (EIN, (), True), ("AddN", (1,), False), (EIN, (2,), True), (EIN, (2,), True),
             ("AddN", (0, 3, 4), False)]
    assert overlap.schedule_of(steps) == [(1, 0, 2), (4, 3, 5)]


def _projections(between=None, read_after=None):
    """A gather (stateful), then Q and K projections, each reading its kernel right before it
    (the reads chained in program order), their bias adds, a sum."""
    steps = [("ResourceGather", (), False, True), ("ReadVariableOp", (0,), False), (EIN, (0, 1), True),
             ("ReadVariableOp", (1,), False), ("AddV2", (2, 3), False), ("ReadVariableOp", (3,), False),
             (EIN, (0, 5), True), ("AddN", (4, 6), False)]
    if between:
        steps[3] = between
    if read_after:
        steps[5] = read_after
    return steps


def test_the_variable_read_a_projection_waits_for_moves_to_the_launch():
    steps = _projections()
    assert overlap.schedule_of(steps) == [(6, 2, 7)]
    assert overlap.early_reads([s[1] for s in steps], 6, 2) == [5]


def test_no_read_moves_across_a_write_nor_ahead_of_what_it_waits_for():
    assert overlap.schedule_of(_projections(between=("AssignVariableOp", (1,), False, True))) == []
    assert overlap.schedule_of(_projections(read_after=("ReadVariableOp", (4,), False))) == []
    assert overlap.schedule_of(_projections(read_after=("ReadVariableOp", (2,), False))) == []   # the partner
    assert overlap.schedule_of(_projections(read_after=("Identity", (1,), False))) == []         # not a read


# ---- a Keras encoder's step --------------------------------------------------------------------
def _train(on, steps=2):
    rng = np.random.default_rng(20)
    ids, y = rng.integers(0, 50, (8, 12)).astype(np.int32), rng.integers(0, 2, (8, 1)).astype(np.float32)
    L = keras.layers
    overlap.ENABLED["on"] = on
    try:
        keras.utils.set_random_seed(0)
        x = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16)(x)
        h = L.LayerNormalization()(L.Add()([h, L.MultiHeadAttention(2, 8)(h, h)]))
        h = L.LayerNormalization()(L.Add()([h, L.Dense(16)(L.Dense(32, activation="relu")(h))]))
        model = keras.Model(x, L.Dense(1)(L.GlobalAveragePooling1D()(h)))
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.BinaryCrossentropy(from_logits=True))
        losses = [float(model.train_on_batch(ids, y)) for _ in range(steps)]
    finally:
        overlap.ENABLED["on"] = True
    plan = list(model.make_train_function()._cache.values())[-1]._plan
    return losses, [np.array(w) for w in model.get_weights()], plan


def test_an_encoders_einsum_pairs_overlap_with_the_bits_they_have_without(monkeypatch):
    real = gemm.split_parts
    monkeypatch.setattr(gemm, "split_parts", lambda: real() if gemm.inside_blocks_here() else 2)
    monkeypatch.setitem(gemm._serial_work, F32, 1)                  # every product split
    monkeypatch.setattr(einsum_matmul, "_min_split", {F32: 0})       # every stack split
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)          # (no timing: the split)
    monkeypatch.setattr(executor, "HEAVY_ELEMENTS", 1)                # small shapes count as heavy
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
    pairs = on[2].runner.overlap
    assert len(pairs) >= 4 and started == [True] * (2 * len(pairs))
    assert all(on[2].steps[j].node.op in (EIN, "FusedEinsum") for j, _ in pairs)   # (with its bias: enc22)
    assert any(overlap.early_reads(on[2].deps, j, launch) for j, (launch, _) in pairs)    # K beside Q
    assert on[0] == off[0]
    for a, b in zip(off[1], on[1]):
        np.testing.assert_array_equal(b, a)
