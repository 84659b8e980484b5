"""The fused batch-norm kernels (``kernels/cpu/batch_norm_kernels.py``): compiled loops == their
NumPy twins bit for bit, results independent of the thread count and the chunking, the
statistics accurate when the mean dwarfs the spread, and the Keras layer on the fused op ==
its composite path. (Values and gradients against references: ``tests/opinfos/batch_norm.py``.)"""
import numpy as np
import pytest

import served_loop

import tensorweave as tw
from tensorweave.kernels.cpu import batch_norm_kernels as bnk
from tensorweave.kernels.cpu import batch_norm_loops as loops
from tensorweave.kernels.cpu import tiles

RNG = np.random.default_rng(18)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _run_both(kernel, args, outs):
    """The compiled kernel and its twin on copies of the output arguments (positions ``outs``)."""
    results = []
    for fn in (served_loop.compiled(kernel, *args), kernel.twin):
        copied = [a.copy() if i in outs else a for i, a in enumerate(args)]
        fn(*copied)
        results.append([copied[i] for i in outs])
    return results


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 3, 4, 37])
def test_loops_match_their_twins_bit_for_bit(rows, dtype):
    c = 5
    x = (RNG.standard_normal((rows, c)) * 3 + 1).astype(dtype)
    dy = RNG.standard_normal((rows, c)).astype(dtype)
    v64 = RNG.standard_normal(c)
    acc = [RNG.standard_normal(c), RNG.standard_normal(c)]   # the loops add into what is there
    vec = [RNG.standard_normal(c).astype(dtype) for _ in range(4)]
    out = np.full((rows, c), 7, dtype)
    for kernel, args, outs in ((loops.moments, [x, v64] + acc, (2, 3)),
                               (loops.grad_sums, [dy, x, v64] + acc, (3, 4)),
                               (loops.scale_shift, [x, vec[0], vec[1], out], (3,)),
                               (loops.input_grad, [dy, x] + vec + [out], (6,))):
        compiled, twin = _run_both(kernel, args, outs)
        for a, b in zip(compiled, twin):
            assert _same(a, b), kernel.py_func.__name__


def test_sums_do_not_depend_on_threads_or_tiles(monkeypatch):
    x = RNG.standard_normal((3 * bnk.SUM_ROWS + 5, 6)).astype(np.float32)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    scale, offset = np.float32(1.5) * np.ones(6, np.float32), np.zeros(6, np.float32)
    ones = np.ones(6, np.float32) * 0
    first = bnk._batch_norm_training(x, scale, offset, 1e-3, "NHWC")
    g1 = bnk._batch_norm_training_grad(dy, x, scale, first[1], first[2], ones, ones, 1e-3, "NHWC")
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: 1)
    monkeypatch.setattr(bnk, "PASS_ROWS", 7)   # many small elementwise tiles
    second = bnk._batch_norm_training(x, scale, offset, 1e-3, "NHWC")
    g2 = bnk._batch_norm_training_grad(dy, x, scale, first[1], first[2], ones, ones, 1e-3, "NHWC")
    for a, b in zip(first + g1, second + g2):
        assert _same(a, b)


@pytest.mark.parametrize("dtype,offset", [(np.float32, 1e4), (np.float64, 1e8)])
def test_statistics_are_accurate_when_the_mean_dwarfs_the_spread(dtype, offset):
    # std 1 under a mean of 1e4 (float32) or 1e8 (float64): E[x^2] - E[x]^2 without a shift loses
    # the variance to rounding (1e16 * 2^-53 ~ 1 in float64)
    x = (offset + RNG.standard_normal((4096, 3))).astype(dtype)
    _, mean, var = bnk._batch_norm_training(x, np.ones(3, dtype), np.zeros(3, dtype), 0.0, "NHWC")
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(var, x64.var(0), rtol=1e-6)
    np.testing.assert_allclose(mean, x64.mean(0), rtol=1e-7)


