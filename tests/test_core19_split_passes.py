"""Large elementwise passes split by rows over the intra-op threads (kernels/cpu/split_passes.py):
the bits of NumPy's whole pass for every broadcast the kernels see, split only where large and
allowed (never inside ``gemm.blocks_here``, on one thread, or switched off), eager == graph, and
the same bits over repeated runs with splitting on and off."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm, gemm_tuning, nn_kernels, split_passes

ROWS, COLS = 64, 320            # 80 KiB of float32: above split_passes.LADDER[0]


@pytest.fixture
def forced(monkeypatch):
    """Every pass from LADDER[0] up split over two threads; the tasks handed out are counted."""
    monkeypatch.setitem(split_passes._limit, "bytes", 0)
    monkeypatch.setitem(split_passes.ENABLED, "on", True)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    shared = []
    real = gemm.share_tasks

    def counting(tasks, parts):
        shared.append((len(tasks), parts))
        return real(tasks, parts)
    monkeypatch.setattr(gemm, "share_tasks", counting)
    return shared


def _data(dtype=np.float32):
    rng = np.random.default_rng(19)
    return {name: rng.standard_normal(shape).astype(dtype) for name, shape in
            (("x", (ROWS, COLS)), ("y", (ROWS, COLS)), ("row", (COLS,)), ("one", (1, COLS)),
             ("x3", (ROWS, 5, COLS)), ("col3", (ROWS, 1, COLS)), ("s", ()))}


BROADCASTS = [("x", "y"), ("x", "row"), ("row", "x"), ("one", "x"), ("x", "one"), ("x3", "col3"),
              ("col3", "x3"), ("x", "s"), ("s", "x")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.maximum, np.minimum])
def test_a_split_pass_has_the_bits_of_numpys_whole_pass(forced, ufunc, dtype):
    d = _data(dtype)
    kernel = split_passes.binary(ufunc)
    for a, b in BROADCASTS:
        got, want = kernel(d[a], d[b]), ufunc(d[a], d[b])
        assert got.dtype == want.dtype and got.shape == want.shape, (a, b)
        assert np.array_equal(got, want), (ufunc.__name__, a, b)
    assert len(forced) == len(BROADCASTS) and all(parts == 2 and n == 4 for n, parts in forced)


def test_relu_and_bias_add_split_with_the_bits_of_the_whole_pass(forced):
    d = _data()
    assert np.array_equal(split_passes.relu(d["x3"]), np.maximum(d["x3"], 0))
    for fmt, bias in (("NHWC", d["row"]), ("NCHW", d["row"][:5])):
        want = d["x3"] + (bias if fmt == "NHWC" else bias[:, None])
        assert np.array_equal(nn_kernels._bias_add(d["x3"], bias, fmt), want), fmt
    assert len(forced) == 3


def test_rows_are_cut_into_contiguous_blocks_each_written_once():
    seen = []
    split_passes.over_rows(7, 2, lambda r0, r1: seen.append((r0, r1)))
    assert sorted(seen) == [(0, 1), (1, 3), (3, 5), (5, 7)]
    seen.clear()
    split_passes.over_rows(3, 2, lambda r0, r1: seen.append((r0, r1)))
    assert sorted(seen) == [(0, 1), (1, 2), (2, 3)]


def test_not_split_when_small_off_inside_blocks_here_on_one_thread_or_for_other_dtypes(forced, monkeypatch):
    d = _data()
    add = split_passes.binary(np.add)
    add(d["x"][:8], d["y"][:8])                                   # 10 KiB: under LADDER[0]
    add(d["x"].astype(np.int32), d["y"].astype(np.int32))          # ints: not a float pass
    add(d["x"], d["y"].astype(np.float64))                         # mixed dtypes: NumPy's promotion
    add(np.ones((1, 40000), np.float32), np.ones((1, 40000), np.float32))   # one row (156 KiB)
    with gemm.blocks_here(2):                                      # a product out on the helper
        add(d["x"], d["y"])
    monkeypatch.setitem(split_passes.ENABLED, "on", False)
    add(d["x"], d["y"])
    assert forced == []
    monkeypatch.setitem(split_passes.ENABLED, "on", True)
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)           # a rank thread, one-thread run
    add(d["x"], d["y"])
    assert forced == []
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setitem(split_passes._limit, "bytes", 1 << 40)     # measured: never worth it
    add(d["x"], d["y"])
    assert forced == []


def test_index_runs_keep_every_row_on_one_side_of_a_cut():
    rng = np.random.default_rng(11)
    for n, blocks in ((600, 4), (7, 4), (3, 4), (1, 2), (0, 2), (50, 2)):
        idx = np.sort(rng.integers(0, max(1, n // 3), n))
        cuts = split_passes.index_cuts(idx, blocks)
        assert cuts[0] == 0 and cuts[-1] == n and cuts == sorted(set(cuts)), (n, cuts)
        assert len(cuts) - 1 <= max(1, blocks)
        for c in cuts[1:-1]:
            assert idx[c - 1] != idx[c], (n, c)        # never between two updates of one row
    assert split_passes.index_cuts(np.arange(8), 4) == [0, 2, 4, 6, 8]
    assert split_passes.index_cuts(np.zeros(8, int), 4) == [0, 8]


def test_the_threshold_is_the_smallest_rung_from_which_the_split_kept_winning(monkeypatch):
    # serial_threshold's ladder walk, in bytes: the split wins from 256 KiB up
    def runners(nbytes):
        return {"serial": lambda: None, "threaded": lambda: None, "_n": nbytes}
    monkeypatch.setattr(gemm_tuning, "measure", lambda r: {"serial": [2.0], "threaded": [1.0 if r["_n"] >= 1 << 18
                                                                                              else 3.0]})
    got, settled = gemm_tuning.serial_threshold(runners, split_passes.LADDER, work_of=lambda n: n)
    assert (got, settled) == (1 << 18, True)
    monkeypatch.setattr(gemm_tuning, "measure", lambda r: {"serial": [1.0], "threaded": [2.0]})
    assert gemm_tuning.serial_threshold(runners, split_passes.LADDER, work_of=lambda n: n)[0] == 2 * (1 << 22)


def _graph_step(x, w, b):
    with tw.GradientTape() as tape:
        tape.watch(w)
        h = tw.nn.relu(tw.nn.bias_add(x * w, b))
        loss = tw.reduce_sum((h - x) * h)
    return [h, loss, tape.gradient(loss, w)]


def test_eager_equals_graph_and_repeated_runs_with_splitting_on_and_off(forced, monkeypatch):
    d = _data()
    x, w, b = tw.constant(d["x3"]), tw.constant(d["col3"]), tw.constant(d["row"])
    graph = tw.function(_graph_step)
    runs = {"eager": [], "graph": []}
    for on in (True, False, True, False):
        monkeypatch.setitem(split_passes.ENABLED, "on", on)
        runs["eager"].append([np.asarray(v) for v in _graph_step(x, w, b)])
        runs["graph"].append([np.asarray(v) for v in graph(x, w, b)])
    assert len(forced) >= 8          # the split path did run (4 runs with it on, >= 2 passes each)
    for mode, got in runs.items():   # split or not, every run of a mode has the same bits
        for run in got[1:]:
            for g, e in zip(run, got[0]):
                assert np.array_equal(g, e), mode
    eager, graph_ = runs["eager"][0], runs["graph"][0]
    h = np.maximum(d["x3"] * d["col3"] + d["row"], 0)                  # NumPy's reference
    np.testing.assert_array_equal(eager[0], h)
    np.testing.assert_array_equal(graph_[0], h)
    np.testing.assert_array_equal(graph_[2], eager[2])
    # the loss's sum: the graph's reduction order is its own (float32 rounding, split or not)
    np.testing.assert_allclose(graph_[1], eager[1], rtol=1e-6)


def test_softmax_rows_shifted_by_fmax_keep_numpys_bits_and_nan_rows():
    from tensorweave.kernels.cpu import nn_kernels
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 2, 8, 64)).astype(np.float32) * 30
    x[0, 0, 0, 3] = np.nan
    x[0, 0, 1, :] = -np.inf
    x[0, 0, 2, 5] = np.inf
    x[0, 0, 3, :] = np.nan
    x[0, 0, 4, :] = [-0.0, 0.0] * 32
    m = np.max(x, axis=-1, keepdims=True)                               # the reference: np.max's shift
    e = np.exp(x - np.where(np.isfinite(m), m, np.float32(0)))
    with np.errstate(all="ignore"):
        want = e / np.sum(e, axis=-1, keepdims=True)
        for axis in (-1, 3, 1):
            if axis == 1:
                m1 = np.max(x, axis=1, keepdims=True)
                e1 = np.exp(x - np.where(np.isfinite(m1), m1, np.float32(0)))
                ref = e1 / np.sum(e1, axis=1, keepdims=True)
            else:
                ref = want
            np.testing.assert_array_equal(nn_kernels._softmax_np(x, axis), ref)
    got = np.asarray(tw.nn.softmax(tw.constant(x)))
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0, 0]).all() and np.isnan(got[0, 0, 3]).all()


class _Slot:
    """A stand-in for a variable handle (what the update kernels read and write)."""

    def __init__(self, value):
        self.value, self.name = value, "emb"

    def _read(self):
        return self.value

    def _storage_for_update(self):
        return self.value


def _sparse_adam(indices, values, amsgrad):
    from tensorweave.kernels.cpu import training_kernels
    rng = np.random.default_rng(7)
    slots = [rng.standard_normal((400, 48)).astype(np.float32) for _ in range(3)]
    slots[2] = np.abs(slots[2])
    if amsgrad:
        slots.append(slots[2].copy())
    handles = [_Slot(s) for s in slots]
    for step in (1, 2):
        training_kernels._sparse_apply_adam(*handles, np.float32(0.01), np.int64(step), values, indices,
                                            beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=amsgrad)
    return slots


@pytest.mark.parametrize("amsgrad", [False, True])
def test_a_sparse_adam_update_split_over_row_ranges_has_the_bits_of_one_thread(forced, monkeypatch, amsgrad):
    rng = np.random.default_rng(3)
    indices = np.sort(rng.integers(0, 400, 600)).astype(np.int32)  # duplicates: updated in their order
    indices[297:303] = indices[300]                                # ... across a cut too
    values = rng.standard_normal((600, 48)).astype(np.float32)    # 112 KiB of gradient rows
    split = _sparse_adam(indices, values, amsgrad)
    assert forced == [(4, 2), (4, 2)]
    monkeypatch.setitem(split_passes.ENABLED, "on", False)
    whole = _sparse_adam(indices, values, amsgrad)
    assert forced == [(4, 2), (4, 2)]
    for a, b in zip(split, whole):
        assert np.array_equal(a, b)
    _sparse_adam(indices[::-1].copy(), values, amsgrad)                   # unsorted: one thread
    assert forced == [(4, 2), (4, 2)]
    # NumPy's reference: each occurrence of a row applied in turn (float64, so to float32 rounding)
    w, m, v = (s.astype(np.float64) for s in _sparse_adam(indices[:0], values[:0], False))
    vh = v.copy()
    for step in (1, 2):
        alpha = 0.01 * np.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
        for i, g in zip(indices, values.astype(np.float64)):
            m[i] += (g - m[i]) * 0.1
            v[i] += (g * g - v[i]) * 0.001
            vh[i] = np.maximum(vh[i], v[i])
            w[i] -= m[i] * alpha / (np.sqrt(vh[i] if amsgrad else v[i]) + 1e-7)
    np.testing.assert_allclose(split[0], w, rtol=2e-5, atol=2e-6)
