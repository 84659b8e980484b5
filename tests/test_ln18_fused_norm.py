"""The fused layer norm and the one-op softmax gradient (``kernels/cpu/layer_norm_kernels.py``):
compiled loops == their NumPy twins bit for bit, results independent of the thread count and the
tiling, Keras' LayerNormalization on the fused op == its composite path (values and gradients,
eager and graph, mixed precision), the SavedModel round trip, and clear errors. (Values and
first/second-order gradients against float64 references: ``tests/opinfos/layer_norm.py``.)"""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras.layers import normalization as N
from tensorweave.kernels.cpu import jit, tiles
from tensorweave.kernels.cpu import layer_norm_kernels as lnk
from tensorweave.kernels.cpu import layer_norm_loops as loops
from tensorweave.ops import softmax_grad_ops
from tensorweave.ops.layer_norm_ops import layer_norm

RNG = np.random.default_rng(1814)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _run_both(kernel, args, outs):
    """The compiled kernel and its twin on copies of the output arguments (positions ``outs``)."""
    results = []
    for fn in (jit.compile_now(kernel, *args), kernel.twin):
        copied = [a.copy() if i in outs else a for i, a in enumerate(args)]
        fn(*copied)
        results.append([copied[i] for i in outs])
    return results


@pytest.mark.parametrize("rows,n", [(0, 8), (3, 5), (4, 16), (5, 21)])
@pytest.mark.parametrize("rms", [False, True])
def test_loops_match_their_twins_bit_for_bit(rows, n, rms, dtype=np.float32):   # (one dtype: compiles are slow)
    x = (RNG.standard_normal((rows, n)) * 3 + 1).astype(dtype)
    dy = RNG.standard_normal((rows, n)).astype(dtype)
    gamma, beta = (RNG.standard_normal(n).astype(dtype) for _ in range(2))
    y, mean, inv = np.empty_like(x), np.empty(rows, dtype), np.empty(rows, dtype)
    fwd = _run_both(loops.forward, [x, x, False, gamma, beta, np.float64(1e-3), rms, y, mean, inv], (7, 8, 9))
    mean, inv = fwd[0][1], fwd[0][2]
    gm, gi = RNG.standard_normal(rows), RNG.standard_normal(rows)       # statistics' gradients too
    acc = [RNG.standard_normal(n), RNG.standard_normal(n)]              # the loop adds into what is there
    bwd = _run_both(loops.backward, [dy, x, gamma, mean, inv, gm, gi, rms, np.empty_like(x)] + acc, (8, 9, 10))
    probs = np.exp(x) / np.exp(x).sum(-1, keepdims=True) if n else x
    sm = _run_both(loops.softmax_grad, [probs.astype(dtype), dy, dtype(0.125), np.empty_like(x)], (3,))
    for compiled, twin in (fwd, bwd, sm):
        for a, b in zip(compiled, twin):
            assert _same(a, b)


def test_lane_sum_order_is_the_twins():
    # values whose float64 sum depends on the order: lane 0 holds 1e16, lanes 1-7 a 1 each, added
    # pairwise (1e16 + 1 rounds to 1e16, 1e16 + 2 does not) -> 1e16 + 6; the tail -1e16, 1, 1 -> 8
    # (one after another: 1e16 absorbs each 1 -> 2)
    s = np.array([1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1e16, 1.0, 1.0])
    assert loops.lane_sum(s) == loops.lane_sums_twin(s[None])[0] == 8.0


def test_results_do_not_depend_on_threads_or_tiles(monkeypatch):
    x = RNG.standard_normal((300, 24)).astype(np.float32)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    gamma, beta = np.full(24, 1.5, np.float32), np.full(24, 0.25, np.float32)
    zeros = np.zeros(300, np.float32)
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 24 * 4 * 16)   # 19 tiles on two threads
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: 2)
    monkeypatch.setattr(lnk.split_passes, "parts_for", lambda nbytes, rows: 2)   # (split: issue 18 tx22)
    first = lnk._layer_norm(x, gamma, beta, 1e-3, -1, False)
    g1 = lnk._layer_norm_grad(dy, x, gamma, first[1], first[2], zeros, zeros, 1e-3, -1, False)
    s1 = lnk._softmax_grad(np.abs(x), dy, -1, 0.5)
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: 1)
    second = lnk._layer_norm(x, gamma, beta, 1e-3, -1, False)
    g2 = lnk._layer_norm_grad(dy, x, gamma, first[1], first[2], zeros, zeros, 1e-3, -1, False)
    s2 = lnk._softmax_grad(np.abs(x), dy, -1, 0.5)
    for a, b in zip(first + g1 + (s1,), second + g2 + (s2,)):
        assert _same(a, b)
    # dgamma/dbeta: the tiles' partial sums added in tile order, each tile's rows in order
    xh = (x - first[1][:, None]) * first[2][:, None]
    parts = [(dy[r:r + 16].astype(np.float64) * xh[r:r + 16]).sum(0) for r in range(0, 300, 16)]
    np.testing.assert_allclose(g1[1], np.sum(parts, 0), rtol=1e-6)