def test_constant_channels_with_zero_epsilon_are_quiet():
    """A constant channel with ``epsilon`` 0 divides by zero: inf/NaN as TensorFlow, no warnings."""
    import warnings
    x, vec = np.ones((8, 2), np.float32), np.ones(2, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, mean, var = bnk._batch_norm_training(x, vec, vec, 0.0, "NHWC")
        dx = bnk._batch_norm_training_grad(x, x, vec, mean, var, vec * 0, vec * 0, 0.0, "NHWC")[0]
    assert np.isnan(y).all() and not np.isfinite(dx).any()


def test_statistics_gradients_reach_x():
    """``mean_grad``/``variance_grad`` add ``1/M`` and ``2 (x - mean) / M`` per element."""
    x = RNG.standard_normal((6, 2))
    zero = np.zeros(2)
    mean, var = x.mean(0), x.var(0)
    base = bnk._batch_norm_training_grad(np.zeros_like(x), x, np.ones(2), mean, var, zero, zero, 1e-3, "NHWC")[0]
    gm = bnk._batch_norm_training_grad(np.zeros_like(x), x, np.ones(2), mean, var, np.array([6.0, 0.0]), zero,
                                       1e-3, "NHWC")[0]
    gv = bnk._batch_norm_training_grad(np.zeros_like(x), x, np.ones(2), mean, var, zero, np.array([0.0, 3.0]),
                                       1e-3, "NHWC")[0]
    np.testing.assert_allclose(base, 0.0)
    np.testing.assert_allclose(gm, np.stack([np.ones(6), np.zeros(6)], 1))
    np.testing.assert_allclose(gv[:, 1], 2 * 3.0 * (x[:, 1] - mean[1]) / 6)


@pytest.mark.parametrize("axis,shape", [(-1, (4, 3, 3, 5)), (1, (4, 5, 3, 3)), (-1, (7, 5))])
def test_keras_layer_fused_equals_composite(axis, shape):
    x = RNG.standard_normal(shape).astype(np.float32) * 2 + 0.5
    layer = tw.keras.layers.BatchNormalization(axis=axis, momentum=0.5)
    ref = tw.keras.layers.BatchNormalization(axis=axis, momentum=0.5)
    layer.build(shape)
    ref.build(shape)
    ref.set_weights(layer.get_weights())
    xt = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt, training=True)
        loss = tw.reduce_sum(y * y)
    # the composite path: a mask (all ones) takes it, as the fused op has none
    y_ref = ref(xt, training=True, mask=np.ones(shape[:1], bool)) if len(shape) == 2 else None
    graph_ops = [op.type for op in tw.function(lambda v: layer(v, training=True)).get_concrete_function(
        tw.TensorSpec(shape, tw.float32)).graph.get_operations()]
    assert "BatchNormTraining" in graph_ops
    x64 = x.astype(np.float64)
    ax = tuple(i for i in range(len(shape)) if i != axis % len(shape))
    mean, var = x64.mean(ax, keepdims=True), x64.var(ax, keepdims=True)
    np.testing.assert_allclose(y.numpy(), (x64 - mean) / np.sqrt(var + 1e-3), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.5 * mean.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.5 + 0.5 * var.ravel(), rtol=1e-5)
    if y_ref is not None:
        np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
    assert np.isfinite(tape.gradient(loss, xt).numpy()).all()


@pytest.mark.parametrize("shape,data_format", [((2, 3, 0), "NHWC"), ((2, 0, 3), "NCHW"), ((0, 4), "NHWC")])
def test_empty_channels_or_batch(shape, data_format):
    x = np.ones(shape, np.float32)
    c = shape[1] if data_format == "NCHW" else shape[-1]
    vec = np.ones(c, np.float32)
    y, mean, var = bnk._batch_norm_training(x, vec, vec, 1e-3, data_format)
    assert y.shape == x.shape and mean.shape == var.shape == (c,)
    dx, ds, do = bnk._batch_norm_training_grad(x, x, vec, mean, var, vec * 0, vec * 0, 1e-3, data_format)
    assert dx.shape == x.shape and ds.shape == do.shape == (c,)


