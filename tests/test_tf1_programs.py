"""The classic TF1 programs, written as a TF1 user writes them (``import ... as tf``, graphs and
sessions), plus the error messages such a user sees.

Every test builds its own ``tf.Graph()``; nothing here depends on eager mode being off except
``InteractiveSession``, which uses the ``graph_mode`` fixture (TF1's default graph).
"""
import collections
import os
import re

import numpy as np
import pytest

import tensorweave.compat.v1 as tf

THIS_FILE = os.path.basename(__file__)


def _shape_re(*dims):
    """Matches a shape in an error message written as ``[2,3]`` or ``(2, 3)``; None is ``?``."""
    parts = [r"\?" if d is None else str(d) for d in dims]
    return r"[\[(]" + r",\s*".join(parts) + r"[\])]"


# ---- the first programs of the TF1 tutorials ----------------------------------------------------
def test_matmul_of_two_constants():
    g = tf.Graph()
    with g.as_default():
        matrix1 = tf.constant([[3.0, 3.0]])
        matrix2 = tf.constant([[2.0], [2.0]])
        product = tf.matmul(matrix1, matrix2)
    assert product.shape.as_list() == [1, 1]
    assert product.dtype == tf.float32
    with tf.Session(graph=g) as sess:
        result = sess.run(product)
    assert isinstance(result, np.ndarray)
    np.testing.assert_array_equal(result, [[12.0]])
    assert result.dtype == np.float32


def test_counter_variable_assign_and_add():
    g = tf.Graph()
    with g.as_default():
        state = tf.Variable(0, name="counter")
        one = tf.constant(1)
        new_value = tf.add(state, one)
        update = tf.assign(state, new_value)
        init_op = tf.global_variables_initializer()
    assert state.name == "counter:0"
    with tf.Session(graph=g) as sess:
        sess.run(init_op)
        assert sess.run(state) == 0
        seen = []
        for _ in range(3):
            sess.run(update)
            seen.append(int(sess.run(state)))
        assert seen == [1, 2, 3]
        # An assign op's value is the variable's new value.
        assert int(sess.run(update)) == 4
    with g.as_default():
        add_ten = tf.assign_add(state, 10)
    with tf.Session(graph=g) as sess:
        sess.run(init_op)          # a new session re-initializes: state starts again from 0
        assert int(sess.run(add_ten)) == 10
        assert int(sess.run(add_ten)) == 20
        assert int(sess.run(state)) == 20


def test_feeds_and_multiple_fetches():
    g = tf.Graph()
    with g.as_default():
        input1 = tf.placeholder(tf.float32, name="input1")
        input2 = tf.placeholder(tf.float32, name="input2")
        input3 = tf.constant(5.0)
        intermed = tf.add(input2, input3)
        mul = tf.multiply(input1, intermed)
        output = tf.multiply(input1, input2)
    feed = {input1: [7.0], input2: [2.0]}
    Pair = collections.namedtuple("Pair", ["product", "sum"])
    with tf.Session(graph=g) as sess:
        # a list
        res = sess.run([output], feed_dict=feed)
        assert isinstance(res, list) and len(res) == 1
        np.testing.assert_array_equal(res[0], np.array([14.0], np.float32))
        # several fetches, one of them twice
        m, i, m2 = sess.run([mul, intermed, mul], feed_dict=feed)
        np.testing.assert_array_equal(m, [49.0])
        np.testing.assert_array_equal(i, [7.0])
        np.testing.assert_array_equal(m2, [49.0])
        # a dict
        res = sess.run({"mul": mul, "out": output}, feed_dict=feed)
        assert set(res) == {"mul", "out"}
        np.testing.assert_array_equal(res["mul"], [49.0])
        np.testing.assert_array_equal(res["out"], [14.0])
        # nested tuples and lists
        res = sess.run((output, [intermed, (mul,)]), feed_dict=feed)
        assert isinstance(res, tuple) and isinstance(res[1], list) and isinstance(res[1][1], tuple)
        np.testing.assert_array_equal(res[0], [14.0])
        np.testing.assert_array_equal(res[1][0], [7.0])
        np.testing.assert_array_equal(res[1][1][0], [49.0])
        # a namedtuple keeps its type
        res = sess.run(Pair(product=output, sum=intermed), feed_dict=feed)
        assert isinstance(res, Pair)
        np.testing.assert_array_equal(res.product, [14.0])
        np.testing.assert_array_equal(res.sum, [7.0])
        # fetches by name, and feeds by name
        res = sess.run("Mul_1:0", feed_dict={"input1:0": [3.0], "input2:0": [4.0]})
        np.testing.assert_array_equal(res, [12.0])
        # an operation fetch gives None
        assert sess.run(output.op, feed_dict=feed) is None
        # other feed values: NumPy arrays, scalars, different batch sizes
        np.testing.assert_array_equal(
            sess.run(output, {input1: np.array([1.0, 2.0]), input2: np.array([3.0, 4.0])}), [3.0, 8.0])
        assert sess.run(output, {input1: 2.0, input2: 3.0}) == 6.0