def test_statistics_are_accurate_when_the_mean_dwarfs_the_spread():
    x = (1e4 + RNG.standard_normal((3, 512))).astype(np.float32)
    _, mean, inv = lnk._layer_norm(x, np.ones(512, np.float32), np.zeros(512, np.float32), 0.0, -1, False)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(1), rtol=1e-7)
    np.testing.assert_allclose(inv, 1 / x64.std(1), rtol=1e-6)


def _layer_run(layer, x, fused, graph):
    """(y, dx, dgamma[, dbeta]) of ``sum(y * w)`` through ``layer`` on its fused or composite path."""
    w = tw.constant(np.cos(np.arange(x.size)).reshape(x.shape).astype(np.float32))

    def step(v):
        with tw.GradientTape() as tape:
            tape.watch(v)
            y = layer(v)
            loss = tw.reduce_sum(tw.cast(y, tw.float32) * w)
        return [y] + tape.gradient(loss, [v] + layer.trainable_weights)
    old = N.FUSED_LAYER_NORM
    N.FUSED_LAYER_NORM = fused
    try:
        out = (tw.function(step) if graph else step)(tw.constant(x))
    finally:
        N.FUSED_LAYER_NORM = old
    return [np.asarray(t.numpy(), np.float64) for t in out]


@pytest.mark.parametrize("kwargs,shape", [({}, (3, 4, 10)), ({"axis": [1, 2], "epsilon": 1e-5}, (2, 3, 4)),
                                          ({"rms_scaling": True}, (4, 9)), ({"center": False, "scale": False}, (3, 6)),
                                          ({"axis": 1}, (2, 5, 3))])
def test_layer_fused_equals_its_composite_eager_and_graph(kwargs, shape):
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    layer = N.LayerNormalization(**kwargs, gamma_initializer="random_normal", beta_initializer="random_normal")
    layer.build(shape)
    ref = _layer_run(layer, x, fused=False, graph=False)
    for graph in (False, True):
        got = _layer_run(layer, x, fused=True, graph=graph)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def _graph_op_types(layer, shape):
    fn = tw.function(lambda v: layer(v))
    return [op.type for op in fn.get_concrete_function(tw.TensorSpec(shape, tw.float32)).graph.get_operations()]


def test_layer_over_trailing_axes_is_one_op_and_other_axes_the_composite():
    assert "LayerNorm" in _graph_op_types(N.LayerNormalization(axis=[-2, -1]), (2, 3, 4))
    types = _graph_op_types(N.LayerNormalization(axis=1), (2, 3, 4))
    assert "LayerNorm" not in types and "Mean" in types or "Sum" in types


def test_mixed_precision_input_is_computed_in_float32():
    x = (RNG.standard_normal((4, 12)) * 3).astype(np.float16)
    layer = N.LayerNormalization(epsilon=1e-5, dtype="float16")    # float16 weights and inputs
    y = layer(tw.constant(x))
    assert y.dtype == tw.float16
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref, rtol=2e-3, atol=2e-3)


def test_saved_model_round_trip(tmp_path):
    layer = N.LayerNormalization(gamma_initializer="random_normal", beta_initializer="random_normal")
    layer.build((None, 6))

    class Holder(tw.Module):
        pass
    h = Holder()
    h.layer = layer
    h.f = tw.function(lambda v: layer(v), input_signature=[tw.TensorSpec([None, 6], tw.float32)])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    want = h.f(tw.constant(x)).numpy()
    tw.saved_model.save(h, str(tmp_path / "ln"))
    got = tw.saved_model.load(str(tmp_path / "ln")).f(tw.constant(x)).numpy()
    assert _same(got, want)


