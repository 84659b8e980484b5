"""Self-attention's Q/K/V projections and the attention as one plan step (``FusedHeadAttention``,
``head_attention_kernels.head_attention``, ``runtime/passes/head_attention.py``; issue 18, enc29):
each way equals NumPy's float64 values, the heads way hands its blocks over once, the class is
timed on a quiet machine only and its choice kept, steps that cannot run by heads take the two
kernels, the pass matches an inference plan's group read by its attention alone."""
import functools

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import attention_kernels, einsum_matmul, gemm
from tensorweave.kernels.cpu import head_attention_kernels as hak
from tensorweave.runtime.passes import head_attention, plan_stats
from scripted_tuner import ScriptedTuner, scripted_split, ways_asked
from test_graph_passes import options

pytestmark = pytest.mark.skipif(not gemm._gemm_serial, reason="needs MKL's one-thread GEMM (gemm._gemm_serial)")
RNG = np.random.default_rng(2029)
GROUP = {"equation": "abc,cfde->abfde", "count": 3, "weight_axis": 1, "out_axis": 2, "bias": True, "relu": False,
         "scales": (None, 0.25, None)}
ATT = {"dot": "aecd,abcd->acbe", "combine": "acbe,aecd->abcd"}

#: the ``head-attention:`` classes scripted (the attention's own, ``attention:``, keeps its incumbent)
_Tuner = functools.partial(ScriptedTuner, "head-attention:")


@pytest.fixture
def heads(monkeypatch):
    """``setup(tuner, quiet=False, parts=2)`` (``scripted_tuner.scripted_split``): the kernels' caches emptied."""
    return scripted_split(monkeypatch, ((hak, "_chosen"), (hak, "_layouts"), (attention_kernels, "_chosen"),
                                        (einsum_matmul, "_rows_chosen")))


def _operands(dtype, batch=1, t=40, c=24, n_heads=4, d=8):
    """``(x, [wq, wk, wv, bq, bk, bv])`` (read-only, as variables' values are)."""
    ws = [RNG.standard_normal((c, n_heads, d)).astype(dtype) * 0.3 for _ in range(3)]
    bs = [RNG.standard_normal((n_heads, d)).astype(dtype) for _ in range(3)]
    for w in ws + bs:
        w.flags.writeable = False
    return RNG.standard_normal((batch, t, c)).astype(dtype), ws + bs


def _reference(x, ops, group=GROUP, at=(0, 1, 2)):
    x = x.astype(np.float64)
    outs = []
    for i in range(3):
        y = np.einsum("abc,cde->abde", x, ops[i].astype(np.float64)) + ops[3 + i]
        y = np.maximum(y, 0) if group["relu"] else y
        outs.append(y * group["scales"][i] if group["scales"][i] is not None else y)
    k, q, v = (outs[i] for i in at)
    s = np.einsum(ATT["dot"], k, q)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum(ATT["combine"], p / p.sum(-1, keepdims=True), v)


def _tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("at,relu,batch", [((0, 1, 2), False, 1), ((2, 0, 1), True, 1), ((1, 2, 0), False, 2)])
def test_each_way_equals_numpy(heads, way, dtype, at, relu, batch):
    shares, _ = heads(_Tuner(cached=way))
    x, ops = _operands(dtype, batch=batch)
    group = {**GROUP, "relu": relu}
    y = hak.head_attention(x, *ops, **group, **ATT, at=at)
    assert y.shape == (batch, 40, 4, 8) and y.dtype == dtype and y.flags.c_contiguous
    np.testing.assert_allclose(y, _reference(x, ops, group, at), **_tol(dtype))
    assert list(hak._chosen.values()) == [way]
    assert (shares == [2]) == (way == "rows")      # two blocks of two heads, handed over once


