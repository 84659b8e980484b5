"""Two ``Dense`` layers in a row on a sequence as one plan step (``FusedEinsumPair``,
``einsum_bias_kernels.fused_einsum_pair``, ``runtime/passes/einsum_pair.py``; issue 18, enc28),
and the per-geometry caches of the Einsum products bounded (``einsum_matmul.remember``): each
way equals NumPy's float64 values, the class is timed on a quiet machine only and its choice
kept, pairs that cannot run by rows take the two calls, the pass matches an inference plan's
``Dense(relu) -> Dense`` alone."""
import functools

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import einsum_bias_kernels as ebk
from tensorweave.kernels.cpu import einsum_matmul, gemm
from tensorweave.runtime.passes import einsum_pair, plan_stats
from scripted_tuner import ScriptedTuner, scripted_split

pytestmark = pytest.mark.skipif(not gemm._gemm_serial, reason="needs MKL's one-thread GEMM (gemm._gemm_serial)")
RNG = np.random.default_rng(28)
FIRST, SECOND = "abc,cd->abd", "abd,de->abe"


#: the ``einsum-pair:`` classes scripted: ``_Tuner(cached=None, pick="one")``
_Tuner = functools.partial(ScriptedTuner, "einsum-pair:")


@pytest.fixture
def pair(monkeypatch):
    """``setup(tuner, quiet=False, parts=2)`` (``scripted_tuner.scripted_split``): the split parts, the
    tuner and the quiet check scripted, the caches emptied; returns the list of task counts
    ``gemm.share_tasks`` was given and the set of threads those tasks ran on."""
    return scripted_split(monkeypatch, ((ebk, "_pair_chosen"), (einsum_matmul, "_rows_chosen")))


def _operands(dtype, m=96, k=32, n1=48, n2=24, bias1=None):
    a = RNG.standard_normal((1, m, k)).astype(dtype)
    w1, w2 = RNG.standard_normal((k, n1)).astype(dtype), RNG.standard_normal((n1, n2)).astype(dtype)
    b1 = RNG.standard_normal(bias1 or (n1,)).astype(dtype)
    return a, w1, b1, w2, RNG.standard_normal(n2).astype(dtype)


def _reference(a, w1, b1, w2, b2, relu1, relu2):
    h = a.astype(np.float64) @ w1.astype(np.float64) + b1
    h = np.maximum(h, 0) if relu1 else h
    y = h @ w2.astype(np.float64) + b2
    return np.maximum(y, 0) if relu2 else y


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-11}


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu1,relu2", [(True, False), (False, True), (False, False)])
def test_each_way_equals_numpy(pair, way, dtype, relu1, relu2):
    shares, threads = pair(_Tuner(cached=way))
    ops = _operands(dtype)
    y = ebk.fused_einsum_pair(*ops, FIRST, SECOND, relu1, relu2)
    assert y.shape == (1, 96, 24) and y.dtype == dtype and y.flags.c_contiguous
    np.testing.assert_allclose(y, _reference(*ops, relu1, relu2), **_tol(dtype))
    assert list(ebk._pair_chosen.values()) == [way]
    # the rows way hands its blocks (two of 48 rows, both products each) over once
    assert (2 in shares) == (way == "rows")


def test_two_blocks_of_the_least_rows_run_by_rows(pair):
    shares, _ = pair(_Tuner(cached="rows"))
    ops = _operands(np.float32, m=2 * gemm.MIN_PART)
    np.testing.assert_allclose(ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False),
                               _reference(*ops, True, False), **_tol(np.float32))
    assert list(ebk._pair_chosen.values()) == ["rows"] and shares == [2]


def test_rows_and_the_two_calls_agree_to_float32_rounding(pair):
    ops = _operands(np.float32)
    pair(_Tuner(cached="rows"))
    split = ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    with gemm.blocks_here(2):       # nothing handed over: the two calls (no way asked)
        here = ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    # (another GEMM blocking: the last bits may differ, as between any two product shapes)
    np.testing.assert_allclose(split, here, **_tol(np.float32))
    assert len(ebk._pair_chosen) == 1


def test_timed_on_a_quiet_machine_once_and_the_choice_kept(pair):
    tuner = _Tuner(pick="rows")
    shares, _ = pair(tuner, quiet=True)
    ops = _operands(np.float32)
    for _ in range(3):
        y = ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    np.testing.assert_allclose(y, _reference(*ops, True, False), **_tol(np.float32))
    # M 96, N1 48, K 32 -> bits 7, 6, 6; the second's width 24 -> 5
    assert tuner.timed == [("einsum-pair:float32:NN:7,6,6,n5,p2", ["one", "rows"], "one")]
    assert list(ebk._pair_chosen.values()) == ["rows"]


