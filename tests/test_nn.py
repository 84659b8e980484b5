"""Specific tests for ``tw.nn`` beyond the op table (tests/opinfos/nn.py)."""
import numpy as np
import pytest

import tensorweave as tw
from opinfos.nn import ref_conv


def _nchw(a):
    return np.transpose(a, (0, 3, 1, 2))


def _nhwc(a):
    return np.transpose(a, (0, 2, 3, 1))


# ---- data formats ------------------------------------------------------------------------------
@pytest.mark.parametrize("strides,padding,dilations", [(1, "SAME", 1), (2, "VALID", 1), ([2, 1], "SAME", 1),
                                                       (1, "SAME", 2), (1, [[1, 0], [0, 2]], 1)])
def test_conv2d_nchw_equals_nhwc(rng, strides, padding, dilations):
    x = rng.standard_normal((2, 7, 6, 3))
    f = rng.standard_normal((3, 2, 3, 4))
    a = tw.nn.conv2d(x, f, strides, padding, dilations=dilations).numpy()
    b = tw.nn.conv2d(_nchw(x), f, strides, padding, data_format="NCHW", dilations=dilations).numpy()
    np.testing.assert_allclose(_nchw(a), b, rtol=1e-12, atol=1e-12)


def test_other_ops_nchw_equals_nhwc(rng):
    x = rng.standard_normal((2, 6, 5, 4))
    xc = tw.constant(_nchw(x))
    pairs = [
        (tw.nn.max_pool2d(x, 3, 2, "SAME"), tw.nn.max_pool2d(xc, 3, 2, "SAME", data_format="NCHW")),
        (tw.nn.avg_pool2d(x, [2, 3], 1, "SAME"), tw.nn.avg_pool2d(xc, [2, 3], 1, "SAME", data_format="NCHW")),
        (tw.nn.bias_add(x, np.arange(4.0)), tw.nn.bias_add(xc, np.arange(4.0), data_format="NCHW")),
        (tw.nn.fused_batch_norm(x, np.ones(4), np.zeros(4))[0],
         tw.nn.fused_batch_norm(xc, np.ones(4), np.zeros(4), data_format="NCHW")[0]),
    ]
    for a, b in pairs:
        np.testing.assert_allclose(_nchw(a.numpy()), b.numpy(), rtol=1e-12, atol=1e-12)
    f = rng.standard_normal((2, 2, 4, 2))
    a = tw.nn.depthwise_conv2d(x, f, [1, 2, 2, 1], "SAME")
    b = tw.nn.depthwise_conv2d(xc, f, [1, 1, 2, 2], "SAME", data_format="NCHW")
    np.testing.assert_allclose(_nchw(a.numpy()), b.numpy(), rtol=1e-12, atol=1e-12)


def test_conv2d_transpose_nchw_equals_nhwc(rng):
    dy = rng.standard_normal((1, 3, 3, 2))
    f = rng.standard_normal((3, 3, 4, 2))
    a = tw.nn.conv2d_transpose(dy, f, [1, 6, 5, 4], 2, "SAME")
    b = tw.nn.conv2d_transpose(_nchw(dy), f, [1, 4, 6, 5], 2, "SAME", data_format="NCHW")
    np.testing.assert_allclose(_nchw(a.numpy()), b.numpy(), rtol=1e-12, atol=1e-12)


# ---- conv2d_transpose is the gradient of conv2d --------------------------------------------------
@pytest.mark.parametrize("strides,padding", [(2, "SAME"), (2, "VALID"), (3, "SAME"), (1, "VALID")])
def test_conv2d_transpose_is_conv2d_gradient(rng, strides, padding):
    x = tw.constant(rng.standard_normal((2, 7, 8, 3)))
    f = tw.constant(rng.standard_normal((3, 3, 3, 5)))
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.nn.conv2d(x, f, strides, padding)
        dy = tw.constant(rng.standard_normal(y.shape.as_list()))
        loss = tw.reduce_sum(y * dy)
    gx = tape.gradient(loss, x)
    t = tw.nn.conv2d_transpose(dy, f, [2, 7, 8, 3], strides, padding)
    np.testing.assert_allclose(t.numpy(), gx.numpy(), rtol=1e-10, atol=1e-10)
    # and the TF1 spelling
    t1 = tw.nn.conv2d_backprop_input([2, 7, 8, 3], f, dy, strides, padding)
    np.testing.assert_allclose(t1.numpy(), gx.numpy(), rtol=1e-10, atol=1e-10)


