"""The sparse SGD (with and without momentum), Adagrad and RMSprop row updates ask for their tables' rows
ahead (``prefetch.ahead``, issue 18 session 25 rows29): a hint reads nothing, so every update keeps the
bits of its rule applied row by row in NumPy (every row count around the look-ahead, repeated rows,
NaN and infinite slots), and the hints are in the compiled code."""
import re

import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, prefetch, training_kernels as tk

RNG = np.random.default_rng(29)
F = np.float32
LR, RHO, MOM, EPS = F(1e-2), F(0.9), F(0.8), F(1e-7)


def _tables(n, cols, rows=64):
    """``n`` table copies of ``rows`` x ``cols`` float32 (positive: slots), a few NaN and inf entries."""
    tables = [np.abs(RNG.standard_normal((rows, cols))).astype(F) for _ in range(n)]
    tables[-1][::7, 0] = np.nan
    tables[0][3::11, -1] = np.inf
    return tables


def _idx(rows, repeated):
    idx = np.sort(RNG.choice(64, rows, replace=False)).astype(np.int32)
    return np.sort(np.concatenate([idx, idx[::3]])) if repeated and rows else idx


def _reference(rule, tables, idx, g):
    """``rule(row views..., gradient row)`` in NumPy, row after row in ``idx``'s order."""
    with np.errstate(all="ignore"):
        for r, i in enumerate(idx):
            rule(*(t[i] for t in tables), g[r])


def _sgd(w, g):
    w[:] = w - g * LR


def _momentum(nesterov):
    def rule(w, m, g):
        mi = m * MOM - g * LR
        m[:] = mi
        w[:] = w + ((mi * MOM - g * LR) if nesterov else mi)
    return rule


def _adagrad(w, acc, g):
    a = acc + g * g
    acc[:] = a
    w[:] = w - (LR * g) / np.sqrt(a + EPS)


def _rmsprop(use_momentum, centered):
    def rule(w, v, mom, avg, g):
        vi = RHO * v + (F(1) - RHO) * (g * g)
        v[:] = vi
        if centered:
            ai = RHO * avg + (F(1) - RHO) * g
            avg[:] = ai
            den = vi - ai * ai + EPS
        else:
            den = vi + EPS
        inc = (LR * g) / np.sqrt(den)
        if use_momentum:
            mi = MOM * mom + inc
            mom[:] = mi
            w[:] = w - mi
        else:
            w[:] = w - inc
    return rule


CASES = {
    "sgd": (tk._sgd_rows, 1, _sgd, ()),
    "momentum": (tk._momentum_rows, 2, _momentum(False), (MOM, False)),
    "nesterov": (tk._momentum_rows, 2, _momentum(True), (MOM, True)),
    "adagrad": (tk._adagrad_rows, 2, _adagrad, (EPS,)),
    "rmsprop": (tk._rmsprop_rows, 4, _rmsprop(False, False), (RHO, F(1) - RHO, F(0), EPS, False, False)),
    "rmsprop momentum centered": (tk._rmsprop_rows, 4, _rmsprop(True, True), (RHO, F(1) - RHO, MOM, EPS, True, True)),
    "rmsprop centered": (tk._rmsprop_rows, 4, _rmsprop(False, True), (RHO, F(1) - RHO, MOM, EPS, False, True)),
}


def _call(name, tables, idx, g):
    loop, _, _, extra = CASES[name]
    args = (*tables, idx, g, LR, *extra)
    jit.compile_now(loop, *args)(*args)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("rows", [0, 1, prefetch.AHEAD, prefetch.AHEAD + 1, 40])
@pytest.mark.parametrize("cols", [1, 17, 50])
@pytest.mark.parametrize("repeated", [False, True])
def test_row_updates_give_their_rules_bits(name, rows, cols, repeated):
    loop, n, rule, _ = CASES[name]
    tables, idx = _tables(n, cols), _idx(rows, repeated)
    g = RNG.standard_normal((len(idx), cols)).astype(F)
    got, want = [t.copy() for t in tables], [t.copy() for t in tables]
    _call(name, got, idx, g)
    _reference(rule, want, idx, g)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    untouched = np.setdiff1d(np.arange(64), idx)
    for a, t in zip(got, tables):
        assert a[untouched].tobytes() == t[untouched].tobytes()


def test_an_update_with_rows_of_two_types_of_ids_and_float64():
    tables = [t.astype(np.float64) for t in _tables(2, 9)]
    idx = np.arange(0, 64, 5, dtype=np.int64)
    g = RNG.standard_normal((len(idx), 9))
    got, want = [t.copy() for t in tables], [t.copy() for t in tables]
    args = (*got, idx, g, np.float64(LR), np.float64(EPS))
    jit.compile_now(tk._adagrad_rows, *args)(*args)
    with np.errstate(all="ignore"):
        for r, i in enumerate(idx):
            a = want[1][i] + g[r] * g[r]
            want[1][i] = a
            want[0][i] = want[0][i] - (np.float64(LR) * g[r]) / np.sqrt(a + np.float64(EPS))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


def test_ahead_hints_the_row_the_look_ahead_names_in_every_table_and_reads_no_index_past_the_end(monkeypatch):
    hinted = []
    monkeypatch.setattr(prefetch, "row", lambda table, k: hinted.append((id(table), int(k))))
    tables = (np.zeros((8, 3), F), np.ones((8, 3), F))
    idx = np.array([6, 1, 7, 0, 5, 2, 3], np.int32)
    for r in range(len(idx) + 2):                       # (Python's indexing raises past the end)
        hinted.clear()
        prefetch.ahead.py_func(tables, idx, r)
        k = r + prefetch.AHEAD
        assert hinted == ([(id(t), int(idx[k])) for t in tables] if k < len(idx) else [])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_row_loop_hints_every_table_it_updates(name, monkeypatch):
    loop, n, _, extra = CASES[name]
    tables, idx = _tables(n, 5), _idx(prefetch.AHEAD + 3, False)
    asked = []
    monkeypatch.setattr(prefetch, "ahead", lambda ts, i, r: asked.append((tuple(map(id, ts)), r)))
    loop.py_func(*tables, idx, np.ones((len(idx), 5), F), LR, *extra)
    assert asked == [(tuple(map(id, tables)), r) for r in range(len(idx))]


@pytest.mark.parametrize("name", ["sgd", "adagrad", "rmsprop momentum centered"])
def test_the_hints_are_in_the_compiled_row_loops(name):
    loop, n, _, extra = CASES[name]
    tables, idx = _tables(n, 8), _idx(8, False)
    args = (*tables, idx, np.ones((8, 8), F), LR, *extra)
    signature = tuple(loop.typeof_pyval(a) for a in args)
    loop.compile(signature)
    # one prefetch per table (a loop over each row's cache lines), for writing, kept in every level
    assert len(re.findall(r"call void @llvm\.prefetch\.p0\(ptr [^,]+, i32 1, i32 3, i32 1\)",
                          loop.inspect_llvm(signature))) >= n
