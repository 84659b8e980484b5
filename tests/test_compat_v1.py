"""``tensorweave.compat.v1``: TF1 semantics and names (issue 15) - the bugs found running TF1
programs unchanged, TF1's argument aliases, and the TF1-only functions."""
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf


# ---- bug 1: TF1's dropout takes keep_prob ------------------------------------------------------
def test_v1_dropout_keep_prob_is_the_fraction_kept():
    x = tw.ones([20000])
    y = tf.nn.dropout(x, keep_prob=0.8, seed=3).numpy()
    assert abs((y > 0).mean() - 0.8) < 0.02
    np.testing.assert_allclose(np.unique(y), [0.0, 1.25])
    # keep_prob=1.0 keeps everything (it used to be read as rate=1.0 and give NaN)
    np.testing.assert_array_equal(tf.nn.dropout(x, 1.0).numpy(), np.ones(20000, np.float32))
    # TF1's later spelling
    y = tf.nn.dropout(x, rate=0.25, seed=3).numpy()
    assert abs((y > 0).mean() - 0.75) < 0.02


def test_v1_dropout_keep_prob_from_a_placeholder():
    g = tf.Graph()
    with g.as_default():
        x = tf.ones([10000])
        keep = tf.placeholder(tf.float32)
        y = tf.nn.dropout(x, keep)
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(y, {keep: 1.0}), np.ones(10000, np.float32))
        kept = sess.run(y, {keep: 0.5})
    assert abs((kept > 0).mean() - 0.5) < 0.03 and set(np.unique(kept)) == {0.0, 2.0}


def test_v1_dropout_argument_errors():
    with pytest.raises(ValueError, match="exactly one of keep_prob and rate"):
        tf.nn.dropout(tw.ones([2]), keep_prob=0.5, rate=0.5)
    with pytest.raises(ValueError, match=r"range \(0, 1\]"):
        tf.nn.dropout(tw.ones([2]), keep_prob=0.0)


