"""Canned estimators and feature columns against TensorFlow.

TensorFlow 2.21 no longer ships ``tf.estimator``, and ``tensorflow-estimator`` 2.15 does not import
with it (``tensorflow.python.distribute.estimator_training`` is gone), so the reference numbers
below come from hand-written TF compat.v1 graphs equivalent to each canned model, run in the
benchmark venv: ``tf.feature_column.input_layer``/``linear_model`` over the same columns, dense
layers with Glorot-uniform kernels and zero biases, TF1's canned losses (sigmoid or softmax
cross-entropy, squared error, ``Reduction.SUM`` over the batch) and optimizers (Adagrad 0.05 for
DNNs, Ftrl ``min(0.2, 1/sqrt(#columns))`` for linear parts), the same batches in the same order,
then ``tf.metrics`` over the training set.

The linear classifier starts from zeros and is deterministic, so it must match TensorFlow closely.
The DNNs start from random weights, so they must land within the range TensorFlow reached with two
seeds (widened a little); the crossed column hashes differently from TensorFlow (see
``feature_column``), so wide-and-deep is compared the same way.
"""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf

fc = tf.feature_column

TF_LINEAR_CLASSIFIER = {"accuracy": 0.9708333611488342, "auc": 0.9955180287361145,
                        "average_loss": 0.21358506381511688, "loss": 8.543402671813965}
TF_DNN_CLASSIFIER = [{"accuracy": 0.9708333611488342, "auc": 0.9991661310195923, "average_loss": 0.04364941269159317},
                     {"accuracy": 0.9791666865348816, "auc": 0.9986796975135803, "average_loss": 0.055918242782354355}]
TF_DNN_REGRESSOR = [{"average_loss": 0.05039812996983528}, {"average_loss": 0.03860791400074959}]
TF_DNN_3CLASS = [{"accuracy": 0.9541666507720947, "average_loss": 0.15450279414653778},
                 {"accuracy": 0.949999988079071, "average_loss": 0.19448210299015045}]
TF_WIDE_DEEP = [{"accuracy": 0.9791666865348816, "average_loss": 0.08090946078300476},
                {"accuracy": 0.9750000238418579, "average_loss": 0.09199413657188416}]

# tf.compat.v1.feature_column.input_layer of _feature_batch() in TF 2.21 (age bucketized at 30/50,
# color indicator with "pink" out of vocabulary, identity ids in 4, x).
TF_INPUT_LAYER = [[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.5, -1.0],
                  [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 3.0],
                  [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.5, 0.25]]

COLORS = np.array([b"red", b"green", b"blue", b"pink"], dtype=object)


def _data(n=240, seed=3):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    color = COLORS[rng.randint(0, 4, size=n)]
    age = rng.uniform(18, 70, size=n).astype(np.float32)
    logit = 1.5 * x[:, 0] - x[:, 1] + 1.2 * (color == b"green") - 0.8 * (age > 50) + 0.3 * rng.randn(n)
    y = (logit > 0).astype(np.int64)
    target = (2.0 * x[:, 0] - x[:, 1] + 1.0 * (color == b"green") + 0.02 * age + 0.1 * rng.randn(n)).astype(np.float32)
    return {"x": x, "color": color, "age": age}, y, target


def _columns():
    x = fc.numeric_column("x", shape=2)
    color = fc.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"])
    age = fc.bucketized_column(fc.numeric_column("age"), [30.0, 50.0])
    return x, color, age


def _fit(est, labels, steps):
    features, *_ = _data()
    est.train(tf.estimator.inputs.numpy_input_fn(features, labels, batch_size=40, num_epochs=None, shuffle=False),
              steps=steps)
    return est.evaluate(tf.estimator.inputs.numpy_input_fn(features, labels, batch_size=40, shuffle=False))


def _within(result, references, keys, slack):
    for k in keys:
        lo = min(r[k] for r in references)
        hi = max(r[k] for r in references)
        assert lo - slack[k] <= result[k] <= hi + slack[k], (k, result[k], lo, hi)


def test_feature_columns_input_layer_matches_tensorflow():
    x, color, age = _columns()
    ident = fc.categorical_column_with_identity("ident", 4, default_value=0)
    g = tf.Graph()
    with g.as_default():
        features = {"x": tf.constant([[0.5, -1.0], [2.0, 3.0], [-1.5, 0.25]]),
                    "color": tf.constant(np.array([b"red", b"blue", b"pink"], dtype=object)),
                    "age": tf.constant([35.0, 55.0, 20.0]), "ident": tf.constant([3, 2, 7])}
        net = fc.input_layer(features, [x, fc.indicator_column(color), age, fc.indicator_column(ident)])
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(net), TF_INPUT_LAYER)