@pytest.mark.parametrize("dy_shape,dtype", [((4, 3), np.float32), ((6, 3), np.float32), ((5, 3), np.float64)])
def test_gradient_kernel_rejects_a_dy_unlike_x(dy_shape, dtype):
    x, vec = np.ones((5, 3), np.float32), np.ones(3, np.float32)
    with pytest.raises(ValueError, match="dy must have x's shape and dtype"):
        bnk._batch_norm_training_grad(np.ones(dy_shape, dtype), x, vec, vec, vec, vec, vec, 1e-3, "NHWC")


def test_op_rejects_a_dy_unlike_x_with_the_op_name():
    from tensorweave.ops.batch_norm_ops import _infer_grad
    vec = tw.TensorSpec([3], tw.float32)
    with pytest.raises(ValueError, match="BatchNormTrainingGrad: dy must have x's shape and dtype"):
        _infer_grad([tw.TensorSpec([4, 3], tw.float32), tw.TensorSpec([5, 3], tw.float32)] + [vec] * 5, {})


def test_bad_inputs_get_clear_errors():
    from tensorweave.ops.batch_norm_ops import batch_norm_training
    with pytest.raises(TypeError, match="BatchNormTraining does not support dtype int32"):
        batch_norm_training(tw.constant([[1, 2]]), [1.0, 1.0], [0.0, 0.0])
    with pytest.raises(ValueError, match=r"scale must be 1-D with one value per channel \(2\), got shape \[3\]"):
        batch_norm_training(tw.ones([4, 2]), [1.0, 1.0, 1.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="x must have rank >= 2"):
        batch_norm_training(tw.ones([4]), [1.0], [0.0])


def test_kernels_reject_per_channel_arguments_that_are_not_vectors():
    x, vec, mat = np.ones((5, 3), np.float32), np.ones(3, np.float32), np.ones((1, 3), np.float32)
    with pytest.raises(ValueError, match="scale and offset must be 1-D"):
        bnk._batch_norm_training(x, mat, vec, 1e-3, "NHWC")
    with pytest.raises(ValueError, match="must be 1-D"):
        bnk._batch_norm_training_grad(x, x, vec, vec, mat, vec, vec, 1e-3, "NHWC")
    with pytest.raises(ValueError, match="rank >= 2"):
        bnk._batch_norm_training(np.ones(3, np.float32), vec, vec, 1e-3, "NHWC")


@pytest.mark.parametrize("data_format,shape", [("NHWC", (3, 2, 2, 3)), ("NCHW", (3, 3, 2, 2))])
def test_second_order_equals_the_composite_graphs(data_format, shape):
    """Hessian-vector products through the fused op == through moments + batch_normalization
    (ordinary differentiable ops), with a loss that is not linear in the statistics outputs, so
    their gradients depend on x too."""
    from tensorweave.ops.batch_norm_ops import batch_norm_training
    x0 = RNG.standard_normal(shape)
    c = shape[1] if data_format == "NCHW" else shape[-1]
    scale0, offset0 = RNG.uniform(0.5, 2, c), RNG.uniform(-1, 1, c)
    w, u = RNG.standard_normal(shape), RNG.standard_normal(shape)
    axes = [0, 2, 3] if data_format == "NCHW" else [0, 1, 2]

    def pc(v):
        return tw.reshape(v, [-1, 1, 1]) if data_format == "NCHW" else v

    def hvp(fused):
        x, scale, offset = tw.constant(x0), tw.constant(scale0), tw.constant(offset0)
        with tw.GradientTape() as outer:
            outer.watch([x, scale, offset])
            with tw.GradientTape() as inner:
                inner.watch([x, scale, offset])
                if fused:
                    y, mean, var = batch_norm_training(x, scale, offset, 1e-3, data_format)
                else:
                    mean, var = tw.nn.moments(x, axes=axes)
                    y = tw.nn.batch_normalization(x, pc(mean), pc(var), pc(offset), pc(scale), 1e-3)
                loss = tw.reduce_sum(y * w) + tw.reduce_sum(mean * mean) + 0.5 * tw.reduce_sum(var * var)
            gx, gs = inner.gradient(loss, [x, scale])
            dot = tw.reduce_sum(gx * u) + tw.reduce_sum(gs * scale0)
        return [g.numpy() for g in outer.gradient(dot, [x, scale])]   # offset: no second order
    for a, b in zip(hvp(True), hvp(False)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
