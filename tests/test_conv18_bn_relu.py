"""Batch norm and its ReLU as one node, forward and backward (issue 18, session 13):
``FusedBatchNormTrainingRelu`` / ``FusedReluGradBatchNormTrainingGrad`` (ops/fused_norm_ops.py),
made by the ``remapping`` pass, kernels in kernels/cpu/batch_norm_kernels.py.

The fused loops == their NumPy twins bit for bit (NaN, negative zero, dead units with an inf
gradient); the fused plans == the unfused plans bit for bit on odd sizes (batch 1, channels not a
multiple of 8, channels first), == eager, and the gradients == float64 finite differences; the
pass leaves alone a ``y`` or a select that something else reads."""
import numpy as np
import pytest

import served_loop

import tensorweave as tw
from tensorweave.kernels.cpu import batch_norm_kernels as bnk
from tensorweave.kernels.cpu import batch_norm_loops as loops
from test_graph_passes import _central_differences, _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(1818)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 3, 4, 37])
def test_relu_loops_match_their_twins_and_the_two_step_loops_bit_for_bit(rows, dtype):
    c = 5
    x = (RNG.standard_normal((rows, c)) * 3 + 1).astype(dtype)
    g = RNG.standard_normal((rows, c)).astype(dtype)
    f = RNG.standard_normal((rows, c)).astype(dtype)
    if rows >= 3:
        x[0, 0], x[1, 1] = np.nan, -0.0
        g[2, 2], f[2, 2] = np.inf, -1.0          # a dead unit with an inf gradient: 0, not nan
        f[1, 3] = np.nan                         # (NaN features: not > 0)
    v64 = RNG.standard_normal(c)
    vec = [RNG.standard_normal(c).astype(dtype) for _ in range(4)]
    masked = np.where(f > 0, g, np.zeros((), dtype))
    for relu_loop, args, outs, plain, plain_args in (
            (loops.scale_shift_relu, [x, vec[0], vec[1], np.full((rows, c), 7, dtype)], 3,
             None, None),
            (loops.grad_sums_relu, [g, f, x, v64, np.ones(c), np.ones(c)], (4, 5),
             loops.grad_sums, [masked, x, v64, np.ones(c), np.ones(c)]),
            (loops.input_grad_relu, [g, f, x] + vec + [np.full((rows, c), 7, dtype)], 7,
             loops.input_grad, [masked, x] + vec + [np.full((rows, c), 7, dtype)])):
        outs = outs if isinstance(outs, tuple) else (outs,)
        results = []
        for fn in (served_loop.compiled(relu_loop, *args), relu_loop.twin):
            copied = [a.copy() for a in args]
            fn(*copied)
            results.append([copied[i] for i in outs])
        for a, b in zip(*results):
            assert _same(a, b), relu_loop.py_func.__name__
        if plain is not None:        # == ReluGrad's select, then the unfused loop
            copied = [a.copy() for a in plain_args]
            served_loop.compiled(plain, *plain_args)(*copied)
            for a, i in zip(results[0], outs):
                assert _same(a, copied[i - 1]), relu_loop.py_func.__name__
    y = np.full((rows, c), 7, dtype)
    served_loop.compiled(loops.scale_shift, x, vec[0], vec[1], y)(x, vec[0], vec[1], y)
    relu_y = np.full((rows, c), 7, dtype)
    served_loop.compiled(loops.scale_shift_relu, x, vec[0], vec[1], relu_y)(x, vec[0], vec[1], relu_y)
    assert _same(relu_y, np.maximum(y, np.zeros((), dtype)))       # Relu's kernel on the output


def test_the_fused_kernels_reject_a_features_unlike_the_gradient():
    x = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    s, z = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="FusedReluGradBatchNormTrainingGrad: gradients"):
        bnk._relu_grad_batch_norm_training_grad(x, x[:1], x, s, z, s, z, z, 1e-3, "NHWC")
    with pytest.raises(ValueError, match="features float64"):
        bnk._batch_norm_training_grad(x, x, s, z, s, z, z, 1e-3, "NHWC", x.astype(np.float64))


def _block(dtype, shape, data_format, w):
    """``loss = sum(relu(batch_norm(x)) * w)`` and the gradients for ``x``, ``scale``, ``offset``."""
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, list(shape))
        c = shape[1] if data_format == "NCHW" else shape[-1]
        scale = tf1.placeholder(dtype, [c])
        offset = tf1.placeholder(dtype, [c])
        y, mean, var = _bn(x, scale, offset, data_format)
        loss = tw.reduce_sum(tw.nn.relu(y) * tw.constant(w))
        grads = tw.gradients(loss, [x, scale, offset])
    return (x, scale, offset), [loss, mean, var] + grads