# ---- bug 2: gradient of a full reduction of an unknown-rank tensor -----------------------------
@pytest.mark.parametrize("reduce", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_prod"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_gradient_of_a_full_reduction_of_unknown_rank(reduce, keepdims):
    xv = np.array([[1.0, 2.0], [3.0, -4.0]], np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder("float")
        assert x.shape.rank is None
        (grad,) = tf.gradients(getattr(tf, reduce)(x * x, keepdims=keepdims), [x])
        known = tf.constant(xv)
        (expected,) = tf.gradients(getattr(tf, reduce)(known * known, keepdims=keepdims), [known])
    with tf.Session(graph=g) as sess:
        got, want = sess.run([grad, expected], {x: xv})
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- bug 3: compat.v1 has data and keras -----------------------------------------------------
def test_v1_has_data_and_keras():
    assert tf.keras.layers.Dense is tw.keras.layers.Dense
    assert tf.data.Dataset is tw.data.Dataset
    g = tf.Graph()
    with g.as_default():
        it = tf.data.Dataset.from_tensor_slices((np.arange(5), np.arange(5) * 2.0)).batch(2).make_one_shot_iterator()
        a, b = it.get_next()
        assert a.shape.as_list() == [None] and b.dtype == tf.float64
    with tf.Session(graph=g) as sess:
        seen = []
        while True:
            try:
                seen.append(sess.run(a).tolist())
            except tf.errors.OutOfRangeError:
                break
    assert seen == [[0, 1], [2, 3], [4]]


def test_v1_initializable_iterator_restarts_and_must_be_initialized():
    g = tf.Graph()
    with g.as_default():
        it = tf.data.make_initializable_iterator(tf.data.Dataset.range(3))
        nxt = it.get_next()
        assert it.output_types == tf.int64
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="initializ"):
            sess.run(nxt)
        for _ in range(2):
            sess.run(it.initializer)
            assert [int(sess.run(nxt)) for _ in range(3)] == [0, 1, 2]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(nxt)


# ---- bug 4: an unknown keyword names the op ---------------------------------------------------
def test_unknown_keyword_names_the_op_its_arguments_and_the_line():
    with pytest.raises(TypeError) as info:
        line = test_unknown_keyword_names_the_op_its_arguments_and_the_line.__code__.co_firstlineno + 3
        tw.reduce_sum(tw.ones([2]), axes=0)
    msg = str(info.value)
    assert msg.startswith("reduce_sum() got an unexpected keyword argument 'axes'"), msg
    assert "<locals>" not in msg
    assert "reduce_sum takes (input_tensor, axis=None, keepdims=False, name=None)" in msg
    assert f"test_compat_v1.py:{line}" in msg
    assert "did you mean 'axis'?" in msg


@pytest.mark.parametrize("fn", [tw.reduce_mean, tw.nn.softmax, tw.math.argmax, tw.nn.relu, tw.linalg.matmul,
                                tw.random.uniform, tf.reduce_max])
def test_every_public_op_function_names_itself(fn):
    with pytest.raises(TypeError, match=rf"^{fn.__name__}\(\) got an unexpected keyword argument 'bogus'"):
        fn(tw.ones([2, 2]), bogus=1)


def test_errors_raised_inside_an_op_are_left_alone():
    with pytest.raises(TypeError, match="does not support dtype string"):
        tw.reduce_sum(tw.constant(["a"]))


# ---- TF1's argument names ------------------------------------------------------------------
_X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10.0


@pytest.mark.parametrize("tf1_call, tw_call", [
    (lambda: tf.reduce_sum(_X, reduction_indices=[1], keep_dims=True), lambda: tw.reduce_sum(_X, 1, keepdims=True)),
    (lambda: tf.reduce_mean(_X, reduction_indices=2), lambda: tw.reduce_mean(_X, 2)),
    (lambda: tf.reduce_max(_X, None, None, None, 0, True), lambda: tw.reduce_max(_X, 0, keepdims=True)),
    (lambda: tf.reduce_logsumexp(_X, keep_dims=True), lambda: tw.reduce_logsumexp(_X, keepdims=True)),
    (lambda: tf.math.reduce_min(_X, reduction_indices=[0, 2]), lambda: tw.reduce_min(_X, [0, 2])),
    (lambda: tf.argmax(_X, dimension=1), lambda: tw.argmax(_X, 1)),
    (lambda: tf.arg_max(_X, 2), lambda: tw.argmax(_X, 2)),
    (lambda: tf.arg_min(_X, dimension=0), lambda: tw.argmin(_X, 0)),
    (lambda: tf.count_nonzero(_X, reduction_indices=1), lambda: tw.count_nonzero(_X, 1)),
    (lambda: tf.expand_dims(_X, dim=1), lambda: tw.expand_dims(_X, 1)),
    (lambda: tf.squeeze(np.ones((1, 3, 1)), squeeze_dims=[0]), lambda: tw.squeeze(np.ones((1, 3, 1)), [0])),
    (lambda: tf.zeros_like(tensor=_X, optimize=False), lambda: tw.zeros_like(_X)),
    (lambda: tf.constant(1.0, verify_shape=True), lambda: tw.constant(1.0)),
    (lambda: tf.norm(_X, keep_dims=True), lambda: tw.linalg.norm(_X, keepdims=True)),
    (lambda: tf.nn.softmax(_X, dim=1), lambda: tw.nn.softmax(_X, axis=1)),
    (lambda: tf.nn.log_softmax(_X, dim=0), lambda: tw.nn.log_softmax(_X, axis=0)),
    (lambda: tf.nn.moments(_X, [0, 1], keep_dims=True)[1], lambda: tw.nn.moments(_X, [0, 1], keepdims=True)[1]),
    (lambda: tf.to_float(tf.constant([1, 2])), lambda: tw.cast([1, 2], tw.float32)),
    (lambda: tf.to_int64(tf.constant([1.5])), lambda: tw.cast([1.5], tw.int64)),
    (lambda: tf.to_double(1), lambda: tw.cast(1, tw.float64)),
    (lambda: tf.cond(tf.constant(True), fn1=lambda: tf.constant(1), fn2=lambda: tf.constant(2)), lambda: np.int32(1)),
])
def test_tf1_argument_names(tf1_call, tw_call):
    a, b = tf1_call(), tw_call()
    b = np.asarray(b.numpy() if hasattr(b, "numpy") else b)
    assert a.dtype.name == tw.convert_to_tensor(b).dtype.name
    np.testing.assert_allclose(a.numpy(), b, rtol=1e-6)


def test_tf1_conv_and_pool_argument_names():
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype(np.float32)
    w = np.random.default_rng(1).normal(size=(3, 3, 3, 4)).astype(np.float32)
    y1 = tf.nn.conv2d(x, filter=w, strides=[1, 1, 1, 1], padding="SAME", use_cudnn_on_gpu=True)
    np.testing.assert_allclose(y1.numpy(), tw.nn.conv2d(x, w, 1, "SAME").numpy(), rtol=1e-5)
    p1 = tf.nn.max_pool(value=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    np.testing.assert_allclose(p1.numpy(), tw.nn.max_pool(x, 2, 2, "VALID").numpy())
    wt = np.random.default_rng(2).normal(size=(3, 3, 5, 3)).astype(np.float32)
    t1 = tf.nn.conv2d_transpose(x, wt, [2, 12, 12, 5], [1, 2, 2, 1])
    np.testing.assert_allclose(t1.numpy(), tw.nn.conv2d_transpose(x, wt, [2, 12, 12, 5], 2, "SAME").numpy(),
                               rtol=1e-5)


def test_tf1_argument_names_both_spellings_and_unknown_ones():
    with pytest.raises(ValueError, match="cannot specify both 'axis' and 'reduction_indices'"):
        tf.reduce_sum(_X, axis=0, reduction_indices=1)
    with pytest.raises(TypeError, match=r"^reduce_sum\(\) got an unexpected keyword argument 'axes'") as info:
        tf.reduce_sum(_X, axes=0)
    assert "reduction_indices" in str(info.value)     # TF1's own parameter list is shown
    with pytest.raises(TypeError, match="got multiple values for argument 'axis'"):
        tf.reduce_sum(_X, 0, axis=1)


# ---- variable scopes and get_variable ---------------------------------------------------------
def test_get_variable_names_reuse_and_name_scope_interplay():
    g = tf.Graph()
    with g.as_default():
        with tf.variable_scope("foo"):
            with tf.name_scope("ns"):
                v = tf.get_variable("v", [1])            # name scopes do not name get_variable's variables
                op = tf.add(v, 1.0, name="add")
            w = tf.Variable(1.0, name="w")               # tf.Variable does follow the name scope
        assert v.name == "foo/v:0" and op.name == "foo/ns/add:0" and w.name == "foo/w:0"
        with tf.variable_scope("foo", reuse=True):
            assert tf.get_variable("v") is v
            x = tf.multiply(v, 2.0, name="x")
        assert x.name == "foo_1/x:0"                      # the second entry's name scope is new
        with tf.variable_scope("foo") as scope:
            with pytest.raises(ValueError, match="Variable foo/v already exists, disallowed"):
                tf.get_variable("v", [1])
            scope.reuse_variables()
            assert tf.get_variable("v", [1]) is v
            with pytest.raises(ValueError, match="Trying to share variable foo/v, but specified shape"):
                tf.get_variable("v", [2])
        with tf.variable_scope("bar", reuse=True):
            with pytest.raises(ValueError, match="Variable bar/u does not exist"):
                tf.get_variable("u", [1])
        with tf.variable_scope("bar", reuse=tf.AUTO_REUSE):
            u = tf.get_variable("u", [2])
        with tf.variable_scope("bar", reuse=tf.AUTO_REUSE):
            assert tf.get_variable("u", [2]) is u
        with tf.variable_scope("outer", reuse=True):
            with tf.variable_scope("inner"):
                assert tf.get_variable_scope().reuse is True  # reuse is inherited
        assert [x.name for x in tf.trainable_variables()] == ["foo/v:0", "foo/w:0", "bar/u:0"]


def test_default_names_count_and_restart_inside_a_reentered_scope():
    g = tf.Graph()
    with g.as_default():
        names = []
        for reuse in (False, True):
            with tf.variable_scope("gen", reuse=reuse):
                for _ in range(2):
                    with tf.variable_scope(None, default_name="dense"):
                        names.append(tf.get_variable("kernel", [1]).name)
        with tf.variable_scope(None, default_name="gen"):
            names.append(tf.get_variable("k", [1]).name)
    assert names == ["gen/dense/kernel:0", "gen/dense_1/kernel:0"] * 2 + ["gen_1/k:0"]


def test_variable_scope_object_initializers_dtype_and_regularizer():
    g = tf.Graph()
    with g.as_default():
        with tf.variable_scope("s", initializer=tf.constant_initializer(3.0), dtype=tf.float64,
                               regularizer=lambda w: tf.reduce_sum(w * w)) as s:
            a = tf.get_variable("a", [2])
            b = tf.get_variable("b", [2], initializer="ones", dtype=tf.float32)
            c = tf.get_variable("c", initializer=tf.constant([1, 2]), regularizer=None, trainable=False)
        with tf.variable_scope(s, reuse=True):
            assert tf.get_variable("a") is a
            d = tf.identity(a, name="d")
        assert d.name.startswith("s/")                   # reopening the object reuses its name scope
        with tf.variable_scope(s):
            e = tf.get_variable("e", [1])
        init = tf.global_variables_initializer()
        regs = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    assert a.dtype == tf.float64 and b.dtype == tf.float32 and c.dtype == tf.int32
    assert e.name == "s/e:0" and len(regs) == 4          # a, b, e (c has none: regularizer=None keeps the scope's)
    assert c.name not in [v.name for v in g.get_collection("trainable_variables")]
    with tf.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(a).tolist() == [3.0, 3.0] and sess.run(b).tolist() == [1.0, 1.0]
        assert sess.run(c).tolist() == [1, 2]
        assert sess.run(regs[0]) == 18.0


def test_get_variable_shape_and_initializer_errors():
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="must be known"):
            tf.get_variable("x")
        with pytest.raises(ValueError, match="do not specify shape"):
            tf.get_variable("y", [2], initializer=tf.constant([1.0, 2.0]))
        with pytest.raises(ValueError, match="reuse must be"):
            with tf.variable_scope("z", reuse="yes"):
                pass


def test_partitioned_variable_and_embedding_lookup():
    g = tf.Graph()
    with g.as_default():
        emb = tf.get_variable("emb", shape=[10, 2], initializer=tf.random_normal_initializer(seed=1),
                              partitioner=tf.fixed_size_partitioner(3))
        assert [p.name for p in emb] == ["emb/part_0:0", "emb/part_1:0", "emb/part_2:0"]
        assert [p.shape.as_list() for p in emb] == [[4, 2], [3, 2], [3, 2]]
        rows = tf.nn.embedding_lookup(emb, [0, 4, 9], partition_strategy="div")
        whole = tf.convert_to_tensor(emb)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        table, got = sess.run([whole, rows])
    assert table.shape == (10, 2)
    np.testing.assert_array_equal(got, table[[0, 4, 9]])


def test_tf1_initializers():
    shape = [200, 100]
    t = tf.truncated_normal_initializer(stddev=0.1, seed=1)(shape).numpy()
    assert t.dtype == np.float32 and np.abs(t).max() <= 0.2 + 1e-6 and abs(t.std() - 0.088) < 0.01
    u = tf.random_uniform_initializer(seed=2)(shape).numpy()
    assert 0 <= u.min() and u.max() < 1
    n = tf.random_normal_initializer(1.0, 2.0, seed=3)(shape, dtype=tf.float64).numpy()
    assert n.dtype == np.float64 and abs(n.mean() - 1.0) < 0.05
    z = tf.zeros_initializer(dtype=tf.int32)([2]).numpy()
    assert z.dtype == np.int32
    lim = np.sqrt(6.0 / 300)
    gu = tf.glorot_uniform_initializer(seed=4)(shape).numpy()
    assert np.abs(gu).max() <= lim and np.abs(gu).max() > 0.9 * lim
    vs = tf.variance_scaling_initializer(2.0, seed=5)(shape).numpy()
    assert abs(vs.std() - np.sqrt(2.0 / 200)) < 0.01


# ---- tf.layers ------------------------------------------------------------------------------------
def test_layers_variable_names_match_tf1():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 8, 8, 3])
        h = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu)
        h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.conv2d(h, 4, [3, 3])
        h = tf.layers.batch_normalization(h, training=True)
        h = tf.layers.conv2d_transpose(h, 2, 3, strides=2)
        h = tf.layers.flatten(h)
        h = tf.layers.dropout(h, 0.5, training=False)
        y = tf.layers.dense(h, 2, name="logits")
        layer = tf.layers.Dense(3)
        a, b = layer(y), layer(y)                       # one object: one set of variables
        names = [v.name for v in tf.global_variables()]
    assert names == ["conv2d/kernel:0", "conv2d/bias:0", "conv2d_1/kernel:0", "conv2d_1/bias:0",
                     "batch_normalization/gamma:0", "batch_normalization/beta:0",
                     "batch_normalization/moving_mean:0", "batch_normalization/moving_variance:0",
                     "conv2d_transpose/kernel:0", "conv2d_transpose/bias:0", "logits/kernel:0", "logits/bias:0",
                     "dense/kernel:0", "dense/bias:0"]
    assert y.shape.as_list() == [None, 2] and a.shape.as_list() == [None, 3]
    assert len(g.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2
    assert "batch_normalization/moving_mean:0" not in [v.name for v in tf.trainable_variables()]


def test_layers_share_variables_through_scopes_like_a_gan():
    def generator(z, reuse):
        with tf.variable_scope("generator", reuse=reuse):
            return tf.layers.dense(tf.layers.dense(z, 4, tf.nn.relu), 2)

    g = tf.Graph()
    with g.as_default():
        z = tf.placeholder(tf.float32, [None, 3])
        out1, out2 = generator(z, False), generator(z, True)
        with tf.variable_scope("d"):
            d1 = tf.layers.dense(out1, 1, name="fc", reuse=tf.AUTO_REUSE)
            d2 = tf.layers.dense(out2, 1, name="fc", reuse=tf.AUTO_REUSE)
            with pytest.raises(ValueError, match="Variable d/fc/kernel already exists"):
                tf.layers.dense(out2, 1, name="fc")
        gen_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="generator")
        init = tf.global_variables_initializer()
    assert [v.name for v in gen_vars] == ["generator/dense/kernel:0", "generator/dense/bias:0",
                                          "generator/dense_1/kernel:0", "generator/dense_1/bias:0"]
    assert len(g.get_collection("trainable_variables")) == 6
    with tf.Session(graph=g) as sess:
        sess.run(init)
        zv = np.ones((2, 3), np.float32)
        r1, r2, e1, e2 = sess.run([out1, out2, d1, d2], {z: zv})
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(e1, e2)


