"""A residual block's end as one node, forward and backward (issue 18, session 21, res25):
``FusedBatchNormTrainingAddRelu`` / ``FusedReluGradBatchNormTrainingGradSelect``
(ops/fused_norm_ops.py), made by ``runtime/passes/bn_add_relu.py``, kernels in
kernels/cpu/batch_norm_kernels.py.

The new loops == their NumPy twins and the unfused steps bit for bit (NaN, negative zero, a dead
unit with an inf gradient); a block ``relu(bn(x) + bn(x2))`` (the stride-2 shortcut's shape) and
``relu(bn(x) + side)`` fuse in both directions with the unfused plan's bits, == eager, and their
gradients == float64 finite differences; a sum read elsewhere stops the fusion."""
import numpy as np
import pytest

import served_loop

import tensorweave as tw
from tensorweave.kernels.cpu import batch_norm_loops as loops
from test_conv18_bn_relu import _bn, _same
from test_graph_passes import _central_differences, _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(2521)


@pytest.mark.parametrize("rows", [0, 3, 37])
def test_the_loops_match_their_twins_and_the_unfused_steps_bit_for_bit(rows):
    c, dtype = 5, np.float32
    x, s, g, f = ((RNG.standard_normal((rows, c)) * 3 + 1).astype(dtype) for _ in range(4))
    if rows:
        x[0, 0], x[1, 1], s[2, 3] = np.nan, -0.0, -0.0
        g[2, 2], f[2, 2], f[1, 3] = np.inf, -1.0, np.nan     # a dead unit with an inf gradient; NaN features
        f[0, 4] = 0.0                                        # (a zero feature is dead: not > 0)
    a, b, v64 = RNG.standard_normal(c).astype(dtype), RNG.standard_normal(c).astype(dtype), RNG.standard_normal(c)
    for loop, args, outs in ((loops.scale_shift_add_relu, [x, s, a, b, np.full((rows, c), 7, dtype)], (4,)),
                             (loops.grad_sums_relu_select, [g, f, x, np.full((rows, c), 7, dtype), v64,
                                                            np.ones(c), np.ones(c)], (3, 5, 6))):
        results = []
        for fn in (served_loop.compiled(loop, *args), loop.twin):
            copied = [t.copy() for t in args]
            fn(*copied)
            results.append([copied[i] for i in outs])
        for p, q in zip(*results):
            assert _same(p, q), loop.py_func.__name__
        if loop is loops.scale_shift_add_relu:          # scale_shift, AddV2's +, Relu's maximum
            y = np.full((rows, c), 7, dtype)
            served_loop.compiled(loops.scale_shift, x, a, b, y)(x, a, b, y)
            assert _same(results[0][0], np.maximum(y + s, np.zeros((), dtype)))
        else:                                           # ReluGrad's select, then grad_sums
            sel = np.where(f > 0, g, np.zeros((), dtype))
            s1, s2 = np.ones(c), np.ones(c)
            served_loop.compiled(loops.grad_sums, sel, x, v64, s1, s2)(sel, x, v64, s1, s2)
            for p, q in zip(results[0], (sel, s1, s2)):
                assert _same(p, q)


def _block(dtype, shape, data_format, w, shortcut_bn):
    """``loss = sum(relu(bn(x) + side) * w)``, ``side = bn(x2)`` or ``x2 * 1.5``, and the gradients
    for every input."""
    c = shape[1] if data_format == "NCHW" else shape[-1]
    g = tw.Graph()
    with g.as_default():
        feeds = [tf1.placeholder(dtype, s) for s in (list(shape), [c], [c], list(shape), [c], [c])]
        x, scale, offset, x2, scale2, offset2 = feeds
        side = _bn(x2, scale2, offset2, data_format)[0] if shortcut_bn else x2 * tw.constant(1.5, dtype)
        y = _bn(x, scale, offset, data_format)[0]
        loss = tw.reduce_sum(tw.nn.relu(y + side) * tw.constant(w))
        fetches = [loss] + tw.gradients(loss, feeds if shortcut_bn else feeds[:4])
    return feeds, fetches


def _values(shape, data_format, dtype):
    c = shape[1] if data_format == "NCHW" else shape[-1]
    return [v.astype(dtype) for v in (RNG.standard_normal(shape) * 2 + 0.3, RNG.standard_normal(c) + 1,
                                      RNG.standard_normal(c), RNG.standard_normal(shape),
                                      RNG.standard_normal(c) + 1, RNG.standard_normal(c))]


@pytest.mark.parametrize("shape,data_format,shortcut_bn,dtype", [((3, 5, 4, 11), "NHWC", True, tw.float32),
                                                                  ((2, 6, 3, 4), "NCHW", False, tw.float32),
                                                                  ((1, 3, 4, 5), "NHWC", False, tw.float64)])
def test_the_pass_fuses_both_directions_with_the_unfused_bits_and_eager(shape, data_format, shortcut_bn, dtype):
    w = RNG.standard_normal(shape).astype(dtype.np_dtype)
    feeds, fetches = _block(dtype, shape, data_format, w, shortcut_bn)
    values = _values(shape, data_format, dtype.np_dtype)
    plan = _plan(fetches, feeds)
    types = _types(plan)
    assert "FusedBatchNormTrainingAddRelu" in types and "FusedReluGradBatchNormTrainingGradSelect" in types
    assert not {"Relu", "ReluGrad"} & set(types)
    on = _run(plan, values)
    for a, b in zip(_run(_plan(fetches, feeds, remapping=False), values), on):
        assert _same(a, b)
    ev = [tw.constant(v) for v in values]               # eager (no passes) == graph
    with tw.GradientTape() as tape:
        tape.watch(ev)
        side = _bn(*ev[3:], data_format)[0] if shortcut_bn else ev[3] * tw.constant(1.5, dtype)
        le = tw.reduce_sum(tw.nn.relu(_bn(*ev[:3], data_format)[0] + side) * tw.constant(w))
    eager = tape.gradient(le, ev if shortcut_bn else ev[:4])
    assert len(eager) == len(on) - 1
    for a, b in zip(eager, on[1:]):
        assert _same(a.numpy(), b)


def test_the_fused_gradients_match_float64_finite_differences():
    shape = (2, 2, 3, 3)
    feeds, fetches = _block(tw.float64, shape, "NHWC", RNG.standard_normal(shape), True)
    values = _values(shape, "NHWC", np.float64)
    plan = _plan(fetches, feeds)
    assert "FusedReluGradBatchNormTrainingGradSelect" in _types(plan)
    lplan = _plan(fetches[:1], feeds)
    for k, grad in enumerate(_run(plan, values)[1:]):
        np.testing.assert_allclose(grad, _central_differences(lplan, values, values[k]), rtol=1e-5, atol=1e-6)


def test_a_sum_read_elsewhere_stops_the_forward_fusion():
    shape = (2, 3, 3, 4)
    g = tw.Graph()
    with g.as_default():
        x, s = tf1.placeholder(tw.float32, list(shape)), tf1.placeholder(tw.float32, list(shape))
        one, zero = tw.constant(np.ones(4, np.float32)), tw.constant(np.zeros(4, np.float32))
        z = _bn(x, one, zero, "NHWC")[0] + s
        fetches = [tw.nn.relu(z), z * 2.0]
    values = [RNG.standard_normal(shape).astype(np.float32) for _ in range(2)]
    plan = _plan(fetches, [x, s])
    assert "FusedBatchNormTrainingAddRelu" not in _types(plan)
    for a, b in zip(_run(_plan(fetches, [x, s], remapping=False), values), _run(plan, values)):
        assert _same(a, b)