def test_heads_and_the_two_kernels_agree(heads):
    heads(_Tuner(cached="rows"))
    x, ops = _operands(np.float32, t=128, c=64)
    split = hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    with gemm.blocks_here(2):       # nothing handed over: the two kernels (no way asked)
        here = hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    # (float32's tolerance: the blocks' projections and the whole one may run on different GEMM
    # libraries, each class's by its own timing, so their last bits differ as the scores amplify them)
    np.testing.assert_allclose(split, here, **_tol(np.float32))
    assert len(hak._chosen) == 1


def test_timed_on_a_quiet_machine_once_and_the_choice_kept(heads):
    tuner = _Tuner(pick="rows")
    shares, _ = heads(tuner, quiet=True)
    x, ops = _operands(np.float32)
    for _ in range(3):
        y = hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    np.testing.assert_allclose(y, _reference(x, ops), **_tol(np.float32))
    # the attention's class: T 40, S 40, D 8 -> bits 6, 6, 4, 4 pairs -> b3; the input's width 24 -> c5
    assert [(cls, ways) for cls, ways, _ in tuner.timed] == [("head-attention:float32:NT:6,6,4,b3,c5,p2",
                                                              ["one", "rows"])]
    assert list(hak._chosen.values()) == ["rows"] and shares.count(2) == 4     # (the timing ran it once)


def test_no_timing_under_load_the_two_kernels_kept(heads):
    tuner = _Tuner(pick="rows")
    shares, _ = heads(tuner, quiet=False)
    x, ops = _operands(np.float32)
    np.testing.assert_allclose(hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2)), _reference(x, ops),
                               **_tol(np.float32))
    assert tuner.timed == [] and list(hak._chosen.values()) == ["one"] and 2 not in shares


@pytest.mark.parametrize("parts", [1, "here"])
def test_one_thread_or_inside_blocks_here_asks_nothing(heads, parts):
    tuner = _Tuner(pick="rows")
    shares, _ = heads(tuner, quiet=True, parts=1 if parts == 1 else 2)
    x, ops = _operands(np.float64)
    if parts == "here":
        with gemm.blocks_here(2):
            y = hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    else:
        y = hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    np.testing.assert_allclose(y, _reference(x, ops), **_tol(np.float64))
    assert hak._chosen == {} and tuner.timed == [] and shares == []


@pytest.mark.parametrize("why", ["one head", "float16", "no bias", "weight dtype differs"])
def test_steps_that_cannot_run_by_heads_take_the_two_kernels(heads, why):
    tuner = _Tuner(cached="rows", pick="rows")
    shares, _ = heads(tuner, quiet=True)
    x, ops = _operands(np.float32, n_heads=1 if why == "one head" else 4)
    group = dict(GROUP)
    if why == "float16":
        x, ops = x.astype(np.float16), [o.astype(np.float16) for o in ops]
    if why == "no bias":
        group["bias"], ops = False, ops[:3]
    if why == "weight dtype differs":       # (the stack promotes, as the group's kernel does)
        ops[1] = ops[1].astype(np.float64)
    y = hak.head_attention(x, *ops, **group, **ATT, at=(0, 1, 2))
    want = _reference(x, ops + [np.zeros_like(ops[0][0])] * 3 if why == "no bias" else ops)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2 if why == "float16" else 1e-4,
                               atol=2e-2 if why == "float16" else 1e-5)
    assert tuner.timed == [] and set(hak._chosen.values()) <= {"one"} and 2 not in shares


def test_the_cache_keeps_at_most_its_bound(heads, monkeypatch):
    heads(_Tuner(cached="one"))
    monkeypatch.setattr(einsum_matmul, "GEOMETRIES", 2)
    for t in (24, 32, 40):
        x, ops = _operands(np.float32, t=t)
        hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2))
    assert [key[0] for key in hak._chosen] == [(1, 32, 24), (1, 40, 24)]


