"""TF1 names of ``tensorweave.compat.v1`` whose behaviour the differential cases
(``tests/tfdiff/v1_cases.py``, compared with TensorFlow) cannot show: messages, TF1 semantics
that TensorFlow 2's compat.v1 no longer has, graph-building errors."""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf


def _graph():
    return tf.Graph().as_default()


def test_assert_message_names_condition_and_values():
    x = tf.constant([1, 2, 3])
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf.assert_equal(x, tf.constant([1, 2, 4]), message="labels differ")
    text = str(e.value)
    assert text.startswith("assertion failed: [labels differ] [Condition x == y did not hold element-wise:]")
    assert "[1 2 3]" in text and "[1 2 4]" in text


def test_assert_summarize_limits_printed_values():
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf.Assert(tf.constant(False), [tf.range(10)], summarize=3)
    assert str(e.value) == "assertion failed: [0 1 2 ...]"


def test_assert_in_graph_raises_only_when_run():
    with _graph() as g:
        x = tf.placeholder(tf.int32, [None])
        check = tf.assert_rank(x, 1)          # static rank: checked now, nothing to run
        with tf.control_dependencies([tf.assert_less(x, 10)]):
            y = tf.identity(x)
    with tf.Session(graph=g) as sess:
        sess.run(check)
        assert sess.run(y, {x: [1, 2]}).tolist() == [1, 2]
        with pytest.raises(tf.errors.InvalidArgumentError, match="x < y"):
            sess.run(y, {x: [1, 20]})


def test_assert_rank_unknown_rank_checks_at_run_time():
    with _graph() as g:
        x = tf.placeholder(tf.float32)
        with tf.control_dependencies([tf.assert_rank(x, 2)]):
            y = tf.identity(x)
    with tf.Session(graph=g) as sess:
        assert sess.run(y, {x: np.ones([1, 2])}).shape == (1, 2)
        with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank 2"):
            sess.run(y, {x: np.ones([3])})


def test_static_rank_error_is_a_value_error_at_build_time():
    with _graph():
        with pytest.raises(ValueError, match="must have rank 3"):
            tf.assert_rank(tf.placeholder(tf.float32, [2, 2]), 3)


def test_check_numerics_names_the_message():
    with _graph() as g:
        x = tf.placeholder(tf.float32, [2])
        y = tf.check_numerics(tf.log(x), "log of x")
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="log of x"):
            sess.run(y, {x: [1.0, -1.0]})


def test_check_numerics_refuses_ints():
    with pytest.raises(TypeError, match="floating point"):
        tf.check_numerics(tf.constant([1]), "m")


def test_assert_variables_initialized_fails_before_init():
    # TF1's documented behaviour (ref variables): the op raises FailedPreconditionError when run
    # before the initializers. TF 2's compat.v1 (resource variables) no longer checks.
    with _graph() as g:
        a = tf.Variable(1.0, name="a")
        check = tf.assert_variables_initialized()
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value a"):
            sess.run(check)
        sess.run(a.initializer)
        sess.run(check)


def test_scatter_refuses_non_variables_and_float_indices():
    with pytest.raises(TypeError, match="ref must be a Variable"):
        tf.scatter_update(tf.constant([1.0]), [0], [2.0])
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        tf.scatter_add(tf.Variable([1.0]), [0.0], [2.0])


def test_scatter_value_read_earlier_is_kept():
    v = tf.Variable([1.0, 2.0])
    before = v.read_value()
    tf.scatter_update(v, [0], [9.0])
    assert before.numpy().tolist() == [1.0, 2.0] and v.numpy().tolist() == [9.0, 2.0]


def test_version_and_logger_are_tensorweaves():
    import tensorweave as tw
    assert tf.VERSION == tw.__version__
    assert tf.get_logger().name == "tensorweave"


def test_disable_v2_behavior_builds_graphs():
    try:
        tf.disable_v2_behavior()
        assert not tf.executing_eagerly() and not tf.executing_eagerly_outside_functions()
        x = tf.constant(2.0)
        assert not hasattr(x, "numpy") or x.graph is tf.get_default_graph()
        with tf.Session() as sess:
            assert sess.run(x * 3.0) == 6.0
    finally:
        tf.enable_v2_behavior()
        tf.reset_default_graph()
    assert tf.executing_eagerly()


def test_op_scope_names_ops():
    with _graph():
        with tf.op_scope([], "outer"):
            c = tf.constant(1.0, name="c")
        with tf.op_scope([], None, default_name="dflt"):
            d = tf.constant(1.0, name="d")
    assert c.name == "outer/c:0" and d.name == "dflt/d:0"


