"""The calling thread alone as a candidate of a threaded product class (``gemm._threaded_choice``,
issue 18 session 19, mlp23): timed beside MKL's threads and the splits by a scripted clock, it
runs the class as one one-thread call (the bits of that call, the first call's too) wherever it
wins; a cached choice timed without it is timed again on a quiet machine, kept on a busy one;
``matmul_then`` (the fused Adam update's product) covers every row after it."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning
from test_mlp18_split_gemm import KEY, _clock, _one_thread_whole, _operands, split  # noqa: F401 - fixture

CLS = "threads:float32:NN:8,10,10,p2"


def _library():
    """The one-thread library the (one) class timed so far took."""
    libs = set(gemm._serial_chosen.values())
    assert len(libs) == 1, libs
    return libs.pop()


def _runs(monkeypatch):
    runs = []
    real_split, real_one = gemm._run_split, gemm._run_one
    monkeypatch.setattr(gemm, "_run_split",
                        lambda axis, *args, **kw: (runs.append(("split", axis)), real_split(axis, *args, **kw)))
    monkeypatch.setattr(gemm, "_run_one", lambda *args: (runs.append("one"), real_one(*args))[1])
    return runs


@pytest.mark.parametrize("one_s,expected", [(0.5, "one"), (0.95, "cols"), (2.0, "cols")])
def test_the_calling_thread_alone_wins_the_class_only_by_the_margin(monkeypatch, rng, split, one_s, expected):
    _clock(monkeypatch, split, {"mkl": 1.0, "rows": 1.0, "cols": 1.0, "one": one_s})
    a, b = _operands(rng, 128, 784, 512, False, False)
    first = gemm.matmul(a, b)                                   # timed here
    entry = gemm.tuner().choices[CLS]
    assert entry["backend"] == expected and entry["settled"] and "one_us" in entry
    assert split.count("one") == split.count("mkl") >= gemm_tuning.MIN_CALLS
    runs = _runs(monkeypatch)
    again = gemm.matmul(a, b)
    assert runs == (["one"] if expected == "one" else [("split", expected)])
    np.testing.assert_array_equal(first, again)                 # the first call's bits are the choice's
    if expected == "one":
        np.testing.assert_array_equal(again, _one_thread_whole(a, b, _library()))
    np.testing.assert_allclose(again, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("quiet", [True, False])
def test_a_cached_choice_timed_without_it_is_timed_again_when_quiet(monkeypatch, rng, split, quiet):
    t = gemm.tuner()
    t.choices[CLS] = {"backend": "mkl", "settled": True, "mkl_us": 900.0, "rows_us": 1200.0, "cols_us": 1300.0}
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
    _clock(monkeypatch, split, {"mkl": 1.0, "rows": 1.0, "cols": 1.0, "one": 0.5})
    runs = _runs(monkeypatch)
    a, b = _operands(rng, 128, 784, 512, False, False)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    if quiet:
        assert t.choices[CLS]["backend"] == "one" and "one_us" in t.choices[CLS] and runs[-1] == "one"
    else:                           # a busy machine times nothing: the old choice stands, untouched
        assert t.choices[CLS]["backend"] == "mkl" and "one_us" not in t.choices[CLS]
        assert not split and "one" not in runs


def test_a_cached_choice_with_the_candidate_is_not_timed_again(monkeypatch, rng, split):
    gemm.tuner().choices[CLS] = {"backend": "one", "settled": True, "one_us": 500.0, "mkl_us": 900.0}
    _clock(monkeypatch, split, {})
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)
    runs = _runs(monkeypatch)
    a, b = _operands(rng, 128, 784, 512, False, False)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert runs == ["one"] and not {"mkl", "rows", "cols", "one"} & set(split)     # (its one-thread library timed)


def test_the_fused_updates_product_on_one_thread_covers_every_row(monkeypatch, rng, split):
    gemm.tuner().choices["threads:float32:TN:10,10,8,p2"] = {"backend": "one", "settled": True, "one_us": 1.0}
    a, b = _operands(rng, 784, 128, 512, True, False)           # dW1 = xᵀ @ dz
    seen, extra = [], []
    out = gemm.matmul_then(a, b, lambda out, i, j: seen.append((i, j)), [lambda: extra.append(1)])
    rows = sorted(r for i, j in seen for r in range(i, j))
    assert rows == list(range(784)) and extra == [1]
    np.testing.assert_array_equal(out, _one_thread_whole(a, b, _library()))
