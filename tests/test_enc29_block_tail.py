"""A post-norm transformer block after its attention as one plan step (``FusedBlockTail``,
``block_tail_kernels.block_tail``, ``runtime/passes/block_tail.py``; issue 18, enc29): each way
equals NumPy's float64 values, the rows way hands its blocks over once and equals the four
kernels' bits, the class is timed on a quiet machine only and its choice kept, chains that cannot
run by rows take the four kernels (their errors for bad input), the pass matches an inference
plan's chain alone."""
import functools

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import block_tail_kernels as btk
from tensorweave.kernels.cpu import einsum_bias_kernels, einsum_matmul, gemm
from tensorweave.ops.layer_norm_ops import layer_norm
from tensorweave.runtime.passes import block_tail, plan_stats
from scripted_tuner import ScriptedTuner, scripted_split, ways_asked
from test_graph_passes import options

pytestmark = pytest.mark.skipif(not gemm._gemm_serial, reason="needs MKL's one-thread GEMM (gemm._gemm_serial)")
RNG = np.random.default_rng(29)
PROJ, FIRST, SECOND = "abcd,cde->abe", "abc,cd->abd", "abd,de->abe"
ATTRS = {"proj": PROJ, "first": FIRST, "second": SECOND, "relu0": False, "relu1": True, "relu2": False,
         "eps1": 1e-5, "eps2": 1e-3, "rms1": False, "rms2": False}

#: the ``block-tail:`` classes scripted: ``_Tuner(cached=None, pick="one")``
_Tuner = functools.partial(ScriptedTuner, "block-tail:")


@pytest.fixture
def tail(monkeypatch):
    """``setup(tuner, quiet=False, parts=2)`` (``scripted_tuner.scripted_split``): the kernel's caches emptied."""
    return scripted_split(monkeypatch, ((btk, "_chosen"), (btk, "_layouts"), (einsum_bias_kernels, "_pair_chosen"),
                                        (einsum_matmul, "_rows_chosen")))


def _operands(dtype, m=96, heads=2, key=8, n=24, hidden=40):
    """``(h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2)`` of a block of ``m`` positions."""
    r = lambda *s: RNG.standard_normal(s).astype(dtype)     # noqa: E731
    return (r(1, m, heads, key), r(heads, key, n), r(n), r(1, m, n), 1 + r(n), r(n), r(n, hidden), r(hidden),
            r(hidden, n), r(n), 1 + r(n), r(n))


def _norm(v, g, b, eps, rms):
    mu = v.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((v - mu) ** 2).mean(-1, keepdims=True) + eps)
    return (v - (0 if rms else mu)) * inv * g + b


def _reference(ops, attrs=ATTRS):
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = (o.astype(np.float64) for o in ops)
    relu = lambda v, on: np.maximum(v, 0) if on else v      # noqa: E731
    p = relu(np.einsum(attrs["proj"], h, wo) + bo, attrs["relu0"])
    y1 = _norm(x + p, g1, be1, attrs["eps1"], attrs["rms1"])
    f = relu(relu(y1 @ w1 + b1, attrs["relu1"]) @ w2 + b2, attrs["relu2"])
    return _norm(y1 + f, g2, be2, attrs["eps2"], attrs["rms2"])


def _tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("change", [{}, {"relu0": True, "relu1": False, "relu2": True}, {"rms1": True},
                                    {"rms2": True}])
def test_each_way_equals_numpy(tail, way, dtype, change):
    shares, threads = tail(_Tuner(cached=way))
    ops, attrs = _operands(dtype), {**ATTRS, **change}
    y = btk.block_tail(*ops, **attrs)
    assert y.shape == (1, 96, 24) and y.dtype == dtype and y.flags.c_contiguous
    np.testing.assert_allclose(y, _reference(ops, attrs), **_tol(dtype))
    assert list(btk._chosen.values()) == [way]
    # the rows way hands its blocks (two of 48 rows, the whole chain each) over once
    assert (shares == [2]) == (way == "rows")


def test_rows_equal_the_four_kernels_bits(tail):
    ops = _operands(np.float32, m=128, heads=4, key=16, n=64, hidden=128)
    tail(_Tuner(cached="rows"))
    split = btk.block_tail(*ops, **ATTRS)
    with gemm.blocks_here(2):       # nothing handed over: the four kernels (no way asked)
        here = btk.block_tail(*ops, **ATTRS)
    # each row's layer norms and biases are the same loops; the products the blocks' GEMMs
    np.testing.assert_allclose(split, here, rtol=2e-6, atol=2e-6)
    assert len(btk._chosen) == 1