def test_a_transposed_weight_names_its_class(pair):
    tuner = _Tuner(pick="rows")
    pair(tuner, quiet=True)
    a, w1, b1, w2, b2 = _operands(np.float32)
    w1t = np.ascontiguousarray(w1.T).T          # the same values, stored transposed
    y = ebk.fused_einsum_pair(a, w1t, b1, w2, b2, FIRST, SECOND, True, False)
    np.testing.assert_allclose(y, _reference(a, w1, b1, w2, b2, True, False), **_tol(np.float32))
    assert [cls for cls, _, _ in tuner.timed] == ["einsum-pair:float32:NT:7,6,6,n5,p2"]


def test_no_timing_under_load_the_two_calls_kept(pair):
    tuner = _Tuner()
    shares, _ = pair(tuner, quiet=False)
    ops = _operands(np.float32)
    ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    assert tuner.timed == [] and list(ebk._pair_chosen.values()) == ["one"] and 2 not in shares


def test_one_thread_asks_nothing(pair):
    tuner = _Tuner(cached="rows")
    pair(tuner, parts=1)
    ops = _operands(np.float64)
    y = ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, True)
    np.testing.assert_allclose(y, _reference(*ops, True, True), **_tol(np.float64))
    assert ebk._pair_chosen == {}


@pytest.mark.parametrize("why", ["few rows", "bias over rows", "second bias over rows", "second bias not trailing",
                                 "hidden transposed", "hidden transposed, square", "output transposed",
                                 "bias dtype differs", "weight dtype differs"])
def test_pairs_that_cannot_run_by_rows_take_the_two_calls(pair, why):
    tuner = _Tuner(cached="rows", pick="rows")
    shares, _ = pair(tuner, quiet=True)
    first, second = FIRST, SECOND
    m = {"few rows": 16, "hidden transposed, square": 48}.get(why, 40)
    ops = list(_operands(np.float64, m=m, bias1=(40, 48) if why == "bias over rows" else None))
    if why.startswith("hidden transposed"):     # the second reads the hidden [1, m, 48] as [a, d, b]
        second, ops[3] = "adb,de->abe", RNG.standard_normal((m, 24))
    if why == "second bias over rows":
        ops[4] = RNG.standard_normal((40, 24))
    if why == "second bias not trailing":       # as many values as the width, not the product's axes
        ops[4] = RNG.standard_normal((1, 24))
    if why == "output transposed":              # [a, e, b]: its bias over b
        second, ops[4] = "abd,de->aeb", RNG.standard_normal(40)
    if why == "bias dtype differs":
        ops[4] = ops[4].astype(np.float32)
    if why == "weight dtype differs":
        ops[3] = ops[3].astype(np.float32)
    a, w1, b1, w2, b2 = ops
    want_h = np.maximum(np.einsum(first, a, w1) + b1, 0)
    if why in ("bias dtype differs", "second bias not trailing"):
        with pytest.raises(ValueError, match="FusedEinsum"):
            ebk.fused_einsum_pair(a, w1, b1, w2, b2, first, second, True, False)
    else:
        y = ebk.fused_einsum_pair(a, w1, b1, w2, b2, first, second, True, False)
        np.testing.assert_allclose(y, np.einsum(second, want_h, w2) + b2, rtol=1e-6, atol=1e-6)
    assert tuner.timed == [] and set(ebk._pair_chosen.values()) <= {"one"} and 2 not in shares


def test_inside_blocks_here_nothing_is_timed_nor_handed_over(pair):
    tuner = _Tuner(pick="rows")
    shares, _ = pair(tuner, quiet=True)
    ops = _operands(np.float32)
    with gemm.blocks_here(2):       # (a product deferred beside another: runtime/overlap.py)
        y = ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    np.testing.assert_allclose(y, _reference(*ops, True, False), **_tol(np.float32))
    assert tuner.timed == [] and ebk._pair_chosen == {}


def test_the_caches_keep_at_most_their_bound(pair, monkeypatch):
    pair(_Tuner(cached="one"))
    monkeypatch.setattr(einsum_matmul, "GEOMETRIES", 2)
    for m in (40, 48, 56):
        ops = _operands(np.float32, m=m)
        ebk.fused_einsum_pair(*ops, FIRST, SECOND, True, False)
    assert [key[0] for key in ebk._pair_chosen] == [(1, 48, 32), (1, 56, 32)]
    # the products' own cache (einsum_matmul.one_or_rows) too: the oldest geometries dropped
    assert len(einsum_matmul._rows_chosen) == 2
    assert [key[0] for key in einsum_matmul._rows_chosen] == [(56, 32), (56, 48)]


def test_remember_drops_the_oldest_only_when_full():
    cache = {}
    for n in range(4):
        assert einsum_matmul.remember(cache, n, -n, limit=3) == -n
    assert cache == {1: -1, 2: -2, 3: -3}
    einsum_matmul.remember(cache, 3, 9, limit=3)      # a key already there, the cache full: one dropped
    assert cache == {2: -2, 3: 9}