def test_conv2d_transpose_checks_output_shape(rng):
    with pytest.raises(ValueError, match=r"out_backprop has shape \[1,3,3,2\].*gives \[1,5,5,2\]"):
        tw.nn.conv2d_transpose(rng.standard_normal((1, 3, 3, 2)), rng.standard_normal((3, 3, 4, 2)),
                               [1, 10, 10, 4], 2, "SAME")


def test_second_order_through_conv(rng):
    """A gradient penalty: d/dx ||d loss/d f||^2 needs the backprop ops' own gradients."""
    x0 = rng.standard_normal((1, 5, 5, 2))
    f = tw.constant(rng.standard_normal((3, 3, 2, 2)))

    def penalty(xv):
        x = tw.constant(xv)
        with tw.GradientTape() as outer:
            outer.watch(x)
            with tw.GradientTape() as inner:
                inner.watch(f)
                y = tw.nn.conv2d(x, f, 2, "SAME")
                loss = tw.reduce_sum(tw.tanh(y))
            gf = inner.gradient(loss, f)
            p = tw.reduce_sum(gf * gf)
        return float(p), outer.gradient(p, x).numpy()

    _, ana = penalty(x0)
    num = np.zeros_like(x0)
    eps = 1e-6
    for i in np.ndindex(*x0.shape):
        xp, xm = x0.copy(), x0.copy()
        xp[i] += eps
        xm[i] -= eps
        num[i] = (penalty(xp)[0] - penalty(xm)[0]) / (2 * eps)
    np.testing.assert_allclose(ana, num, rtol=1e-5, atol=1e-6)


# ---- error messages ------------------------------------------------------------------------------
def test_conv2d_wrong_channels_names_shapes():
    with pytest.raises(ValueError) as e:
        tw.nn.conv2d(tw.ones([1, 5, 5, 3]), tw.ones([3, 3, 4, 2]), 1, "SAME")
    msg = str(e.value)
    assert "input depth must be evenly divisible by filter depth: 3 vs 4" in msg
    assert "[1,5,5,3]" in msg and "[3,3,4,2]" in msg and "Conv2D" in msg


def test_conv2d_wrong_channels_graph_mode():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 5, 5, 3])
        with pytest.raises(ValueError) as e:
            tw.nn.conv2d(x, tw.ones([3, 3, 4, 2]), 1, "SAME")
    msg = str(e.value)
    assert "3 vs 4" in msg and "[?,5,5,3]" in msg and "node 'Conv2D'" in msg and "test_nn.py" in msg


def test_conv2d_argument_errors():
    x, f = tw.ones([1, 5, 5, 3]), tw.ones([3, 3, 3, 2])
    with pytest.raises(ValueError, match="must be 4-D"):
        tw.nn.conv2d(tw.ones([5, 5, 3]), f, 1, "SAME")
    with pytest.raises(ValueError, match="padding must be"):
        tw.nn.conv2d(x, f, 1, "FULL")
    with pytest.raises(ValueError, match="batch and channel dimensions must be 1"):
        tw.nn.conv2d(x, f, [2, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="data_format"):
        tw.nn.conv2d(x, f, 1, "SAME", data_format="NWC")
    with pytest.raises(ValueError, match="output size would be negative"):
        tw.nn.conv2d(tw.ones([1, 2, 2, 3]), f, 1, "VALID")
    with pytest.raises(TypeError, match="Mixed dtypes"):
        tw.nn.conv2d(x, tw.ones([3, 3, 3, 2], dtype=tw.float64), 1, "SAME")
    with pytest.raises(ValueError, match="filter expects in_channels=4"):
        tw.nn.depthwise_conv2d(x, tw.ones([3, 3, 4, 1]), [1, 1, 1, 1], "SAME")


def test_bias_add_and_pool_errors():
    with pytest.raises(ValueError, match=r"as many biases.*bias shape \[2\] vs. value shape \[2,3\]"):
        tw.nn.bias_add(tw.ones([2, 3]), [1.0, 2.0])
    with pytest.raises(ValueError, match=r"must be 4-D.*got shape \[2,3\]"):
        tw.nn.max_pool2d(tw.ones([2, 3]), 2, 2, "VALID")
    with pytest.raises(TypeError, match="int32"):
        tw.nn.softmax(tw.constant([1, 2]))
    with pytest.raises(TypeError, match="int32"):
        tw.nn.avg_pool2d(tw.ones([1, 2, 2, 1], dtype=tw.int32), 2, 2, "VALID")


def test_sparse_labels_out_of_range():
    logits = tw.ones([3, 4])
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"label value of 4.*valid range of \[0, 4\)"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 4, 1], logits=logits)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"label value of -1"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, -1, 1], logits=logits)
    g = tw.Graph()
    with g.as_default():
        y = tw.placeholder(tw.int32, [None])
        loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tw.ones([3, 4]))
        assert loss.shape.as_list() == [3]
    with tw.Session(graph=g) as sess:
        with pytest.raises(tw.errors.InvalidArgumentError, match="label value of 7"):
            sess.run(loss, {y: np.array([7, 0, 0], np.int32)})