def test_feed_overrides_an_intermediate_tensor():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(2.0)
        b = a * 3.0
        c = b + 1.0
    with tf.Session(graph=g) as sess:
        assert sess.run(c) == 7.0
        assert sess.run(c, feed_dict={b: 10.0}) == 11.0


def _digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target
    perm = np.random.default_rng(42).permutation(len(x))
    n_test = 360
    return x[perm[n_test:]], y[perm[n_test:]], x[perm[:n_test]], y[perm[:n_test]]


def test_softmax_regression_on_digits_with_gradients_and_assign():
    """softmax(xW + b) trained by minibatch gradient descent: tf.gradients + assign_sub."""
    x_train, y_train, x_test, y_test = _digits()
    eye = np.eye(10, dtype=np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 64], name="x")
        y_ = tf.placeholder(tf.float32, [None, 10], name="y_")
        W = tf.Variable(tf.zeros([64, 10]), name="W")
        b = tf.Variable(tf.zeros([10]), name="b")
        logits = tf.matmul(x, W) + b
        log_probs = logits - tf.reduce_logsumexp(logits, axis=1, keepdims=True)
        cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * log_probs, axis=1))
        grad_W, grad_b = tf.gradients(cross_entropy, [W, b])
        assert grad_W.shape.as_list() == [64, 10] and grad_b.shape.as_list() == [10]
        learning_rate = 0.5
        train_step = tf.group(tf.assign_sub(W, learning_rate * grad_W),
                              tf.assign_sub(b, learning_rate * grad_b))
        correct = tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
        init = tf.global_variables_initializer()
    assert set(v.name for v in g.get_collection("trainable_variables")) == {"W:0", "b:0"}
    rng = np.random.default_rng(0)
    with tf.Session(graph=g) as sess:
        sess.run(init)
        first_loss = sess.run(cross_entropy, {x: x_train, y_: eye[y_train]})
        np.testing.assert_allclose(first_loss, np.log(10.0), rtol=1e-5)
        for _ in range(10):
            order = rng.permutation(len(x_train))
            for i in range(0, len(order), 32):
                idx = order[i:i + 32]
                sess.run(train_step, feed_dict={x: x_train[idx], y_: eye[y_train[idx]]})
        last_loss = sess.run(cross_entropy, {x: x_train, y_: eye[y_train]})
        test_accuracy = sess.run(accuracy, feed_dict={x: x_test, y_: eye[y_test]})
        w_value = sess.run(W)
    assert last_loss < 0.3 < first_loss
    assert test_accuracy >= 0.9
    assert w_value.shape == (64, 10) and np.abs(w_value).sum() > 0


def test_softmax_regression_tutorial_with_optimizer():
    """The TF1 MNIST-for-beginners program, verbatim apart from the data."""
    x_train, y_train, x_test, y_test = _digits()
    eye = np.eye(10, dtype=np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 64])
        W = tf.Variable(tf.zeros([64, 10]))
        b = tf.Variable(tf.zeros([10]))
        y = tf.nn.softmax(tf.matmul(x, W) + b)
        y_ = tf.placeholder(tf.float32, [None, 10])
        cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y), axis=[1]))
        train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)
        correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    rng = np.random.default_rng(0)
    sess = tf.Session(graph=g)
    with g.as_default():
        sess.run(tf.global_variables_initializer())
    for _ in range(400):
        idx = rng.integers(0, len(x_train), 100)
        sess.run(train_step, feed_dict={x: x_train[idx], y_: eye[y_train[idx]]})
    assert sess.run(accuracy, feed_dict={x: x_test, y_: eye[y_test]}) >= 0.9
    sess.close()


# ---- sessions ---------------------------------------------------------------------------------
def test_interactive_session_and_eval(graph_mode):
    sess = tf.InteractiveSession()
    try:
        x = tf.Variable([1.0, 2.0])
        a = tf.constant([3.0, 3.0])
        x.initializer.run()
        sub = tf.subtract(x, a)
        np.testing.assert_array_equal(sub.eval(), [-2.0, -1.0])
        np.testing.assert_array_equal(x.eval(), [1.0, 2.0])
        p = tf.placeholder(tf.float32, [2])
        np.testing.assert_array_equal((p * a).eval(feed_dict={p: [1.0, 2.0]}), [3.0, 6.0])
        assert tf.get_default_session() is sess
    finally:
        sess.close()
    assert tf.get_default_session() is None