def test_batch_normalization_update_ops_and_a_training_placeholder():
    rng = np.random.default_rng(0)
    xv = rng.normal(3.0, 2.0, size=(64, 4)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        is_training = tf.placeholder(tf.bool, [])
        y = tf.layers.batch_normalization(x, training=is_training, momentum=0.5)
        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_y = tf.identity(y)
        init = tf.global_variables_initializer()
        mm = [v for v in tf.global_variables() if "moving_mean" in v.name][0]
    with tf.Session(graph=g) as sess:
        sess.run(init)
        out = sess.run(y, {x: xv, is_training: True})
        np.testing.assert_allclose(out.mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(sess.run(mm), 0)           # updates run only with UPDATE_OPS
        sess.run(train_y, {x: xv, is_training: True})
        np.testing.assert_allclose(sess.run(mm), xv.mean(0) * 0.5, rtol=1e-5)
        before = sess.run(mm)
        inf = sess.run(train_y, {x: xv, is_training: False})  # inference: moving statistics, no update
        np.testing.assert_allclose(sess.run(mm), before)
        assert not np.allclose(inf, out)


def test_layers_dropout_with_a_training_tensor():
    g = tf.Graph()
    with g.as_default():
        x = tf.ones([1000])
        training = tf.placeholder_with_default(False, [])
        y = tf.layers.dropout(x, rate=0.5, training=training)
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(y), np.ones(1000, np.float32))
        kept = sess.run(y, {training: True})
    assert set(np.unique(kept)) == {0.0, 2.0}


# ---- tf.train.Saver ---------------------------------------------------------------------------------
def _model(scale):
    g = tf.Graph()
    with g.as_default():
        step = tf.train.get_or_create_global_step()
        with tf.variable_scope("net"):
            w = tf.get_variable("w", [2, 2], initializer=tf.constant_initializer(scale))
            b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
        bump = tf.group(tf.assign_add(w, tf.ones([2, 2])), tf.assign_add(step, 1))
        init = tf.global_variables_initializer()
    return g, w, b, step, bump, init


def test_saver_save_restore_into_a_fresh_graph_and_max_to_keep(tmp_path):
    g, w, b, step, bump, init = _model(1.0)
    with g.as_default():
        saver = tf.train.Saver(max_to_keep=2)
    prefix = str(tmp_path / "model.ckpt")
    with tf.Session(graph=g) as sess:
        sess.run(init)
        paths = []
        for _ in range(3):
            sess.run(bump)
            paths.append(saver.save(sess, prefix, global_step=step))
        final_w = sess.run(w)
    assert [os.path.basename(p) for p in paths] == ["model.ckpt-1", "model.ckpt-2", "model.ckpt-3"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[-1]
    assert not tf.train.checkpoint_exists(paths[0]) and tf.train.checkpoint_exists(paths[1])
    assert saver.last_checkpoints == paths[1:]
    assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == paths[1:]
    # another graph made by the same code, other initial values
    g2, w2, b2, step2, _, init2 = _model(7.0)
    with g2.as_default():
        saver2 = tf.train.Saver()
        ops_before = len(g2.get_operations())
    with tf.Session(graph=g2) as sess:
        sess.run(init2)
        saver2.restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
        np.testing.assert_array_equal(sess.run(w2), final_w)
        assert sess.run(step2) == 3
        saver2.restore(sess, paths[1])
        assert sess.run(step2) == 2
    assert len(g2.get_operations()) == ops_before           # restore adds no nodes


def test_saver_var_list_forms_and_errors(tmp_path):
    g, w, b, step, bump, init = _model(2.0)
    with g.as_default():
        only_w = tf.train.Saver([w])
        renamed = tf.train.Saver({"weights": w})
    with tf.Session(graph=g) as sess:
        sess.run(init)
        p1 = only_w.save(sess, str(tmp_path / "w"))
        p2 = renamed.save(sess, str(tmp_path / "r"), write_state=False)
    from tensorweave.saving import tensor_file
    assert sorted(tensor_file.read_tensors(p1 + ".safetensors")) == ["net/w"]
    assert sorted(tensor_file.read_tensors(p2 + ".safetensors")) == ["weights"]
    g2, w2, b2, *_ = _model(0.0)
    with g2.as_default():
        full = tf.train.Saver()
        back = tf.train.Saver({"weights": w2})
    with tf.Session(graph=g2) as sess:
        with pytest.raises(tf.errors.NotFoundError, match="key .* not found in checkpoint"):
            full.restore(sess, p1)
        back.restore(sess, p2)
        np.testing.assert_array_equal(sess.run(w2), np.full((2, 2), 2.0, np.float32))
    data = bytearray(open(p1 + ".safetensors", "rb").read())
    data[-1] ^= 0xFF
    open(p1 + ".safetensors", "wb").write(bytes(data))
    with pytest.raises(ValueError, match="CRC-32"):
        only_w.restore(tf.Session(graph=g), p1)
    with pytest.raises(ValueError, match="No variables to save"):
        with tf.Graph().as_default():
            tf.train.Saver()


# ---- RNN cells and drivers ------------------------------------------------------------------------
def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _np_basic_lstm(x, kernel, bias, lengths, forget_bias=1.0):
    """TF1's BasicLSTMCell over x [batch, time, depth] with sequence lengths (NumPy reference)."""
    b, t, _ = x.shape
    n = kernel.shape[1] // 4
    c, h = np.zeros((b, n)), np.zeros((b, n))
    outs = np.zeros((b, t, n))
    for s in range(t):
        z = np.concatenate([x[:, s], h], 1) @ kernel + bias
        i, j, f, o = np.split(z, 4, axis=1)
        nc = c * _sigmoid(f + forget_bias) + _sigmoid(i) * np.tanh(j)
        nh = np.tanh(nc) * _sigmoid(o)
        valid = (s < lengths)[:, None]
        c, h = np.where(valid, nc, c), np.where(valid, nh, h)
        outs[:, s] = np.where(valid, nh, 0.0)
    return outs, c, h


def _run_rnn(make_cell, driver="dynamic", lengths=(5, 3), depth=3, steps=5):
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(len(lengths), steps, depth)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, steps, depth])
        cell = make_cell()
        seq = tf.constant(list(lengths))
        # the same initial values whatever ops come first (an op seed of its own)
        tf.get_variable_scope().set_initializer(tf.random_uniform_initializer(-0.5, 0.5, seed=3))
        if driver == "dynamic":
            out, state = tf.nn.dynamic_rnn(cell, x, sequence_length=seq, dtype=tf.float32)
        else:
            outs, state = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), sequence_length=seq, dtype=tf.float32)
            out = tf.stack(outs, axis=1)
        loss = tf.reduce_sum(out * out) + tf.reduce_sum([tf.reduce_sum(s) for s in nest_flatten(state)])
        grads = tf.gradients(loss, tf.trainable_variables())
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        values = sess.run({"out": out, "state": state, "grads": grads, "vars": tf.trainable_variables()},
                          {x: xv})
    return xv, values, [v.name for v in g.get_collection("trainable_variables")]