def test_sparse_labels_rank_and_dtype():
    with pytest.raises(ValueError, match="Rank mismatch"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=[[0]], logits=tw.ones([1, 4]))
    with pytest.raises(TypeError, match="labels"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant([0.0]), logits=tw.ones([1, 4]))


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_sparse_xent_loss_and_gradient_rows(rng, dtype, tol):
    """The compiled row loops against float64 log-softmax, with rank-3 logits, int64 labels and
    rows that hold -inf, +inf or NaN (those rows are not finite, their gradients neither)."""
    logits = (rng.standard_normal((3, 5, 7)) * 8).astype(dtype)
    logits[0, 1] = -np.inf
    logits[1, 2, 3] = np.nan
    logits[2, 0, 4] = np.inf
    logits[2, 3, :3] = -np.inf  # masked classes, finite elsewhere: a finite loss
    labels = rng.integers(0, 7, (3, 5))
    labels[2, 3] = 5
    with np.errstate(invalid="ignore"):
        shifted = logits.astype(np.float64) - np.max(logits, -1, keepdims=True)
        logp = shifted - np.log(np.sum(np.exp(shifted), -1, keepdims=True))
    want = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    want_grad = np.exp(logp)
    np.put_along_axis(want_grad, labels[..., None], np.take_along_axis(want_grad, labels[..., None], -1) - 1, -1)
    x, y = tw.constant(logits), tw.constant(labels)
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)
    grad = tape.gradient(loss, x).numpy()
    bad = ~np.isfinite(want)
    assert bad[0, 1] and bad[1, 2] and bad[2, 0] and bad.sum() == 3
    np.testing.assert_array_equal(~np.isfinite(loss.numpy()), bad)
    np.testing.assert_allclose(loss.numpy()[~bad], want[~bad], rtol=tol, atol=tol)
    assert not np.isfinite(grad[bad]).all(-1).any()
    np.testing.assert_allclose(grad[~bad], want_grad[~bad], rtol=tol, atol=tol)
    assert loss.dtype == dtype and grad.dtype == dtype


def test_sparse_xent_empty_batch():
    loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.zeros([0], tw.int32), logits=tw.ones([0, 4]))
    assert loss.shape.as_list() == [0]


# ---- static shapes -------------------------------------------------------------------------------
def test_static_shapes_in_graph():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 28, 28, 3])
        y = tw.nn.conv2d(x, tw.ones([5, 5, 3, 8]), 2, "SAME")
        assert y.shape.as_list() == [None, 14, 14, 8]
        assert tw.nn.conv2d(x, tw.ones([5, 5, 3, 8]), 1, "VALID", dilations=2).shape.as_list() == [None, 20, 20, 8]
        assert tw.nn.max_pool2d(y, 3, 2, "VALID").shape.as_list() == [None, 6, 6, 8]
        assert tw.nn.avg_pool2d(y, 2, 2, "SAME").shape.as_list() == [None, 7, 7, 8]
        u = tw.placeholder(tw.float32, [None, None, None, 3])
        assert tw.nn.conv2d(u, tw.ones([3, 3, 3, 4]), 1, "SAME").shape.as_list() == [None, None, None, 4]
        assert tw.nn.conv2d(u, tw.ones([3, 3, 3, 4]), 1, "SAME", data_format="NHWC").shape.rank == 4
        gx, = tw.gradients(tw.reduce_sum(y), [x])
        assert gx.shape.as_list() == [None, 28, 28, 3]
        t = tw.nn.conv2d_transpose(y, tw.ones([5, 5, 3, 8]), [4, 28, 28, 3], 2)
        assert t.shape.as_list() == [4, 28, 28, 3]
        s = tw.nn.softmax_cross_entropy_with_logits(tw.ones([2, 5]), tw.placeholder(tw.float32, [None, 5]))
        assert s.shape.as_list() == [2]


