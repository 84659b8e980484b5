"""Stacked Einsum products split over the cores (kernels/cpu/einsum_matmul.py, issue 18 enc18):
the split and the one-call way equal np.einsum (float64) for attention's equations, odd block
sizes and a batch subscript that is not the output's first; the choice between them follows the
GEMM tuner's rules (timed on a quiet machine only, the split kept under load, cached per class
whatever the subscripts' letters); the products come out in the output's order (no transpose
after); gradients through split einsums match float64 finite differences, eager == graph."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning
from tensorweave.kernels.cpu.linalg_kernels import _einsum

RNG = np.random.default_rng(18)
# attention's scores, weighted sum and their gradients; a batch subscript last in the output;
# a batch that does not merge into one axis; a one-sided summed subscript
EQUATIONS = [("aecd,abcd->acbe", [(3, 5, 2, 4), (3, 6, 2, 4)]),
             ("acbe,aecd->abcd", [(3, 2, 6, 5), (3, 5, 2, 4)]),
             ("abcd,acbe->aecd", [(3, 6, 2, 4), (3, 2, 6, 5)]),
             ("abcd,aecd->acbe", [(3, 6, 2, 4), (3, 5, 2, 4)]),
             ("bij,bjk->ikb", [(5, 3, 4), (5, 4, 2)]),
             ("xbij,bjk->bxik", [(2, 3, 4, 5), (3, 5, 2)]),
             ("bijz,bjk->bik", [(4, 3, 2, 6), (4, 2, 5)])]


@pytest.fixture
def forced(monkeypatch):
    """Every stack splits in 2 parts, on the way ``way[0]`` (the choice cache emptied)."""
    way = ["rows"]
    monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 0})
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(einsum_matmul, "_chosen", {})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)   # no timing: the split
    monkeypatch.setattr(einsum_matmul, "_stack", _forced_stack(way))
    return way


def _forced_stack(way):
    def stack(a, b, sa, sb, so, size, batch, left, right, inner, parts):
        if way[0] == "mkl":
            return einsum_matmul._product(a, b, sa, sb, so, size, batch, left, right, inner)
        return einsum_matmul._split(a, b, sa, sb, so, size, batch, left, right, inner, parts)
    return stack


@pytest.mark.parametrize("way", ["rows", "mkl"])
@pytest.mark.parametrize("eq,shapes", EQUATIONS)
def test_both_ways_equal_numpy(eq, shapes, way, forced, monkeypatch):
    forced[0] = way
    a, b = (RNG.standard_normal(s) for s in shapes)
    ref = np.einsum(eq, a, b)
    calls = []
    real = einsum_matmul._split
    monkeypatch.setattr(einsum_matmul, "_split", lambda *args: calls.append(1) or real(*args))
    got = _einsum(a, b, equation=eq)
    assert got.shape == ref.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert bool(calls) == (way == "rows")


def test_split_blocks_cover_an_odd_batch_in_parts():
    """3 batch entries over 2 threads: blocks 2 and 1, every entry written once."""
    a, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((3, 5, 6))
    plan = einsum_matmul._plan("bij", "bjk", "bik", a.shape, b.shape)
    out = np.full((3, 4, 6), np.nan)
    einsum_matmul._split(a, b, "bij", "bjk", "bik", *plan[:5], 2, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    for parts in (3, 5):    # more parts than entries: one each
        got = einsum_matmul._split(a, b, "bij", "bjk", "bik", *plan[:5], parts)
        np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_a_batch_of_one_splits_its_heads(forced, monkeypatch):
    """predict on one sequence: scores [1, N, T, S] split along the heads (the largest batch
    subscript; the first of equals otherwise), each block written to its slice."""
    blocks = []
    real = einsum_matmul._product
    monkeypatch.setattr(einsum_matmul, "_product", lambda a, b, *r, **k: blocks.append(a.shape) or real(a, b, *r, **k))
    k, q = RNG.standard_normal((1, 5, 3, 4)), RNG.standard_normal((1, 6, 3, 4))
    got = _einsum(k, q, equation="aecd,abcd->acbe")
    np.testing.assert_allclose(got, np.einsum("aecd,abcd->acbe", k, q), rtol=1e-12)
    assert sorted(blocks) == [(1, 5, 1, 4), (1, 5, 2, 4)]     # key blocks of 1 and 2 heads
    assert einsum_matmul._split_letter(["a", "c"], {"a": 2, "c": 2}) == "a"
    assert einsum_matmul._split_letter(["a", "c"], {"a": 2, "c": 3}) == "c"


def test_small_stacks_and_one_core_stay_one_call(monkeypatch):
    split = []
    monkeypatch.setattr(einsum_matmul, "_stack", lambda *args: split.append(args[-1]))
    a, b = RNG.standard_normal((4, 8, 8)), RNG.standard_normal((4, 8, 8))
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    einsum_matmul.contract(a, b, "bij", "bjk", "bik")             # 2048 multiply-adds: one call
    assert split == []
    monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 4 * 8 * 8 * 8})
    einsum_matmul.contract(a, b, "bij", "bjk", "bik")
    assert split == [2]
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    assert einsum_matmul.contract(a, b, "bij", "bjk", "bik").shape == (4, 8, 8) and split == [2]
    monkeypatch.setattr(gemm, "split_parts", lambda: 8)                # no more parts than entries
    einsum_matmul.contract(a, b, "bij", "bjk", "bik")
    assert split == [2, 4]
    monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 0})
    a2, b2 = RNG.standard_normal((8, 8)), RNG.standard_normal((8, 8))
    np.testing.assert_allclose(einsum_matmul.contract(a2, b2, "ij", "jk", "ik"), a2 @ b2, rtol=1e-12)
    assert split == [2, 4]                                               # no stack: one 2-D call


class _Tuner:
    def __init__(self, cached=None, pick="mkl"):
        self.cached, self.pick, self.chosen = cached, pick, []

    def backend(self, cls):
        return self.cached

    def choose(self, cls, runners, incumbent="mkl", clock=None):
        for run in runners.values():
            run()
        self.chosen.append((cls, sorted(runners), incumbent))
        return self.pick


def _stack_once(monkeypatch, tuner, quiet, eq="aecd,abcd->acbe", shapes=((4, 5, 2, 3), (4, 6, 2, 3))):
    monkeypatch.setattr(einsum_matmul, "_chosen", {})
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
    ways = []
    real_split, real_product = einsum_matmul._split, einsum_matmul._product
    monkeypatch.setattr(einsum_matmul, "_split", lambda *a, **k: ways.append("rows") or real_split(*a, **k))
    monkeypatch.setattr(einsum_matmul, "_product",
                        lambda *a, **k: ways.append("mkl" if "out" not in k and not k.get("one_thread") else "")
                        or real_product(*a, **k))
    a, b = (RNG.standard_normal(s) for s in shapes)
    lhs, so = eq.split("->")
    plan = einsum_matmul._plan(*lhs.split(","), so, a.shape, b.shape)
    got = einsum_matmul._stack(a, b, *lhs.split(","), so, *plan[:5], 2)
    np.testing.assert_allclose(got, np.einsum(eq, a, b), rtol=1e-12)
    return [w for w in ways if w]


def test_choice_is_timed_on_a_quiet_machine_and_kept(monkeypatch):
    tuner = _Tuner(pick="mkl")
    ways = _stack_once(monkeypatch, tuner, quiet=True)
    assert tuner.chosen == [("einsum:abcd,aecd->aceb:float64:NN:3,3,2,b4,p2", ["mkl", "rows"], "rows")]
    assert ways[-1] == "mkl"          # the product returned is computed the chosen way
    key = next(iter(einsum_matmul._chosen))
    assert einsum_matmul._chosen[key] == "mkl"


def test_no_timing_under_load_the_split_is_kept(monkeypatch):
    tuner = _Tuner(pick="mkl")
    assert _stack_once(monkeypatch, tuner, quiet=False) == ["rows"] and tuner.chosen == []


def test_a_cached_choice_is_used_without_timing(monkeypatch):
    tuner = _Tuner(cached="mkl", pick="rows")
    assert _stack_once(monkeypatch, tuner, quiet=True) == ["mkl"] and tuner.chosen == []


def test_layout_key_renames_letters_in_order():
    assert einsum_matmul.layout_key("aecd", "abcd", "acbe") == "abcd,aecd->aceb"
    assert einsum_matmul.layout_key("xzyw", "xvyw", "xyvz") == "abcd,aecd->aceb"
    assert einsum_matmul.layout_key("ij", "jk", "ik") == "ab,bc->ac"


def test_products_come_out_in_the_output_order(monkeypatch):
    """attention's scores [B, N, T, S] from key [B, S, N, H] and query [B, T, N, H]: the GEMM's
    result is already [B*N, T, S] (no transpose after it), and no operand is copied in an order
    that moves its innermost axis."""
    seen = []
    real = gemm.matmul
    monkeypatch.setattr(gemm, "matmul", lambda a, b, **k: seen.append((a, b)) or real(a, b, **k))
    k, q = RNG.standard_normal((2, 5, 3, 4)), RNG.standard_normal((2, 7, 3, 4))
    got = einsum_matmul._product(k, q, "aecd", "abcd", "acbe", *einsum_matmul._plan(
        "aecd", "abcd", "acbe", k.shape, q.shape)[:5])
    np.testing.assert_allclose(got, np.einsum("aecd,abcd->acbe", k, q), rtol=1e-12)
    (am, bm), = seen
    assert am.shape == (6, 7, 4) and bm.shape == (6, 4, 5)      # query rows x key columns
    assert am.strides[-1] == 8 and bm.strides[-2] == 8          # each read along its own last axis


def _attention_scores(k, q):
    return tw.einsum("aecd,abcd->acbe", k, q)


def test_gradients_match_finite_differences_and_graph(forced):
    k = RNG.standard_normal((3, 5, 2, 4))
    q = RNG.standard_normal((3, 6, 2, 4))
    w = RNG.standard_normal((3, 2, 6, 5))

    def loss(kk, qq):
        return float(np.sum(np.einsum("aecd,abcd->acbe", kk, qq) * w))
    kt, qt = tw.Variable(k), tw.Variable(q)
    with tw.GradientTape() as tape:
        out = tw.reduce_sum(_attention_scores(kt, qt) * w)
    gk, gq = (g.numpy() for g in tape.gradient(out, [kt, qt]))
    eps = 1e-6
    for x, g, other in ((k, gk, "k"), (q, gq, "q")):
        for idx in [(0, 0, 0, 0), (2, 4, 1, 3), (1, 2, 0, 1)]:
            up, down = x.copy(), x.copy()
            up[idx] += eps
            down[idx] -= eps
            if other == "k":
                fd = (loss(up, q) - loss(down, q)) / (2 * eps)
            else:
                fd = (loss(k, up) - loss(k, down)) / (2 * eps)
            assert g[idx] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    graph = tw.function(lambda a, b: _attention_scores(a, b))(tw.constant(k), tw.constant(q)).numpy()
    np.testing.assert_array_equal(graph, _attention_scores(tw.constant(k), tw.constant(q)).numpy())