def test_timed_on_a_quiet_machine_once_and_the_choice_kept(tail):
    tuner = _Tuner(pick="rows")
    shares, _ = tail(tuner, quiet=True)
    ops = _operands(np.float32)
    for _ in range(3):
        y = btk.block_tail(*ops, **ATTRS)
    np.testing.assert_allclose(y, _reference(ops), **_tol(np.float32))
    # the projection M 96, N 24, K 16 -> bits 7, 5, 5; the hidden width 40 -> 6
    assert tuner.timed == [("block-tail:float32:NN:7,5,5,h6,p2", ["one", "rows"], "one")]
    assert list(btk._chosen.values()) == ["rows"] and shares == [2] * 4     # (the timing ran it once)


def test_no_timing_under_load_the_four_kernels_kept(tail):
    tuner = _Tuner()
    shares, _ = tail(tuner, quiet=False)
    ops = _operands(np.float32)
    np.testing.assert_allclose(btk.block_tail(*ops, **ATTRS), _reference(ops), **_tol(np.float32))
    assert tuner.timed == [] and list(btk._chosen.values()) == ["one"] and 2 not in shares


@pytest.mark.parametrize("parts", [1, "here"])
def test_one_thread_or_inside_blocks_here_asks_nothing(tail, parts):
    tuner = _Tuner(pick="rows")
    shares, _ = tail(tuner, quiet=True, parts=1 if parts == 1 else 2)
    ops = _operands(np.float64)
    if parts == "here":
        with gemm.blocks_here(2):
            y = btk.block_tail(*ops, **ATTRS)
    else:
        y = btk.block_tail(*ops, **ATTRS)
    np.testing.assert_allclose(y, _reference(ops), **_tol(np.float64))
    assert btk._chosen == {} and tuner.timed == [] and shares == []


@pytest.mark.parametrize("why", ["few rows", "bias over rows", "gamma not the width", "projection transposed",
                                 "weight dtype differs", "residual dtype differs", "hidden transposed"])
def test_chains_that_cannot_run_by_rows_take_the_four_kernels(tail, why):
    tuner = _Tuner(cached="rows", pick="rows")
    shares, _ = tail(tuner, quiet=True)
    ops = list(_operands(np.float64, m=16 if why == "few rows" else 40))
    attrs = dict(ATTRS)
    if why == "bias over rows":
        ops[2] = RNG.standard_normal((40, 24))
    if why == "gamma not the width":
        ops[4] = np.ones((1, 24))
    if why == "projection transposed":      # the output [a, e, b]: not the block's rows
        attrs["proj"] = "abcd,cde->aeb"
        ops[3], ops[2] = RNG.standard_normal((1, 24, 40)), RNG.standard_normal(40)
    if why == "weight dtype differs":
        ops[6] = ops[6].astype(np.float32)
    if why == "residual dtype differs":
        ops[3] = ops[3].astype(np.float32)
    if why == "hidden transposed":
        attrs["second"], ops[8] = "adb,de->abe", RNG.standard_normal((40, 24))
    if why in ("gamma not the width", "residual dtype differs", "projection transposed"):
        with pytest.raises((ValueError, TypeError)):
            btk.block_tail(*ops, **attrs)
    elif why == "hidden transposed":
        y = btk.block_tail(*ops, **attrs)
        assert y.shape == (1, 40, 24)
    else:       # (a float32 weight: the products promote, as the four kernels' do)
        np.testing.assert_allclose(btk.block_tail(*ops, **attrs),
                                   _reference_bias_rows(ops) if why == "bias over rows" else _reference(ops),
                                   **_tol(np.float32 if why == "weight dtype differs" else np.float64))
    assert tuner.timed == [] and set(btk._chosen.values()) <= {"one"} and 2 not in shares


def _reference_bias_rows(ops):
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = ops
    p = np.einsum(PROJ, h, wo) + bo
    y1 = _norm(x + p, g1, be1, ATTRS["eps1"], False)
    return _norm(y1 + (np.maximum(y1 @ w1 + b1, 0) @ w2 + b2), g2, be2, ATTRS["eps2"], False)