def test_colocate_with_takes_the_ops_device():
    with _graph():
        with tf.device("/cpu:0"):
            a = tf.constant(1.0)
        with tf.colocate_with(a):
            b = tf.identity(a)
        with tf.colocate_with(tf.constant(2.0)):     # no device: nothing forced
            c = tf.identity(a)
    assert "CPU:0" in b.op.device.upper() and not c.op.device


def test_make_template_refuses_an_empty_name_and_exposes_its_variables():
    with pytest.raises(ValueError, match="name_ cannot be empty"):
        tf.make_template("", lambda: None)
    with _graph():
        t = tf.make_template("net", lambda x: tf.layers.dense(x, 3))
        t(tf.zeros([1, 2]))
        t(tf.ones([1, 2]))
        assert t.variable_scope_name == "net"
        assert sorted(v.name for v in t.trainable_variables) == ["net/dense/bias:0", "net/dense/kernel:0"]


def test_hessians_needs_static_shapes():
    with _graph():
        x = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="must be fully known"):
            tf.hessians(tf.reduce_sum(x * x), x)


def test_eager_switches_and_init_scope():
    try:
        tf.disable_eager_execution()
        assert not tf.executing_eagerly()
        with tf.Graph().as_default():
            with tf.init_scope():      # TF1 mode: the graph being built stays in effect
                assert not tf.executing_eagerly()
    finally:
        tf.enable_eager_execution()
    assert tf.executing_eagerly()


def test_variable_op_scope_names_variables():
    with _graph():
        with tf.variable_op_scope([], "outer"):
            v = tf.get_variable("v", [1])
        with tf.variable_op_scope([], None, default_name="dflt"):
            w = tf.get_variable("w", [1])
    assert v.name == "outer/v:0" and w.name == "dflt/w:0"


def test_uniform_unit_scaling_bound():
    w = tf.uniform_unit_scaling_initializer(factor=2.0, seed=3)([300, 50]).numpy()
    limit = 2.0 * (3.0 / 300) ** 0.5
    assert np.abs(w).max() <= limit and np.abs(w).max() > 0.9 * limit


def test_approx_min_k_is_exact_min_k():
    # TensorFlow 2.21 has no CPU kernel for approx_min_k; it must be the negated max-k of -x
    x = tf.constant([[0.5, -1.25, 2.0], [3.0, 0.25, -0.75]])
    values, idx = tf.nn.approx_min_k(x, 1, reduction_dimension=0)
    neg_values, neg_idx = tf.nn.approx_max_k(-x, 1, reduction_dimension=0)
    assert values.numpy().tolist() == (-neg_values).numpy().tolist() == [[0.5, -1.25, -0.75]]
    assert idx.numpy().tolist() == neg_idx.numpy().tolist() == [[0, 0, 1]]


def test_conv2d_backprop_v2_take_tensors_instead_of_sizes():
    # TensorFlow 2.21 has no CPU kernels for the *_v2 ops; they equal the size-taking forms
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal([1, 5, 5, 2]).astype(np.float32))
    f = tf.constant(rng.standard_normal([3, 3, 2, 4]).astype(np.float32))
    dy = tf.constant(rng.standard_normal([1, 3, 3, 4]).astype(np.float32))
    got_f = tf.conv2d_backprop_filter_v2(x, f, dy, [1, 1, 1, 1], "VALID")
    want_f = tf.nn.conv2d_backprop_filter(x, [3, 3, 2, 4], dy, [1, 1, 1, 1], "VALID")
    got_x = tf.conv2d_backprop_input_v2(x, f, dy, [1, 2, 2, 1], "SAME")
    want_x = tf.nn.conv2d_backprop_input([1, 5, 5, 2], f, dy, [1, 2, 2, 1], "SAME")
    np.testing.assert_allclose(got_f.numpy(), want_f.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got_x.numpy(), want_x.numpy(), rtol=1e-6)