def test_conv_gradients_in_graph_with_unknown_batch(rng):
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [None, 6, 6, 2])
        fv = rng.standard_normal((3, 3, 2, 4))
        f = tw.constant(fv)
        y = tw.nn.max_pool2d(tw.nn.relu(tw.nn.conv2d(x, f, 1, "SAME")), 2, 2, "VALID")
        gx, gf = tw.gradients(tw.reduce_sum(y), [x, f])
        assert gx.shape.as_list() == [None, 6, 6, 2] and gf.shape.as_list() == [3, 3, 2, 4]
    xv = rng.standard_normal((3, 6, 6, 2))
    with tw.Session(graph=g) as sess:
        gxv, gfv = sess.run([gx, gf], {x: xv})
    xe, f = tw.constant(xv), tw.constant(fv)
    with tw.GradientTape() as tape:
        tape.watch([xe, f])
        ye = tw.reduce_sum(tw.nn.max_pool2d(tw.nn.relu(tw.nn.conv2d(xe, f, 1, "SAME")), 2, 2, "VALID"))
    ge = tape.gradient(ye, [xe, f])
    np.testing.assert_allclose(gxv, ge[0].numpy(), rtol=1e-12)
    np.testing.assert_allclose(gfv, ge[1].numpy(), rtol=1e-12)


# ---- pooling semantics ---------------------------------------------------------------------------
def test_max_pool_gradient_ties_go_to_first_max():
    x = tw.constant(np.array([[1.0, 3.0, 3.0, 2.0], [3.0, 0.0, 3.0, 3.0]]).reshape(1, 2, 4, 1))
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.nn.max_pool2d(x, 2, 2, "VALID")
    g = tape.gradient(y, x).numpy().reshape(2, 4)
    np.testing.assert_array_equal(g, [[0, 1, 1, 0], [0, 0, 0, 0]])


def test_max_pool_same_ignores_padding():
    x = -np.ones((1, 3, 3, 1))
    y = tw.nn.max_pool2d(x, 2, 2, "SAME").numpy()
    np.testing.assert_array_equal(y, -np.ones((1, 2, 2, 1)))


def test_avg_pool_same_counts_only_valid_elements():
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = tw.nn.avg_pool2d(x, 2, 2, "SAME").numpy()[0, :, :, 0]
    np.testing.assert_allclose(y, [[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8.0]])


def test_max_pool_int():
    x = tw.constant(np.array([[1, -5, 7, 2]], np.int32)[..., None])
    np.testing.assert_array_equal(tw.nn.max_pool1d(x, 2, 2, "SAME").numpy().ravel(), [1, 7])


# ---- numerics ------------------------------------------------------------------------------------
def test_softmax_and_losses_are_stable():
    big = tw.constant([[1e4, 0.0, -1e4]])
    assert np.all(np.isfinite(tw.nn.softmax(big).numpy()))
    assert np.all(np.isfinite(tw.nn.log_softmax(big).numpy()))
    loss = tw.nn.softmax_cross_entropy_with_logits([[0.0, 1.0, 0.0]], big).numpy()
    np.testing.assert_allclose(loss, [1e4])
    s = tw.nn.sigmoid_cross_entropy_with_logits(labels=tw.constant([0.0, 1.0]), logits=tw.constant([1e4, -1e4]))
    np.testing.assert_allclose(s.numpy(), [1e4, 1e4])
    h = tw.nn.softmax(tw.constant([[1.0, 2.0, 3.0]], dtype=tw.float16))
    assert h.dtype == tw.float16
    np.testing.assert_allclose(h.numpy().astype(np.float64).sum(), 1.0, atol=1e-3)