def nest_flatten(s):
    return tw.nest.flatten(s)


def test_basic_lstm_cell_matches_tf1_equations_on_the_fused_kernel():
    xv, r, names = _run_rnn(lambda: tf.nn.rnn_cell.BasicLSTMCell(4))
    assert names == ["rnn/basic_lstm_cell/kernel:0", "rnn/basic_lstm_cell/bias:0"]
    kernel, bias = r["vars"]
    bias = np.random.default_rng(1).normal(size=bias.shape) * 0 + bias
    outs, c, h = _np_basic_lstm(xv.astype(np.float64), kernel, bias, np.array([5, 3]))
    np.testing.assert_allclose(r["out"], outs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["state"].c, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["state"].h, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make_cell", [
    lambda: tf.nn.rnn_cell.BasicLSTMCell(4, forget_bias=0.5),
    lambda: tf.nn.rnn_cell.LSTMCell(4),
    lambda: tf.nn.rnn_cell.GRUCell(4),
    lambda: tf.nn.rnn_cell.BasicRNNCell(4),
    lambda: tf.nn.rnn_cell.MultiRNNCell([tf.nn.rnn_cell.GRUCell(3), tf.nn.rnn_cell.BasicLSTMCell(4)]),
], ids=["basic_lstm", "lstm", "gru", "rnn", "multi"])
def test_fused_sequences_equal_the_step_by_step_cells(make_cell, monkeypatch):
    _, fused, names = _run_rnn(make_cell, "dynamic")
    # the same cells forced onto the step-by-step path (static_rnn of an unfusable copy)
    from tensorweave.compat import v1_rnn
    monkeypatch.setattr(v1_rnn.RNNCell, "_fused", lambda self, x, s, m: None)
    for cls in (v1_rnn.BasicLSTMCell, v1_rnn.GRUCell, v1_rnn.BasicRNNCell, v1_rnn.MultiRNNCell):
        monkeypatch.setattr(cls, "_fused", lambda self, x, s, m: None)
    _, stepped, names2 = _run_rnn(make_cell, "static")
    assert names == names2
    np.testing.assert_allclose(fused["out"], stepped["out"], rtol=1e-5, atol=1e-6)
    for a, b in zip(tw.nest.flatten(fused["state"]), tw.nest.flatten(stepped["state"])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(fused["grads"], stepped["grads"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_rnn_variable_names_as_tf1():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2, 4, 3])
        tf.nn.dynamic_rnn(tf.nn.rnn_cell.MultiRNNCell([tf.nn.rnn_cell.LSTMCell(5) for _ in range(2)]), x,
                          dtype=tf.float32)
        (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(tf.nn.rnn_cell.GRUCell(2), tf.nn.rnn_cell.GRUCell(2), x,
                                                      sequence_length=[4, 2], dtype=tf.float32)
        tf.nn.static_bidirectional_rnn(tf.nn.rnn_cell.BasicRNNCell(2), tf.nn.rnn_cell.BasicRNNCell(2),
                                       tf.unstack(x, axis=1), dtype=tf.float32, scope="sbi")
        names = [v.name for v in g.get_collection("trainable_variables")]
    assert names == [
        "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel:0", "rnn/multi_rnn_cell/cell_0/lstm_cell/bias:0",
        "rnn/multi_rnn_cell/cell_1/lstm_cell/kernel:0", "rnn/multi_rnn_cell/cell_1/lstm_cell/bias:0",
        "bidirectional_rnn/fw/gru_cell/gates/kernel:0", "bidirectional_rnn/fw/gru_cell/gates/bias:0",
        "bidirectional_rnn/fw/gru_cell/candidate/kernel:0", "bidirectional_rnn/fw/gru_cell/candidate/bias:0",
        "bidirectional_rnn/bw/gru_cell/gates/kernel:0", "bidirectional_rnn/bw/gru_cell/gates/bias:0",
        "bidirectional_rnn/bw/gru_cell/candidate/kernel:0", "bidirectional_rnn/bw/gru_cell/candidate/bias:0",
        "sbi/fw/basic_rnn_cell/kernel:0", "sbi/fw/basic_rnn_cell/bias:0",
        "sbi/bw/basic_rnn_cell/kernel:0", "sbi/bw/basic_rnn_cell/bias:0"]
    assert fw.shape.as_list() == [2, 4, 2] and bw.shape.as_list() == [2, 4, 2]


def test_bidirectional_backward_direction_reads_each_sequence_from_its_end():
    xv = np.random.default_rng(3).normal(size=(2, 4, 3)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(xv)
        cell_bw = tf.nn.rnn_cell.BasicRNNCell(2)
        (_, bw), (_, st_bw) = tf.nn.bidirectional_dynamic_rnn(tf.nn.rnn_cell.BasicRNNCell(2), cell_bw, x,
                                                              sequence_length=[4, 2], dtype=tf.float32)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        got, st = sess.run([bw, st_bw])
        k, b = sess.run([cell_bw.kernel, cell_bw.bias])
    for row, n in ((0, 4), (1, 2)):
        h = np.zeros(2)
        expect = np.zeros((4, 2))
        for t in reversed(range(n)):
            h = np.tanh(np.concatenate([xv[row, t], h]) @ k + b)
            expect[t] = h
        np.testing.assert_allclose(got[row], expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(st[row], expect[0], rtol=1e-5, atol=1e-6)


def test_dropout_wrapper_and_state_dropout_fallback():
    g = tf.Graph()
    with g.as_default():
        x = tf.ones([2, 3, 4])
        keep = tf.placeholder_with_default(1.0, [])
        cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.BasicLSTMCell(3), output_keep_prob=keep)
        out, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        cell2 = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(3), state_keep_prob=0.5)
        out2, _ = tf.nn.dynamic_rnn(cell2, x, dtype=tf.float32, scope="rnn2")
        init = tf.global_variables_initializer()
    assert any(op.type == "LSTMSequence" for op in g.get_operations())
    assert not any(op.type == "GRUSequence" for op in g.get_operations())   # state dropout: step by step
    with tf.Session(graph=g) as sess:
        sess.run(init)
        full, dropped = sess.run(out), sess.run(out, {keep: 0.5})
        assert sess.run(out2).shape == (2, 3, 3)
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], full[kept] * 2, rtol=1e-5)


