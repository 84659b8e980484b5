"""The sparse row loops asking for rows ahead (``kernels/cpu/prefetch.py``, issue 18 session 24): the
hints change no bit (NumPy references of sparse Adam and of the duplicate-row sums, every row count
around the look-ahead, AMSGrad on and off), they are in the compiled code, and ``UniqueSegmentSum``
marks ids (rather than sorting them) up to its wider bound."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, prefetch, training_kernels as tk
from tensorweave.keras.optimizers import sparse_ops

RNG = np.random.default_rng(28)
COEFFS = (np.float32(1e-3), np.float32(0.1), np.float32(0.001), np.float32(1e-7))


def _adam_reference(w, m, v, vh, idx, g, amsgrad):
    """Adam on the rows, in NumPy, in the kernel's operation order (module docstring of training_kernels)."""
    alpha, c1, c2, eps = COEFFS
    for r, i in enumerate(idx):
        mi = m[i] + (g[r] - m[i]) * c1
        vi = v[i] + (g[r] * g[r] - v[i]) * c2
        m[i], v[i] = mi, vi
        if amsgrad:
            vi = np.where((vh[i] > vi) | np.isnan(vh[i]), vh[i], vi)
            vh[i] = vi
        w[i] = w[i] - (mi * alpha) / (np.sqrt(vi) + eps)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("rows", [0, 1, prefetch.AHEAD, prefetch.AHEAD + 1, 40])
@pytest.mark.parametrize("cols", [1, 17, 50])
def test_adam_rows_give_numpys_bits(rows, cols, amsgrad):
    tables = [np.abs(RNG.standard_normal((64, cols))).astype(np.float32) for _ in range(4)]
    tables[3][::5] = np.nan                                 # AMSGrad's max keeps a NaN
    idx = np.sort(RNG.choice(64, rows, replace=False)).astype(np.int32)
    g = RNG.standard_normal((rows, cols)).astype(np.float32)
    got, want = [t.copy() for t in tables], [t.copy() for t in tables]
    kernel = jit.compile_now(tk._adam_rows, *got, idx, g, *COEFFS, amsgrad)
    kernel(*got, idx, g, *COEFFS, amsgrad)
    with np.errstate(invalid="ignore"):
        _adam_reference(*want, idx, g, amsgrad)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("n", [1, prefetch.AHEAD, prefetch.AHEAD + 1, 300])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_segment_sums_give_add_at_bits(n, dtype):
    inverse = RNG.integers(0, 9, n).astype(dtype)
    values = RNG.standard_normal((n, 13)).astype(np.float32)
    got, want = np.zeros((9, 13), np.float32), np.zeros((9, 13), np.float32)
    jit.compile_now(sparse_ops._segment_sum_rows, got, inverse, values)(got, inverse, values)
    np.add.at(want, inverse, values)
    assert got.tobytes() == want.tobytes()


def test_a_row_of_a_strided_table_is_hinted_without_touching_it():
    @jit.njit
    def hint_all(table):
        for i in range(-2, table.shape[0] + 3):          # rows outside the table too: a hint cannot fault
            prefetch.row(table, i)
    table = np.arange(40.0).reshape(8, 5)[::2]
    before = table.copy()
    hint_all(table)
    assert table.tobytes() == before.tobytes()


@pytest.mark.parametrize("kernel,args", [
    (tk._adam_rows, (np.zeros((8, 4), np.float32),) * 4 + (np.zeros(3, np.int32), np.zeros((3, 4), np.float32))
     + COEFFS + (False,)),
    (sparse_ops._segment_sum_rows, (np.zeros((8, 4), np.float32), np.zeros(3, np.int64), np.zeros((3, 4), np.float32))),
])
def test_the_compiled_loops_carry_the_hints(kernel, args):
    jit.compile_now(kernel, *args)
    signature = tuple(kernel.typeof_pyval(a) for a in args)
    # (which tables are hinted only a timing shows: the hints change no value)
    assert "llvm.prefetch" in kernel.inspect_llvm(signature)


def test_the_marks_stay_within_8_mib_beyond_four_per_id():
    for n in (10 ** 5, 10 ** 6 // 4):
        assert (sparse_ops._mark_bound(n) - 4096) * 8 <= 8 << 20


@pytest.mark.parametrize("n,top,marked", [
    (2560, 19999, True),                     # the gru's and lstm's batch of ids: marked (was sorted)
    (10 ** 6, 4 * 10 ** 6 + 4095, True),     # four per id stays allowed past the cap
    (10 ** 5, sparse_ops.MARK_SPAN + 4095, True), (10 ** 5, sparse_ops.MARK_SPAN + 4096, False),
])
def test_wider_bound_marks_the_rnn_batches_and_is_capped(n, top, marked, monkeypatch):
    assert (top < sparse_ops._mark_bound(n)) == marked
    ids = RNG.integers(0, top + 1, n).astype(np.int64)
    ids[0] = top
    calls = []
    real = sparse_ops._unique_by_marking
    monkeypatch.setattr(sparse_ops, "_unique_by_marking", lambda *a: (calls.append(1), real(*a))[1])
    uniq, inverse = sparse_ops._unique(ids)
    assert bool(calls) == marked
    want, want_inverse = np.unique(ids, return_inverse=True)
    np.testing.assert_array_equal(uniq, want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