def test_embedding_and_crossed_columns():
    color = fc.categorical_column_with_vocabulary_list("color", ["red", "green"], num_oov_buckets=2)
    emb = fc.embedding_column(color, 2, combiner="mean", initializer=lambda shape, dtype: tf.reshape(
        tf.range(8, dtype=tf.float32), shape))
    cross = fc.crossed_column(["color", fc.bucketized_column(fc.numeric_column("age"), [40.0])], 1000)
    g = tf.Graph()
    with g.as_default():
        feats = {"color": tf.constant(np.array([[b"green", b"red"], [b"red", b"red"]], dtype=object)),
                 "age": tf.constant([[20.0], [60.0]])}
        out = fc.input_layer(feats, [emb])
        ids = cross.ids(feats)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        # Rows 0..3 of the table are [0,1],[2,3],[4,5],[6,7]; green=1, red=0; mean over the two ids.
        np.testing.assert_array_equal(sess.run(out), [[1.0, 2.0], [0.0, 1.0]])
        crossed = sess.run(ids)
    assert crossed.shape == (2, 2) and crossed.min() >= 0 and crossed.max() < 1000
    assert crossed[1, 0] == crossed[1, 1] and crossed[0, 0] != crossed[0, 1]


def test_linear_classifier_matches_tensorflow(tmp_path):
    _, y, _ = _data()
    est = tf.estimator.LinearClassifier(list(_columns()), model_dir=str(tmp_path))
    result = _fit(est, y, 60)
    for k, want in TF_LINEAR_CLASSIFIER.items():
        np.testing.assert_allclose(result[k], want, rtol=1e-4, err_msg=k)
    assert result["global_step"] == 60
    names = est.get_variable_names()
    assert {"linear/linear_model/age_bucketized/weights", "linear/linear_model/color/weights",
            "linear/linear_model/x/weights", "linear/linear_model/bias_weights"} <= set(names)


def test_dnn_classifier_reaches_tensorflows_numbers(tmp_path):
    x, color, age = _columns()
    _, y, _ = _data()
    est = tf.estimator.DNNClassifier([16, 8], [x, fc.indicator_column(color), fc.embedding_column(color, 3), age],
                                     model_dir=str(tmp_path), config=tf.estimator.RunConfig(tf_random_seed=1))
    result = _fit(est, y, 120)
    _within(result, TF_DNN_CLASSIFIER, ["accuracy", "auc", "average_loss"],
            {"accuracy": 0.03, "auc": 0.01, "average_loss": 0.05})
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn(_data()[0], batch_size=40, shuffle=False)))
    assert len(preds) == 240
    assert sorted(preds[0]) == ["class_ids", "classes", "logistic", "logits", "probabilities"]
    assert np.mean([p["class_ids"][0] == t for p, t in zip(preds, y)]) == pytest.approx(result["accuracy"])
    assert preds[0]["classes"][0] in (b"0", b"1")


def test_dnn_regressor_and_multiclass_reach_tensorflows_numbers(tmp_path):
    x, color, age = _columns()
    features, y, target = _data()
    cols = [x, fc.indicator_column(color), fc.embedding_column(color, 3), age]
    reg = tf.estimator.DNNRegressor([16], cols, model_dir=str(tmp_path / "reg"),
                                    config=tf.estimator.RunConfig(tf_random_seed=1))
    _within(_fit(reg, target, 120), TF_DNN_REGRESSOR, ["average_loss"], {"average_loss": 0.04})
    three = (y + (features["x"][:, 1] > 1)).astype(np.int64)
    clf = tf.estimator.DNNClassifier([16], cols, n_classes=3, model_dir=str(tmp_path / "clf"),
                                     config=tf.estimator.RunConfig(tf_random_seed=1))
    _within(_fit(clf, three, 120), TF_DNN_3CLASS, ["accuracy", "average_loss"],
            {"accuracy": 0.04, "average_loss": 0.08})