# ---- the pass ----------------------------------------------------------------------------------------
def _ffn(dtype=np.float32, k=32, n1=48, n2=24):
    w1, w2 = (tw.Variable(RNG.standard_normal(s).astype(dtype)) for s in ((k, n1), (n1, n2)))
    b1, b2 = (tw.Variable(RNG.standard_normal(s).astype(dtype)) for s in ((n1,), (n2,)))

    def dense(x, w, b):
        return tw.nn.bias_add(tw.einsum("abc,cd->abd", x, w), b)
    return (w1, b1, w2, b2), dense


def _numpy(x, w1, b1, w2, b2):
    return _reference(x, w1.numpy(), b1.numpy(), w2.numpy(), b2.numpy(), True, False)


@pytest.mark.parametrize("way", ["one", "rows"])
def test_the_pass_makes_one_step_of_an_inference_plan_s_pair(pair, way):
    pair(_Tuner(cached=way))
    (w1, b1, w2, b2), dense = _ffn()
    f = tw.function(lambda x: dense(tw.nn.relu(dense(x, w1, b1)), w2, b2))
    x = RNG.standard_normal((1, 64, 32)).astype(np.float32)
    np.testing.assert_allclose(f(x).numpy(), _numpy(x, w1, b1, w2, b2), **_tol(np.float32))
    assert plan_stats(f).get("einsum_pair") == 1
    assert list(ebk._pair_chosen.values()) == [way]
    node, = [st.op for st in list(f._cache.values())[-1]._plan.steps if st.op is not None
             and st.op.type == "FusedEinsumPair"]
    assert len(node.fused) == 5      # the two FusedEinsums' products and bias adds, the first's Relu


def test_a_chain_of_three_makes_one_pair(pair):
    pair(_Tuner(cached="rows"))
    (w1, b1, w2, b2), dense = _ffn(n2=48)
    f = tw.function(lambda x: dense(tw.nn.relu(dense(tw.nn.relu(dense(x, w1, b1)), w2, b2)), w2, b2))
    x = RNG.standard_normal((1, 64, 32)).astype(np.float32)
    h = np.maximum(_numpy(x, w1, b1, w2, b2), 0)
    want = h @ w2.numpy().astype(np.float64) + b2.numpy()
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-4, atol=1e-3)
    assert plan_stats(f).get("einsum_pair") == 1


def test_no_pair_where_the_hidden_is_read_elsewhere_or_the_pass_is_off(pair, monkeypatch):
    pair(_Tuner(cached="rows"))
    (w1, b1, w2, b2), dense = _ffn()
    x = RNG.standard_normal((1, 64, 32)).astype(np.float32)

    def both(x):
        h = tw.nn.relu(dense(x, w1, b1))
        return h, dense(h, w2, b2)
    f = tw.function(both)
    h, y = f(x)
    np.testing.assert_allclose(y.numpy(), _numpy(x, w1, b1, w2, b2), **_tol(np.float32))
    assert not plan_stats(f).get("einsum_pair")

    def read_twice(x):          # the hidden read by a second step, not fetched
        h = tw.nn.relu(dense(x, w1, b1))
        return dense(h, w2, b2) + tw.reduce_sum(h)
    r = tw.function(read_twice)
    want = _numpy(x, w1, b1, w2, b2) + np.maximum(x.astype(np.float64) @ w1.numpy() + b1.numpy(), 0).sum()
    np.testing.assert_allclose(r(x).numpy(), want, rtol=1e-4)
    assert not plan_stats(r).get("einsum_pair")
    monkeypatch.setattr(einsum_pair, "ENABLED", False)
    g = tw.function(lambda x: dense(tw.nn.relu(dense(x, w1, b1)), w2, b2))
    np.testing.assert_allclose(g(x).numpy(), _numpy(x, w1, b1, w2, b2), **_tol(np.float32))
    assert not plan_stats(g).get("einsum_pair")


def test_a_training_step_keeps_its_products_apart(pair):
    pair(_Tuner(cached="rows"))
    (w1, b1, w2, b2), dense = _ffn()
    x = RNG.standard_normal((1, 64, 32)).astype(np.float32)

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(dense(tw.nn.relu(dense(x, w1, b1)), w2, b2))
        g = tape.gradient(loss, [w2])[0]
        w2.assign_sub(0.0 * g)
        return loss
    np.testing.assert_allclose(step(x).numpy(), _numpy(x, w1, b1, w2, b2).sum(), rtol=1e-4)
    assert not plan_stats(step).get("einsum_pair")

    @tw.function
    def first_only(x):      # no ReLU, the first weight's gradient alone: nothing else reads the hidden
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(dense(dense(x, w1, b1), w2, b2))
        w1.assign_sub(0.0 * tape.gradient(loss, [w1])[0])
        return loss
    want = (x.astype(np.float64) @ w1.numpy() + b1.numpy()) @ w2.numpy() + b2.numpy()
    np.testing.assert_allclose(first_only(x).numpy(), want.sum(), rtol=1e-4)
    assert not plan_stats(first_only).get("einsum_pair")
    assert ebk._pair_chosen == {}