# ---- devices ----------------------------------------------------------------------------------------
def test_device_functions_place_each_op_and_inner_strings_win():
    g = tf.Graph()
    seen = []
    with g.as_default():
        def by_type(op):
            seen.append(op.type)
            return "/cpu:1" if op.type == "MatMul" else None

        with tf.device(by_type):
            a = tf.constant([[1.0]], name="a")
            m = tf.matmul(a, a, name="m")
            with tf.device("/cpu:0"):
                n = tf.matmul(m, a, name="n")
        after = tf.matmul(a, a, name="after")
        with tf.device(tf.train.replica_device_setter(ps_tasks=2)):
            v1, v2 = tf.Variable(1.0, name="v1"), tf.Variable(2.0, name="v2")
            s = v1 + v2
        init = tf.global_variables_initializer()
    assert "Const" in seen and "MatMul" in seen
    assert m.op.device == "/cpu:1" and not a.op.device and "CPU:0" in n.op.device.upper() and not after.op.device
    handles = [op.device for op in g.get_operations() if op.type == "VarHandleOp"]
    assert handles == ["/job:ps/task:0", "/job:ps/task:1"] and s.op.device == "/job:worker"
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False, device_count={"CPU": 2},
                            inter_op_parallelism_threads=1, intra_op_parallelism_threads=1,
                            gpu_options=tf.GPUOptions(allow_growth=True))
    with tf.Session(graph=g, config=config) as sess:
        sess.run(init)
        assert sess.run(s) == 3.0 and sess.run(n).tolist() == [[1.0]]
    with pytest.raises(RuntimeError, match="eager"):
        with tf.device(lambda op: "/cpu:0"):
            pass