# ---- the pass ----------------------------------------------------------------------------------------
def _attend(n_heads=4, d=8, c=24):
    ws = [tw.Variable(RNG.standard_normal((c, n_heads, d)).astype(np.float32) * 0.3) for _ in range(3)]
    bs = [tw.Variable(RNG.standard_normal((n_heads, d)).astype(np.float32)) for _ in range(3)]

    def projections(x):
        q, k, v = (tw.einsum("abc,cde->abde", x, w) + b for w, b in zip(ws, bs))
        return q * 0.25, k, v

    def attend(q, k, v):
        return tw.einsum(ATT["combine"], tw.nn.softmax(tw.einsum(ATT["dot"], k, q)), v)

    def numpy(x):
        ops = [w.numpy() for w in ws] + [b.numpy() for b in bs]
        return _reference(x, ops, at=(1, 0, 2))     # (q the first projection, scaled; k the second)
    return projections, attend, numpy


@pytest.mark.parametrize("way", ["one", "rows"])
def test_the_pass_makes_one_step_of_an_inference_plan_s_attention(heads, way):
    heads(_Tuner(cached=way))
    projections, attend, numpy = _attend()
    f = tw.function(lambda x: attend(*projections(x)))
    x = RNG.standard_normal((1, 40, 24)).astype(np.float32)
    np.testing.assert_allclose(f(x).numpy(), numpy(x), **_tol(np.float32))
    stats = plan_stats(f)
    assert stats.get("head_attention") == 1 and stats.get("einsum_group") == 1 and stats.get("attention") == 1
    assert list(hak._chosen.values()) == [way]
    node, = [st.op for st in list(f._cache.values())[-1]._plan.steps if st.op is not None
             and st.op.type == "FusedHeadAttention"]
    # the group's three products, their bias adds and the query's scale, then the attention's three steps
    assert len(node.fused) == 10 and node.fused[-3:][1] == "Softmax"
    with options(pruning=False):        # (pruning would hide a step the pass left behind)
        g = tw.function(lambda x: attend(*projections(x)))
        g(x)
    types = {st.op.type for st in list(g._cache.values())[-1]._plan.steps if st.op is not None}
    assert "FusedHeadAttention" in types and not {"FusedEinsumGroup", "FusedAttention"} & types, types


def test_the_pass_equals_the_plan_without_it(heads, monkeypatch):
    heads(_Tuner(cached="one"))
    projections, attend, _ = _attend()
    x = RNG.standard_normal((1, 40, 24)).astype(np.float32)
    f = tw.function(lambda x: attend(*projections(x)))
    with_it = f(x).numpy()
    monkeypatch.setattr(head_attention, "ENABLED", False)
    g = tw.function(lambda x: attend(*projections(x)))
    assert np.array_equal(g(x).numpy(), with_it)
    assert plan_stats(f).get("head_attention") == 1 and not plan_stats(g).get("head_attention")


@pytest.mark.parametrize("why", ["value fetched", "key read elsewhere", "training plan"])
def test_no_fusion_where_a_projection_is_read_elsewhere(heads, why):
    heads(_Tuner(cached="rows"))
    projections, attend, numpy = _attend()
    x = RNG.standard_normal((1, 40, 24)).astype(np.float32)
    counter = tw.Variable(0.0)

    def fn(x):
        q, k, v = projections(x)
        y = attend(q, k, v)
        if why == "value fetched":
            return y, v
        if why == "key read elsewhere":
            return y, tw.reduce_sum(k)
        counter.assign_add(1.0)     # (a plan that writes a variable: not an inference plan)
        return y
    f = tw.function(fn)
    got = f(x)
    y = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(y.numpy(), numpy(x), **_tol(np.float32))
    assert not plan_stats(f).get("head_attention")


def test_the_ways_are_names_the_gemm_tuner_keeps(heads, monkeypatch):
    known = gemm.tuner().backends       # (the real tuner: its file keeps entries of these ways only)
    heads(_Tuner())
    x, ops = _operands(np.float32)
    asked = ways_asked(monkeypatch, lambda: hak.head_attention(x, *ops, **GROUP, **ATT, at=(0, 1, 2)))
    assert asked == [{"one", "rows"}] and asked[0] <= known