def test_the_cache_keeps_at_most_its_bound(tail, monkeypatch):
    tail(_Tuner(cached="one"))
    monkeypatch.setattr(einsum_matmul, "GEOMETRIES", 2)
    for m in (40, 48, 56):
        btk.block_tail(*_operands(np.float32, m=m), **ATTRS)
    assert [key[0] for key in btk._chosen] == [(1, 48, 2, 8), (1, 56, 2, 8)]


# ---- the pass ----------------------------------------------------------------------------------------
def _block(dtype=np.float32, heads=2, key=8, n=24, hidden=40, eps=(1e-5, 1e-3)):
    """A ``tw.function`` of ``(h, x)`` -> the block's tail, and its weights."""
    v = lambda *s: tw.Variable(RNG.standard_normal(s).astype(dtype))     # noqa: E731
    ws = (v(heads, key, n), v(n), v(n, hidden), v(hidden), v(hidden, n), v(n))
    wo, bo, w1, b1, w2, b2 = ws
    gs = [tw.Variable((1 + RNG.standard_normal(n)).astype(dtype)) for _ in range(2)]
    bs = [tw.Variable(RNG.standard_normal(n).astype(dtype)) for _ in range(2)]

    def dense(x, w, b, eq):
        return tw.nn.bias_add(tw.einsum(eq, x, w), b)

    def norm(x, i):
        return layer_norm(x, gs[i], bs[i], epsilon=eps[i])

    def chain(h, x):
        y1 = norm(x + dense(h, wo, bo, PROJ), 0)[0]
        return y1, norm(y1 + dense(tw.nn.relu(dense(y1, w1, b1, FIRST)), w2, b2, SECOND), 1)

    def numpy(h, x):
        return _reference((h, wo.numpy(), bo.numpy(), x, gs[0].numpy(), bs[0].numpy(), w1.numpy(), b1.numpy(),
                           w2.numpy(), b2.numpy(), gs[1].numpy(), bs[1].numpy()))
    return chain, numpy


def _inputs(dtype=np.float32, m=64):
    return RNG.standard_normal((1, m, 2, 8)).astype(dtype), RNG.standard_normal((1, m, 24)).astype(dtype)


@pytest.mark.parametrize("way", ["one", "rows"])
def test_the_pass_makes_one_step_of_an_inference_plan_s_block_tail(tail, way):
    tail(_Tuner(cached=way))
    chain, numpy = _block()
    f = tw.function(lambda h, x: chain(h, x)[1][0])
    h, x = _inputs()
    np.testing.assert_allclose(f(h, x).numpy(), numpy(h, x), **_tol(np.float32))
    assert plan_stats(f).get("block_tail") == 1
    assert list(btk._chosen.values()) == [way]
    with options(pruning=False):        # (pruning would hide a step the pass left behind)
        g = tw.function(lambda h, x: chain(h, x)[1][0])
        g(h, x)
    types = {st.op.type for st in list(g._cache.values())[-1]._plan.steps if st.op is not None}
    assert "FusedBlockTail" in types and not {"FusedEinsum", "AddLayerNorm", "FusedEinsumPair"} & types, types


def test_the_pass_equals_the_plan_without_it(tail, monkeypatch):
    tail(_Tuner(cached="one"))
    chain, _ = _block()
    h, x = _inputs()
    f = tw.function(lambda h, x: chain(h, x)[1][0])
    with_it = f(h, x).numpy()
    monkeypatch.setattr(block_tail, "ENABLED", False)
    g = tw.function(lambda h, x: chain(h, x)[1][0])
    assert np.array_equal(g(h, x).numpy(), with_it)
    assert plan_stats(f).get("block_tail") == 1 and not plan_stats(g).get("block_tail")
    assert plan_stats(g).get("residual_norm") == 2 and plan_stats(g).get("einsum_pair") == 1