# ---- TF1-only spellings and helpers ------------------------------------------------------------------
def test_tf1_only_spellings(capsys):
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(1.0, name="v")
        tf.add_to_collections(["model_variables", "mine"], v)
        assert tf.model_variables() == [v] and tf.get_collection_ref("mine") == [v]
        assert tf.all_variables() == [v]
        init_ops = [tf.initialize_all_variables(), tf.initialize_variables([v]), tf.initialize_local_variables()]
        x = tf.constant([[2.0, 1.0], [1.0, 3.0]])
        printed = tf.Print(x, [x[0]], message="x0=")
        outs = {
            "floor_div": tf.floor_div(7, 2), "lin_space": tf.lin_space(0.0, 1.0, 3),
            "where_v2": tf.where_v2([True, False], 1.0, 0.0), "reverse_v2": tf.reverse_v2([1, 2, 3], [0]),
            "py_func": tf.py_func(lambda a: a * 2, [x], tf.float32), "log_sigmoid": tf.log_sigmoid([0.0, -100.0]),
            "matrix_transpose": tf.matrix_transpose(x), "matrix_determinant": tf.matrix_determinant(x),
            "matrix_inverse": tf.matrix_inverse(x), "matrix_diag": tf.matrix_diag([1.0, 2.0]),
            "matrix_diag_part": tf.matrix_diag_part(x), "matrix_set_diag": tf.matrix_set_diag(x, [0.0, 0.0]),
            "diag": tf.diag([1.0, 2.0]), "diag_part": tf.diag_part(x), "trace": tf.trace(x),
            "cross": tf.cross([1.0, 0.0, 0.0], [0.0, 1.0, 0.0]), "printed": printed,
            "clip_by_norm": tf.clip_by_norm([3.0, 4.0], 1.0), "global_norm": tf.global_norm([x, None, x]),
        }
        assert tf.is_tensor(x) and tf.is_tensor(v) and not tf.is_tensor(1.0)
    with tf.Session(graph=g) as sess:
        sess.run(init_ops)
        r = sess.run(outs)
    captured = capsys.readouterr()
    assert "x0=" in captured.err + captured.out
    xv = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    assert r["floor_div"] == 3 and r["lin_space"].tolist() == [0.0, 0.5, 1.0]
    assert r["where_v2"].tolist() == [1.0, 0.0] and r["reverse_v2"].tolist() == [3, 2, 1]
    np.testing.assert_allclose(r["py_func"], 2 * xv)
    np.testing.assert_allclose(r["log_sigmoid"], [np.log(0.5), -100.0], rtol=1e-6)
    np.testing.assert_allclose(r["matrix_determinant"], 5.0, rtol=1e-6)
    np.testing.assert_allclose(r["matrix_inverse"], np.linalg.inv(xv), rtol=1e-5)
    np.testing.assert_array_equal(r["matrix_transpose"], xv.T)
    np.testing.assert_array_equal(r["matrix_diag"], np.diag([1.0, 2.0]))
    np.testing.assert_array_equal(r["diag"], np.diag([1.0, 2.0]))
    np.testing.assert_array_equal(r["matrix_diag_part"], [2.0, 3.0])
    np.testing.assert_array_equal(r["diag_part"], [2.0, 3.0])
    np.testing.assert_array_equal(r["matrix_set_diag"], [[0.0, 1.0], [1.0, 0.0]])
    assert r["trace"] == 5.0 and r["cross"].tolist() == [0.0, 0.0, 1.0]
    np.testing.assert_array_equal(r["printed"], xv)
    np.testing.assert_allclose(r["clip_by_norm"], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(r["global_norm"], np.sqrt(2 * (xv ** 2).sum()), rtol=1e-6)


def test_clip_by_global_norm_of_gradients_including_indexed_slices():
    g = tf.Graph()
    with g.as_default():
        emb = tf.Variable(np.ones((5, 2), np.float32))
        w = tf.Variable([1.0, 1.0])
        loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, [0, 2, 3]) * w) * 10.0
        grads = tf.gradients(loss, [emb, w])
        assert isinstance(grads[0], tw.IndexedSlices)
        clipped, norm = tf.clip_by_global_norm(grads + [None], 1.0)
        assert clipped[2] is None and isinstance(clipped[0], tw.IndexedSlices)
        dense = [tf.convert_to_tensor(c) for c in clipped[:2]]
        new_norm = tf.global_norm(dense)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        n, n2 = sess.run([norm, new_norm])
    assert n > 1.0 and abs(n2 - 1.0) < 1e-5