def test_softmax_gradient_is_one_op_and_equals_the_composite(monkeypatch):
    x = tw.constant(RNG.standard_normal((3, 7)).astype(np.float32))
    w = tw.constant(RNG.standard_normal((3, 7)).astype(np.float32))

    def grad(v):
        with tw.GradientTape() as tape:
            tape.watch(v)
            loss = tw.reduce_sum(tw.nn.softmax(v * 0.125) * w)
        return tape.gradient(loss, v)
    monkeypatch.setattr(softmax_grad_ops, "FUSED", True)
    fused = grad(x).numpy()
    types = [op.type for op in tw.function(grad).get_concrete_function(
        tw.TensorSpec([3, 7], tw.float32)).graph.get_operations()]
    assert "SoftmaxGrad" in types
    monkeypatch.setattr(softmax_grad_ops, "FUSED", False)
    np.testing.assert_allclose(fused, grad(x).numpy(), rtol=1e-5, atol=1e-7)


def test_bad_inputs_get_clear_errors():
    x = tw.constant(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"LayerNorm: gamma must be shaped like the normalized axes \[4\]"):
        layer_norm(x, np.ones(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="begin_norm_axis=2 is out of range"):
        layer_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32), begin_norm_axis=2)
    with pytest.raises(TypeError, match="LayerNorm does not support dtype int32"):
        layer_norm(tw.constant([[1, 2]]), [1.0, 1.0], [0.0, 0.0])
    with pytest.raises(TypeError, match="gamma must be float32 for x of dtype float16"):
        layer_norm(tw.constant(np.ones((2, 2), np.float16)), tw.constant([1.0, 1.0], tw.float16), [0.0, 0.0])
    with pytest.raises(ValueError, match="SoftmaxGrad: the gradient must have the softmax output's shape"):
        softmax_grad_ops.softmax_grad(tw.ones([2, 3]), tw.ones([2, 4]))


@pytest.mark.parametrize("rms", [False, True])
def test_second_order_through_every_first_order_output_equals_the_composite(rms):
    # the op table's second-order check differentiates dx only; here dgamma and dbeta too (their
    # cotangents reach dy in LayerNormGrad's own gradient), against the composite's autodiff
    x = tw.constant(RNG.standard_normal((3, 2, 6)))
    w = tw.constant(RNG.standard_normal((3, 2, 6)))
    layer = N.LayerNormalization(rms_scaling=rms, dtype="float64", gamma_initializer="random_normal",
                                 beta_initializer="random_normal")
    layer.build((3, 2, 6))
    cs = [tw.constant(RNG.standard_normal(s)) for s in ((3, 2, 6), (6,), (6,))]

    def second(fused):
        old = N.FUSED_LAYER_NORM
        N.FUSED_LAYER_NORM = fused
        try:
            with tw.GradientTape() as outer:
                outer.watch(x)
                with tw.GradientTape() as inner:
                    inner.watch(x)
                    y = layer(x)
                    loss = tw.reduce_sum(y * y * w)
                firsts = inner.gradient(loss, [x] + layer.trainable_weights)
                z = tw.add_n([tw.reduce_sum(g * c) for g, c in zip(firsts, cs)])
            return [t.numpy() for t in outer.gradient(z, [x] + layer.trainable_weights)]
        finally:
            N.FUSED_LAYER_NORM = old
    for a, b in zip(second(True), second(False)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


def test_second_order_through_the_statistics_outputs_matches_finite_differences():
    # a loss of the mean and inv outputs too: their gradients (LayerNormGrad's mean_grad/inv_grad)
    # then depend on x, and the second order runs through their coefficients
    xv = RNG.standard_normal((4, 7))
    w, c, v = (tw.constant(RNG.standard_normal((4, 7))) for _ in range(3))
    k1, k2 = tw.constant(RNG.standard_normal(4)), tw.constant(RNG.standard_normal(4))
    gamma, beta = tw.constant(RNG.standard_normal(7)), tw.constant(RNG.standard_normal(7))

    def first_dot_c(x):
        with tw.GradientTape() as tape:
            tape.watch(x)
            y, mean, inv = layer_norm(x, gamma, beta, 1e-3)
            loss = tw.reduce_sum(y * w) + tw.reduce_sum(inv * inv * k1) + tw.reduce_sum(mean * mean * k2)
        return tw.reduce_sum(tape.gradient(loss, x) * c)
    x = tw.constant(xv)
    with tw.GradientTape() as outer:
        outer.watch(x)
        z = first_dot_c(x)
    hess_c = outer.gradient(z, x).numpy()
    h = 1e-5
    fd = (first_dot_c(tw.constant(xv + h * v.numpy())).numpy()
          - first_dot_c(tw.constant(xv - h * v.numpy())).numpy()) / (2 * h)
    np.testing.assert_allclose((hess_c * v.numpy()).sum(), fd, rtol=1e-6, atol=1e-8)