@pytest.mark.parametrize("why", ["y1 fetched", "statistics fetched", "y1 read elsewhere", "two axes normalized"])
def test_no_tail_where_the_chain_does_not_match(tail, why):
    tail(_Tuner(cached="rows"))
    chain, numpy = _block()
    h, x = _inputs()
    if why == "two axes normalized":    # the second norm over [T, N]: not row by row
        v = lambda *s: tw.Variable(RNG.standard_normal(s).astype(np.float32))     # noqa: E731
        wo, bo, w1, b1, w2, b2, g2, be2 = v(2, 8, 24), v(24), v(24, 40), v(40), v(40, 24), v(24), v(64, 24), v(64, 24)

        def dense(x, w, b, eq):
            return tw.nn.bias_add(tw.einsum(eq, x, w), b)

        def fn(h, x):
            y1 = layer_norm(x + dense(h, wo, bo, PROJ), tw.ones([24]), tw.zeros([24]))[0]
            f = dense(tw.nn.relu(dense(y1, w1, b1, FIRST)), w2, b2, SECOND)
            return layer_norm(y1 + f, g2, be2, begin_norm_axis=1)[0]
        f = tw.function(fn)
        p = np.einsum(PROJ, h.astype(np.float64), wo.numpy()) + bo.numpy()
        y1 = _norm(x + p, 1, 0, 1e-3, False)
        v2 = y1 + np.maximum(y1 @ w1.numpy() + b1.numpy(), 0) @ w2.numpy() + b2.numpy()
        mu = v2.mean((1, 2), keepdims=True)
        want = (v2 - mu) / np.sqrt(((v2 - mu) ** 2).mean((1, 2), keepdims=True) + 1e-3) * g2.numpy() + be2.numpy()
        np.testing.assert_allclose(f(h, x).numpy(), want, **_tol(np.float32))
        assert not plan_stats(f).get("block_tail") and plan_stats(f).get("residual_norm") == 2
        return

    def fn(h, x):
        y1, (y, mean, _) = chain(h, x)
        if why == "y1 fetched":
            return y, y1
        if why == "statistics fetched":
            return y, mean
        return y + tw.reduce_sum(y1)
    f = tw.function(fn)
    got = f(h, x)
    if why == "y1 read elsewhere":
        assert got.shape == (1, 64, 24)
        np.testing.assert_allclose(got.numpy() - numpy(h, x), np.full((1, 64, 24), got.numpy()[0, 0, 0]
                                                                      - numpy(h, x)[0, 0, 0]), atol=2e-3)
    else:
        np.testing.assert_allclose(got[0].numpy(), numpy(h, x), **_tol(np.float32))
    assert not plan_stats(f).get("block_tail") and plan_stats(f).get("einsum_pair") == 1


def test_a_training_plan_keeps_the_four(tail):
    tail(_Tuner(cached="rows"))
    chain, numpy = _block()
    h, x = _inputs()
    counter = tw.Variable(0.0)

    def step(h, x):
        counter.assign_add(1.0)     # (a plan that writes a variable: not an inference plan)
        return chain(h, x)[1][0]
    f = tw.function(step)
    np.testing.assert_allclose(f(h, x).numpy(), numpy(h, x), **_tol(np.float32))
    assert not plan_stats(f).get("block_tail") and not plan_stats(f).get("einsum_pair")


def test_a_residual_of_another_shape_raises_as_the_four_kernels(tail):
    tail(_Tuner(cached="rows"))
    ops = list(_operands(np.float32))
    ops[3] = ops[3].reshape(96, 1, 24)      # against the projection's [1, 96, 24]: AddLayerNorm's error
    with pytest.raises(ValueError, match="AddLayerNorm"):
        btk.block_tail(*ops, **ATTRS)
    assert list(btk._chosen.values()) == ["one"]


def test_a_pair_reading_its_rows_transposed_takes_the_four_kernels(tail):
    # the pair's "abc,cd->bad" reads y1 [B, T, N] as [T, B, N]: its rows a copy, not y1's own
    shares, _ = tail(_Tuner(cached="rows"))
    ops = list(_operands(np.float64, m=8))
    ops[0], ops[3] = RNG.standard_normal((8, 8, 2, 8)), RNG.standard_normal((8, 8, 24))
    attrs = {**ATTRS, "first": "abc,cd->bad", "second": "bad,de->bae"}
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = ops
    y1 = _norm(x + np.einsum(PROJ, h, wo) + bo, g1, be1, attrs["eps1"], False)
    f = np.einsum(attrs["second"], np.maximum(np.einsum(attrs["first"], y1, w1) + b1, 0), w2) + b2
    np.testing.assert_allclose(btk.block_tail(*ops, **attrs), _norm(y1 + f, g2, be2, attrs["eps2"], False),
                               **_tol(np.float64))
    assert list(btk._chosen.values()) == ["one"] and 2 not in shares


def test_the_ways_are_names_the_gemm_tuner_keeps(tail, monkeypatch):
    known = gemm.tuner().backends       # (the real tuner: its file keeps entries of these ways only)
    tail(_Tuner())
    asked = ways_asked(monkeypatch, lambda: btk.block_tail(*_operands(np.float32), **ATTRS))
    assert asked == [{"one", "rows"}] and asked[0] <= known
