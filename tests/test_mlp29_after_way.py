"""The fused grouped Adam update's epilogue, where its product is not split by rows: shared with the
helper threads after the product, or run on the calling thread, by the class's timing
(``gemm.after_way``, issue 18 mlp29). Either way the variables end bit for bit as the stock kernel
and a NumPy reference leave them; the timing runs on copies, never on the variables; the choice is
kept per class and made only where it may be timed."""
import numpy as np
import pytest

import tensorweave as tw
from scripted_tuner import ScriptedTuner
from tensorweave.kernels.cpu import fused_kernels, gemm, gemm_tuning, training_kernels
from test_mlp18_fused_update import _train

ADAM = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
SHAPES = [(96, 160), (300, 256), (7,)]       # the product's (rows not split), a large one, a small one
LR, STEP = np.float32(0.01), np.int64(3)
needs_split = pytest.mark.skipif(not gemm._gemm_serial or gemm._openblas_threads() is None,
                                 reason="needs MKL with a per-thread setting and NumPy's OpenBLAS")


@pytest.fixture
def way(monkeypatch):
    """Products above a tiny one-thread size on two parts, none split by rows (the whole product on
    the calling thread), the ``after:`` classes scripted to pick the way asked; returns the tuner
    and the hand-offs ``(tasks, parts)`` made."""
    handoffs = []
    real_share = gemm.share_tasks

    def share(tasks, parts):
        handoffs.append((len(tasks), parts))
        return real_share(tasks, parts)

    def pick(choice, cached=None, quiet=True):
        tuner = ScriptedTuner("after:", cached=cached, pick=choice)
        monkeypatch.setitem(gemm._tuning, "tuner", tuner)
        monkeypatch.setitem(gemm._tuning, "on", False)
        monkeypatch.setitem(gemm._split, "on", True)
        monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)
        monkeypatch.setattr(gemm, "split_parts", lambda: 2)
        monkeypatch.setattr(gemm, "_threaded_choice", lambda *args: "one")
        monkeypatch.setattr(gemm, "_after_chosen", {})
        monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
        monkeypatch.setattr(gemm, "share_tasks", share)
        return tuner, handoffs
    return pick


def _group(seed=5):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    x, dz = rng.standard_normal((40, 96)).astype(np.float32), rng.standard_normal((40, 160)).astype(np.float32)
    grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES[1:]]
    slots = [(np.full(w.shape, 0.5, np.float32), np.abs(rng.standard_normal(w.shape)).astype(np.float32))
             for w in init]
    return init, slots, grads, x, dz


def _handles(init, slots):
    handles = []
    for w, (m, v) in zip(init, slots):
        handles += [tw.Variable(w), tw.Variable(m), tw.Variable(v)]
    return handles


def _fused(handles, grads, x, dz):
    fused_kernels.matmul_group_apply_adam(*handles, LR, STEP, *grads, x, dz, num_variables=len(SHAPES),
                                          index=0, transpose_a=True, transpose_b=False, **ADAM)


def _reference(w, m, v, g):
    """Adam in NumPy, operation for operation as the optimizer's rule (float32 throughout)."""
    t = np.float32
    alpha = LR * np.sqrt(t(1) - np.power(t(0.999), t(STEP))) / (t(1) - np.power(t(0.9), t(STEP)))
    m = m + (g - m) * t(1 - 0.9)
    v = v + (g * g - v) * t(1 - 0.999)
    return w - (m * alpha) / (np.sqrt(v) + t(1e-7)), m, v


def _values(handles):
    return [np.array(h.numpy()) for h in handles]