def test_logging_every_n_and_first_n(caplog):
    tf.logging.set_verbosity(tf.logging.INFO)
    try:
        with caplog.at_level(tf.logging.INFO, logger="tensorweave"):
            for i in range(5):
                tf.logging.log_every_n(tf.logging.INFO, "every %d", 2, i)
                tf.logging.log_first_n(tf.logging.INFO, "first %d", 2, i)
            tf.logging.log_if(tf.logging.INFO, "if", True)
            tf.logging.vlog(tf.logging.INFO, "v")
            tf.logging.flush()
    finally:
        tf.logging.set_verbosity(tf.logging.WARN)
    msgs = [r.getMessage() for r in caplog.records]
    assert [m for m in msgs if m.startswith("every")] == ["every 0", "every 2", "every 4"]
    assert [m for m in msgs if m.startswith("first")] == ["first 0", "first 1"]
    assert "if" in msgs and "v" in msgs


def test_gfile_camel_case_names(tmp_path):
    d = str(tmp_path / "a" / "b")
    tf.gfile.MakeDirs(d)
    with tf.gfile.Open(d + "/x.txt", "w") as f:
        f.write("hello")
    with tf.gfile.FastGFile(d + "/x.txt", "r") as f:
        assert f.read() == "hello"
    tf.gfile.Copy(d + "/x.txt", d + "/y.txt")
    tf.gfile.Rename(d + "/y.txt", d + "/z.txt")
    assert sorted(tf.gfile.ListDirectory(d)) == ["x.txt", "z.txt"]
    assert tf.gfile.Glob(d + "/*.txt") and tf.gfile.IsDirectory(d) and tf.gfile.Stat(d + "/x.txt").length == 5
    assert [files for _, _, files in tf.gfile.Walk(str(tmp_path))][-1] == ["x.txt", "z.txt"]
    tf.gfile.Remove(d + "/z.txt")
    tf.gfile.MkDir(str(tmp_path / "c"))
    tf.gfile.DeleteRecursively(str(tmp_path / "a"))
    assert not tf.gfile.Exists(d) and tf.gfile.Exists(str(tmp_path / "c"))


def test_app_run_parses_flags_and_exits_with_main():
    flags = pytest.importorskip("absl.flags")
    tf.app.flags.DEFINE_string("tw_app_test_flag", "a", "help")
    seen = []
    try:
        with pytest.raises(SystemExit) as e:
            tf.app.run(main=lambda argv: seen.append((flags.FLAGS.tw_app_test_flag, argv[1:])) or 3,
                       argv=["prog", "--tw_app_test_flag=b", "rest"])
        assert e.value.code == 3 and seen == [("b", ["rest"])]
    finally:
        flags.FLAGS.unparse_flags()
        delattr(flags.FLAGS, "tw_app_test_flag")


def test_moving_average_of_a_tensor_starts_at_zero():
    # TF 2.21 compat.v1 gives [1.0, 2.5, 4.25] for this program (tensor shadows start at zero, no debiasing)
    with _graph() as g:
        v = tf.Variable(1.0)
        t = v * 2.0
        ema = tf.train.ExponentialMovingAverage(0.5)
        op = ema.apply([t])
        with tf.control_dependencies([op]):
            bump = tf.assign_add(v, 1.0)
        assert ema.average_name(t) == t.name.split(":")[0] + "/ExponentialMovingAverage"
    with tf.Session(graph=g) as sess:
        sess.run(tf.global_variables_initializer())
        out = []
        for _ in range(3):
            sess.run(bump)
            out.append(float(sess.run(ema.average(t))))
    assert out == [1.0, 2.5, 4.25]


def test_decode_raw_in_a_graph():
    with _graph() as g:
        s = tf.placeholder(tf.string, [2])
        d = tf.decode_raw(s, tf.uint16)
        assert d.shape.as_list() == [2, None]
    with tf.Session(graph=g) as sess:
        assert sess.run(d, {s: [b"\x01\x00\x02\x00", b"\x03\x00\x04\x00"]}).tolist() == [[1, 2], [3, 4]]


def test_reader_base_reset_and_state(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("a\nb\n")
    reader = tf.TextLineReader()
    assert isinstance(reader, tf.ReaderBase) and not reader.supports_serialize
    with pytest.raises(tf.errors.UnimplementedError):
        reader.serialize_state()
    with _graph() as g:
        queue = tf.FIFOQueue(4, tf.string)
        fill = queue.enqueue_many([[str(path)] * 3])
        key, value = reader.read(queue)
        produced, reset = reader.num_records_produced(), reader.reset()
    with tf.Session(graph=g) as sess:
        sess.run(fill)
        assert [sess.run(value) for _ in range(3)] == [b"a", b"b", b"a"]
        assert sess.run(produced) == 3
        sess.run(reset)                 # forgets the current file and the counts
        assert sess.run(produced) == 0 and sess.run(value) == b"a"