def test_eval_without_a_default_session_says_so():
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(1.0)
    with pytest.raises(ValueError, match="default session"):
        c.eval()
    with tf.Session(graph=g) as sess:
        assert c.eval() == 1.0
        assert c.eval(session=sess) == 1.0


def test_closed_session_cannot_run():
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(1.0)
    sess = tf.Session(graph=g)
    sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        sess.run(c)


def test_control_dependencies_order_a_read_after_an_assign():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(1.0, name="v")
        assign = tf.assign(v, 5.0)
        with tf.control_dependencies([assign]):
            read = tf.identity(v)
            plus_one = v + 1.0
            read_value = v.read_value()
        init = tf.global_variables_initializer()
    assert assign.op in read.op.control_inputs or any(
        assign.op in op.control_inputs for op in g.get_operations() if op.type == "ReadVariableOp")
    with tf.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(v) == 1.0
        assert sess.run(read) == 5.0
        sess.run(init)
        assert sess.run(plus_one) == 6.0
        sess.run(init)
        assert sess.run(read_value) == 5.0


def test_control_dependencies_on_a_group_and_no_op():
    g = tf.Graph()
    with g.as_default():
        counter = tf.Variable(0, name="counter")
        inc_a = tf.assign_add(counter, 1)
        inc_b = tf.assign_add(counter, 10)
        both = tf.group(inc_a, inc_b)
        with tf.control_dependencies([both]):
            done = tf.no_op(name="done")
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(done) is None
        assert sess.run(counter) == 11


def test_session_runs_only_the_subgraph_the_fetches_need():
    g = tf.Graph()
    with g.as_default():
        unfed = tf.placeholder(tf.float32, [None], name="unfed")
        unrelated = tf.reduce_sum(unfed * 2.0)
        uninitialized = tf.Variable(3.0, name="never_initialized")
        also_unrelated = uninitialized * 2.0
        a = tf.constant(3.0)
        b = a + 1.0
        total = b + unrelated + also_unrelated   # a consumer of everything, never fetched
    with tf.Session(graph=g) as sess:
        assert sess.run(b) == 4.0
        assert sess.run([a, b]) == [3.0, 4.0]
        # the same graph, fetched through the unrelated branch, does need the feed
        assert sess.run(unrelated, feed_dict={unfed: [1.0, 2.0]}) == 6.0
    assert total.op.type == "AddV2"


def test_a_graph_keeps_its_ops_and_session_graph_is_the_graph():
    g = tf.Graph()
    with g.as_default():
        with tf.name_scope("layer"):
            w = tf.constant(1.0, name="w")
            out = tf.multiply(w, 2.0, name="out")
    assert out.name == "layer/out:0"
    assert g.get_tensor_by_name("layer/out:0") is out
    assert out.op.type == "Mul" and out.op.inputs[0] is w
    assert out.graph is g
    sess = tf.Session(graph=g)
    assert sess.graph is g
    assert sess.run("layer/out:0") == 2.0
    sess.close()


def test_device_scopes_are_recorded_on_the_ops():
    g = tf.Graph()
    with g.as_default():
        with g.device("/cpu:0"):
            a = tf.constant(1.0, name="a")
        with tf.device("/device:CPU:0"):
            b = tf.add(a, 1.0, name="b")
        c = b * 2.0
    assert "CPU:0" in (a.op.device or "").upper()
    assert "CPU:0" in (b.op.device or "").upper()
    assert not c.op.device
    with tf.Session(graph=g) as sess:
        assert sess.run(c) == 4.0


# ---- error messages -------------------------------------------------------------------------------
def test_wrong_shape_feed_names_the_placeholder_and_both_shapes():
    g = tf.Graph()
    with g.as_default():
        images = tf.placeholder(tf.float32, shape=[None, 3], name="images")
        total = tf.reduce_sum(images)
    with tf.Session(graph=g) as sess:
        with pytest.raises(ValueError) as info:
            sess.run(total, feed_dict={images: np.zeros((2, 4), np.float32)})
    msg = str(info.value)
    assert "images" in msg
    assert re.search(_shape_re(2, 4), msg), msg
    assert re.search(_shape_re(None, 3), msg), msg