def test_momentum_optimizer_follows_tf1_with_a_decaying_learning_rate():
    """TF1's accumulator (accum = m * accum + g; w -= lr_t * accum), not Keras' velocity: the two differ
    once the rate changes (found by the corpus program variable_scopes.py)."""
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable([1.0, -2.0])
        step = tf.train.get_or_create_global_step()
        lr = tf.train.exponential_decay(0.1, step, 1, 0.5)
        loss = tf.reduce_sum(w * w)
        train = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=step)
        init = tf.global_variables_initializer()
    expect, accum = np.array([1.0, -2.0]), np.zeros(2)
    with tf.Session(graph=g) as sess:
        sess.run(init)
        for t in range(4):
            sess.run(train)
            accum = 0.9 * accum + 2 * expect
            expect = expect - 0.1 * 0.5 ** t * accum
        np.testing.assert_allclose(sess.run(w), expect, rtol=1e-5)


@pytest.mark.parametrize("build, shape, names", [
    (lambda x: tf.layers.Conv1D(2, 3)(x[:, :, :, 0]), [2, 4, 2], ["conv1d/kernel:0", "conv1d/bias:0"]),
    (lambda x: tf.layers.conv1d(x[:, :, :, 0], 2, 3, padding="same"), [2, 6, 2], ["conv1d/kernel:0", "conv1d/bias:0"]),
    (lambda x: tf.layers.Conv2D(2, 3)(x), [2, 4, 4, 2], ["conv2d/kernel:0", "conv2d/bias:0"]),
    (lambda x: tf.layers.Conv2DTranspose(2, 3, strides=2)(x), [2, 13, 13, 2],
     ["conv2d_transpose/kernel:0", "conv2d_transpose/bias:0"]),
    (lambda x: tf.layers.Conv3D(2, 2)(x[:, :, :, :, None]), [2, 5, 5, 2, 2], ["conv3d/kernel:0", "conv3d/bias:0"]),
    (lambda x: tf.layers.conv3d(x[:, :, :, :, None], 2, 2), [2, 5, 5, 2, 2], ["conv3d/kernel:0", "conv3d/bias:0"]),
    (lambda x: tf.layers.Conv3DTranspose(2, 2)(x[:, :, :, :, None]), [2, 7, 7, 4, 2],
     ["conv3d_transpose/kernel:0", "conv3d_transpose/bias:0"]),
    (lambda x: tf.layers.conv3d_transpose(x[:, :, :, :, None], 2, 2), [2, 7, 7, 4, 2],
     ["conv3d_transpose/kernel:0", "conv3d_transpose/bias:0"]),
    (lambda x: tf.layers.SeparableConv2D(4, 3)(x), [2, 4, 4, 4],
     ["separable_conv2d/depthwise_kernel:0", "separable_conv2d/pointwise_kernel:0", "separable_conv2d/bias:0"]),
    (lambda x: tf.layers.separable_conv2d(x, 4, 3), [2, 4, 4, 4],
     ["separable_conv2d/depthwise_kernel:0", "separable_conv2d/pointwise_kernel:0", "separable_conv2d/bias:0"]),
    (lambda x: tf.layers.MaxPooling1D(2, 2)(x[:, :, :, 0]), [2, 3, 6], []),
    (lambda x: tf.layers.max_pooling1d(x[:, :, :, 0], 2, 2), [2, 3, 6], []),
    (lambda x: tf.layers.MaxPooling2D(2, 2)(x), [2, 3, 3, 3], []),
    (lambda x: tf.layers.MaxPooling3D(2, 2)(x[:, :, :, :, None]), [2, 3, 3, 1, 1], []),
    (lambda x: tf.layers.max_pooling3d(x[:, :, :, :, None], 2, 2), [2, 3, 3, 1, 1], []),
    (lambda x: tf.layers.AveragePooling1D(2, 2)(x[:, :, :, 0]), [2, 3, 6], []),
    (lambda x: tf.layers.average_pooling1d(x[:, :, :, 0], 2, 2), [2, 3, 6], []),
    (lambda x: tf.layers.AveragePooling2D(2, 2)(x), [2, 3, 3, 3], []),
    (lambda x: tf.layers.average_pooling2d(x, 2, 2), [2, 3, 3, 3], []),
    (lambda x: tf.layers.AveragePooling3D(2, 2)(x[:, :, :, :, None]), [2, 3, 3, 1, 1], []),
    (lambda x: tf.layers.average_pooling3d(x[:, :, :, :, None], 2, 2), [2, 3, 3, 1, 1], []),
    (lambda x: tf.layers.Flatten()(x), [2, 108], []),
    (lambda x: tf.layers.Dropout(0.5)(x, training=True), [2, 6, 6, 3], []),
    (lambda x: tf.layers.BatchNormalization()(x, training=False), [2, 6, 6, 3],
     ["batch_normalization/gamma:0", "batch_normalization/beta:0", "batch_normalization/moving_mean:0",
      "batch_normalization/moving_variance:0"]),
], ids=lambda v: None)
def test_every_tf1_layer_builds_with_tf1_names_and_runs(build, shape, names):
    xv = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        y = build(tf.constant(xv))
        init = tf.global_variables_initializer()
    assert [v.name for v in g.get_collection("variables")] == names
    with tf.Session(graph=g) as sess:
        sess.run(init)
        out = sess.run(y)
    assert list(out.shape) == shape and np.isfinite(out).all()


