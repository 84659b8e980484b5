"""Stacks of products under the split threshold (attention's per-head products at inference) on
the way their class measured fastest (``einsum_matmul._small_stack``, issue 18 session 19, enc23):
timed on a quiet machine only (MKL's threads, one thread, the heads split), the incumbent (MKL's
threads, the way before) untimed under load, a cached choice used as it is, one thread beside a
product on the other core; every way equals np.einsum in float64."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning
from test_einsum_split import _Tuner as _StackTuner

RNG = np.random.default_rng(19)
# attention's scores at a small size: 4 heads of 32x32x16 (65536 multiply-adds, gemm.MIN_WORK)
EQ, SHAPES = "aecd,abcd->acbe", ((1, 32, 4, 16), (1, 32, 4, 16))


class _Tuner(_StackTuner):
    """The stack classes' choices scripted; every other class (gemm's own: each product's
    one-thread library) its incumbent, untimed."""

    def backend(self, cls):
        return super().backend(cls) if cls.startswith("einsum-stack:") else None

    def choose(self, cls, runners, incumbent="mkl", clock=None, settle=True):
        if cls.startswith("einsum-stack:"):
            return super().choose(cls, runners, incumbent, clock)
        return incumbent

    def threshold(self, name, walk, default):
        return default


def _small_once(monkeypatch, tuner, quiet, eq=EQ, shapes=SHAPES):
    """``contract`` of one stack with the choice cache emptied: the ways taken, checked against
    np.einsum."""
    monkeypatch.setattr(einsum_matmul, "_small_chosen", {})
    monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 1 << 40})   # never the big split
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
    ways, inside = [], []
    real_split, real_product = einsum_matmul._split, einsum_matmul._product

    def split(*a, **k):
        ways.append("rows")
        inside.append(1)          # (its blocks are one-thread products: not ways of their own)
        try:
            return real_split(*a, **k)
        finally:
            inside.pop()

    def product(*a, **k):
        if not inside:
            ways.append("one" if k.get("one_thread") else "mkl")
        return real_product(*a, **k)
    monkeypatch.setattr(einsum_matmul, "_split", split)
    monkeypatch.setattr(einsum_matmul, "_product", product)
    a, b = (RNG.standard_normal(s) for s in shapes)
    lhs, so = eq.split("->")
    got = einsum_matmul.contract(a, b, *lhs.split(","), so)
    np.testing.assert_allclose(got, np.einsum(eq, a, b), rtol=1e-12, atol=1e-12)
    return ways


def test_timed_on_a_quiet_machine_among_three_ways_and_kept(monkeypatch):
    tuner = _Tuner(pick="one")
    ways = _small_once(monkeypatch, tuner, quiet=True)
    assert ways[-1] == "one" and "rows" in ways[:-1]     # (the timing ran the split; the product returned is one's)
    assert tuner.chosen == [("einsum-stack:abcd,aecd->aceb:float64:NN:6,6,5,b3,p2", ["mkl", "one", "rows"], "mkl")]
    assert list(einsum_matmul._small_chosen.values()) == ["one"]


def test_no_timing_under_load_the_way_before_is_kept(monkeypatch):
    tuner = _Tuner(pick="rows")
    assert _small_once(monkeypatch, tuner, quiet=False) == ["mkl"] and tuner.chosen == []


@pytest.mark.parametrize("way", ["mkl", "one", "rows"])
def test_a_cached_choice_is_used_without_timing(monkeypatch, way):
    tuner = _Tuner(cached=way, pick="mkl" if way != "mkl" else "one")
    assert _small_once(monkeypatch, tuner, quiet=True) == [way] and tuner.chosen == []


@pytest.mark.parametrize("eq,shapes", [("acbe,aecd->abcd", ((2, 4, 16, 32), (2, 32, 4, 16))),
                                       ("bij,bjk->bik", ((8, 32, 16), (8, 16, 32)))])
def test_other_layouts_every_way(monkeypatch, eq, shapes):
    for way in ("mkl", "one", "rows"):
        assert _small_once(monkeypatch, _Tuner(cached=way), quiet=True, eq=eq, shapes=shapes) == [way]


def test_beside_a_product_on_the_other_core_it_runs_on_this_thread(monkeypatch):
    tuner = _Tuner(cached="mkl")
    with gemm.blocks_here(2):
        assert _small_once(monkeypatch, tuner, quiet=True) == ["one"]
    assert einsum_matmul._small_chosen == {}


def test_stacks_under_min_work_stay_one_call(monkeypatch):
    tuner = _Tuner(cached="rows")
    assert _small_once(monkeypatch, tuner, quiet=True, shapes=((1, 8, 4, 16), (1, 8, 4, 16))) == ["mkl"]


def test_the_threads_way_sends_mkl_workers_to_sleep_after_the_call(monkeypatch):
    wrapped = []
    real = gemm._sleeping_after
    monkeypatch.setattr(gemm, "_sleeping_after", lambda run: wrapped.append(run) or real(run))
    assert _small_once(monkeypatch, _Tuner(cached="mkl"), quiet=True) == ["mkl"] and len(wrapped) == 1