def test_wrong_rank_feed_is_an_error_too():
    g = tf.Graph()
    with g.as_default():
        v = tf.placeholder(tf.float32, shape=[3], name="vec")
        out = v * 2.0
    with tf.Session(graph=g) as sess:
        with pytest.raises(ValueError, match="vec"):
            sess.run(out, feed_dict={v: [[1.0, 2.0, 3.0]]})


def test_missing_feed_names_the_placeholder():
    g = tf.Graph()
    with g.as_default():
        labels = tf.placeholder(tf.float32, shape=[None, 10], name="labels")
        loss = tf.reduce_mean(labels)
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(loss)
    msg = str(info.value)
    assert "labels" in msg
    assert "feed" in msg.lower()
    assert "float32" in msg


def test_uninitialized_variable_is_a_failed_precondition_naming_it():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable([1.0], name="weights")
        out = v * 2.0
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="weights"):
            sess.run(out)


def test_construction_time_shape_mismatch_names_op_node_shapes_dtypes_and_line():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((2, 3), np.float32), name="a")
        b = tf.constant(np.ones((4, 5), np.float32), name="b")
        with pytest.raises(ValueError) as info:
            line = _lineno() + 1
            tf.matmul(a, b, name="bad_product")
    msg = str(info.value)
    assert "MatMul" in msg
    assert "bad_product" in msg
    assert re.search(_shape_re(2, 3), msg), msg
    assert re.search(_shape_re(4, 5), msg), msg
    assert "float32" in msg
    assert f"{THIS_FILE}:{line}" in msg, msg
    # nothing was added to the graph
    assert not any(op.name.startswith("bad_product") for op in g.get_operations())


def test_construction_time_broadcast_mismatch_names_everything():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        y = tf.placeholder(tf.float32, [4], name="y")
        with pytest.raises(ValueError) as info:
            line = _lineno() + 1
            tf.add(x, y, name="sum")
    msg = str(info.value)
    assert "AddV2" in msg and "sum" in msg
    assert re.search(_shape_re(None, 3), msg) and re.search(_shape_re(4), msg), msg
    assert f"{THIS_FILE}:{line}" in msg, msg


def test_construction_time_dtype_mismatch_names_both_dtypes():
    g = tf.Graph()
    with g.as_default():
        f = tf.constant([1.0, 2.0])
        i = tf.constant([1, 2])
        with pytest.raises(TypeError) as info:
            line = _lineno() + 1
            f + i
    msg = str(info.value)
    assert "float32" in msg and "int32" in msg, msg
    assert f"{THIS_FILE}:{line}" in msg, msg


def test_runtime_failure_names_the_node():
    g = tf.Graph()
    with g.as_default():
        n = tf.placeholder(tf.int32, [], name="n")
        q = tf.floordiv(tf.constant(7), n, name="quotient")
    with tf.Session(graph=g) as sess:
        assert sess.run(q, {n: 2}) == 3
        with pytest.raises(tf.errors.OpError) as info:
            sess.run(q, {n: 0})
    assert "quotient" in str(info.value)


def _lineno():
    import sys
    return sys._getframe(1).f_lineno


# ---- the TF1 compatibility corpus (tests/tf1_corpus) -----------------------------------------------
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf1_corpus")
# these run in tests/test_tf1_corpus_estimator.py, with tolerances of their own
_OWN_TESTS = ("word2vec_nce", "queue_softmax_summaries", "estimator_premade_dnn", "estimator_custom_census")
_CORPUS_PROGRAMS = sorted(f[:-3] for f in os.listdir(CORPUS) if f.endswith(".py")
                          and f not in ("corpus_data.py", "run_reference.py") and f[:-3] not in _OWN_TESTS)


def _load_program(name):
    import importlib.util
    import sys
    if CORPUS not in sys.path:
        sys.path.insert(0, CORPUS)
    spec = importlib.util.spec_from_file_location(f"tf1_corpus_{name}", os.path.join(CORPUS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", _CORPUS_PROGRAMS)
def test_tf1_corpus_program(name, graph_mode):
    """Each program trains (its loss falls) and reaches the metric TensorFlow's compat.v1 reaches on the
    same file (TF_REFERENCE, recorded by run_reference.py --tensorflow)."""
    program = _load_program(name)
    ref = program.TF_REFERENCE
    assert ref, f"{name}: no TF_REFERENCE recorded"
    got = program.main()
    assert got["last_loss"] < 0.6 * got["first_loss"], got
    metric, direction = program.METRIC
    if direction == "higher":
        assert got["metric"] >= ref["metric"] - getattr(program, "METRIC_TOLERANCE", 0.03), (metric, got, ref)
    else:
        assert got["metric"] <= max(1.5 * ref["metric"], ref["metric"] + 0.05), (metric, got, ref)