def test_tf1_layer_base_class_makes_variables_in_its_scope():
    class Scale(tf.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight("w", [input_shape[-1]], initializer=tf.ones_initializer())
            self.input_spec = tf.layers.InputSpec(ndim=2)

        def call(self, x):
            return x * self.w

    g = tf.Graph()
    with g.as_default():
        with tf.variable_scope("outer"):
            y = Scale()(tf.ones([2, 3]))
    assert [v.name for v in g.get_collection("variables")] == ["outer/scale/w:0"]
    assert y.shape.as_list() == [2, 3]


def test_tf1_nn_signatures_of_convolutions_and_pools():
    rng = np.random.default_rng(1)
    x4 = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
    x3, x5 = x4[:, :, :, 0:1].reshape(2, 6, 6), x4[:, :, :, :, None]
    w1, w3 = rng.normal(size=(3, 6, 2)).astype(np.float32), rng.normal(size=(2, 2, 2, 1, 2)).astype(np.float32)
    dw, pw = rng.normal(size=(3, 3, 3, 2)).astype(np.float32), rng.normal(size=(1, 1, 6, 4)).astype(np.float32)
    pairs = [
        (tf.nn.conv1d(value=x3, filters=w1, stride=1, padding="SAME", use_cudnn_on_gpu=False),
         tw.nn.conv1d(x3, w1, 1, "SAME")),
        (tf.nn.conv3d(x5, filter=w3, strides=[1, 1, 1, 1, 1], padding="VALID"), tw.nn.conv3d(x5, w3, 1, "VALID")),
        (tf.nn.avg_pool(value=x4, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME"),
         tw.nn.avg_pool(x4, 2, 2, "SAME")),
        (tf.nn.avg_pool2d(value=x4, ksize=2, strides=2, padding="VALID"), tw.nn.avg_pool2d(x4, 2, 2, "VALID")),
        (tf.nn.pool(x4, [2, 2], "MAX", padding="VALID", strides=[2, 2]),
         tw.nn.max_pool(x4, 2, 2, "VALID")),
        (tf.nn.convolution(x4, filter=dw[:, :, :, :1].repeat(3, axis=3)[:, :, :, :3], padding="SAME"),
         tw.nn.conv2d(x4, dw[:, :, :, :1].repeat(3, axis=3)[:, :, :, :3], 1, "SAME")),
        (tf.nn.depthwise_conv2d(x4, dw, [1, 1, 1, 1], "SAME", rate=[1, 1]),
         tw.nn.depthwise_conv2d(x4, dw, [1, 1, 1, 1], "SAME")),
        (tf.nn.separable_conv2d(x4, dw, pw, [1, 1, 1, 1], "VALID", rate=[1, 1]),
         tw.nn.separable_conv2d(x4, dw, pw, [1, 1, 1, 1], "VALID")),
        (tf.nn.weighted_cross_entropy_with_logits(targets=[1.0, 0.0], logits=[0.5, -0.5], pos_weight=2.0),
         tw.nn.weighted_cross_entropy_with_logits([1.0, 0.0], [0.5, -0.5], 2.0)),
        (tf.nn.softmax_cross_entropy_with_logits(labels=[[0.0, 1.0]], logits=[[1.0, 2.0]], dim=-1),
         tw.nn.softmax_cross_entropy_with_logits([[0.0, 1.0]], [[1.0, 2.0]])),
        (tf.nn.softmax_cross_entropy_with_logits_v2(labels=[[0.0, 1.0]], logits=[[1.0, 2.0]], dim=-1),
         tw.nn.softmax_cross_entropy_with_logits([[0.0, 1.0]], [[1.0, 2.0]])),
    ]
    for a, b in pairs:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_exponential_moving_average_and_restoring_the_averages(tmp_path):
    g = tf.Graph()
    with g.as_default():
        step = tf.Variable(0, trainable=False, name="step")
        w = tf.Variable([1.0, 2.0], name="w")
        ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
        train = tf.assign_add(w, [1.0, 1.0])
        with tf.control_dependencies([train]):
            train_op = tf.group(ema.apply([w]), tf.assign_add(step, 1))
        assert ema.average(w).name == "w/ExponentialMovingAverage:0"
        assert [v.name for v in tf.moving_average_variables()] == ["w/ExponentialMovingAverage:0"]
        assert "w/ExponentialMovingAverage:0" not in [v.name for v in tf.trainable_variables()]
        saver = tf.train.Saver()
        init = tf.global_variables_initializer()
    shadow, wv = np.array([1.0, 2.0]), np.array([1.0, 2.0])
    with tf.Session(graph=g) as sess:
        sess.run(init)
        for n in range(3):
            sess.run(train_op)
            wv = wv + 1.0
            decay = min(0.9, (1.0 + n) / (10.0 + n))
            shadow = shadow - (1 - decay) * (shadow - wv)
        np.testing.assert_allclose(sess.run(ema.average(w)), shadow, rtol=1e-6)
        path = saver.save(sess, str(tmp_path / "m"))
    assert dict(tf.train.list_variables(path)) == {"step": [], "w": [2], "w/ExponentialMovingAverage": [2]}
    np.testing.assert_allclose(tf.train.load_variable(str(tmp_path), "w/ExponentialMovingAverage"), shadow,
                               rtol=1e-6)
    g2 = tf.Graph()          # evaluation graph: the model's variables loaded from their averages
    with g2.as_default():
        step2 = tf.Variable(0, trainable=False, name="step")
        w2 = tf.Variable([0.0, 0.0], name="w")
        to_restore = tf.train.ExponentialMovingAverage(0.9).variables_to_restore([w2])
        assert set(to_restore) == {"w/ExponentialMovingAverage", "step"}
        restorer = tf.train.Saver(to_restore)
    with tf.Session(graph=g2) as sess:
        restorer.restore(sess, path)
        np.testing.assert_allclose(sess.run(w2), shadow, rtol=1e-6)
        assert sess.run(step2) == 3
