"""A planned function's per-rank plans go through the graph passes (fusion, remapping, constant
folding, in-place) like a single-device tw.function, keep their collectives in one order on every
rank, give the single-device values; and rank threads use their share of the controller's threads."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(13)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _rank_specs(fn, *args):
    fn(*args)                                                   # traces, plans, binds
    return [b.spec for b in fn.get_concrete_function(*args)._global.bound]


def _ops(spec):
    return [n.op for n in spec.nodes]


def _train_step(x, y, w1, b1, w2):
    @tw.function
    def step():
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.nn.bias_add(tw.matmul(x, w1), b1))
            logits = tw.matmul(h, w2)
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        for v, g in zip((w1, b1, w2), tape.gradient(loss, [w1, b1, w2])):
            v.assign_sub(0.1 * g)
        return loss
    return step


def _data(placement):
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((64, 300)).astype(np.float32), (np.arange(64) % 5).astype(np.int32)
    ws = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in ((300, 256), (256,), (256, 5))]
    if placement is None:
        return [tw.constant(x), tw.constant(y)] + [tw.Variable(w) for w in ws]
    return ([tw.constant(x).to_global(placement=placement, sbp=S(0)),
             tw.constant(y).to_global(placement=placement, sbp=S(0))]
            + [tw.Variable(w, placement=placement, sbp=B) for w in ws])


def test_rank_plans_get_the_remapping_and_fusion_a_single_device_plan_gets():
    one = _train_step(*_data(None))
    glob_args = _data(P2)
    dp = _train_step(*glob_args)
    want = [float(one()) for _ in range(3)]
    got = [float(dp()) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=2e-5)
    single = _ops(list(one._cache.values())[-1]._plan.spec)
    for spec in (b.spec for b in list(dp._cache.values())[-1]._global.bound):
        ops = _ops(spec)
        for fused in ("FusedMatMul", "FusedSparseSoftmaxCrossEntropy", "FusedMatMulReluGradBiasAddGrad"):
            assert fused in single                       # what one device gets ...
            assert fused in ops, (fused, ops)            # ... each rank gets too
        assert "SparseSoftmaxCrossEntropyWithLogits" not in ops and "BiasAdd" not in ops
        assert spec.pass_stats["nodes_out"] < spec.pass_stats["nodes_in"]
        assert spec.pass_stats.get("remapping", 0) >= 3


def test_trained_weights_equal_one_device_with_the_passes_on_the_ranks():
    one_args, glob_args = _data(None), _data(P2)
    one, dp = _train_step(*one_args), _train_step(*glob_args)
    for _ in range(4):
        one(), dp()
    for a, b in zip(one_args[2:], glob_args[2:]):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=2e-5, atol=1e-6)


def test_elementwise_chains_fuse_and_run_in_place_on_each_rank():
    x = _arr(64, 512)
    f = tw.function(lambda x: tw.reduce_sum(tw.tanh(x * 2.0 + 1.0) * 3.0 - x, axis=1))
    gx = tw.constant(x).to_global(placement=P2, sbp=S(0))
    np.testing.assert_allclose(f(gx).numpy(), f(tw.constant(x)).numpy(), rtol=1e-5, atol=1e-5)
    for spec in _rank_specs(f, gx):
        assert "FusedReduction" in _ops(spec) or "FusedElementwise" in _ops(spec), _ops(spec)
    g = tw.function(lambda x, w: tw.nn.relu(tw.matmul(x, w) * 2.0) + 1.0)   # fused, in MatMul's buffer
    gw = tw.constant(_arr(512, 1024)).to_global(placement=P2, sbp=B)
    for spec in _rank_specs(g, gx, gw):
        assert [n.attrs["inplace"] for n in spec.nodes if n.op == "FusedElementwise"] == [0], _ops(spec)
    np.testing.assert_allclose(g(gx, gw).numpy(), g(tw.constant(x), tw.constant(gw.numpy())).numpy(), rtol=1e-5,
                               atol=1e-4)


def test_switching_the_passes_off_reaches_the_rank_plans_too():
    x = tw.constant(_arr(64, 512)).to_global(placement=P2, sbp=S(0))
    tw.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        f = tw.function(lambda x: tw.reduce_sum(tw.tanh(x * 2.0 + 1.0) * 3.0, axis=1))
        specs = _rank_specs(f, x)
    finally:
        tw.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    for spec in specs:
        assert not any(op.startswith("Fused") for op in _ops(spec))
        assert spec.pass_stats["nodes_in"] == spec.pass_stats["nodes_out"]


def test_uneven_split_fuses_on_one_rank_only_and_the_collectives_still_match():
    # (33, 1000) over 2 ranks: 17,000 elements on rank 0 (fused: over fusion_min_elements, 16,384),
    # 16,000 on rank 1 (not fused); the boxing after the chain is the same call on both ranks
    x = _arr(33, 1000)
    f = tw.function(lambda x: tw.reduce_sum(tw.tanh(x * 2.0 + 1.0) * 3.0, axis=0))
    gx = tw.constant(x).to_global(placement=P2, sbp=S(0))
    got = f(gx)
    np.testing.assert_allclose(got.numpy(), f(tw.constant(x)).numpy(), rtol=1e-4, atol=1e-4)
    s0, s1 = _rank_specs(f, gx)
    assert any(op.startswith("Fused") for op in _ops(s0)) and not any(op.startswith("Fused") for op in _ops(s1))
    boxing = [[(n.name, n.attrs["plan"]["steps"]) for n in s.nodes if n.op == "_Boxing"] for s in (s0, s1)]
    assert boxing[0] == boxing[1]


def test_a_constant_chain_of_shape_values_folds_on_the_ranks():
    # the loss gradient's seed (OnesLike, Reshape, RealDiv by the batch size, BroadcastTo) is a constant
    x = tw.constant(_arr(8, 3)).to_global(placement=P2, sbp=S(0))
    w = tw.Variable(_arr(3, 2), placement=P2, sbp=B)

    @tw.function
    def f(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean(tw.square(tw.matmul(x, w)))
        return tape.gradient(loss, w)
    for spec in _rank_specs(f, x):
        assert spec.pass_stats.get("constant_folding", 0) >= 1
        assert "OnesLike" not in _ops(spec)


def test_rank_threads_use_their_share_of_the_controllers_blas_threads():
    from threadpoolctl import threadpool_limits

    from tensorweave.distribute.ranks import default_world
    from tensorweave.kernels import threads
    mkl = [lib for lib in threads._blas() if lib.internal_api == "mkl"]
    if not mkl:
        pytest.skip("MKL is not loaded (its thread count is per thread; OpenBLAS's is the process's)")
    import numba

    from tensorweave.distribute import plan_function
    from tensorweave.runtime import executor
    f = tw.function(lambda x: x * 2.0)
    x = tw.constant(_arr(4, 3)).to_global(placement=P2, sbp=S(0))
    f(x)
    seen, run_plan = [], executor.run_plan

    def recording(plan, feeds):          # the settings each rank's plan runs under, on whichever thread
        seen.append((plan.spec.label, mkl[0].num_threads, numba.get_num_threads()))
        return run_plan(plan, feeds)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executor, "run_plan", recording)
        for inline in (True, False):
            mp.setattr(plan_function, "INLINE_FIRST_RANK", inline)
            with threadpool_limits(2):
                before = (mkl[0].num_threads, numba.get_num_threads())
                f(x)
                # the controller ran rank 0's plan itself (inline) at the ranks' share and has its own count back
                assert (mkl[0].num_threads, numba.get_num_threads()) == before
    assert [s[1:] for s in seen] == [(1, 1)] * 4 and len({s[0] for s in seen}) == 2   # both ranks, both ways


def test_share_splits_the_controllers_threads_over_the_ranks():
    from tensorweave.distribute.rank_threads import share
    assert [share(8, 2), share(8, 3), share(1, 4), share(2, 1), share(0, 2), share(3, 0)] == [4, 2, 1, 2, 1, 3]