def _bn(x, scale, offset, data_format):
    from tensorweave.ops.batch_norm_ops import batch_norm_training
    return batch_norm_training(x, scale, offset, 1e-3, data_format)


SHAPES = [((1, 3, 4, 5), "NHWC"), ((3, 5, 4, 11), "NHWC"), ((2, 6, 3, 4), "NCHW"), ((7, 13), "NHWC")]


def _values(shape, data_format, dtype):
    c = shape[1] if data_format == "NCHW" else shape[-1]
    x = (RNG.standard_normal(shape) * 2 + 0.3).astype(dtype)
    return [x, (RNG.standard_normal(c) + 1).astype(dtype), RNG.standard_normal(c).astype(dtype)]


@pytest.mark.parametrize("shape,data_format", SHAPES)
@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_the_pass_fuses_both_directions_with_the_same_bits(shape, data_format, dtype):
    w = RNG.standard_normal(shape).astype(dtype.np_dtype)
    feeds, fetches = _block(dtype, shape, data_format, w)
    values = _values(shape, data_format, dtype.np_dtype)
    plan = _plan(fetches, feeds)
    types = _types(plan)
    assert "FusedBatchNormTrainingRelu" in types and "FusedReluGradBatchNormTrainingGrad" in types
    assert not {"Relu", "ReluGrad", "BatchNormTraining", "BatchNormTrainingGrad"} & set(types)
    on = _run(plan, values)
    off = _run(_plan(fetches, feeds, remapping=False), values)
    for a, b in zip(off, on):
        assert _same(a, b)
    xe, se, oe = (tw.constant(v) for v in values)       # eager (no passes) == graph
    with tw.GradientTape() as tape:
        tape.watch([xe, se, oe])
        y, _, _ = _bn(xe, se, oe, data_format)
        le = tw.reduce_sum(tw.nn.relu(y) * tw.constant(w))
    for a, b in zip(tape.gradient(le, [xe, se, oe]), on[3:]):
        assert _same(a.numpy(), b)


def test_the_fused_gradients_match_float64_finite_differences():
    shape = (3, 2, 3, 3)
    w = RNG.standard_normal(shape)
    feeds, fetches = _block(tw.float64, shape, "NHWC", w)
    values = _values(shape, "NHWC", np.float64)
    plan = _plan(fetches, feeds)
    assert "FusedReluGradBatchNormTrainingGrad" in _types(plan)
    grads = _run(plan, values)[3:]
    lplan = _plan(fetches[:1], feeds)
    for k, grad in enumerate(grads):
        np.testing.assert_allclose(grad, _central_differences(lplan, values, values[k]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seen", ["y", "select", "y fetched", "relu fed"])
def test_values_read_elsewhere_stop_the_fusion(seen):
    shape, c = (3, 4, 5, 6), 6
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, list(shape))
        scale, offset = tf1.placeholder(tw.float32, [c]), tf1.placeholder(tw.float32, [c])
        y, mean, var = _bn(x, scale, offset, "NHWC")
        r = tw.nn.relu(y)
        loss = tw.reduce_sum(r * tw.constant(RNG.standard_normal(shape).astype(np.float32)))
        gx, gs, go = tw.gradients(loss, [x, scale, offset])
        sel = [op for op in g.get_operations() if op.type == "ReluGrad"][0].outputs[0]
        y2, sel2 = y * 2.0, sel * 2.0
    feeds, fetches = [x, scale, offset], [loss, gx, gs, go]
    values = _values(shape, "NHWC", np.float32)
    if seen == "y":
        fetches = fetches + [y2]
    elif seen == "select":
        fetches = fetches + [sel2]
    elif seen == "y fetched":
        fetches = fetches + [y]
    else:
        feeds, values = feeds + [r], values + [np.abs(RNG.standard_normal(shape)).astype(np.float32)]
    plan = _plan(fetches, feeds)
    types = _types(plan)
    if seen in ("y", "y fetched"):
        assert "FusedBatchNormTrainingRelu" not in types and "FusedReluGradBatchNormTrainingGrad" in types
    elif seen == "select":
        assert "FusedBatchNormTrainingRelu" in types and "FusedReluGradBatchNormTrainingGrad" not in types
    else:
        assert "FusedBatchNormTrainingRelu" not in types
    off = _run(_plan(fetches, feeds, remapping=False), values)
    for a, b in zip(off, _run(plan, values)):
        assert _same(a, b)