def test_wide_and_deep_reaches_tensorflows_numbers(tmp_path):
    x, color, age = _columns()
    _, y, _ = _data()
    est = tf.estimator.DNNLinearCombinedClassifier(
        model_dir=str(tmp_path), linear_feature_columns=[color, age, fc.crossed_column([age, "color"], 20)],
        dnn_feature_columns=[x, fc.embedding_column(color, 3)], dnn_hidden_units=[8],
        config=tf.estimator.RunConfig(tf_random_seed=1))
    result = _fit(est, y, 120)
    _within(result, TF_WIDE_DEEP, ["accuracy", "average_loss"], {"accuracy": 0.03, "average_loss": 0.05})
    names = est.get_variable_names()
    assert any(n.startswith("dnn/hiddenlayer_0/kernel") for n in names)
    assert any(n.startswith("linear/linear_model/") for n in names)


def test_label_vocabulary_and_weight_column(tmp_path):
    features, y, _ = _data(80)
    features = dict(features, w=np.where(y == 1, 2.0, 1.0).astype(np.float32))
    labels = np.array([b"no", b"yes"], dtype=object)[y]
    est = tf.estimator.LinearClassifier([fc.numeric_column("x", shape=2)], model_dir=str(tmp_path),
                                        label_vocabulary=["no", "yes"], weight_column="w")
    est.train(tf.estimator.inputs.numpy_input_fn(features, labels, batch_size=20, num_epochs=None, shuffle=True),
              steps=30)
    result = est.evaluate(tf.estimator.inputs.numpy_input_fn(features, labels, batch_size=20, shuffle=False))
    assert result["accuracy"] > 0.8
    pred = next(est.predict(tf.estimator.inputs.numpy_input_fn({"x": features["x"][:1]}, shuffle=False)))
    assert pred["classes"][0] == labels[0]


def test_canned_errors():
    x, color, _ = _columns()
    with pytest.raises(ValueError, match="items of feature_columns must be dense columns.*indicator_column"):
        g = tf.Graph()
        with g.as_default():
            fc.input_layer({"color": tf.constant(np.array([b"a"], dtype=object))}, [color])
    with pytest.raises(ValueError, match="n_classes must be > 1"):
        tf.estimator.DNNClassifier([4], [x], n_classes=1)
    with pytest.raises(ValueError, match="unsupported optimizer name 'Adamw'"):
        est = tf.estimator.LinearRegressor([x], optimizer="Adamw")
        est.train(tf.estimator.inputs.numpy_input_fn({"x": np.zeros((4, 2), np.float32)}, np.zeros(4, np.float32),
                                                     shuffle=False), steps=1)
    with pytest.raises(ValueError, match="boundaries must be a sorted list"):
        fc.bucketized_column(fc.numeric_column("a"), [2.0, 1.0])
    with pytest.raises(ValueError, match="either linear_feature_columns or dnn_feature_columns"):
        tf.estimator.DNNLinearCombinedClassifier()


def test_export_saved_model_serves_the_trained_dnn(tmp_path):
    x = fc.numeric_column("x", shape=2)
    features, y, _ = _data(80)
    est = tf.estimator.DNNClassifier([8], [x], model_dir=str(tmp_path / "model"), optimizer="Adam")
    est.train(tf.estimator.inputs.numpy_input_fn({"x": features["x"]}, y, batch_size=20, num_epochs=None,
                                                 shuffle=True), steps=20)
    receiver = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 2], tf.float32)})
    path = est.export_saved_model(str(tmp_path / "export"), receiver)
    assert isinstance(path, bytes) and path.decode().startswith(str(tmp_path / "export"))
    want = [p["probabilities"] for p in est.predict(
        tf.estimator.inputs.numpy_input_fn({"x": features["x"][:6]}, shuffle=False))]
    import tensorweave as tw
    loaded = tw.saved_model.load(path.decode())
    got = loaded.signatures["serving_default"](x=features["x"][:6])["probabilities"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_vocabulary_file_column(tmp_path):
    vocab = tmp_path / "colors.txt"
    vocab.write_text("red\ngreen\nblue\n")
    col = fc.categorical_column_with_vocabulary_file("color", str(vocab), vocabulary_size=2, num_oov_buckets=1)
    g = tf.Graph()
    with g.as_default():
        out = fc.input_layer({"color": tf.constant(np.array([b"green", b"blue", b"red"], dtype=object))},
                             [fc.indicator_column(col)])
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(out), [[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    with pytest.raises(ValueError, match="vocabulary_size 5 is larger than the file's 3 lines"):
        fc.categorical_column_with_vocabulary_file("color", str(vocab), vocabulary_size=5)