def test_softmax_xent_with_masked_class():
    # a -inf logit with label 0 is a masked class: it must add nothing, not nan
    loss = tw.nn.softmax_cross_entropy_with_logits([[1.0, 0.0]], [[0.0, -np.inf]])
    np.testing.assert_array_equal(loss.numpy(), [0.0])


def test_sigmoid_xent_gradient_at_zero():
    x = tw.constant([0.0, 0.0])
    z = tw.constant([0.0, 1.0])
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = tw.reduce_sum(tw.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [0.5, -0.5])


def test_softmax_xent_gradient_flows_to_labels(rng):
    labels = tw.constant(rng.dirichlet(np.ones(4), size=2))
    logits = tw.constant(rng.standard_normal((2, 4)))
    with tw.GradientTape() as tape:
        tape.watch(labels)
        loss = tw.reduce_sum(tw.nn.softmax_cross_entropy_with_logits(labels, logits))
    np.testing.assert_allclose(tape.gradient(loss, labels).numpy(), -tw.nn.log_softmax(logits).numpy())


def test_fused_batch_norm_half_precision():
    x = tw.constant(np.arange(8, dtype=np.float16).reshape(2, 2, 2, 1))
    y, mean, var = tw.nn.fused_batch_norm(x, [1.0], [0.0])
    assert y.dtype == tw.float16 and mean.dtype == tw.float32 and var.dtype == tw.float32
    np.testing.assert_allclose(float(mean[0]), 3.5)
    np.testing.assert_allclose(float(var[0]), np.var(np.arange(8.0), ddof=1), rtol=1e-6)


# ---- embeddings ----------------------------------------------------------------------------------
def test_embedding_lookup_variable_gives_indexed_slices():
    v = tw.Variable(np.arange(12.0).reshape(4, 3))
    with tw.GradientTape() as tape:
        e = tw.nn.embedding_lookup(v, [3, 1, 3])
        loss = tw.reduce_sum(e * e)
    g = tape.gradient(loss, v)
    assert isinstance(g, tw.IndexedSlices)
    np.testing.assert_array_equal(np.asarray(g.indices), [3, 1, 3])
    dense = np.zeros((4, 3))
    np.add.at(dense, [3, 1, 3], 2 * np.arange(12.0).reshape(4, 3)[[3, 1, 3]])
    np.testing.assert_allclose(g.to_dense().numpy(), dense)


def test_embedding_lookup_sharded_variables():
    shards = [tw.Variable(np.arange(6.0).reshape(3, 2)), tw.Variable(10 + np.arange(4.0).reshape(2, 2))]
    ids = [4, 0, 3]
    # "div": shard 0 holds ids 0-2, shard 1 ids 3-4
    np.testing.assert_array_equal(tw.nn.embedding_lookup(shards, ids).numpy(), [[12, 13], [0, 1], [10, 11]])
    # "mod": id i is row i // 2 of shard i % 2
    np.testing.assert_array_equal(tw.nn.embedding_lookup(shards, ids, partition_strategy="mod").numpy(),
                                  [[4, 5], [0, 1], [12, 13]])
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.nn.embedding_lookup(shards, ids))
    g0, g1 = tape.gradient(loss, shards)
    assert isinstance(g0, tw.IndexedSlices) and isinstance(g1, tw.IndexedSlices)
    np.testing.assert_array_equal(g0.to_dense().numpy(), [[1, 1], [0, 0], [0, 0]])
    np.testing.assert_array_equal(g1.to_dense().numpy(), [[1, 1], [1, 1]])


# ---- the reference itself (guards the table) -------------------------------------------------------
def test_naive_conv_reference_matches_hand_example():
    x = np.arange(16.0).reshape(1, 4, 4, 1)
    f = np.ones((2, 2, 1, 1))
    y = ref_conv(x, f, 2, "VALID")[0, :, :, 0]
    np.testing.assert_array_equal(y, [[0 + 1 + 4 + 5, 2 + 3 + 6 + 7], [8 + 9 + 12 + 13, 10 + 11 + 14 + 15]])