@needs_split
@pytest.mark.parametrize("choice", ["caller", "shared"])
def test_either_way_the_variables_end_as_the_stock_kernel_and_numpy_leave_them(way, choice):
    tuner, handoffs = way(choice)
    init, slots, grads, x, dz = _group()
    handles = _handles(init, slots)
    _fused(handles, grads, x, dz)
    got = _values(handles)
    product = gemm.matmul(x.T, dz)
    stock = _handles(init, slots)
    for i, g in enumerate([product] + grads):
        training_kernels._apply_adam(*stock[3 * i:3 * i + 3], LR, STEP, g, **ADAM)
    for a, b in zip(got, _values(stock)):
        np.testing.assert_array_equal(a, b)
    for i, g in enumerate([product] + grads):
        for a, b in zip(got[3 * i:3 * i + 3], _reference(init[i], *slots[i], g)):
            np.testing.assert_array_equal(a, b)
    assert [cls for cls, _, _ in tuner.timed] == ["after:float32:7,8,p2"]
    assert tuner.timed[0][1:] == (["caller", "shared"], "shared")
    # the epilogue's hand-off: its two row blocks, the large variable's slices, the small one's task
    tasks = 2 + -(-300 * 256 // fused_kernels.ADAM_TASK) + 1
    assert handoffs[-1] == ((tasks - 1, 1) if choice == "caller" else (tasks, 2))


@needs_split
def test_the_timing_updates_copies_not_the_variables(way):
    tuner, _ = way("caller")
    init, slots, grads, x, dz = _group()
    handles = _handles(init, slots)
    _fused(handles, grads, x, dz)      # the scripted timing ran both ways on its copies once each
    assert tuner.timed
    w, m, v = _values(handles[:3])
    for a, b in zip((w, m, v), _reference(init[0], *slots[0], gemm.matmul(x.T, dz))):
        np.testing.assert_array_equal(a, b)     # one update, not three


@needs_split
def test_the_choice_is_kept_per_class_and_timed_once(way):
    tuner, handoffs = way("caller")
    for seed in (1, 2):
        init, slots, grads, x, dz = _group(seed)
        _fused(_handles(init, slots), grads, x, dz)
    assert len(tuner.timed) == 1 and handoffs[-1][1] == 1
    assert gemm._after_chosen == {("f", 7, 8, 2): "caller"}


@needs_split
@pytest.mark.parametrize("cached", ["caller", "shared"])
def test_a_cached_choice_is_taken_without_timing(way, cached):
    tuner, handoffs = way("shared" if cached == "caller" else "caller", cached=cached)
    init, slots, grads, x, dz = _group()
    _fused(_handles(init, slots), grads, x, dz)
    assert tuner.timed == [] and handoffs[-1][1] == (1 if cached == "caller" else 2)


@needs_split
def test_a_busy_machine_keeps_the_shared_way_untimed(way):
    tuner, handoffs = way("caller", quiet=False)
    init, slots, grads, x, dz = _group()
    _fused(_handles(init, slots), grads, x, dz)
    assert tuner.timed == [] and handoffs[-1][1] == 2


@needs_split
def test_untimed_without_copies_or_inside_blocks_here(way):
    tuner, _ = way("caller")
    out = np.ones((100, 70), np.float32)
    assert gemm.after_way(out, 2) == "shared"            # no scratch: not timed
    gemm._after_chosen.clear()
    made = []
    with gemm.blocks_here(2):
        assert gemm.after_way(out, 2, lambda: made.append(1)) == "shared"
    assert tuner.timed == [] and made == []


@needs_split
def test_an_unknown_cached_backend_is_the_shared_way(way):
    way("caller", cached="rows")
    assert gemm.after_way(np.ones((100, 70), np.float32), 2, lambda: None) == "shared"


def test_a_kept_choice_is_read_back_from_the_tuning_file(monkeypatch, tmp_path):
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "gemm-tuning.json"))
    monkeypatch.setitem(gemm._tuning, "tuner", None)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    gemm.tuner().record("after:float32:7,8,p2", {"caller": [1e-4] * 5, "shared": [1e-3] * 5}, "shared")
    monkeypatch.setitem(gemm._tuning, "tuner", None)          # a later process reads the file
    assert gemm.tuner().backend("after:float32:7,8,p2") == "caller"


@needs_split
@pytest.mark.parametrize("choice", ["caller", "shared"])
def test_a_keras_step_fused_either_way_ends_as_the_unfused_plan(way, choice):
    way(choice)
    off = _train(3, remapping=False)
    on = _train(3)
    assert "FusedMatMulGroupApplyAdam" in on[2]
    assert off[0] == on[0]
    for a, b in zip(off[1], on[1]):
        np.testing.assert_array_equal(b, a)


def test_eager_adam_matches_the_numpy_reference():
    init, slots, grads, _, _ = _group()
    w, g = tw.Variable(init[1]), grads[0]
    opt = tw.keras.optimizers.Adam(learning_rate=float(LR))
    for _ in range(int(STEP)):
        opt.apply([tw.constant(g)], [w])
    m, v = np.zeros_like(g), np.zeros_like(g)
    ref = init[1]
    t = np.float32
    for step in range(1, int(STEP) + 1):
        alpha = LR * np.sqrt(t(1) - np.power(t(0.999), t(step))) / (t(1) - np.power(t(0.9), t(step)))
        m = m + (g - m) * t(1 - 0.9)
        v = v + (g * g - v) * t(1 - 0.999)
        ref = ref - (m * alpha) / (np.sqrt(v) + t(1e-7))
    np.testing.assert_array_equal(w.numpy(), ref)
